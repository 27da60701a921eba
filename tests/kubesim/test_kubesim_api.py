"""kubesim through the official kubernetes client over HTTPS: the API behaves as a real one."""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator

import pytest
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from kubesim import KubeSim
from tests.support import TEST_BUILDS, kubectl_binary

PODS = ("", "pods")


@pytest.fixture(scope="module")
def sim() -> Iterator[KubeSim]:
    with KubeSim(pushed=TEST_BUILDS, scenario="gpu-small", k8s_version="1.31") as s:
        yield s


@pytest.fixture(scope="module")
def api(sim: KubeSim) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(sim.kubeconfig), context="kubesim")


def bulk_pods(sim: KubeSim, namespace: str, count: int) -> None:
    """Create a namespace and ``count`` pods straight in the store (fast set-up)."""

    def load(s) -> None:
        s.store.create(s.store.storage_type(("", "namespaces")), {"metadata": {"name": namespace}})
        pods = [
            {
                "metadata": {"name": f"bulk-{i:05d}", "namespace": namespace, "labels": {"i": str(i % 2)}},
                "spec": {"containers": [{"name": "c", "image": "busybox"}], "nodeName": "cpu-node1"},
                "status": {"phase": "Running"},
            }
            for i in range(count)
        ]
        s.store.load(("", "pods"), pods)

    sim.call(load)


def test_pagination_over_2000_pods(sim: KubeSim, api: client.ApiClient) -> None:
    """limit/continue returns every one of 2,000 pods exactly once, 500 at a time."""
    bulk_pods(sim, "bulk", 2000)
    core = client.CoreV1Api(api)
    names: list[str] = []
    token = None
    pages = 0
    while True:
        page = core.list_namespaced_pod("bulk", limit=500, _continue=token)
        pages += 1
        names += [p.metadata.name for p in page.items]
        token = page.metadata._continue
        if not token:
            break
        assert page.metadata.remaining_item_count == 2000 - len(names)
    assert pages == 4
    assert len(names) == 2000 == len(set(names))
    selected = core.list_namespaced_pod("bulk", label_selector="i=1", limit=300)
    assert len(selected.items) == 300 and all(p.metadata.labels["i"] == "1" for p in selected.items)
    assert selected.metadata._continue and selected.metadata.remaining_item_count is None  # unknown with a selector


def test_watch_resumes_from_a_resource_version(sim: KubeSim, api: client.ApiClient) -> None:
    """A watch from a list's resourceVersion gets exactly the changes made after it."""
    core = client.CoreV1Api(api)
    rv = core.list_namespaced_config_map("default").metadata.resource_version
    for i in range(3):
        core.create_namespaced_config_map("default", {"metadata": {"name": f"cm{i}"}, "data": {"i": str(i)}})
    core.patch_namespaced_config_map("cm1", "default", {"data": {"i": "changed"}})
    core.delete_namespaced_config_map("cm2", "default")
    seen = [
        (ev["type"], ev["object"].metadata.name)
        for ev in watch.Watch().stream(
            core.list_namespaced_config_map, "default", resource_version=rv, timeout_seconds=1
        )
    ]
    assert seen == [("ADDED", "cm0"), ("ADDED", "cm1"), ("ADDED", "cm2"), ("MODIFIED", "cm1"),
                    ("DELETED", "cm2")]


def test_watch_sees_live_changes(sim: KubeSim, api: client.ApiClient) -> None:
    """Changes made while a watch is open arrive on it; a label selector filters them."""
    core = client.CoreV1Api(api)
    rv = core.list_namespaced_config_map("default").metadata.resource_version
    got: list[tuple[str, str]] = []

    def run() -> None:
        w = watch.Watch()
        for ev in w.stream(core.list_namespaced_config_map, "default", resource_version=rv,
                           label_selector="team=gpu", timeout_seconds=3):
            got.append((ev["type"], ev["object"].metadata.name))
            if len(got) == 2:
                w.stop()

    thread = threading.Thread(target=run)
    thread.start()
    core.create_namespaced_config_map("default", {"metadata": {"name": "live-a", "labels": {"team": "gpu"}}})
    core.create_namespaced_config_map("default", {"metadata": {"name": "live-b", "labels": {"team": "cpu"}}})
    core.patch_namespaced_config_map("live-a", "default", {"metadata": {"labels": {"team": "other"}}})
    thread.join(timeout=10)
    assert got == [("ADDED", "live-a"), ("DELETED", "live-a")]


def test_watch_from_a_compacted_version_gets_410(sim: KubeSim, api: client.ApiClient) -> None:
    """A watch older than the kept history ends with 410 Gone, as after etcd compaction."""
    core = client.CoreV1Api(api)
    rv = core.list_namespaced_config_map("default").metadata.resource_version
    core.create_namespaced_config_map("default", {"metadata": {"name": "before-compaction"}})
    sim.fault(kind="compact")
    with pytest.raises(ApiException) as exc:
        for _ in watch.Watch().stream(core.list_namespaced_config_map, "default", resource_version=rv,
                                      timeout_seconds=2):
            pass
    assert exc.value.status == 410


def test_update_with_a_stale_version_is_409(sim: KubeSim, api: client.ApiClient) -> None:
    """replace with an old resourceVersion fails with 409 Conflict."""
    core = client.CoreV1Api(api)
    cm = core.create_namespaced_config_map("default", {"metadata": {"name": "conflict"}, "data": {"a": "1"}})
    core.patch_namespaced_config_map("conflict", "default", {"data": {"a": "2"}})
    cm.data = {"a": "3"}
    with pytest.raises(ApiException) as exc:
        core.replace_namespaced_config_map("conflict", "default", cm)
    assert exc.value.status == 409
    body = json.loads(exc.value.body)
    assert body["reason"] == "Conflict" and "the object has been modified" in body["message"]
    assert core.read_namespaced_config_map("conflict", "default").data == {"a": "2"}


def test_patch_types_and_dry_run(sim: KubeSim, api: client.ApiClient) -> None:
    """Strategic merge, JSON merge and JSON patch apply; dryRun=All stores nothing."""
    apps = client.AppsV1Api(api)
    name, ns = "nvidia-device-plugin-daemonset", "kube-system"
    before = apps.read_namespaced_daemon_set(name, ns)
    dry = apps.patch_namespaced_daemon_set(
        name, ns, {"spec": {"template": {"spec": {"containers": [
            {"name": "nvidia-device-plugin-ctr", "image": "nvcr.io/nvidia/k8s-device-plugin:v9.9.9"}]}}}},
        dry_run="All",
    )
    assert dry.spec.template.spec.containers[0].image.endswith("v9.9.9")
    after = apps.read_namespaced_daemon_set(name, ns)
    assert after.spec.template.spec.containers[0].image == before.spec.template.spec.containers[0].image
    assert after.metadata.resource_version == before.metadata.resource_version
    core = client.CoreV1Api(api)
    core.create_namespaced_config_map("default", {"metadata": {"name": "patchy"}, "data": {"a": "1", "b": "2"}})
    core.patch_namespaced_config_map(  # a list body is sent as application/json-patch+json
        "patchy", "default",
        [{"op": "replace", "path": "/data/a", "value": "x"}, {"op": "remove", "path": "/data/b"}],
    )
    assert core.read_namespaced_config_map("patchy", "default").data == {"a": "x"}


def _insecure() -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def test_requests_without_the_token_get_401(sim: KubeSim) -> None:
    """No bearer token: 401 Unauthorized, as a real API server without anonymous access."""
    ctx = _insecure()
    with pytest.raises(urllib.error.HTTPError) as exc:
        urllib.request.urlopen(f"{sim.url}/api/v1/pods", context=ctx)
    assert exc.value.code == 401
    with urllib.request.urlopen(f"{sim.url}/version", context=ctx) as resp:
        assert json.loads(resp.read())["gitVersion"].startswith("v1.31.")


def test_injected_api_errors_then_recovery(sim: KubeSim, api: client.ApiClient) -> None:
    """An api-errors fault fails the next N requests with 500 (or 429 with Retry-After), then clears."""
    core = client.CoreV1Api(api)
    sim.fault(kind="api-errors", count=2, code=500)
    for _ in range(2):
        with pytest.raises(ApiException) as exc:
            core.list_namespace()
        assert exc.value.status == 500
    assert "ml-team" in [ns.metadata.name for ns in core.list_namespace().items]
    sim.fault(kind="api-errors", count=1, code=429, retry_after=7)
    request = urllib.request.Request(f"{sim.url}/api/v1/namespaces", headers={"Authorization": f"Bearer {sim.token}"})
    with pytest.raises(urllib.error.HTTPError) as too_many:
        urllib.request.urlopen(request, context=_insecure())
    assert too_many.value.code == 429 and too_many.value.headers["Retry-After"] == "7"
    with urllib.request.urlopen(request, context=_insecure()) as resp:
        assert resp.status == 200


def test_mutation_log_records_each_mutating_request(sim: KubeSim, api: client.ApiClient) -> None:
    """/sim/v1/requests lists each create/patch/delete once, with verb, path and time."""
    core = client.CoreV1Api(api)
    start = len(sim.mutations())
    core.create_namespaced_config_map("default", {"metadata": {"name": "logged"}})
    core.patch_namespaced_config_map("logged", "default", {"data": {"x": "1"}})
    core.delete_namespaced_config_map("logged", "default")
    core.list_namespace()
    log = sim.mutations()[start:]
    assert [(m["verb"], m["path"]) for m in log] == [
        ("create", "/api/v1/namespaces/default/configmaps"),
        ("patch", "/api/v1/namespaces/default/configmaps/logged"),
        ("delete", "/api/v1/namespaces/default/configmaps/logged"),
    ]
    assert all(m["time"].endswith("Z") for m in log)


def test_dra_versions_follow_the_release() -> None:
    """Discovery serves resource.k8s.io exactly in the versions each release has."""
    expected = {"1.27": ["v1alpha2"], "1.31": ["v1alpha3"], "1.32": ["v1beta1"],
                "1.33": ["v1beta2", "v1beta1"], "1.34": ["v1", "v1beta2", "v1beta1"]}
    for release, versions in expected.items():
        with KubeSim(pushed=TEST_BUILDS, k8s_version=release) as s:
            api = config.new_client_from_config(config_file=str(s.kubeconfig))
            groups = client.ApisApi(api).get_api_versions().groups
            dra = next(g for g in groups if g.name == "resource.k8s.io")
            assert [v.version for v in dra.versions] == versions, release
            assert dra.preferred_version.version == versions[0]
            assert client.VersionApi(api).get_code().git_version.startswith(f"v{release}.")


def test_stopping_the_server_ends_its_open_watches() -> None:
    """As the API server ends its watches when it shuts down: a ``kubectl get -w`` and a client's
    watch of five minutes both end at once, and the server stops without waiting for them."""
    own = KubeSim(pushed=TEST_BUILDS, scenario="gpu-small", k8s_version="1.31").start()
    try:
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("KUBE")},
               "KUBECONFIG": str(own.kubeconfig), "HOME": str(own.kubeconfig.parent)}
        watching = subprocess.Popen([kubectl_binary(), "get", "pods", "-A", "-w"], env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
        core = client.CoreV1Api(config.new_client_from_config(config_file=str(own.kubeconfig), context="kubesim"))
        ended = threading.Event()

        def follow() -> None:
            for _ in watch.Watch().stream(core.list_pod_for_all_namespaces, timeout_seconds=300):
                pass
            ended.set()

        threading.Thread(target=follow, daemon=True).start()
        assert watching.stdout is not None and watching.stdout.readline()  # kubectl's first line: it is watching
        time.sleep(0.5)
        began = time.monotonic()
        own.stop()
        assert time.monotonic() - began < 5
        assert ended.wait(5), "the client's watch did not end"
        watching.wait(timeout=20)  # kubectl -w ends when its watch does and it cannot watch again
    finally:
        own.stop()
        if watching.poll() is None:
            watching.kill()
