"""Verify's registration check on many nodes: the log sample covers each failure domain, and the
nodes outside it are judged by the GPUs they advertise (pure: snapshots and nodes built by hand)."""

from __future__ import annotations

from runbooks.daemonset import checks as judge
from runbooks.daemonset.observing import Snapshot
from runbooks.daemonset.verifying import domain_of, log_sample
from runbooks.engine.steps import CheckStatus
from runbooks.inventory import Node, PluginPod
from runbooks.inventory.plugins import LogResult


def node(i: int, zone: str, gpus: int = 8) -> Node:
    return Node(name=f"n{i:03}", ready=True, unschedulable=False, gpu_hardware=True, kubelet_version="v1.32.0",
                labels={"topology.kubernetes.io/zone": zone, "nvidia.com/gpu.product": "H100"},
                capacity={"nvidia.com/gpu": 8}, allocatable={"nvidia.com/gpu": gpus})


def pod(i: int) -> PluginPod:
    return PluginPod(name=f"plugin-{i}", node=f"n{i:03}", phase="Running", ready=True, restarts=0, crashloop=False)


def test_the_sample_takes_each_domain_in_turn() -> None:
    nodes = {f"n{i:03}": node(i, "a" if i < 90 else "b" if i < 99 else "c") for i in range(100)}
    pairs = [(f"n{i:03}", pod(i)) for i in range(100)]
    chosen = log_sample(pairs, nodes, 6)
    zones = [domain_of(nodes[n]).split(" / ")[0] for n, _ in chosen]
    assert sorted(zones) == ["a", "a", "a", "b", "b", "c"], "each zone in turn: c, with one node, is read too"
    assert log_sample(pairs[:5], nodes, 6) == pairs[:5], "under the budget: every log"
    assert domain_of(None) == "unknown" and domain_of(nodes["n099"]) == "c / H100 / v1.32.0"


def test_a_node_outside_the_sample_that_advertises_no_gpu_fails_naming_it() -> None:
    snap = Snapshot(ds={}, pods=[pod(i) for i in range(3)], revisions=[])
    logs = {"n000": LogResult(registered=True, drivers=[])}
    check = judge.registered(snap, ["n000", "n001", "n002"], logs, kind="device-plugin", everywhere=True,
                             advertised={"n001": 8, "n002": 0})
    assert check.status is CheckStatus.FAIL
    assert check.detail == "n002 advertises no nvidia.com/gpu: it did not register" and check.evidence["silent"] == ["n002"]
    fine = judge.registered(snap, ["n000", "n001"], logs, kind="device-plugin", everywhere=True, advertised={"n001": 8})
    assert fine.status is CheckStatus.PASS and fine.evidence == {"by_logs": 1, "by_capacity": 1}
