"""Issue 35: the ``not-ready`` taint path. A node whose kubelet still heartbeats but reports
``Ready=False`` (the ``runtime-down`` fault: its container runtime stopped) gets
``node.kubernetes.io/not-ready:NoSchedule`` and, from the node lifecycle controller's next
monitor pass, ``not-ready:NoExecute``; the taint eviction controller evicts its pods after
their tolerationSeconds (300 s from admission), never a DaemonSet's; the ``unreachable`` taints
stay the path of a stopped heartbeat. On kubesim's simulated clock (it barely moves on its
own), refereed by the real kubectl on 1.27, 1.32 and 1.34."""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from kubesim import KubeSim
from kubesim.clock import parse_time
from tests.kubesim._simkit import RELEASES, condition
from tests.support import Kubectl

pytestmark = pytest.mark.conformance

NOT_READY = "node.kubernetes.io/not-ready"
UNREACHABLE = "node.kubernetes.io/unreachable"


@pytest.fixture(scope="module", params=RELEASES)
def sim(request: pytest.FixtureRequest) -> Iterator[KubeSim]:
    """gpu-small whose clock moves a hundredth as fast as the wall's: only advance() moves it much."""
    with KubeSim(scenario="gpu-small", k8s_version=request.param, speed=0.01) as s:
        yield s


@pytest.fixture(scope="module")
def kubectl(sim: KubeSim) -> Kubectl:
    return Kubectl(sim.kubeconfig)


def taints(node: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(t["key"], t["effect"]): t for t in node["spec"].get("taints") or []}


def renewed(kubectl: Kubectl, node: str) -> dt.datetime:
    moment = parse_time(kubectl.json("get", "lease", "-n", "kube-node-lease", node)["spec"]["renewTime"])
    assert moment is not None
    return moment


def deleting(kubectl: Kubectl, ns: str, name: str) -> bool:
    return bool(kubectl.json("get", "pod", "-n", ns, name)["metadata"].get("deletionTimestamp"))


def test_a_kubelet_reporting_not_ready_gets_the_not_ready_taints_and_its_pods_go_after_300s(
        sim: KubeSim, kubectl: Kubectl) -> None:
    """issue 35: 30 s after its runtime goes down (maxWaitForContainerRuntime) the kubelet posts
    Ready=False (KubeletNotReady, "container runtime is down", a NodeNotReady event of its own) and
    keeps renewing its Lease; the node lifecycle controller adds not-ready:NoSchedule and, on its
    next 5 s pass, not-ready:NoExecute, never an unreachable taint; a pod admitted with the default
    300 s toleration is evicted 300 s after the NoExecute taint and stays Terminating while the
    runtime is down, a DaemonSet pod stays; node-ready clears the taints and the pod goes."""
    node = "gpu-node2"
    daemon = [p["metadata"]["name"] for p in kubectl.json("get", "pods", "-n", "kube-system")["items"]
              if p["spec"].get("nodeName") == node]
    assert daemon
    lease_before = renewed(kubectl, node)
    sim.fault(kind="runtime-down", node=node)
    sim.advance("25s")
    obj = kubectl.json("get", "node", node)
    assert condition(obj, "Ready")["status"] == "True" and not taints(obj)  # type: ignore[index]
    sim.advance("15s")
    obj = kubectl.json("get", "node", node)
    ready = condition(obj, "Ready")
    assert ready is not None and (ready["status"], ready["reason"], ready["message"]) == (
        "False", "KubeletNotReady", "container runtime is down")
    assert ready["lastHeartbeatTime"] == ready["lastTransitionTime"]
    assert set(taints(obj)) == {(NOT_READY, "NoSchedule"), (NOT_READY, "NoExecute")}
    assert renewed(kubectl, node) > lease_before, "the kubelet still renews its Lease"
    described = kubectl("describe", "node", node)
    assert re.search(r"Taints:\s+node\.kubernetes\.io/not-ready:No(Schedule|Execute)\n\s+"
                     r"node\.kubernetes\.io/not-ready:No(Schedule|Execute)\n", described), described
    assert re.search(r"\n  Ready\s+False\s.*KubeletNotReady\s+container runtime is down\n", described), described
    assert UNREACHABLE not in described
    events = json.loads(kubectl("get", "events", "-n", "default", "--field-selector",
                                f"involvedObject.name={node},reason=NodeNotReady", "-o", "json"))["items"]
    assert [(e["source"]["component"], e["message"]) for e in events] == [
        ("kubelet", f"Node {node} status is now: NodeNotReady")]

    added = parse_time(taints(obj)[(NOT_READY, "NoExecute")]["timeAdded"])
    assert added is not None
    now = dt.datetime.fromtimestamp(sim.call(lambda s: s.clock.time()), dt.UTC)
    sim.advance((added - now).total_seconds() + 295)
    assert not deleting(kubectl, "ml-team", "trainer-1")
    sim.advance("10s")
    trainer = kubectl.json("get", "pod", "-n", "ml-team", "trainer-1")
    assert trainer["metadata"].get("deletionTimestamp"), "evicted 300 s after the taint, held while the runtime is down"
    target = condition(trainer, "DisruptionTarget")
    assert target is not None and target["reason"] == "DeletionByTaintManager"
    assert all(not deleting(kubectl, "kube-system", name) for name in daemon)

    sim.fault(kind="node-ready", node=node)
    sim.advance("5s")
    obj = kubectl.json("get", "node", node)
    assert condition(obj, "Ready")["status"] == "True" and not taints(obj)  # type: ignore[index]
    assert kubectl.run("get", "pod", "-n", "ml-team", "trainer-1", check=False).returncode != 0


def test_a_stopped_heartbeat_still_takes_the_unreachable_path(sim: KubeSim, kubectl: Kubectl) -> None:
    """issue 35: a kubelet that stops heartbeating (node-not-ready) is still marked Unknown with the
    unreachable taints after the grace, not with not-ready ones."""
    sim.fault(kind="node-not-ready", node="gpu-node3")
    sim.advance("70s")
    obj = kubectl.json("get", "node", "gpu-node3")
    assert condition(obj, "Ready")["status"] == "Unknown"  # type: ignore[index]
    assert set(taints(obj)) == {(UNREACHABLE, "NoSchedule"), (UNREACHABLE, "NoExecute")}
    sim.fault(kind="node-ready", node="gpu-node3")
    sim.advance("2s")
    assert not taints(kubectl.json("get", "node", "gpu-node3"))
