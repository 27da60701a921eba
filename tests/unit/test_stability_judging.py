"""The verdict rules of a stability report, on a baseline and a cluster state built by hand (pure)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from runbooks.daemonset.baselines import Baseline, NodeBaseline
from runbooks.engine.runs import Run, RunState, Target
from runbooks.inventory import Node, PluginPod, ResourceClaim
from runbooks.policy import Policy
from runbooks.stability.reading import ClusterNow
from runbooks.stability.reporting import build_report, due_times
from runbooks.stability.tallying import KUBELET_RESTART, Seen, Tally

T0 = dt.datetime(2025, 1, 6, 9, 0, tzinfo=dt.UTC)
NODES = ("gpu-node1", "gpu-node2")
POLICY = Policy.model_validate({"reports": {"after": ["24h", "48h"], "claims_pending_after": "15m"}})


def baseline() -> Baseline:
    nodes = {n: NodeBaseline(name=n, capacity={"nvidia.com/gpu": 8}, allocatable={"nvidia.com/gpu": 8}, pod=f"plugin-{n}",
                             pod_uid=f"uid-{n}", restarts=2, images={"ctr": "plugin:v1"}) for n in NODES}
    return Baseline(taken_at=T0 - dt.timedelta(hours=1), daemonset="kube-system/plugin", kind="device-plugin",
                    gpu_resources=["nvidia.com/gpu"], nodes=nodes)


def run() -> Run:
    return Run(id="r-judge001", target=Target(cluster="c", namespace="kube-system", name="plugin"), image="plugin:v2",
               container="ctr", node="gpu-node1", requester="U0ALICE", state=RunState.MONITORING, created_at=T0,
               updated_at=T0, progress={"baseline": baseline().model_dump(mode="json"), "promote_started_at": T0.isoformat()})


def pod(node: str, **changes: Any) -> PluginPod:
    values: dict[str, Any] = {"name": f"plugin-new-{node}", "node": node, "phase": "Running", "ready": True, "restarts": 0,
                              "crashloop": False, "images": {"ctr": "plugin:v2"}, "uid": f"new-{node}", **changes}
    return PluginPod(**values)


def node(name: str, allocatable: int = 8, ready: bool = True) -> Node:
    return Node(name=name, ready=ready, unschedulable=False, gpu_hardware=True, capacity={"nvidia.com/gpu": 8},
                allocatable={"nvidia.com/gpu": allocatable})


def now(*, pods: dict[str, PluginPod] | None = None, nodes: dict[str, Node] | None = None,
        claims: list[ResourceClaim] | None = None) -> ClusterNow:
    return ClusterNow(taken_at=T0 + dt.timedelta(hours=24), pods=pods if pods is not None else {n: pod(n) for n in NODES},
                      nodes=nodes if nodes is not None else {n: node(n) for n in NODES}, claims=claims)


def test_a_quiet_cluster_is_stable_and_the_window_starts_at_the_promotion() -> None:
    """No event, every pod Ready, GPUs as before: stable, over 24 h since the promotion."""
    report = build_report(run(), now=now(), tally=Tally(), info={}, policy=POLICY, due="24h")
    assert (report.verdict, report.findings, report.window) == ("stable", [], dt.timedelta(hours=24))
    assert [after for after, _ in due_times(run(), POLICY)] == ["24h", "48h"]
    assert [n.gpus_before + " " + n.gpus_now for n in report.nodes] == ["8/8 8/8", "8/8 8/8"]


def test_gpus_below_the_baseline_fail_the_report_naming_the_node() -> None:
    """An allocatable that fell from 8 to 0 (a deregistered plugin) is failing, on that node."""
    report = build_report(run(), now=now(nodes={"gpu-node1": node("gpu-node1"), "gpu-node2": node("gpu-node2", 0)}),
                          tally=Tally(), info={}, policy=POLICY)
    assert report.verdict == "failing" and report.nodes_named() == ["gpu-node2"]
    assert [(d.node, d.field, d.baseline, d.now) for d in report.capacity_drops] == [("gpu-node2", "allocatable", 8, 0)]


def test_a_crash_looping_plugin_fails_and_its_restarts_count_from_the_promotion() -> None:
    """CrashLoopBackOff now is failing; restarts of a new pod count whole, of the baseline's pod beyond its 2."""
    pods = {"gpu-node1": pod("gpu-node1", uid="uid-gpu-node1", restarts=3),
            "gpu-node2": pod("gpu-node2", restarts=5, crashloop=True, ready=False, waiting_reason="CrashLoopBackOff")}
    report = build_report(run(), now=now(pods=pods), tally=Tally(), info={}, policy=POLICY)
    assert report.verdict == "failing"
    assert [(r.node, r.restarts) for r in report.restarts] == [("gpu-node1", 1), ("gpu-node2", 5)]
    codes = {f.code: f.nodes for f in report.findings}
    assert codes["plugin-down"] == ["gpu-node2"] and codes["plugin-restarts"] == ["gpu-node1", "gpu-node2"]


def test_warning_events_degrade_but_kubelet_restarts_are_only_noted() -> None:
    """BackOff events in the window: degraded on their nodes; a kubelet restart alone stays stable."""
    tally = Tally()
    seen = Seen(reason=KUBELET_RESTART, node="gpu-node1", object="node/gpu-node1", message="Starting kubelet.",
                first="2025-01-06T10:00:00", last="2025-01-06T10:00:00")
    tally.add(seen, 1, new=True)
    quiet = build_report(run(), now=now(), tally=tally, info={}, policy=POLICY)
    assert quiet.verdict == "stable" and any("kubelet restarted 1 time(s) on gpu-node1" in n for n in quiet.notes)
    tally.add(Seen(reason="BackOff", node="gpu-node2", object="pod/ml/a", message="Back-off", first="2025-01-06T11:00:00",
                   last="2025-01-06T12:00:00"), 7, new=True)
    report = build_report(run(), now=now(), tally=tally, info={"since": "2025-01-06T09:00:00"}, policy=POLICY)
    assert report.verdict == "degraded" and report.nodes_named() == ["gpu-node2"]
    assert [(e.reason, e.count) for e in report.events] == [("BackOff", 7), (KUBELET_RESTART, 1)]
    assert report.collection.collected and report.collection.occurrences == 8


def test_only_claims_pending_since_the_upgrade_degrade() -> None:
    """A claim pending from before the upgrade is shown, not blamed; a new one pending 20 min degrades."""
    def claim(name: str, created: dt.datetime) -> ResourceClaim:
        return ResourceClaim(namespace="ml", name=name, state="pending", created=created)

    before = claim("old", T0 - dt.timedelta(days=2))
    report = build_report(run(), now=now(claims=[before]), tally=Tally(), info={}, policy=POLICY)
    assert report.verdict == "stable" and [c.pre_existing for c in report.claims_pending] == [True]
    fresh = claim("new", T0 + dt.timedelta(hours=24) - dt.timedelta(minutes=20))
    report = build_report(run(), now=now(claims=[before, fresh]), tally=Tally(), info={}, policy=POLICY)
    assert report.verdict == "degraded" and [f.code for f in report.findings] == ["claims-pending"]


def test_a_collection_begun_late_says_what_it_may_have_missed() -> None:
    """Watching began 3 h after the promotion: the report says expired events may be missing."""
    info = {"since": "2025-01-06T09:00:00", "started": "2025-01-06T12:00:00", "flushed_at": "2025-01-07T09:00:00"}
    report = build_report(run(), now=now(), tally=Tally(), info=info, policy=POLICY)
    assert report.collection.started == T0 + dt.timedelta(hours=3)
    assert any("began watching events 3h after the promotion" in n for n in report.notes)
    on_time = build_report(run(), now=now(), tally=Tally(), info={**info, "started": "2025-01-06T09:00:05"}, policy=POLICY)
    assert not any("began watching" in n for n in on_time.notes)
