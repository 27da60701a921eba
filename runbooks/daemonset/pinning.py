"""The DaemonSet steps' part of digests pinned (policy ``images.pin_digest``, :mod:`runbooks.digests`).

- :func:`save_pre_run`: before the canary's first change, the digest each node's pod runs (one list
  of the DaemonSet's pods, their ``imageID``s), kept in the run's progress beside the saved state;
- :func:`verified_check`: once the canary's pods are Ready, the digest they pulled (the same on every
  canary node, else the canary fails) and what the tag resolves to now, kept for the promotion request;
- :func:`pin`: the promotion's first write, the canary's template with its image pinned to the
  verified digest (``repository@sha256:…``), a new revision every node (the canary's too) moves to;
- :func:`promoted`: the image the promotion and its checks expect.

Only a run that changes the image pins (:func:`pins`): a template edit or a restart keeps the
tag the fleet runs, as it was.

A target the GPU operator renders (``owner: clusterpolicy/<name>``) is promoted by its tag: the
operator writes the ClusterPolicy's ``version`` into the DaemonSet, and the run changes only the
fields it saved.
"""

from __future__ import annotations

from typing import Any

from runbooks import digests
from runbooks.daemonset.observing import Snapshot
from runbooks.daemonset.patching import set_image
from runbooks.engine.recording import failed, passed
from runbooks.engine.runs import Run
from runbooks.engine.steps import Check, StepContext, StepSettings


def pins(run: Run, settings: StepSettings, *, before: str | None = None) -> bool:
    """Whether this run pins digests: the policy says so, the operator does not render the target,
    and the run changes the image (``before``: the image the DaemonSet ran, default the one saved);
    a run that keeps the image (a template edit, a restart) verified no new bytes and writes the tag."""
    was = before if before is not None else (run.progress.get("saved") or {}).get("image")
    return settings.pin_digest and not run.target.clusterpolicy and bool(run.image) and run.image != was


def promoted(run: Run, settings: StepSettings) -> str:
    """The image every node runs once promoted: pinned to the verified digest, or the tag."""
    return digests.promoted_image(run.image, run.progress, pin=pins(run, settings))


def save_pre_run(ctx: StepContext, snap: Snapshot, container: str) -> dict[str, Any]:
    """``{pre_run_digests: node -> container -> imageID}`` of the DaemonSet's pods in ``snap`` ({}
    when the run pins nothing; a node whose pod reports none is left out, and a rollback writes the
    saved tag back there)."""
    if not pins(ctx.run, ctx.settings, before=snap.images.get(container) or ""):
        return {}
    # the snapshot's pods (the step's watch cache, or read just now), with each container's imageID
    return {digests.PRE_RUN: {p.node: {c: i for c, i in p.image_ids.items() if digests.digest_in(i)}
                              for p in snap.pods if p.node and not p.deleting
                              and any(digests.digest_in(i) for i in p.image_ids.values())}}


def verified_check(ctx: StepContext, image_ids: dict[str, str]) -> Check | None:
    """The canary's pods (node -> ``imageID``) all Ready: the digest they verified, saved with what
    the tag resolves to now; a failed check when they pulled different digests or none."""
    run = ctx.run
    if not pins(run, ctx.settings):
        return None
    found = {node: digests.digest_in(image_id) for node, image_id in image_ids.items()}
    distinct = set(found.values())
    if "" in distinct or len(distinct) != 1:
        said = ", ".join(f"{node}: {digest or 'no imageID'}" for node, digest in sorted(found.items()))
        return failed("canary-digest", f"the canary's pods did not verify one digest of {run.image} ({said}): the tag "
                      "changed while they pulled it, or the runtime reports no imageID; nothing can be pinned",
                      ", ".join(sorted(found)), digests=found)
    verified = distinct.pop()
    now = digests.look_now(run.image, ctx.settings.mirrors, at=ctx.clock.now().isoformat())
    ctx.run = ctx.save_progress({digests.KEY: {"tag": run.image, "verified": verified, **now}})
    said = (f"; the tag resolves to {now['now']} now" if now["now"] else
            f"; what the tag resolves to now is unknown ({now['unknown']})")
    return passed("canary-digest", f"the canary verified {digests.pinned(run.image, verified)}{said}",
                  ", ".join(sorted(found)), verified=verified, now=now["now"], unknown=now["unknown"])


def pin(ctx: StepContext, snap: Snapshot, container: str) -> bool:
    """The promotion's first write: the container's image := ``repository@<verified>`` (OnDelete
    still holds, so no pod moves yet); False when there is nothing to pin or it is pinned already."""
    run = ctx.run
    image = promoted(run, ctx.settings)
    if image == run.image or snap.images.get(container) == image:
        return False
    return set_image(ctx, container, image, step="promote.pin")
