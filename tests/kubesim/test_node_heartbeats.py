"""Issue 35 item 3: each kubelet renews its node's Lease in ``kube-node-lease``, and the
``node-not-ready`` fault goes through that heartbeat: the node lifecycle controller marks the
node Unknown with the ``unreachable`` taints after its grace period, and the taint eviction
controller evicts the pods that do not tolerate ``NoExecute``. Refereed by the real kubectl on
1.27, 1.32 and 1.34."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from kubesim import KubeSim
from kubesim.clock import parse_time
from kubesim.control import apply_fault
from kubesim.heartbeats import LEASES, grace_period
from kubesim.scenarios import build
from kubesim.simulation import Simulation
from tests.kubesim._simkit import NODES, PODS, condition, events, get, per_release
from tests.support import Kubectl, push_test_builds

UNREACHABLE = "node.kubernetes.io/unreachable"

sim, kubectl = per_release()


def renew_time(kubectl: Kubectl, node: str) -> dt.datetime:
    lease = kubectl.json("get", "lease", "-n", "kube-node-lease", node)
    moment = parse_time(lease["spec"]["renewTime"])
    assert moment is not None
    return moment


def test_describe_node_prints_the_lease_its_kubelet_renews(sim: KubeSim, kubectl: Kubectl) -> None:
    """issue 35 item 3: ``kubectl describe node`` prints the node's Lease (holder = the node) where
    it printed ``Failed to get lease``; the Lease's renewTime follows the simulated clock every
    10 s, and no renewal is a mutating request."""
    out = kubectl("describe", "node", "gpu-node1")
    assert "Failed to get lease" not in out
    lease_lines = out.split("Lease:", 1)[1].splitlines()[1:4]
    assert [line.split(":", 1)[0].strip() for line in lease_lines] == ["HolderIdentity", "AcquireTime", "RenewTime"]
    assert lease_lines[0].split()[-1] == "gpu-node1" and lease_lines[1].split()[-1] == "<unset>"
    lease = kubectl.json("get", "lease", "-n", "kube-node-lease", "gpu-node1")
    assert lease["spec"]["holderIdentity"] == "gpu-node1" and lease["spec"]["leaseDurationSeconds"] == 40
    assert lease["metadata"]["ownerReferences"][0]["kind"] == "Node"
    sim.call(lambda s: s.mutations.clear())
    before = renew_time(kubectl, "gpu-node1")
    sim.advance("60s")
    after = renew_time(kubectl, "gpu-node1")
    moved = (after - before).total_seconds()
    assert moved >= 60 and moved % 10 == 0, "renewed every 10 s of the simulated clock"
    assert sim.mutations() == []


def test_a_stopped_heartbeat_makes_the_node_unknown_after_the_grace(sim: KubeSim, kubectl: Kubectl) -> None:
    """issue 35 item 3: the node-not-ready fault stops the kubelet's renewals; the node stays Ready
    until the grace period has passed, then is Unknown ("Kubelet stopped posting node status.")
    with the unreachable NoSchedule and NoExecute taints; node-ready renews and clears them."""
    sim.fault(kind="node-not-ready", node="gpu-node3")
    frozen = renew_time(kubectl, "gpu-node3")
    sim.advance("20s")
    node = kubectl.json("get", "node", "gpu-node3")
    assert condition(node, "Ready")["status"] == "True"  # type: ignore[index]
    assert renew_time(kubectl, "gpu-node3") == frozen
    sim.advance("40s")
    node = kubectl.json("get", "node", "gpu-node3")
    ready = condition(node, "Ready")
    assert ready is not None and ready["status"] == "Unknown" and ready["reason"] == "NodeStatusUnknown"
    assert ready["message"] == "Kubelet stopped posting node status."
    taints = {(t["key"], t["effect"]): t for t in node["spec"]["taints"]}
    assert set(taints) == {(UNREACHABLE, "NoSchedule"), (UNREACHABLE, "NoExecute")}
    assert all(t.get("timeAdded") for t in taints.values())
    assert "Taints:             node.kubernetes.io/unreachable:NoExecute" in kubectl("describe", "node", "gpu-node3")
    sim.fault(kind="node-ready", node="gpu-node3")
    sim.advance("1s")
    node = kubectl.json("get", "node", "gpu-node3")
    assert condition(node, "Ready")["status"] == "True" and "taints" not in node["spec"]  # type: ignore[index]
    assert renew_time(kubectl, "gpu-node3") > frozen


KUBELET_CONDITIONS = ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")


def heartbeats(node: dict[str, Any]) -> dict[str, tuple[dt.datetime, dt.datetime]]:
    """Each kubelet condition's (lastHeartbeatTime, lastTransitionTime)."""
    out = {}
    for kind in KUBELET_CONDITIONS:
        cond = condition(node, kind)
        assert cond is not None, kind
        beat, moved = parse_time(cond["lastHeartbeatTime"]), parse_time(cond["lastTransitionTime"])
        assert beat is not None and moved is not None
        out[kind] = (beat, moved)
    return out


def test_node_status_heartbeat_moves_as_the_kubelet_posts_it(sim: KubeSim, kubectl: Kubectl) -> None:
    """issue 35: the kubelet posts its node's status every nodeStatusReportFrequency (5 min) of the
    simulated clock, so each of its conditions' lastHeartbeatTime moves while lastTransitionTime
    stays; kubectl describe node shows the moving heartbeat; no post is a mutating request."""
    before = heartbeats(kubectl.json("get", "node", "gpu-node1"))
    described = kubectl("describe", "node", "gpu-node1")
    sim.call(lambda s: s.mutations.clear())
    sim.advance("11m")
    now = dt.datetime.fromtimestamp(sim.call(lambda s: s.clock.time()), dt.UTC)
    after = heartbeats(kubectl.json("get", "node", "gpu-node1"))
    for kind in KUBELET_CONDITIONS:
        assert after[kind][1] == before[kind][1], "lastTransitionTime stays"
        assert (after[kind][0] - before[kind][0]).total_seconds() >= 600, kind
        assert 0 <= (now - after[kind][0]).total_seconds() < 300, "posted within the last 5 minutes"
    again = kubectl("describe", "node", "gpu-node1")
    [ready_before] = [line for line in described.splitlines() if line.lstrip().startswith("Ready ")]
    [ready_after] = [line for line in again.splitlines() if line.lstrip().startswith("Ready ")]
    beat = after["Ready"][0].astimezone().strftime("%a, %d %b %Y %H:%M:%S %z")
    assert ready_after != ready_before and ready_after.split()[2:8] == beat.split(), (ready_after, beat)
    assert sim.mutations() == []


# ------------------------------------------------------------------ in process: taint eviction
def pinned_pod(name: str, node: str, tolerations: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"nodeName": node, "containers": [{"name": "c", "image": "registry.example.com/app:1"}]}
    if tolerations is not None:
        spec["tolerations"] = tolerations
    return {"metadata": {"name": name, "namespace": "default"}, "spec": spec}


@pytest.mark.parametrize("minor", [27, 32, 34])
def test_noexecute_evicts_pods_by_their_tolerations(minor: int) -> None:
    """issue 35 item 3: after the grace, a pod tolerating the unreachable taint for 0 s is
    evicted at once (DisruptionTarget, TaintManagerEviction) and stays Terminating while the
    kubelet is away; one created with no toleration, given admission's 300 s, goes 300 s after
    the taint; a DaemonSet pod (tolerating it for ever) stays."""
    s: Simulation = push_test_builds(build(scenario="gpu-small", minor=minor))
    store = s.store
    for pod in (pinned_pod("bare", "gpu-node2", [{"key": UNREACHABLE, "operator": "Exists",
                                                   "effect": "NoExecute", "tolerationSeconds": 0}]),
                pinned_pod("patient", "gpu-node2")):
        store.create(store.storage_type(PODS), pod)
    s.settle()
    daemon = [p for p in store.list(PODS, "kube-system") if p["spec"].get("nodeName") == "gpu-node2"]
    assert daemon
    assert apply_fault(s, {"kind": "node-not-ready", "node": "gpu-node2"}) is None
    s.advance(grace_period(minor) - 12.0)  # the last renewal was at most 10 s before the fault
    assert not (get(s, PODS, "default", "bare") or {})["metadata"].get("deletionTimestamp")
    s.advance(18.0)  # past the grace and the next 5 s monitor tick
    node = get(s, NODES, "", "gpu-node2") or {}
    assert condition(node, "Ready")["status"] == "Unknown"  # type: ignore[index]
    [added] = {t["timeAdded"] for t in node["spec"]["taints"] if t["effect"] == "NoExecute"}
    tainted = (parse_time(added) or dt.datetime.now(dt.UTC)).timestamp()
    bare = get(s, PODS, "default", "bare")
    assert bare is not None and bare["metadata"].get("deletionTimestamp")
    target = condition(bare, "DisruptionTarget")
    assert target is not None and target["reason"] == "DeletionByTaintManager"
    assert events(s, reason="TaintManagerEviction", name="bare")[0]["message"] == "Marking for deletion Pod default/bare"
    assert not (get(s, PODS, "default", "patient") or {})["metadata"].get("deletionTimestamp")
    s.advance(tainted + 300 - s.clock.time() - 2)
    assert not (get(s, PODS, "default", "patient") or {})["metadata"].get("deletionTimestamp")
    s.advance(4.0)
    assert (get(s, PODS, "default", "patient") or {})["metadata"].get("deletionTimestamp")
    for pod in daemon:
        assert not (get(s, PODS, "kube-system", pod["metadata"]["name"]) or {})["metadata"].get("deletionTimestamp")
    assert apply_fault(s, {"kind": "node-ready", "node": "gpu-node2"}) is None
    s.advance(5.0)
    assert get(s, PODS, "default", "bare") is None


def test_a_kubelet_back_within_the_grace_leaves_the_node_alone() -> None:
    """issue 35 item 3: a heartbeat that stops for less than the grace period (node-not-ready with
    a 20 s duration) never makes the node Unknown, and nothing is evicted."""
    s = push_test_builds(build(scenario="gpu-small", minor=31))
    assert apply_fault(s, {"kind": "node-not-ready", "node": "gpu-node1", "duration": "20s"}) is None
    s.advance(120.0)
    assert condition(get(s, NODES, "", "gpu-node1") or {}, "Ready")["status"] == "True"  # type: ignore[index]
    assert events(s, reason="NodeNotReady") == [] and events(s, reason="TaintManagerEviction") == []
    assert len(s.store.list(LEASES, "kube-node-lease")) == len(s.store.list(NODES))


def test_a_kubelet_that_stopped_posting_holds_its_writes_within_the_grace() -> None:
    """issue 35 item 3: from the moment its heartbeat stops (before the node lifecycle controller
    notices), the kubelet posts nothing: a pod deleted on its node stays Terminating; once the
    kubelet is back (within the grace) the pod goes, and the node was never marked."""
    s = push_test_builds(build(scenario="gpu-small", minor=31))
    assert apply_fault(s, {"kind": "node-not-ready", "node": "gpu-node1"}) is None
    s.advance(5.0)
    s.store.delete(PODS, "ml-team", "trainer-0")
    s.advance(20.0)
    held = get(s, PODS, "ml-team", "trainer-0")
    assert held is not None and held["metadata"].get("deletionTimestamp")
    assert apply_fault(s, {"kind": "node-ready", "node": "gpu-node1"}) is None
    s.advance(2.0)
    assert get(s, PODS, "ml-team", "trainer-0") is None
    assert events(s, reason="NodeNotReady") == [] and events(s, reason="NodeReady") == []
