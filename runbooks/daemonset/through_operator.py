"""The writes of a run whose target the GPU operator renders (``run.target.owner``: ``clusterpolicy/<name>``).

Such a run never patches the DaemonSet (the engine's scope refuses it): the canary writes the
ClusterPolicy fields its request planned (:mod:`runbooks.clusterpolicy`: the image's fields, env and
args, with ``spec.daemonsets.updateStrategy: OnDelete``) in one merge patch, then waits for the
operator to render them into the DaemonSet (:func:`rendered`) before any pod is replaced; the
promotion puts ``spec.daemonsets.updateStrategy`` back as the request found it; a rollback puts back
every field the run changed, exactly, and nothing else (an unrelated edit of the ClusterPolicy made
meanwhile stays). The values put back are those saved at the request, which the approvers saw as a
diff. Each write is made only when the ClusterPolicy does not hold it yet, with a ``resourceVersion``
precondition (a 409 re-reads and decides again), and recorded as a mutation. The wait for the
operator's render after each write is a step of the run's trail too (:func:`note_rendered`): what the
operator rendered (the DaemonSet's revision and hash), or that it never came.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runbooks import clusterpolicy as cp
from runbooks.cluster.resources import CLUSTER_POLICIES
from runbooks.daemonset.observing import Revision, Snapshot
from runbooks.engine.recording import note
from runbooks.engine.steps import StepContext
from runbooks.errors import Conflict

MAX_CONFLICTS = 5


def planned(ctx: StepContext) -> Mapping[str, Any]:
    """The ClusterPolicy change the request planned: ``name``, ``saved`` and ``wanted`` fields."""
    found: Mapping[str, Any] = ctx.run.progress.get("clusterpolicy") or {}
    return found


def saved_fields(ctx: StepContext) -> str:
    """What a rollback puts back, in words: ``ClusterPolicy/cluster-policy's fields spec.devicePlugin.version, …``."""
    fields = ", ".join(planned(ctx).get("saved") or {}) or "none"
    return f"ClusterPolicy/{ctx.run.target.clusterpolicy}'s fields {fields} (as the request showed them)"


def _write(ctx: StepContext, fields: Mapping[str, Any], *, step: str, what: str) -> bool:
    name = ctx.run.target.clusterpolicy
    for _ in range(MAX_CONFLICTS):
        policy = ctx.cluster.get(CLUSTER_POLICIES, name)
        if cp.holds(policy, fields):
            note(ctx, step, "info", f"ClusterPolicy/{name} already holds {what}")
            return False
        before = cp.saved(policy, list(fields))
        try:
            ctx.cluster.patch(CLUSTER_POLICIES, name, cp.merge_patch(fields), patch_type="merge",
                              resource_version=(policy.get("metadata") or {}).get("resourceVersion"))
        except Conflict:
            continue
        note(ctx, step, "ok", kind="mutation", detail=f"ClusterPolicy/{name}: {what}\n{cp.diff(before, fields)}",
             before=before, after=dict(fields))
        return True
    raise Conflict(f"cannot patch ClusterPolicy/{name}: it kept changing ({MAX_CONFLICTS} conflicts); try again")


def as_requested(ctx: StepContext) -> str:
    """'' when the ClusterPolicy's fields are still those the request saw (or already the run's own:
    a resumed canary); else the sentence saying that someone changed them."""
    name, change = ctx.run.target.clusterpolicy, planned(ctx)
    policy = ctx.cluster.get(CLUSTER_POLICIES, name)
    if cp.holds(policy, change.get("saved") or {}) or cp.holds(policy, change.get("wanted") or {}):
        return ""
    return (f"ClusterPolicy/{name} changed since the request (the fields the approvers saw are neither as they were "
            "nor the run's): nothing was changed, request it again")


def change(ctx: StepContext, *, step: str) -> bool:
    """The canary's write: every planned field, with ``updateStrategy: OnDelete``, in one patch."""
    return _write(ctx, planned(ctx).get("wanted") or {}, step=step, what=f"{ctx.run.image} with OnDelete")


def put_back_strategy(ctx: StepContext, *, step: str) -> bool:
    """The promotion's end: ``spec.daemonsets.updateStrategy`` as the request found it."""
    saved = planned(ctx).get("saved") or {}
    return _write(ctx, {cp.STRATEGY: saved.get(cp.STRATEGY)}, step=step, what="its update strategy as it was")


def put_back(ctx: StepContext, *, step: str) -> bool:
    """The rollback's write: every field the run changed, as the request found it."""
    return _write(ctx, planned(ctx).get("saved") or {}, step=step, what="every field the run changed, as it was")


def rendered(snap: Snapshot, ctx: StepContext, container: str) -> bool:
    """The operator has rendered the run's change, and the DaemonSet controller has seen it."""
    run = ctx.run
    return snap.settled and cp.renders(snap.template, snap.strategy, container=container, image=run.image,
                                       edits=run.edits)


def rendered_back(snap: Snapshot, saved: Mapping[str, Any]) -> bool:
    """After a rollback's write: the DaemonSet runs the saved image again under the saved strategy, settled."""
    strategy = (saved.get("update_strategy") or {}).get("type") or "RollingUpdate"
    return (snap.settled and snap.images.get(saved.get("container") or "") == saved.get("image")
            and snap.strategy_type == strategy)


def note_rendered(ctx: StepContext, new: Revision | None, *, step: str, what: str) -> None:
    """The wait for the operator's render, in the run's trail: the revision it rendered ``what`` into,
    or (``new`` None) that it did not within ``ready_timeout``."""
    name, ref = ctx.run.target.clusterpolicy, ctx.run.target.ref
    if new is None:
        note(ctx, step, "failed", f"the GPU operator did not render ClusterPolicy/{name}'s {what} into {ref} in "
             f"{ctx.settings.ready_timeout:g}s")
        return
    note(ctx, step, "ok", f"the GPU operator rendered ClusterPolicy/{name}'s {what} into {ref}: revision "
         f"{new.number} ({new.hash})", revision=new.as_progress())
