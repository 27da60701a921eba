"""The simulated DaemonSet controller and a required node-affinity term added to the template, as a
quarantine adds it (issue 61, item 5): kube-controller-manager's ``NodeShouldRunDaemonPod`` answers
"should not run, should not continue running" for a node the term excludes, and ``manage`` deletes
its pod whatever the update strategy; under OnDelete no other pod is replaced; the template put back
makes the old ControllerRevision current again (``constructHistory``), so the other pods are up to
date and RollingUpdate restored replaces none of them."""

from __future__ import annotations

import copy
from typing import Any

from _simkit import DAEMONSETS, NODES, REVISIONS, create, daemonset, get, pods_of, small

KEY = "default.quarantine.upgradebot.io/agent"
TERM = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
    {"matchExpressions": [{"key": KEY, "operator": "DoesNotExist"}]}]}}}


def _uids(sim: Any) -> dict[str, str]:
    return {p["spec"]["nodeName"]: p["metadata"]["uid"] for p in pods_of(sim, "default", "app", "agent", alive=True)}


def _mutate(sim: Any, gr: tuple[str, str], ns: str, name: str, change: Any) -> None:
    sim.store.mutate(gr, ns, name, change)
    sim.settle()


def test_a_does_not_exist_term_removes_the_pod_from_the_labelled_node_only_and_its_removal_rolls_nothing() -> None:
    sim = small()
    create(sim, DAEMONSETS, daemonset("agent"))
    sim.advance(5)
    before, template = _uids(sim), copy.deepcopy(get(sim, DAEMONSETS, "default", "agent")["spec"]["template"])
    strategy = copy.deepcopy(get(sim, DAEMONSETS, "default", "agent")["spec"]["updateStrategy"])

    def quarantine(obj: dict[str, Any]) -> None:
        obj["spec"]["updateStrategy"] = {"type": "OnDelete"}
        obj["spec"]["template"]["spec"]["affinity"] = copy.deepcopy(TERM)

    _mutate(sim, DAEMONSETS, "default", "agent", quarantine)
    sim.advance(20)
    assert _uids(sim) == before  # the new template alone replaces nothing under OnDelete
    _mutate(sim, NODES, "", "gpu-node2", lambda obj: obj["metadata"]["labels"].__setitem__(KEY, "r-00000000"))
    sim.advance(20)
    assert _uids(sim) == {n: u for n, u in before.items() if n != "gpu-node2"}
    status = get(sim, DAEMONSETS, "default", "agent")["status"]
    assert status["desiredNumberScheduled"] == len(before) - 1

    def release(obj: dict[str, Any]) -> None:
        obj["spec"]["updateStrategy"] = strategy
        obj["spec"]["template"] = copy.deepcopy(template)

    _mutate(sim, DAEMONSETS, "default", "agent", release)
    _mutate(sim, NODES, "", "gpu-node2", lambda obj: obj["metadata"]["labels"].pop(KEY))
    sim.advance(30)
    after = _uids(sim)
    assert {n: u for n, u in after.items() if n != "gpu-node2"} == {n: u for n, u in before.items() if n != "gpu-node2"}
    assert "gpu-node2" in after and after["gpu-node2"] != before["gpu-node2"]
    assert len(sim.store.list(REVISIONS, "default")) == 2  # the first revision is current again, renumbered
    status = get(sim, DAEMONSETS, "default", "agent")["status"]
    assert status["updatedNumberScheduled"] == len(before) and status["desiredNumberScheduled"] == len(before)
