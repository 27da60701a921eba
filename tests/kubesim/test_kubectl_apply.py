"""Server-side apply and field management, refereed by the real kubectl and the official client.

``kubectl apply --server-side`` creates and updates, two managers conflict over a field
and ``--force-conflicts`` moves it, a field dropped from the configuration is removed,
``--dry-run=server`` changes nothing, ``kubectl diff`` (client- and server-side) shows what
an apply would do, and the client's ``create_from_yaml(apply=True)`` works.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml
from kubernetes import utils

from kubesim import KubeSim
from tests.kubesim.test_kubectl import wait_for
from tests.support import TEST_BUILDS, Kubectl

pytestmark = pytest.mark.conformance

NS = "ml-team"
IMAGE = "registry.example.com/exporter:1.0"


@pytest.fixture(scope="module")
def sim() -> Iterator[KubeSim]:
    with KubeSim(pushed=TEST_BUILDS, scenario="gpu-small", k8s_version="1.33", speed=5.0) as s:
        yield s


@pytest.fixture(scope="module")
def kubectl(sim: KubeSim) -> Kubectl:
    return Kubectl(sim.kubeconfig)


def daemonset(name: str, image: str = IMAGE, env: dict[str, str] | None = None,
              extra: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "exporter", "image": image}
    if env:
        container["env"] = [{"name": k, "value": v} for k, v in env.items()]
    return {
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": NS, "labels": {"app": name}},
        "spec": {"selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [container, *(extra or [])]}}},
    }


def write(tmp_path: Path, obj: dict[str, Any], name: str = "ds.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(obj))
    return str(path)


def managers(kubectl: Kubectl, name: str) -> dict[str, dict[str, Any]]:
    live = kubectl.json("get", "ds", name, "-n", NS, "--show-managed-fields")
    return {f"{e['manager']}/{e['operation']}": e["fieldsV1"] for e in live["metadata"]["managedFields"]}


def test_apply_creates_then_updates_and_removes_what_it_no_longer_applies(kubectl: Kubectl, tmp_path: Path) -> None:
    out = kubectl("apply", "--server-side", "-f", write(tmp_path, daemonset("ssa-a", env={"A": "1", "B": "2"})))
    assert out == "daemonset.apps/ssa-a serverside-applied\n"
    owned = managers(kubectl, "ssa-a")["kubectl/Apply"]
    container = owned["f:spec"]["f:template"]["f:spec"]["f:containers"]['k:{"name":"exporter"}']
    assert container == {".": {}, "f:env": {'k:{"name":"A"}': {".": {}, "f:name": {}, "f:value": {}},
                                            'k:{"name":"B"}': {".": {}, "f:name": {}, "f:value": {}}},
                         "f:image": {}, "f:name": {}}
    assert owned["f:spec"]["f:selector"] == {}  # an atomic struct is owned whole
    wait_for(lambda: kubectl.json("get", "ds", "ssa-a", "-n", NS)["status"]["numberReady"] >= 1)

    kubectl("apply", "--server-side", "-f", write(tmp_path, daemonset("ssa-a", IMAGE + "-2", env={"A": "1"})))
    live = kubectl.json("get", "ds", "ssa-a", "-n", NS)
    spec = live["spec"]["template"]["spec"]["containers"][0]
    assert spec["image"] == IMAGE + "-2" and spec["env"] == [{"name": "A", "value": "1"}]
    assert live["metadata"]["generation"] == 2


def test_two_appliers_share_a_list_by_its_keys(kubectl: Kubectl, tmp_path: Path) -> None:
    kubectl("apply", "--server-side", "-f", write(tmp_path, daemonset("ssa-b")))
    sidecar = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "ssa-b", "namespace": NS},
               "spec": {"template": {"spec": {"containers": [{"name": "sidecar", "image": "busybox:1.36"}]}}}}
    kubectl("apply", "--server-side", "--field-manager=mesh", "-f", write(tmp_path, sidecar, "sidecar.yaml"))
    names = kubectl("get", "ds", "ssa-b", "-n", NS, "-o", "jsonpath={.spec.template.spec.containers[*].name}")
    assert names == "exporter sidecar"
    assert list(managers(kubectl, "ssa-b")["mesh/Apply"]["f:spec"]["f:template"]["f:spec"]["f:containers"]) == [
        'k:{"name":"sidecar"}']


def test_conflict_with_an_updater_then_forced(kubectl: Kubectl, tmp_path: Path) -> None:
    kubectl("apply", "--server-side", "-f", write(tmp_path, daemonset("ssa-c")))
    kubectl("set", "image", "ds/ssa-c", "-n", NS, "exporter=" + IMAGE + "-hotfix")
    assert "kubectl-set/Update" in managers(kubectl, "ssa-c")

    refused = kubectl.run("apply", "--server-side", "-f", write(tmp_path, daemonset("ssa-c", IMAGE + "-3")),
                          check=False)
    assert refused.returncode == 1
    assert refused.stderr.splitlines()[0] == (
        'error: Apply failed with 1 conflict: conflict with "kubectl-set" using apps/v1: '
        '.spec.template.spec.containers[name="exporter"].image')
    assert "--force-conflicts" in refused.stderr
    assert kubectl("get", "ds", "ssa-c", "-n", NS, "-o",
                   "jsonpath={.spec.template.spec.containers[0].image}") == IMAGE + "-hotfix"

    kubectl("apply", "--server-side", "--force-conflicts", "-f", write(tmp_path, daemonset("ssa-c", IMAGE + "-3")))
    assert kubectl("get", "ds", "ssa-c", "-n", NS, "-o",
                   "jsonpath={.spec.template.spec.containers[0].image}") == IMAGE + "-3"
    assert "kubectl-set/Update" not in managers(kubectl, "ssa-c")  # it owned only the image, now kubectl's


def test_conflict_answer_is_the_servers(sim: KubeSim, tmp_path: Path, kubectl: Kubectl) -> None:
    kubectl("apply", "--server-side", "--field-manager=one", "-f", write(tmp_path, daemonset("ssa-d")))
    api = kubernetes.config.new_client_from_config(config_file=str(sim.kubeconfig))
    body = daemonset("ssa-d", IMAGE + "-x", env={"A": "1"})
    body["metadata"]["labels"] = {"app": "other"}
    with pytest.raises(kubernetes.client.ApiException) as caught:
        kubernetes.client.AppsV1Api(api).patch_namespaced_daemon_set(
            "ssa-d", NS, body, field_manager="two", _content_type="application/apply-patch+yaml")
    status = json.loads(caught.value.body)
    assert caught.value.status == 409 and status["reason"] == "Conflict"
    assert status["message"] == (
        'Apply failed with 2 conflicts: conflicts with "one":\n- .metadata.labels.app\n'
        '- .spec.template.spec.containers[name="exporter"].image')
    assert status["details"]["causes"][0] == {
        "reason": "FieldManagerConflict", "message": 'conflict with "one"', "field": ".metadata.labels.app"}


def test_apply_options_are_checked(sim: KubeSim) -> None:
    api = kubernetes.config.new_client_from_config(config_file=str(sim.kubeconfig))
    apps = kubernetes.client.AppsV1Api(api)
    with pytest.raises(kubernetes.client.ApiException) as caught:
        apps.patch_namespaced_daemon_set("ssa-x", NS, daemonset("ssa-x"), _content_type="application/apply-patch+yaml")
    assert caught.value.status == 422
    assert json.loads(caught.value.body)["message"] == (
        'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch')
    with pytest.raises(kubernetes.client.ApiException) as caught:
        apps.patch_namespaced_daemon_set("ssa-x", NS, {"metadata": {"labels": {"a": "b"}}}, force=True)
    assert caught.value.status == 422 and "force: Forbidden: may not be specified for non-apply patch" in (
        json.loads(caught.value.body)["message"])


def test_server_dry_run_and_diff_change_nothing(kubectl: Kubectl, tmp_path: Path) -> None:
    first = write(tmp_path, daemonset("ssa-e"))
    assert kubectl("diff", "--server-side", "-f", first, check=False) != ""  # a new object: all of it
    kubectl("apply", "--server-side", "-f", first)
    before = kubectl.json("get", "ds", "ssa-e", "-n", NS, "--show-managed-fields")
    same = kubectl.run("diff", "--server-side", "-f", first, check=False)
    assert (same.returncode, same.stdout) == (0, "")

    changed = write(tmp_path, daemonset("ssa-e", IMAGE + "-9"), "changed.yaml")
    out = kubectl("apply", "--server-side", "--dry-run=server", "-f", changed)
    assert out == "daemonset.apps/ssa-e serverside-applied (server dry run)\n"
    for how in (("--server-side",), ()):
        diff = kubectl.run("diff", *how, "-f", changed, check=False)
        assert diff.returncode == 1, diff.stderr
        lines = [ln for ln in diff.stdout.splitlines() if ln[:1] in "+-" and ln[:3] not in ("+++", "---")]
        assert f"-      - image: {IMAGE}" in lines and f"+      - image: {IMAGE}-9" in lines
    live = kubectl.json("get", "ds", "ssa-e", "-n", NS, "--show-managed-fields")
    assert (live["spec"], live["metadata"]) == (before["spec"], before["metadata"]) or (
        live["spec"] == before["spec"] and live["metadata"]["generation"] == 1
        and live["metadata"]["managedFields"] == before["metadata"]["managedFields"])  # status moves on its own


def test_client_create_from_yaml_with_apply(sim: KubeSim, tmp_path: Path, kubectl: Kubectl) -> None:
    api = kubernetes.config.new_client_from_config(config_file=str(sim.kubeconfig))
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa-f", "namespace": NS},
          "data": {"a": "1"}}
    utils.create_from_dict(api, cm, apply=True, namespace=NS)
    utils.create_from_dict(api, {**cm, "data": {"a": "2"}}, apply=True, namespace=NS)
    live = kubectl.json("get", "cm", "ssa-f", "-n", NS, "--show-managed-fields")
    assert live["data"] == {"a": "2"}
    assert [(e["manager"], e["operation"]) for e in live["metadata"]["managedFields"]] == [("python-client", "Apply")]


def test_client_side_apply_hands_over_to_server_side_apply(kubectl: Kubectl, tmp_path: Path) -> None:
    """``kubectl apply`` then ``kubectl apply --server-side``: no conflict on the fields the
    client-side apply set, and kubectl's migration leaves ``kubectl`` (Apply) owning them."""
    kubectl("apply", "-f", write(tmp_path, daemonset("ssa-g")))
    csa = managers(kubectl, "ssa-g")
    assert list(csa) == ["kubectl-client-side-apply/Update"]
    # an update owns the maps it created, as well as their keys
    assert csa["kubectl-client-side-apply/Update"]["f:metadata"]["f:labels"] == {".": {}, "f:app": {}}
    kubectl("apply", "--server-side", "-f", write(tmp_path, daemonset("ssa-g", IMAGE + "-4")))
    owners = managers(kubectl, "ssa-g")
    assert sorted(owners) == ["kubectl-last-applied/Apply", "kubectl/Apply"]
    assert "f:image" in owners["kubectl/Apply"]["f:spec"]["f:template"]["f:spec"]["f:containers"][
        'k:{"name":"exporter"}']
    assert kubectl("get", "ds", "ssa-g", "-n", NS, "-o",
                   "jsonpath={.spec.template.spec.containers[0].image}") == IMAGE + "-4"


def test_explain_reads_the_releases_published_schemas(kubectl: Kubectl) -> None:
    text = kubectl("explain", "daemonset.spec.updateStrategy.rollingUpdate")
    assert "FIELD: rollingUpdate <RollingUpdateDaemonSet>" in text and "maxSurge\t<IntOrString>" in text
    assert "Deprecated: KubeProxy Version reported by the node." in kubectl(
        "explain", "nodes.status.nodeInfo.kubeProxyVersion")
    assert "requests\t<[]DeviceRequest>" in kubectl("explain", "resourceclaims.spec.devices",
                                                     "--api-version=resource.k8s.io/v1beta2")


def test_field_validation_strict_warn_and_ignore(kubectl: Kubectl, sim: KubeSim, tmp_path: Path) -> None:
    """kubectl asks for Strict: an unknown field is refused with the API server's message;
    ``--validate=warn`` stores the object without it and prints the server's warning; a client that
    asks for nothing gets Warn, as from a real API server."""
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "fv", "namespace": NS},
          "data": {"a": "1"}, "bogus": {"x": 1}}
    path = write(tmp_path, cm, "cm.yaml")
    refused = kubectl.run("apply", "-f", path, check=False)
    assert refused.returncode == 1
    assert ('ConfigMap in version "v1" cannot be handled as a ConfigMap: strict decoding error: '
            'unknown field "bogus"') in refused.stderr
    warned = kubectl.run("apply", "--validate=warn", "-f", path, check=False)
    assert warned.returncode == 0 and 'Warning: unknown field "bogus"' in warned.stderr
    assert "bogus" not in kubectl.json("get", "cm", "fv", "-n", NS)
    api = kubernetes.config.new_client_from_config(config_file=str(sim.kubeconfig))
    answer = api.call_api(f"/api/v1/namespaces/{NS}/configmaps", "POST", body={**cm, "metadata": {"name": "fv2"}},
                          header_params={"Content-Type": "application/json", "Accept": "application/json"},
                          auth_settings=["BearerToken"], _preload_content=False)
    assert answer.status == 201 and answer.headers.get("Warning") == '299 - "unknown field \\"bogus\\""'
