"""Issue 61 item 2: the run's change a FailedScheduling message points at, named for people."""

from __future__ import annotations

from runbooks.daemonset.unschedulable import cause, detail
from runbooks.templates import Edits, parse_toleration

CPU = ("0/4 nodes are available: 1 Insufficient cpu, 3 node(s) didn't satisfy plugin(s) [NodeAffinity]. preemption: "
       "0/4 nodes are available: 4 Preemption is not helpful for scheduling..")
TAINT = ("0/4 nodes are available: 1 node(s) had untolerated taint {nvidia.com/gpu: present}, 3 node(s) didn't "
         "satisfy plugin(s) [NodeAffinity]. preemption: 0/4 nodes are available: 4 Preemption is not helpful for "
         "scheduling..")


def test_a_request_the_scheduler_calls_insufficient_is_the_cause_with_what_the_node_offers() -> None:
    """``requests=cpu=200``: named with gpu-node1's allocatable; a limit (the request when none is
    set) is named as such; a resource the run did not touch names nothing."""
    alloc = {"cpu": "96", "memory": "1056376768Ki"}
    assert cause(CPU, Edits(requests={"cpu": "200"}), alloc, node="gpu-node1") == \
        "the run's requests=cpu=200 (gpu-node1 offers 96 allocatable)"
    assert cause(CPU, Edits(limits={"cpu": "200"}), alloc, node="gpu-node1") == \
        "the run's limits=cpu=200 (also the request when none is set) (gpu-node1 offers 96 allocatable)"
    assert cause(CPU.replace("cpu", "example.com/fpga"), Edits(requests={"example.com/fpga": "1"}), alloc,
                 node="gpu-node1") == "the run's requests=example.com/fpga=1 (gpu-node1 offers none)"
    assert cause(CPU, Edits(requests={"memory": "1Gi"}), alloc, node="gpu-node1") == ""


def test_a_removed_toleration_whose_taint_the_node_carries_is_the_cause() -> None:
    """``toleration=nvidia.com/gpu:NoSchedule-`` removed, the node tainted ``nvidia.com/gpu=present``."""
    removed = Edits(untolerate=[parse_toleration("nvidia.com/gpu:NoSchedule")])
    assert cause(TAINT, removed, {}, node="gpu-node1") == \
        "the run removed the toleration nvidia.com/gpu:NoSchedule, and gpu-node1 carries the taint nvidia.com/gpu=present"
    assert cause(TAINT, Edits(untolerate=[parse_toleration("example.com/other")]), {}, node="gpu-node1") == ""


def test_the_checks_sentence_says_when_no_edit_of_the_run_explains_it() -> None:
    """The scheduler's words are quoted either way; without a cause the sentence says so."""
    said = detail("plugin-x", "gpu-node1", {"message": CPU})
    assert said.startswith("plugin-x cannot be scheduled on gpu-node1: the scheduler said: 0/4 nodes are available")
    assert said.endswith("none of this run's edits explains it")


def test_verify_names_the_scheduler_for_a_pod_it_cannot_place() -> None:
    """verify's failing ``pods-ready`` carries the scheduler's message for the first pod in scope
    that cannot be scheduled (no log is read for it: it never ran)."""
    from runbooks.daemonset.evidence import attach
    from runbooks.daemonset.observing import Snapshot
    from runbooks.engine.recording import failed
    from runbooks.inventory import PluginPod

    pod = PluginPod(name="plugin-x", node="gpu-node1", phase="Pending", ready=False, restarts=0, crashloop=False,
                    unschedulable=CPU)
    snap = Snapshot(ds={"metadata": {"namespace": "kube-system"}}, pods=[pod], revisions=[])
    [check] = attach(None, snap, [failed("pods-ready", "1 pod not Ready", "all nodes")],  # type: ignore[arg-type]
                     scope=["gpu-node1"], container="plugin")
    assert check.evidence == {"pod": "plugin-x", "node": "gpu-node1", "reason": "FailedScheduling", "message": CPU}
    assert check.detail == f"1 pod not Ready; plugin-x cannot be scheduled on gpu-node1: the scheduler said: {CPU}"
