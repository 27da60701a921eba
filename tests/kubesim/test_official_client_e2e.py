"""The official Python client's own end-to-end suite (``kubernetes/e2e_test`` of kubernetes-client/python
v36.0.3), the subset in scope, re-told against kubesim (issue 35): the same API calls and the same
checks, written here in our words, one test per upstream test (named in each docstring).

In scope are the upstream tests that use only what kubesim serves: pods, services, configmaps,
nodes, namespaces, deployments, daemonsets, watches and the informer over them, and
``create_from_yaml``/``create_from_dict`` of those kinds. Left out: exec and port-forward
(``test_pod_apis``, ``test_pod_exec_close_channel``, ``test_exit_code``, ``test_portforward_*``: a shell
in a container), ReplicationControllers, Jobs, RBAC Roles, APIServices, metrics.k8s.io, the proxy
test, and the two quantity unit tests (no server). docs/testing.md says how to run the upstream suite
itself against kubesim.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config, utils, watch
from kubernetes.client.rest import ApiException
from kubernetes.informer import ADDED, DELETED, MODIFIED, SharedInformer

from kubesim import KubeSim
from tests.kubesim.test_kubectl import wait_for
from tests.support import TEST_BUILDS

NS = "default"
IMAGE = "registry.example.com/web:2.4"


@pytest.fixture(scope="module")
def sim() -> Iterator[KubeSim]:
    with KubeSim(pushed=TEST_BUILDS, scenario="gpu-small", k8s_version="1.34") as s:
        yield s


@pytest.fixture(scope="module")
def api(sim: KubeSim) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(sim.kubeconfig))


@pytest.fixture(scope="module")
def core(api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api)


@pytest.fixture(scope="module")
def apps(api: client.ApiClient) -> client.AppsV1Api:
    return client.AppsV1Api(api)


def suffix() -> str:
    return uuid.uuid4().hex[:8]


def deployment(name: str, *, app: str = "web", replicas: int = 2, ns: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {"app": app}}
    if ns:
        meta["namespace"] = ns
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta, "spec": {
        "replicas": replicas, "selector": {"matchLabels": {"app": app}},
        "template": {"metadata": {"labels": {"app": app}}, "spec": {"containers": [
            {"name": "web", "image": IMAGE, "ports": [{"containerPort": 8080}]}]}}}}


def service(name: str, *, app: str, port: int = 8080, target: int = 8080) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "labels": {"app": app}},
            "spec": {"selector": {"app": app}, "ports": [{"protocol": "TCP", "port": port, "targetPort": target}]}}


def pod(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": name}},
            "spec": {"containers": [{"name": "main", "image": IMAGE, "command": ["sleep", "3600"]}]}}


def write(tmp_path: Path, name: str, *docs: dict[str, Any]) -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump_all(docs))
    return str(path)


def check_deployment(apps: client.AppsV1Api, name: str, *, ns: str = NS, replicas: int = 2) -> None:
    got = apps.read_namespaced_deployment(name, ns)
    assert got.metadata.name == name
    ctr = got.spec.template.spec.containers[0]
    assert (ctr.name, ctr.image, ctr.ports[0].container_port) == ("web", IMAGE, 8080)
    assert got.spec.template.metadata.labels["app"] == got.spec.selector.match_labels["app"]
    assert got.spec.replicas == replicas


def conflict_text(qualified: str, name: str, group: str, plural: str) -> str:
    """What ``FailToCreateError`` prints for one AlreadyExists: the Status body byte for byte as the
    API server encodes a ``metav1.Status`` (Go field order: ... reason, details, code)."""
    group_part = f'"group":"{group}",' if group else ""
    return ('Error from server (Conflict): {"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
            f'"message":"{qualified} \\"{name}\\" already exists","reason":"AlreadyExists",'
            f'"details":{{"name":"{name}",{group_part}"kind":"{plural}"}},"code":409}}\n')


# ------------------------------------------------------------------ test_client.py
def test_service_create_read_patch_delete(core: client.CoreV1Api) -> None:
    """Upstream test_client.py::test_service_apis (issue 35): a service is created and read back with a
    status; a strategic merge patch naming a new port adds it next to the old one (Service ports merge
    on ``port``), so the service then has two ports."""
    name = f"svc-e2e-{suffix()}"
    body = service(name, app=name, port=80, target=80)
    made = core.create_namespaced_service(NS, body)
    assert made.metadata.name == name and made.status is not None
    assert core.read_namespaced_service(name, NS).status is not None
    body["spec"]["ports"] = [{"name": "extra", "port": 9090, "protocol": "TCP", "targetPort": 9090}]
    patched = core.patch_namespaced_service(name, NS, body)
    assert sorted(p.port for p in patched.spec.ports) == [80, 9090]
    core.delete_namespaced_service(name, NS)


def test_configmap_json_patch_merge_patch_and_delete(core: client.CoreV1Api) -> None:
    """Upstream test_client.py::test_configmap_apis (issue 35): a JSON patch replacing ``/data`` drops the
    old keys, a merge patch of ``data`` keeps only what is there, and after the delete a list by the
    label finds nothing."""
    name = f"cm-e2e-{suffix()}"
    label = {"e2e-cm": name}
    core.create_namespaced_config_map(NS, {"apiVersion": "v1", "kind": "ConfigMap",
                                          "metadata": {"name": name, "labels": label},
                                          "data": {"a.json": '{"x":1}', "b.cnf": "[b]\nport = 1\n"}})
    assert core.read_namespaced_config_map(name, NS).metadata.name == name
    replaced = core.patch_namespaced_config_map(name, NS, [{"op": "replace", "path": "/data",
                                                            "value": {"fresh": "by-json-patch"}}])
    assert replaced.data == {"fresh": "by-json-patch"}
    merged = core.patch_namespaced_config_map(name, NS, {"data": {"fresh": "by-merge-patch"}})
    assert merged.data == {"fresh": "by-merge-patch"}
    core.delete_namespaced_config_map(name, NS)
    assert core.list_namespaced_config_map(NS, pretty="true", label_selector=f"e2e-cm={name}").items == []


def test_every_node_reads_back_with_labels(core: client.CoreV1Api) -> None:
    """Upstream test_client.py::test_node_apis (issue 35): each listed node reads back by name with a
    non-empty label map."""
    nodes = core.list_node().items
    assert nodes
    for item in nodes:
        node = core.read_node(item.metadata.name)
        assert isinstance(node.metadata.labels, dict) and node.metadata.labels


# ------------------------------------------------------------------ test_apps.py
def test_deployment_created_and_read_back(apps: client.AppsV1Api) -> None:
    """Upstream test_apps.py::test_create_deployment (issue 35): a Deployment created from YAML reads back
    with its replicas, selector, template labels and container, and can be deleted."""
    name = f"dep-e2e-{suffix()}"
    apps.create_namespaced_deployment(NS, yaml.safe_load(yaml.safe_dump(deployment(name, replicas=3))))
    check_deployment(apps, name, replicas=3)
    apps.delete_namespaced_deployment(name, NS, body=client.V1DeleteOptions())


def test_daemonset_created_and_read_back(apps: client.AppsV1Api) -> None:
    """Upstream test_apps.py::test_create_daemonset (issue 35): a rolling-update DaemonSet reads back with
    its selector, template labels and container, and can be deleted."""
    name = f"ds-e2e-{suffix()}"
    apps.create_namespaced_daemon_set(NS, {
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name, "labels": {"app": name}},
        "spec": {"selector": {"matchLabels": {"app": name}}, "updateStrategy": {"type": "RollingUpdate"},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [{"name": "agent", "image": IMAGE}]}}}})
    got = apps.read_namespaced_daemon_set(name, NS)
    assert got.spec.selector.match_labels["app"] == got.spec.template.metadata.labels["app"] == name
    assert (got.spec.template.spec.containers[0].name, got.spec.template.spec.containers[0].image) == ("agent", IMAGE)
    apps.delete_namespaced_daemon_set(name, NS, body=client.V1DeleteOptions())


# ------------------------------------------------------------------ test_watch.py
def test_watch_from_list_version_sees_later_events(core: client.CoreV1Api) -> None:
    """Upstream test_watch.py::test_watch_configmaps (issue 35): a watch from the resourceVersion of a list
    sees exactly what happened after it: the second configmap ADDED and MODIFIED, then both DELETED by
    a delete-collection, and ends when its timeout does."""
    label = f"e2e-watch-{suffix()}"
    first, second = f"{label}-a", f"{label}-b"

    def cm(name: str) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": {"e2e": label}},
                "data": {"v": name}}
    core.create_namespaced_config_map(NS, cm(first))
    rv = core.list_namespaced_config_map(NS, label_selector=f"e2e={label}").metadata.resource_version
    core.create_namespaced_config_map(NS, cm(second))
    core.patch_namespaced_config_map(second, NS, {"data": {"v": "{}"}})
    core.delete_collection_namespaced_config_map(NS, label_selector=f"e2e={label}")
    seen = [(e["type"], e["object"].metadata.name) for e in watch.Watch().stream(
        core.list_namespaced_config_map, namespace=NS, resource_version=rv, timeout_seconds=2,
        label_selector=f"e2e={label}")]
    assert seen[:2] == [("ADDED", second), ("MODIFIED", second)]
    assert sorted(seen[2:]) == [("DELETED", first), ("DELETED", second)]


# ------------------------------------------------------------------ test_informer.py
def informer(core: client.CoreV1Api, label: str, **kw: Any) -> SharedInformer:
    return SharedInformer(list_func=core.list_namespaced_config_map, namespace=NS,
                          label_selector=f"e2e-informer={label}", **kw)


def informer_cm(name: str, label: str, value: str = "v") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "labels": {"e2e-informer": label}}, "data": {"k": value}}


def started(inf: SharedInformer, request: pytest.FixtureRequest) -> SharedInformer:
    inf.start()
    request.addfinalizer(inf.stop)
    return inf


def on(inf: SharedInformer, kind: str, name: str) -> threading.Event:
    seen = threading.Event()
    inf.add_event_handler(kind, lambda o: seen.set() if o.metadata.name == name else None)
    return seen


def cached(inf: SharedInformer, name: str) -> Any:
    return inf.cache.get_by_key(f"{NS}/{name}")


def listed(inf: SharedInformer) -> Callable[[], bool]:
    return lambda: inf._resource_version is not None


def test_informer_cache_holds_objects_made_before_start(core: client.CoreV1Api,
                                                        request: pytest.FixtureRequest) -> None:
    """Upstream test_informer.py::test_cache_populated_after_start (issue 35): a configmap made before the
    informer starts is in its cache, with its data, once the first list is done."""
    label, name = f"pre-{suffix()}", f"inf-pre-{suffix()}"
    core.create_namespaced_config_map(NS, informer_cm(name, label))
    inf = started(informer(core, label), request)
    got = wait_for(lambda: cached(inf, name), what="configmap in the informer's cache")
    assert got.data["k"] == "v"
    core.delete_namespaced_config_map(name, NS)


def test_informer_added_event_fills_cache(core: client.CoreV1Api, request: pytest.FixtureRequest) -> None:
    """Upstream test_informer.py::test_added_event_and_cache_entry (issue 35): a configmap made after the
    list fires ADDED through the watch and lands in the cache."""
    label, name = f"add-{suffix()}", f"inf-add-{suffix()}"
    inf = informer(core, label)
    seen = on(inf, ADDED, name)
    started(inf, request)
    wait_for(listed(inf), what="the informer's first list")
    core.create_namespaced_config_map(NS, informer_cm(name, label))
    assert seen.wait(30)
    assert cached(inf, name) is not None
    core.delete_namespaced_config_map(name, NS)


def test_informer_modified_event_refreshes_cache(core: client.CoreV1Api, request: pytest.FixtureRequest) -> None:
    """Upstream test_informer.py::test_modified_event_and_cache_refresh (issue 35): patching a cached
    configmap fires MODIFIED and the cache then holds the new data."""
    label, name = f"mod-{suffix()}", f"inf-mod-{suffix()}"
    inf = informer(core, label)
    seen = on(inf, MODIFIED, name)
    started(inf, request)
    core.create_namespaced_config_map(NS, informer_cm(name, label))
    wait_for(lambda: cached(inf, name), what="configmap in the informer's cache")
    core.patch_namespaced_config_map(name, NS, {"data": {"k": "changed"}})
    assert seen.wait(30)
    assert cached(inf, name).data["k"] == "changed"
    core.delete_namespaced_config_map(name, NS)


def test_informer_deleted_event_empties_cache(core: client.CoreV1Api, request: pytest.FixtureRequest) -> None:
    """Upstream test_informer.py::test_deleted_event_removes_from_cache (issue 35): deleting a cached
    configmap fires DELETED and takes it out of the cache."""
    label, name = f"del-{suffix()}", f"inf-del-{suffix()}"
    inf = informer(core, label)
    seen = on(inf, DELETED, name)
    started(inf, request)
    core.create_namespaced_config_map(NS, informer_cm(name, label))
    wait_for(lambda: cached(inf, name), what="configmap in the informer's cache")
    core.delete_namespaced_config_map(name, NS)
    assert seen.wait(30)
    assert cached(inf, name) is None


def test_informer_resource_version_moves_on(core: client.CoreV1Api, request: pytest.FixtureRequest) -> None:
    """Upstream test_informer.py::test_resource_version_advances (issue 35): the resourceVersion the
    informer keeps grows past the list's once a watch event arrives."""
    label, name = f"rv-{suffix()}", f"inf-rv-{suffix()}"
    inf = informer(core, label)
    seen = on(inf, ADDED, name)
    started(inf, request)
    wait_for(listed(inf), what="the informer's first list")
    before = int(inf._resource_version)
    core.create_namespaced_config_map(NS, informer_cm(name, label))
    assert seen.wait(30)
    assert int(inf._resource_version) > before
    core.delete_namespaced_config_map(name, NS)


def test_informer_resync_relists_cached_objects(core: client.CoreV1Api, request: pytest.FixtureRequest) -> None:
    """Upstream test_informer.py::test_resync_fires_modified_for_existing_objects (issue 35): with a resync
    period the informer lists again and fires MODIFIED for an object it already has, data unchanged."""
    label, name = f"rsync-{suffix()}", f"inf-rsync-{suffix()}"
    core.create_namespaced_config_map(NS, informer_cm(name, label))
    inf = informer(core, label, resync_period=1)
    added, resynced = on(inf, ADDED, name), on(inf, MODIFIED, name)
    started(inf, request)
    assert added.wait(30)
    assert resynced.wait(30)
    assert cached(inf, name).data["k"] == "v"
    core.delete_namespaced_config_map(name, NS)


# ------------------------------------------------------------------ test_utils.py
def test_yaml_file_deployment(api: client.ApiClient, apps: client.AppsV1Api, tmp_path: Path) -> None:
    """Upstream test_utils.py::test_create_apps_deployment_from_yaml (issue 35): create_from_yaml of a file
    holding one apps/v1 Deployment creates it in the default namespace."""
    name = f"yaml-dep-{suffix()}"
    utils.create_from_yaml(api, write(tmp_path, "dep.yaml", deployment(name)))
    check_deployment(apps, name)
    apps.delete_namespaced_deployment(name, NS)


def test_yaml_file_deployment_then_apply_is_idempotent(api: client.ApiClient, apps: client.AppsV1Api,
                                                       tmp_path: Path) -> None:
    """Upstream test_utils.py::test_create_apps_deployment_from_yaml_with_apply_is_idempotent (issue 35):
    applying (server-side) the file a Deployment was created from succeeds and leaves it as it was."""
    name = f"yaml-apply-{suffix()}"
    path = write(tmp_path, "dep.yaml", deployment(name))
    utils.create_from_yaml(api, path)
    check_deployment(apps, name)
    utils.create_from_yaml(api, path, apply=True)
    check_deployment(apps, name)
    apps.delete_namespaced_deployment(name, NS)


def test_yaml_objects_deployment(api: client.ApiClient, apps: client.AppsV1Api) -> None:
    """Upstream test_utils.py::test_create_apps_deployment_from_yaml_object (issue 35): create_from_yaml
    also takes already-loaded YAML documents (``yaml_objects=``)."""
    name = f"yaml-objs-{suffix()}"
    utils.create_from_yaml(api, yaml_objects=yaml.safe_load_all(yaml.safe_dump(deployment(name))))
    check_deployment(apps, name)
    apps.delete_namespaced_deployment(name, NS)


def test_dict_deployment(api: client.ApiClient, apps: client.AppsV1Api) -> None:
    """Upstream test_utils.py::test_create_apps_deployment_from_yaml_obj (issue 35): create_from_dict of a
    loaded manifest, its name changed, creates that Deployment."""
    manifest = deployment("placeholder")
    manifest["metadata"]["name"] = name = f"dict-dep-{suffix()}"
    utils.create_from_dict(api, manifest)
    check_deployment(apps, name)
    apps.delete_namespaced_deployment(name, NS)


def test_yaml_file_pod(api: client.ApiClient, core: client.CoreV1Api, tmp_path: Path) -> None:
    """Upstream test_utils.py::test_create_pod_from_yaml (issue 35): a Pod from a YAML file reads back with
    its container's name and image."""
    name = f"yaml-pod-{suffix()}"
    utils.create_from_yaml(api, write(tmp_path, "pod.yaml", pod(name)))
    got = core.read_namespaced_pod(name, NS)
    assert (got.spec.containers[0].name, got.spec.containers[0].image) == ("main", IMAGE)
    core.delete_namespaced_pod(name, NS)


def test_yaml_file_service(api: client.ApiClient, core: client.CoreV1Api, tmp_path: Path) -> None:
    """Upstream test_utils.py::test_create_service_from_yaml (issue 35): a Service from a YAML file reads
    back with its selector."""
    name = f"yaml-svc-{suffix()}"
    utils.create_from_yaml(api, write(tmp_path, "svc.yaml", service(name, app="Shop")))
    assert core.read_namespaced_service(name, NS).spec.selector == {"app": "Shop"}
    core.delete_namespaced_service(name, NS)


def test_yaml_file_namespace(api: client.ApiClient, core: client.CoreV1Api, tmp_path: Path) -> None:
    """Upstream test_utils.py::test_create_namespace_from_yaml (issue 35): a Namespace from a YAML file
    reads back by name."""
    name = f"yaml-ns-{suffix()}"
    utils.create_from_yaml(api, write(tmp_path, "ns.yaml", {"apiVersion": "v1", "kind": "Namespace",
                                                            "metadata": {"name": name, "labels": {"name": name}}}))
    assert core.read_namespace(name).metadata.name == name
    core.delete_namespace(name)


def test_yaml_files_namespace_then_deployment_in_it(api: client.ApiClient, core: client.CoreV1Api,
                                                    apps: client.AppsV1Api, tmp_path: Path) -> None:
    """Upstream test_utils.py::test_create_deployment_non_default_namespace_from_yaml (issue 35): a
    namespace from one file, then a Deployment whose manifest names that namespace from another."""
    ns, name = f"yaml-dep-ns-{suffix()}", "in-own-namespace"
    utils.create_from_yaml(api, write(tmp_path, "ns.yaml", {"apiVersion": "v1", "kind": "Namespace",
                                                            "metadata": {"name": ns}}))
    utils.create_from_yaml(api, write(tmp_path, "dep.yaml", deployment(name, ns=ns)))
    assert core.read_namespace(ns).metadata.name == ns
    check_deployment(apps, name, ns=ns)
    apps.delete_namespaced_deployment(name, ns)
    core.delete_namespace(ns)


def test_yaml_kind_list_service_and_deployment(api: client.ApiClient, core: client.CoreV1Api,
                                               apps: client.AppsV1Api, tmp_path: Path) -> None:
    """Upstream test_utils.py::test_create_general_list_from_yaml (issue 35): a ``kind: List`` holding a
    Service and a Deployment creates both."""
    name = f"yaml-list-{suffix()}"
    utils.create_from_yaml(api, write(tmp_path, "list.yaml", {"apiVersion": "v1", "kind": "List", "items": [
        service(name, app=name), deployment(name, app=name, replicas=1)]}))
    assert core.read_namespaced_service(name, NS).spec.selector["app"] == name
    check_deployment(apps, name, replicas=1)
    core.delete_namespaced_service(name, NS)
    apps.delete_namespaced_deployment(name, NS)


def test_yaml_namespace_list(api: client.ApiClient, core: client.CoreV1Api, tmp_path: Path) -> None:
    """Upstream test_utils.py::test_create_namespace_list_from_yaml (issue 35): a ``kind: NamespaceList``
    creates each namespace with its labels."""
    names = [f"yaml-nsl-{suffix()}", f"yaml-nsl-{suffix()}"]
    utils.create_from_yaml(api, write(tmp_path, "nsl.yaml", {"apiVersion": "v1", "kind": "NamespaceList", "items": [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n, "labels": {"name": n}}} for n in names]}))
    for n in names:
        assert core.read_namespace(n).metadata.labels["name"] == n
        core.delete_namespace(n)


def test_json_service_list_kinds_implied_with_conflict(api: client.ApiClient, core: client.CoreV1Api,
                                                       tmp_path: Path) -> None:
    """Upstream test_utils.py::test_create_implicit_service_list_from_yaml_with_conflict (issue 35): the
    items of a ``kind: ServiceList`` carry no kind of their own; the one named twice fails with a
    conflict, the others are created."""
    first, second = f"svcl-{suffix()}", f"svcl-{suffix()}"
    items = [{"metadata": {"name": n, "labels": {"app": n}},
              "spec": {"selector": {"app": n}, "ports": [{"protocol": "TCP", "port": 99, "targetPort": 9949}]}}
             for n in (first, first, second)]
    path = tmp_path / "svclist.json"
    path.write_text(json.dumps({"kind": "ServiceList", "apiVersion": "v1", "items": items}))
    with pytest.raises(utils.FailToCreateError) as failed:
        utils.create_from_yaml(api, str(path))
    assert str(failed.value) == conflict_text("services", first, "", "services")
    for n in (first, second):
        assert core.read_namespaced_service(n, NS).metadata.labels["app"] == n
        core.delete_namespaced_service(n, NS)


def pod_list_and_deployment(tmp_path: Path, tag: str) -> tuple[str, list[str], str]:
    pods, dep = [f"{tag}-pod-0", f"{tag}-pod-1"], f"{tag}-dep"
    return write(tmp_path, "multi.yaml", {"apiVersion": "v1", "kind": "PodList", "items": [pod(p) for p in pods]},
                 deployment(dep, app=dep, replicas=3)), pods, dep


def test_yaml_pod_list_then_deployment(api: client.ApiClient, core: client.CoreV1Api, apps: client.AppsV1Api,
                                       tmp_path: Path) -> None:
    """Upstream test_utils.py::test_create_from_list_in_multi_resource_yaml (issue 35): a file of two
    documents, a ``PodList`` then a Deployment, creates the two pods and the Deployment."""
    path, pods, dep = pod_list_and_deployment(tmp_path, f"mr-{suffix()}")
    utils.create_from_yaml(api, path)
    for p in pods:
        assert core.read_namespaced_pod(p, NS).spec.containers[0].image == IMAGE
        core.delete_namespaced_pod(p, NS)
    check_deployment(apps, dep, replicas=3)
    apps.delete_namespaced_deployment(dep, NS)


def test_yaml_same_deployment_three_times_two_conflicts(api: client.ApiClient, apps: client.AppsV1Api,
                                                        tmp_path: Path) -> None:
    """Upstream test_utils.py::test_create_from_multi_resource_yaml_with_multi_conflicts (issue 35): a file
    with one Deployment three times creates it once and raises one error holding both conflicts, each
    the API server's Status JSON exactly (field order included)."""
    name = f"thrice-{suffix()}"
    path = write(tmp_path, "thrice.yaml", *[deployment(name)] * 3)
    with pytest.raises(utils.FailToCreateError) as failed:
        utils.create_from_yaml(api, path)
    assert str(failed.value) == conflict_text("deployments.apps", name, "apps", "deployments") * 2
    check_deployment(apps, name)
    apps.delete_namespaced_deployment(name, NS)


def test_yaml_deployment_into_given_namespace(api: client.ApiClient, core: client.CoreV1Api,
                                              apps: client.AppsV1Api, tmp_path: Path) -> None:
    """Upstream test_utils.py::test_create_namespaced_apps_deployment_from_yaml (issue 35): the
    ``namespace=`` argument puts a Deployment whose manifest names none into that namespace."""
    ns, name = f"yaml-into-{suffix()}", f"into-{suffix()}"
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    utils.create_from_yaml(api, write(tmp_path, "dep.yaml", deployment(name)), namespace=ns)
    check_deployment(apps, name, ns=ns)
    apps.delete_namespaced_deployment(name, ns)
    core.delete_namespace(ns)


def test_yaml_pod_list_then_deployment_into_given_namespace(api: client.ApiClient, core: client.CoreV1Api,
                                                            apps: client.AppsV1Api, tmp_path: Path) -> None:
    """Upstream test_utils.py::test_create_from_list_in_multi_resource_yaml_namespaced (issue 35): the
    same two-document file with ``namespace=`` creates the pods and the Deployment in that namespace."""
    ns = f"yaml-mr-{suffix()}"
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    path, pods, dep = pod_list_and_deployment(tmp_path, "mrn")
    utils.create_from_yaml(api, path, namespace=ns)
    for p in pods:
        assert core.read_namespaced_pod(p, ns).metadata.name == p
    check_deployment(apps, dep, ns=ns, replicas=3)
    with pytest.raises(ApiException) as missing:
        core.read_namespaced_pod(pods[0], NS)
    assert missing.value.status == 404
    core.delete_namespace(ns)
