"""kubesim refereed by the real kubectl: each command behaves as against a real cluster."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from kubesim import KubeSim
from tests.support import Kubectl

pytestmark = pytest.mark.conformance

DS = "nvidia-device-plugin-daemonset"
NS = "kube-system"
OLD = "nvcr.io/nvidia/k8s-device-plugin:v0.14.2"
NEW = "nvcr.io/nvidia/k8s-device-plugin:v0.15.0"


@pytest.fixture(scope="module")
def sim() -> Iterator[KubeSim]:
    with KubeSim(scenario="gpu-small", k8s_version="1.31", speed=5.0) as s:
        s.fault(kind="kubelet-restart", node="gpu-node3")  # so there are events to list
        s.advance("5s")
        yield s


@pytest.fixture(scope="module")
def kubectl(sim: KubeSim) -> Kubectl:
    return Kubectl(sim.kubeconfig)


def wait_for(predicate, timeout: float = 30.0, every: float = 0.2, *, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        time.sleep(every)
    raise AssertionError(f"{what} not met in time")


def header(text: str) -> list[str]:
    return text.splitlines()[0].split()


@pytest.mark.parametrize(
    ("resource", "columns", "wide_extra"),
    [
        ("nodes", ["NAME", "STATUS", "ROLES", "AGE", "VERSION"], ["INTERNAL-IP", "OS-IMAGE"]),
        ("pods -A", ["NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE"], ["IP", "NODE"]),
        ("daemonsets -A", ["NAMESPACE", "NAME", "DESIRED", "CURRENT", "READY", "UP-TO-DATE", "AVAILABLE"],
         ["CONTAINERS", "IMAGES"]),
        ("controllerrevisions -A", ["NAMESPACE", "NAME", "CONTROLLER", "REVISION", "AGE"], []),
        ("events -A", ["NAMESPACE", "LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"], ["COUNT"]),
        ("resourceclaims -A", ["NAMESPACE", "NAME", "STATE", "AGE"], []),
        ("deviceclasses", ["NAME", "AGE"], []),
        ("resourceslices", ["NAME", "NODE", "DRIVER", "POOL", "AGE"], []),
    ],
)
def test_get_tables_wide_and_json(kubectl: Kubectl, resource: str, columns: list[str], wide_extra: list[str]) -> None:
    """kubectl get prints the server's columns, -o wide adds the wide ones, -o json parses."""
    args = resource.split()
    table = kubectl("get", *args)
    assert header(table)[: len(columns)] == columns
    assert len(table.splitlines()) > 1, table
    wide = kubectl("get", *args, "-o", "wide")
    for col in wide_extra:
        assert col in header(wide)
    listing = json.loads(kubectl("get", *args, "-o", "json"))
    assert listing["kind"] == "List" and listing["items"]


def test_get_shows_the_scenario(kubectl: Kubectl) -> None:
    """Nodes are Ready, the plugin DaemonSet is fully available, claims show their states."""
    nodes = kubectl("get", "nodes")
    for node in ("gpu-node1", "gpu-node2", "gpu-node3", "cpu-node1"):
        assert any(line.split()[:2] == [node, "Ready"] for line in nodes.splitlines()), nodes
    ds = kubectl("get", "ds", DS, "-n", NS, "--no-headers").split()
    assert ds[1:6] == ["3", "3", "3", "3", "3"], ds
    claims = {line.split()[0]: line.split()[1] for line in kubectl("get", "resourceclaims", "-n", "ml-team", "--no-headers").splitlines()}
    assert claims["shared-gpu"] == "allocated,reserved" and claims["pending-gpu"] == "pending"


def test_describe_node_shows_gpu_capacity(kubectl: Kubectl) -> None:
    """describe node lists nvidia.com/gpu under Capacity and Allocatable."""
    text = kubectl("describe", "node", "gpu-node1")
    capacity = text.split("Capacity:")[1].split("System Info:")[0]
    assert "nvidia.com/gpu:" in capacity
    assert [line.split()[-1] for line in capacity.splitlines() if "nvidia.com/gpu" in line] == ["8", "8"]


def test_logs_show_registration(kubectl: Kubectl) -> None:
    """kubectl logs of a plugin pod shows it registered with the kubelet."""
    pod = kubectl("get", "pods", "-n", NS, "-l", "name=nvidia-device-plugin-ds", "-o", "jsonpath={.items[0].metadata.name}")
    logs = kubectl("logs", "-n", NS, pod)
    assert "Registered device plugin for 'nvidia.com/gpu' with Kubelet" in logs
    assert kubectl("logs", "-n", NS, pod, "--tail=1").count("\n") == 1


def test_metrics_raw(kubectl: Kubectl) -> None:
    """get --raw /metrics carries the DRA feature gate as the release reports it."""
    text = kubectl("get", "--raw", "/metrics")
    assert 'kubernetes_feature_enabled{name="DynamicResourceAllocation",stage="ALPHA"} 1' in text


def test_metrics_count_the_bytes_answered_as_the_api_server_does(kubectl: Kubectl) -> None:
    """apiserver_response_sizes (per verb) and apiserver_watch_events_sizes: what a client read."""
    def sample(text: str, line: str) -> float:
        return next((float(x.rsplit(" ", 1)[1]) for x in text.splitlines() if x.startswith(line + " ")), 0.0)

    pods_sum = 'apiserver_response_sizes_sum{resource="pods",verb="list"}'
    pods_count = 'apiserver_response_sizes_count{resource="pods",verb="list"}'
    before = kubectl("get", "--raw", "/metrics")
    listed = kubectl("get", "--raw", "/api/v1/pods")
    after = kubectl("get", "--raw", "/metrics")
    assert sample(after, pods_count) == sample(before, pods_count) + 1
    assert sample(after, pods_sum) - sample(before, pods_sum) == len(listed.encode())
    watch_sum, watch_count = ('apiserver_watch_events_sizes_sum{resource="pods"}',
                              'apiserver_watch_events_sizes_count{resource="pods"}')
    streamed = kubectl("get", "--raw", f"/api/v1/namespaces/{NS}/pods?watch=1&resourceVersion=0&timeoutSeconds=1")
    events = kubectl("get", "--raw", "/metrics")
    lines = [line for line in streamed.splitlines() if line]
    assert lines and sample(events, watch_count) - sample(after, watch_count) == len(lines)
    assert sample(events, watch_sum) - sample(after, watch_sum) == len(streamed.encode())


def test_apply_dry_run_served_and_unserved(kubectl: Kubectl, tmp_path) -> None:
    """apply --dry-run=server accepts a served version and names an unserved one."""
    claim = """apiVersion: resource.k8s.io/{v}
kind: ResourceClaim
metadata: {{name: dry-claim, namespace: ml-team}}
spec:
  devices:
    requests:
    - {{name: gpu, deviceClassName: gpu.example.com}}
"""
    served = tmp_path / "served.yaml"
    served.write_text(claim.format(v="v1alpha3"))
    out = kubectl("apply", "--dry-run=server", "-f", str(served))
    assert "resourceclaim.resource.k8s.io/dry-claim created (server dry run)" in out
    assert "dry-claim" not in kubectl("get", "resourceclaims", "-n", "ml-team")
    unserved = tmp_path / "unserved.yaml"
    unserved.write_text(claim.format(v="v1beta1"))
    proc = kubectl.run("apply", "--dry-run=server", "-f", str(unserved), check=False)
    assert proc.returncode != 0
    assert 'no matches for kind "ResourceClaim" in version "resource.k8s.io/v1beta1"' in proc.stderr


def test_delete_pod_is_recreated(kubectl: Kubectl) -> None:
    """Deleting a DaemonSet pod: the controller puts a new one on the same node."""
    pods = json.loads(kubectl("get", "pods", "-n", NS, "-l", "name=nvidia-device-plugin-ds", "-o", "json"))["items"]
    victim = pods[0]
    node = victim["spec"]["nodeName"]
    kubectl("delete", "pod", "-n", NS, victim["metadata"]["name"], "--wait=true", timeout=60)

    def replaced() -> bool:
        now = json.loads(kubectl("get", "pods", "-n", NS, "-l", "name=nvidia-device-plugin-ds",
                                 f"--field-selector=spec.nodeName={node}", "-o", "json"))["items"]
        return any(p["metadata"]["name"] != victim["metadata"]["name"] and p["status"].get("phase") == "Running"
                   for p in now)

    wait_for(replaced)


def test_set_image_rollout_status_history_undo(kubectl: Kubectl) -> None:
    """set image rolls out to every node; history lists revisions; undo restores the image."""
    kubectl("set", "image", f"ds/{DS}", "-n", NS, f"nvidia-device-plugin-ctr={NEW}")
    out = kubectl("rollout", "status", f"ds/{DS}", "-n", NS, "--timeout=60s", timeout=90)
    assert "successfully rolled out" in out
    images = kubectl("get", "pods", "-n", NS, "-l", "name=nvidia-device-plugin-ds",
                     "-o", "jsonpath={.items[*].spec.containers[0].image}").split()
    assert images == [NEW] * 3
    history = kubectl("rollout", "history", f"ds/{DS}", "-n", NS)
    assert "REVISION" in history and len([line for line in history.splitlines() if line[:1].isdigit()]) >= 2
    kubectl("rollout", "undo", f"ds/{DS}", "-n", NS)
    out = kubectl("rollout", "status", f"ds/{DS}", "-n", NS, "--timeout=60s", timeout=90)
    assert "successfully rolled out" in out
    assert kubectl("get", "ds", DS, "-n", NS, "-o", "jsonpath={.spec.template.spec.containers[0].image}") == OLD
    images = kubectl("get", "pods", "-n", NS, "-l", "name=nvidia-device-plugin-ds",
                     "-o", "jsonpath={.items[*].spec.containers[0].image}").split()
    assert images == [OLD] * 3


@pytest.mark.parametrize(("release", "kind"), [("1.27", "resourceclasses"), ("1.34", "deviceclasses")])
def test_release_specific_dra_kinds(release: str, kind: str) -> None:
    """Each release serves its own DRA class kind; kubectl lists it and the claims."""
    with KubeSim(k8s_version=release) as s:
        k = Kubectl(s.kubeconfig)
        assert "gpu.example.com" in k("get", kind)
        states = k("get", "resourceclaims", "-n", "ml-team", "--no-headers")
        assert "allocated,reserved" in states and "pending" in states
        versions = k("api-versions").split()
        assert ("resource.k8s.io/v1" in versions) == (release == "1.34")
