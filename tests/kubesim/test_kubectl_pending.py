"""Issue 61 item 2, refereed by the real kubectl: a DaemonSet pod its node has no room for stays
Pending, unbound, with ``PodScheduled=False`` reason ``Unschedulable`` and the scheduler's
``FailedScheduling`` event, as a real cluster shows it (``kubectl get``, ``describe``); quantities
are read as the API server reads them (``1Ti`` is a quantity; ``1Kii`` is refused in the API
server's words, never with a 500)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from kubesim import KubeSim
from tests.kubesim.test_kubectl import wait_for
from tests.support import TEST_BUILDS, Kubectl

pytestmark = pytest.mark.conformance
DS, NS = "nvidia-device-plugin-daemonset", "kube-system"
REGEX = "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"


@pytest.fixture(scope="module", params=["1.27", "1.34"])
def sim(request: pytest.FixtureRequest) -> Iterator[KubeSim]:
    with KubeSim(pushed=TEST_BUILDS, scenario="gpu-small", k8s_version=request.param, speed=10.0) as served:
        yield served


def _requests(amounts: dict[str, str]) -> str:
    return json.dumps([{"op": "add", "path": "/spec/template/spec/containers/0/resources",
                        "value": {"requests": amounts}}])


def _pending(kubectl: Kubectl) -> dict[str, Any] | None:
    pods = kubectl.json("get", "pods", "-n", NS)["items"]
    return next((p for p in pods if p["metadata"]["name"].startswith(DS) and not p["spec"].get("nodeName")
                 and any(c["type"] == "PodScheduled" and c["status"] == "False"
                         for c in (p.get("status") or {}).get("conditions") or [])), None)


def test_a_pod_too_large_for_its_node_is_pending_as_kubectl_shows_it(sim: KubeSim) -> None:
    """200 CPUs asked of a 96-CPU node: the replacement pod on gpu-node1 is Pending with no node,
    PodScheduled=False reason Unschedulable with the scheduler's message, and ``kubectl describe``
    lists the Warning FailedScheduling event from default-scheduler with the same message."""
    kubectl = Kubectl(sim.kubeconfig)
    kubectl("patch", "daemonset", DS, "-n", NS, "--type=merge", "-p", '{"spec":{"updateStrategy":{"type":"OnDelete"}}}')
    kubectl("patch", "daemonset", DS, "-n", NS, "--type=json", "-p", _requests({"cpu": "200"}))
    old = kubectl("get", "pods", "-n", NS, "--field-selector", "spec.nodeName=gpu-node1", "-o", "name").split()
    kubectl("delete", "-n", NS, *[o for o in old if DS in o], "--wait=false")
    pod = wait_for(lambda: _pending(kubectl), what="the pending pod")
    [cond] = [c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert (cond["status"], cond["reason"]) == ("False", "Unschedulable")
    assert cond["message"].startswith("0/4 nodes are available: 1 Insufficient cpu")
    assert pod["status"]["phase"] == "Pending"
    name = pod["metadata"]["name"]
    wide = kubectl("get", "pod", name, "-n", NS, "-o", "wide").splitlines()[1].split()
    assert wide[2] == "Pending" and wide[6] == "<none>", wide
    described = kubectl("describe", "pod", name, "-n", NS)
    line = next(ln for ln in described.splitlines() if "FailedScheduling" in ln)
    assert line.split()[:2] == ["Warning", "FailedScheduling"] and "default-scheduler" in line, line
    assert line.rstrip().endswith(cond["message"]), (line, cond["message"])
    assert any(ln.split() == ["PodScheduled", "False"] for ln in described.splitlines()), described


def test_quantities_are_read_as_the_api_server_reads_them(sim: KubeSim) -> None:
    """``1Ti`` in a server-side dry run is stored as given (no 500); ``1Kii`` is refused: kubectl's
    JSON patch with the API server's 422 (``patch: Invalid value``), a create with its 400
    (``cannot be handled as a Pod``), each with the parser's ``unable to parse quantity's suffix``."""
    kubectl = Kubectl(sim.kubeconfig)
    dry = kubectl.json("patch", "daemonset", DS, "-n", NS, "--type=json", "-p", _requests({"memory": "1Ti"}),
                       "--dry-run=server")
    assert dry["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"] == {"memory": "1Ti"}
    bad = kubectl.run("patch", "daemonset", DS, "-n", NS, "--type=json", "-p", _requests({"memory": "1Kii"}),
                      check=False)
    assert bad.returncode == 1 and "is invalid: patch: Invalid value: " in bad.stderr, bad.stderr
    assert bad.stderr.rstrip().endswith("unable to parse quantity's suffix"), bad.stderr
    api = client.CoreV1Api(config.new_client_from_config(config_file=str(sim.kubeconfig)))
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "q", "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "busybox:1.36", "resources": {"limits": {"cpu": "2x"}}}]}}
    with pytest.raises(ApiException) as caught:
        api.create_namespaced_pod("default", body)
    status = json.loads(caught.value.body)
    assert (caught.value.status, status["reason"]) == (400, "BadRequest")
    assert status["message"] == ('Pod in version "v1" cannot be handled as a Pod: quantities must match the regular '
                                 f"expression {REGEX}")


def test_a_server_side_apply_with_a_malformed_quantity_is_refused_not_a_500(sim: KubeSim) -> None:
    """``kubectl apply --server-side`` of a pod asking ``cpu: 2x`` is refused with the parser's
    words (kubesim answers as a create's decode error), and nothing is stored."""
    kubectl = Kubectl(sim.kubeconfig)
    pod = ("apiVersion: v1\nkind: Pod\nmetadata: {name: ssa-q, namespace: default}\nspec:\n  containers:\n"
           "  - {name: c, image: 'busybox:1.36', resources: {limits: {cpu: 2x}}}\n")
    proc = kubectl.run("apply", "--server-side", "-f", "-", input=pod, check=False)
    assert proc.returncode == 1 and "quantities must match the regular expression" in proc.stderr, proc.stderr
    assert "InternalError" not in proc.stderr and "500" not in proc.stderr
    assert kubectl.run("get", "pod", "ssa-q", check=False).returncode == 1
