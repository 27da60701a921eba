"""When a followed rollout is done: every pod on the revision and Ready, and the controller agreeing."""

from __future__ import annotations

from runbooks.daemonset.following import rolled_out
from runbooks.daemonset.observing import Revision, Snapshot
from runbooks.inventory import PluginPod
from runbooks.rollouts import COMPLETE, rollout_state

TEMPLATE = {"spec": {"containers": [{"name": "plugin", "image": "img:2"}]}}


def _snap(nodes: list[str], *, desired: int, updated: int, available: int, observed: int = 2) -> Snapshot:
    ds = {"kind": "DaemonSet", "metadata": {"generation": 2}, "spec": {"template": TEMPLATE},
          "status": {"observedGeneration": observed, "desiredNumberScheduled": desired,
                     "updatedNumberScheduled": updated, "numberAvailable": available}}
    pods = [PluginPod(name=f"p-{n}", node=n, phase="Running", ready=True, restarts=0, crashloop=False,
                      revision_hash="h2") for n in nodes]
    return Snapshot(ds=ds, pods=pods, revisions=[Revision(name="r2", number=2, hash="h2", data={"spec": {"template": TEMPLATE}})])


def test_a_node_between_its_old_pod_and_its_new_one_keeps_the_rollout_going() -> None:
    """gpu-node3's old pod is gone and its new one not created yet: no pod says it is behind,
    the controller does (2 of 3 updated)."""
    snap = _snap(["gpu-node1", "gpu-node2"], desired=3, updated=2, available=2)
    assert snap.behind("h2") == []
    assert not rolled_out(snap)


def test_done_when_the_controller_counts_every_node_updated_and_available() -> None:
    assert rolled_out(_snap(["gpu-node1", "gpu-node2", "gpu-node3"], desired=3, updated=3, available=3))
    assert not rolled_out(_snap(["gpu-node1", "gpu-node2", "gpu-node3"], desired=3, updated=3, available=2))
    assert not rolled_out(_snap(["gpu-node1", "gpu-node2", "gpu-node3"], desired=3, updated=3, available=3, observed=1))


def test_restoring_a_workload_and_following_a_rollout_judge_a_daemonset_alike() -> None:
    """One test for both (kubectl's ``rollout status``): a count above desired, while a node
    leaves, is done; one below, or a generation not yet observed, is not."""
    for counts, done in [((3, 3, 3, 2), True), ((3, 4, 4, 2), True), ((3, 2, 3, 2), False), ((3, 3, 3, 1), False)]:
        desired, updated, available, observed = counts
        snap = _snap(["gpu-node1", "gpu-node2", "gpu-node3"], desired=desired, updated=updated, available=available,
                     observed=observed)
        assert rolled_out(snap) is done, counts
        assert (rollout_state(snap.ds, TEMPLATE) == COMPLETE) is done, counts
