"""promote and rollback on kubesim, with kubectl as the referee, and their re-entry."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kubesim import KubeSim
from runbooks.daemonset.steps import DaemonSetSteps
from tests.integration.stepkit import (
    BASELINE_GPUS,
    DS,
    NEW,
    NS,
    OLD,
    SPEED,
    Harness,
    Killed,
    again,
    ds_field,
    gpus_by_node,
    harness,
    images_by_node,
    kill_after,
    writes,
)
from tests.support import TEST_BUILDS, Kubectl, pinned

STEPS = DaemonSetSteps()
ALL_OLD = {"gpu-node1": OLD, "gpu-node2": OLD, "gpu-node3": OLD}
ALL_NEW = dict.fromkeys(("gpu-node1", "gpu-node2", "gpu-node3"), pinned(NEW))
"""Promoted: every node's pod names the digest the canary verified (``images.pin_digest``), not the tag."""
ALL_RAN = dict.fromkeys(("gpu-node1", "gpu-node2", "gpu-node3"), pinned(OLD))
"""Rolled back: every node's pod names the digest the pods ran before the run, not the tag."""


@pytest.fixture
def sim() -> Iterator[KubeSim]:
    with KubeSim(pushed=TEST_BUILDS, scenario="gpu-small", speed=SPEED) as s:
        yield s


def _canary(sim: KubeSim, **kwargs: object) -> Harness:
    h = harness(sim, **kwargs)  # type: ignore[arg-type]
    result = STEPS.canary(h.ctx)
    assert result.ok, result.reason
    return h


def test_promote_changes_the_other_nodes_and_restores_the_strategy(sim: KubeSim) -> None:
    """Promote pins the verified digest, puts RollingUpdate (with its maxUnavailable) back; the controller
    rolls every node (the canary's to the pinned revision too), each node recorded."""
    kubectl = Kubectl(sim.kubeconfig)
    h = _canary(sim)
    done = len(sim.mutations())
    result = STEPS.promote(h.ctx)
    assert result.ok, result.reason
    assert images_by_node(kubectl) == ALL_NEW
    assert gpus_by_node(kubectl) == BASELINE_GPUS
    assert ds_field(kubectl, "{.spec.updateStrategy}") == '{"rollingUpdate":{"maxSurge":0,"maxUnavailable":1},"type":"RollingUpdate"}'
    assert [verb for verb, _ in writes(sim, done)] == ["patch", "patch"]  # the pinned image, the strategy
    moved = [n for s in h.steps if s.name == "promote.node" and s.status == "ok" for n in s.evidence["nodes"]]
    assert sorted(moved) == ["gpu-node1", "gpu-node2", "gpu-node3"]
    done = len(sim.mutations())
    assert STEPS.promote(again(h).ctx).ok
    assert writes(sim, done) == []


def test_promote_killed_after_restoring_the_strategy_resumes_without_repeating(sim: KubeSim) -> None:
    """Killed right after the strategy patch, promote called again only follows the rollout."""
    h = _canary(sim)
    done = len(sim.mutations())
    with pytest.raises(Killed):
        STEPS.promote(kill_after(h, "promote.strategy").ctx)
    result = STEPS.promote(again(h).ctx)
    assert result.ok, result.reason
    assert [verb for verb, _ in writes(sim, done)] == ["patch", "patch"]  # the pinned image, the strategy
    assert images_by_node(Kubectl(sim.kubeconfig)) == ALL_NEW


def test_promote_of_an_ondelete_daemonset_replaces_pods_node_by_node(sim: KubeSim) -> None:
    """Originally OnDelete: promote pins the verified digest, keeps OnDelete and deletes the pods itself (the
    canary's too: it names the tag), one node at a time."""
    kubectl = Kubectl(sim.kubeconfig)
    kubectl("patch", "daemonset", DS, "-n", NS, "--type=merge", "-p",
            '{"spec": {"updateStrategy": {"type": "OnDelete", "rollingUpdate": null}}}')
    h = _canary(sim)
    assert [verb for verb, _ in writes(sim)][-2:] == ["patch", "delete"]  # the image, the canary pod: no strategy patch
    done = len(sim.mutations())
    result = STEPS.promote(h.ctx)
    assert result.ok, result.reason
    assert [verb for verb, _ in writes(sim, done)] == ["patch", "delete", "delete", "delete"]
    assert ds_field(kubectl, "{.spec.updateStrategy.type}") == "OnDelete"
    assert images_by_node(kubectl) == ALL_NEW
    order = [s.name for s in h.steps if s.name.startswith("promote.node")]
    assert order == ["promote.node.delete-pod", "promote.node"] * 3
    done = len(sim.mutations())
    assert STEPS.rollback(h.ctx).ok
    assert [verb for verb, _ in writes(sim, done)] == ["patch", "delete", "delete", "delete"]
    assert images_by_node(kubectl) == ALL_RAN


def test_rollback_after_promote_restores_every_node(sim: KubeSim) -> None:
    """After a promotion, rollback puts the old image on every node, pinned to the digest it ran, with its baseline GPUs."""
    kubectl = Kubectl(sim.kubeconfig)
    h = _canary(sim)
    assert STEPS.promote(h.ctx).ok
    result = STEPS.rollback(h.ctx)
    assert result.ok, result.reason
    assert images_by_node(kubectl) == ALL_RAN
    assert gpus_by_node(kubectl) == BASELINE_GPUS
    assert {c.name for c in result.checks} == {"rollback-images", "pods-ready", "rollback-capacity"}


def test_rollback_uses_the_controller_revision_when_the_template_was_not_saved(sim: KubeSim) -> None:
    """Without the saved template, rollback applies the recorded ControllerRevision's data, as rollout undo does."""
    kubectl = Kubectl(sim.kubeconfig)
    h = _canary(sim)
    saved = dict(h.run.progress["saved"])
    revision = saved["revision"]["name"]
    del saved["template"]
    h.ctx.run = h.run.model_copy(update={"progress": {**h.run.progress, "saved": saved}})
    result = STEPS.rollback(h.ctx)
    assert result.ok, result.reason
    template_step = next(s for s in h.steps if s.name == "rollback.template")
    assert template_step.status == "ok" and f"ControllerRevision {revision}" in template_step.detail
    assert images_by_node(kubectl) == ALL_OLD
    assert gpus_by_node(kubectl) == BASELINE_GPUS
    assert ds_field(kubectl, "{.spec.updateStrategy.type}") == "RollingUpdate"


def test_rollback_with_no_progress_at_all_never_falls_back_to_the_previous_revision(sim: KubeSim) -> None:
    """A run that recorded nothing changed nothing, even when the DaemonSet runs its image (someone else
    put it there): the rollback writes nothing and says so; no "undo" to the newest older revision."""
    kubectl = Kubectl(sim.kubeconfig)
    h = _canary(sim)
    before = (ds_field(kubectl, "{.spec.updateStrategy.type}"), images_by_node(kubectl))
    bare = harness(sim, progress={})
    done = len(sim.mutations())
    result = STEPS.rollback(bare.ctx)
    assert result.ok and [c.name for c in result.checks] == ["nothing-to-roll-back"], result.reason
    assert writes(sim, done) == []
    assert (ds_field(kubectl, "{.spec.updateStrategy.type}"), images_by_node(kubectl)) == before
    assert h.run.progress["saved"]["image"] == OLD


@pytest.mark.parametrize("kill_at", ["rollback.template", "rollback.strategy"])
def test_rollback_killed_and_resumed_applies_each_mutation_once(sim: KubeSim, kill_at: str) -> None:
    """Killed after restoring the template or the strategy, rollback resumed writes nothing twice."""
    h = _canary(sim, image=NEW + "-silent")
    done = len(sim.mutations())
    with pytest.raises(Killed):
        STEPS.rollback(kill_after(h, kill_at).ctx)
    result = STEPS.rollback(again(h).ctx)
    assert result.ok, result.reason
    assert [verb for verb, _ in writes(sim, done)] == ["patch", "patch"]
    assert images_by_node(Kubectl(sim.kubeconfig)) == ALL_OLD  # a canary's rollback: the exact saved template
    done = len(sim.mutations())
    assert STEPS.rollback(again(h).ctx).ok
    assert writes(sim, done) == []


def test_rollback_after_a_refused_canary_changes_nothing(sim: KubeSim) -> None:
    """A canary stopped by its pre-checks saved nothing; the automatic rollback that follows writes nothing."""
    kubectl = Kubectl(sim.kubeconfig)
    kubectl("cordon", "gpu-node1")
    h = harness(sim)
    assert not STEPS.canary(h.ctx).ok
    done = len(sim.mutations())
    result = STEPS.rollback(h.ctx)
    assert result.ok and [c.name for c in result.checks] == ["nothing-to-roll-back"]
    assert writes(sim, done) == []
    assert images_by_node(kubectl) == ALL_OLD


def test_a_rollout_is_a_line_of_the_trail_per_look_with_every_node_in_its_evidence() -> None:
    """On 40 nodes rolled 100 % at a time, the promotion records which nodes became Ready at
    each look at the cluster (every node exactly once, in the entries' evidence), not one
    entry per node: the trail of a 5,000-node promotion stays a few lines per wave."""
    with KubeSim(pushed=TEST_BUILDS, scenario="gpu-large", nodes=40, speed=SPEED) as sim:
        Kubectl(sim.kubeconfig)("patch", "daemonset", DS, "-n", NS, "--type=merge", "-p",
                                '{"spec":{"updateStrategy":{"rollingUpdate":{"maxUnavailable":"100%"}}}}')
        h = _canary(sim)
        result = STEPS.promote(h.ctx)
    assert result.ok, result.reason
    entries = [s for s in h.steps if s.name == "promote.node" and s.status == "ok"]
    moved = [node for s in entries for node in s.evidence["nodes"]]
    assert sorted(moved) == sorted(f"gpu-node{i}" for i in range(1, 41)), "\n".join(
        f"{s.name} {s.status} {s.detail[:200]}" for s in h.steps if s.name.startswith("promote"))
    assert len(entries) <= 10, [s.detail for s in entries]
    assert any(" nodes run revision " in s.detail for s in entries)
