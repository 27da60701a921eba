"""The rollback step: every node back on the previous template, with its baseline capacity.

1. The template saved before the run's first change goes back whole; once the promotion began, with
   ``images.pin_digest`` its container pinned to the digest every node's pod ran before the run
   (saved from their ``imageID``s: :mod:`runbooks.digests`; the tag itself when they ran several)
   (else, for a run
   saved before templates were kept, the ControllerRevision the canary recorded); its
   ``data`` is the patch applied. The choice is saved first, so a re-entered rollback
   never "undoes the undo". A run that saved nothing changed nothing (the canary saves
   before it writes): it has nothing to roll back, says so, and writes nothing. There is
   no fall-back to "the revision before the current one": what is there may be someone
   else's change.
2. The original update strategy goes back (saved by the canary; unknown: left as is). A target
   the GPU operator renders (``owner: clusterpolicy/<name>``): steps 1 and 2 are one merge patch of
   its ClusterPolicy putting back exactly the fields the run changed (saved at the request), and the
   step waits for the operator to render the saved image and strategy again.
3. Pods of other revisions are replaced: by the controller under RollingUpdate (the
   canary pod left by OnDelete included), by the step under OnDelete (all at once: a
   rollback is a repair, and the new pods are what is broken).
4. Wait until every pod runs the previous revision and is Ready and every node's GPU
   capacity and allocatable equal the baseline; the checks say where it is not so.

The nodes the run cordoned to drain them (:mod:`runbooks.daemonset.draining`) are
uncordoned once the rest has passed, except those whose new plugin failed when the policy
keeps them cordoned. A rollback itself does not drain: it is a repair, and waiting on
disruption budgets would leave the broken plugin in place longer.

The target's other workloads (:mod:`runbooks.daemonset.companions`) are restored with it,
in the reverse of the upgrade's order: those upgraded after the DaemonSet before step 1,
those upgraded before it last.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from runbooks import digests
from runbooks.daemonset import checks as judge
from runbooks.daemonset import companions, draining, pinning, through_operator
from runbooks.daemonset.baselines import Baseline
from runbooks.daemonset.following import follow_rollout
from runbooks.daemonset.observing import Revision, Snapshot, observe, wait_for
from runbooks.daemonset.patching import delete_pod, restore_template, set_strategy, undo_patch
from runbooks.daemonset.verifying import sample_nodes
from runbooks.engine.recording import failed, note, note_checks, passed, result
from runbooks.engine.steps import Check, StepContext, StepResult
from runbooks.errors import NotFound, plural
from runbooks.inventory.reading import images_of
from runbooks.rollouts import with_image


def previous_template(snap: Snapshot, progress: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], str] | None:
    """``(template, patch, source)`` the run saved before its first change, or ``None``."""
    saved = progress.get("saved") or {}
    if saved.get("template"):
        return saved["template"], undo_patch(saved["template"]), "the template saved before the canary"
    chosen = progress.get("rollback_to") or saved.get("revision") or {}
    revision: Revision | None = snap.revision_named(chosen["name"]) if chosen.get("name") else None
    if revision is None:
        return None
    return revision.template, revision.data, f"ControllerRevision {revision.name} (revision {revision.number})"


def rollback(ctx: StepContext) -> StepResult:
    run = ctx.run
    target = run.target
    try:
        snap = observe(ctx.cluster, target.namespace, target.name)
    except NotFound:
        return StepResult(ok=False, reason=f"daemonset {target.ref} does not exist on {ctx.cluster.context}: nothing to roll back")
    progress = run.progress
    if not progress.get("saved") and not progress.get("rollback_to"):
        check = passed("nothing-to-roll-back", f"the run changed nothing on {target.ref} (it stopped before its first "
                       "change, which it saves the state for first): nothing to roll back, left exactly as it is",
                       judge.ALL, images=snap.images)
        note_checks(ctx, "rollback", [check])
        return StepResult(ok=True, reason="the run changed nothing: nothing to roll back", checks=[check])
    chosen = previous_template(snap, progress)
    if chosen is None:
        reason = (f"cannot tell what to roll {target.ref} back to: the ControllerRevision the run recorded "
                  f"({(progress.get('saved') or {}).get('revision')}) is gone and no template was saved")
        note(ctx, "rollback.template", "failed", reason)
        return StepResult(ok=False, reason=reason)
    template, patch, source = chosen
    template, patch, source = _pinned_back(ctx, snap, template, patch, source)
    if "rollback_started_at" not in progress:
        revision = next((r for r in snap.revisions if r.template == template), None)
        ctx.run = ctx.save_progress({
            "rollback_started_at": ctx.cluster.server_time().isoformat(),
            "rollback_to": revision.as_progress() if revision else {"source": source},
        })
    after = companions.restore(ctx, before=False)  # the reverse of the upgrade's order
    saved = progress.get("saved") or {}
    if target.clusterpolicy:  # the fields the run changed put back; the operator renders the rest
        through_operator.put_back(ctx, step="rollback.clusterpolicy")
        back: Callable[[Snapshot], bool] = lambda s: through_operator.rendered_back(s, saved)  # noqa: E731
    else:
        restore_template(ctx, template, patch, step="rollback.template", source=source)
        if saved.get("update_strategy"):
            set_strategy(ctx, saved["update_strategy"], step="rollback.strategy")
        else:
            note(ctx, "rollback.strategy", "info", f"the original strategy is unknown: keeping {snap.strategy_type}")
        back = lambda s: s.settled  # noqa: E731
    settled = wait_for(ctx.clock, timeout=ctx.settings.ready_timeout, interval=ctx.settings.poll_interval,
                       probe=lambda: s if back(s := observe(ctx.cluster, target.namespace, target.name)) else None)
    if target.clusterpolicy:
        through_operator.note_rendered(ctx, settled.current_revision if settled else None, step="rollback.rendered",
                                       what="saved fields")
    if settled is None and target.clusterpolicy:
        return StepResult(ok=False, reason=f"the GPU operator did not render ClusterPolicy/{target.clusterpolicy} "
                          f"back into {target.ref} in {ctx.settings.ready_timeout:g}s: is the operator running?")
    if settled is None or settled.current_revision is None:
        return StepResult(ok=False, reason=f"the DaemonSet controller did not pick up the restored template of {target.ref} "
                          f"in {ctx.settings.ready_timeout:g}s")
    old = settled.current_revision
    if settled.strategy_type == "OnDelete":
        for node in settled.nodes:
            pod = settled.pod_on(node)
            if pod is not None and not pod.deleting and pod.revision_hash != old.hash:
                delete_pod(ctx, pod, step="rollback.delete-pod", why=f"revision {pod.revision_hash} -> {old.hash}")
    else:
        note(ctx, "rollback.pods", "info", "RollingUpdate: the controller replaces the pods of the new revision")
    outcome = follow_rollout(ctx, old.hash, step="rollback.node", before=snap)
    checks = [*after, *_back_to_baseline(ctx, outcome.snapshot, template, problem=outcome.problem),
              *companions.restore(ctx, before=True)]
    checks.extend(_give_back_nodes(ctx, ok=all(c.status in ("pass", "skip") for c in checks)))
    note_checks(ctx, "rollback", checks)
    return result(checks, what=f"rollback of {target.ref} ({source})")


def _pinned_back(ctx: StepContext, snap: Snapshot, template: dict[str, Any], patch: dict[str, Any],
                 source: str) -> tuple[dict[str, Any], dict[str, Any], str]:
    """Once the promotion began (every pod is replaced either way), the saved template with its
    container pinned to the digest every node's pod ran before the run (``pre_run_digests``,
    :mod:`runbooks.digests`), so the rollback brings back those bytes and not what the tag names
    now. Unchanged when the run pins nothing, saved no single digest, or was a canary only: the
    exact saved template moves no pod but the canary's (another template, even pinned to the same
    bytes, would replace every node's)."""
    saved = ctx.run.progress.get("saved") or {}
    container = saved.get("container") or ""
    if (not saved.get("template") or not pinning.pins(ctx.run, ctx.settings) or digests.PRE_RUN not in ctx.run.progress
            or not _fleet_moved(ctx, snap, ctx.run.progress.get("rollback_pinned"))):
        return template, patch, source  # a canary's rollback: the exact template, no other node's pod moves
    image, why = digests.rollback_image(ctx.run.progress, container, images_of(template.get("spec") or {}).get(container, ""))
    if why:
        note(ctx, "rollback.digest", "info", f"{why}: the saved template goes back as it was")
        return template, patch, source
    back = with_image(template, container, image)
    if not ctx.run.progress.get("rollback_pinned"):  # decided once: a resumed rollback does not judge its own moves
        ctx.run = ctx.save_progress({"rollback_pinned": image})
    return back, undo_patch(back), f"{source}, {container} pinned to {image}, the digest its pods ran before the run"


def _fleet_moved(ctx: StepContext, snap: Snapshot, decided: object) -> bool:
    """Whether the promotion moved a pod beyond the canary's nodes (to the pinned digest): then
    every pod is replaced by the rollback anyway, and it may as well name the digest they ran."""
    if decided:
        return True
    if "promote_started_at" not in ctx.run.progress:
        return False
    promoted = pinning.promoted(ctx.run, ctx.settings)
    container = (ctx.run.progress.get("saved") or {}).get("container") or ""
    canary = set(ctx.run.canary_nodes)
    return any(p.node not in canary and p.images.get(container) == promoted for p in snap.pods)


def _give_back_nodes(ctx: StepContext, *, ok: bool) -> list[Check]:
    """The nodes the run cordoned to drain them: uncordoned once the rollback has put their
    plugin back (those whose new plugin failed kept, when the policy says so); left cordoned,
    and said, when it has not."""
    held = draining.still_cordoned(ctx.run.progress)
    if not held:
        return []
    if not ok:
        return [failed("rollback-uncordon", f"{judge.listing(held)} stay cordoned: the rollback did not bring their "
                       "plugin back; `kubectl uncordon` them once it runs", judge.listing(held), nodes=held)]
    kept = draining.uncordon(ctx, held, step="rollback.uncordon", rolling_back=True)
    given = [n for n in held if n not in kept]
    detail = f"uncordoned {judge.listing(given)}" if given else "no node uncordoned"
    if kept:
        detail += f"; {judge.listing(kept)} stay cordoned: their new plugin failed (drain.keep_failed_cordoned)"
    return [passed("rollback-uncordon", detail, judge.listing(held), uncordoned=given, kept=kept)]


def _back_to_baseline(ctx: StepContext, snap: Snapshot, template: dict[str, Any], *, problem: str) -> list[Check]:
    """Pods Ready on the previous images and GPU capacity as before; waits for the capacity to return."""
    data = ctx.run.progress.get("baseline")
    baseline = Baseline.model_validate(data) if data else None
    resources = tuple(baseline.gpu_resources if baseline else ctx.settings.gpu_resources)
    nodes = sorted(set(snap.nodes) | set(baseline.nodes if baseline else ()))
    wanted_images = {c.get("name", ""): c.get("image", "") for c in (template.get("spec") or {}).get("containers") or []}

    def capacity_back() -> Check | None:
        check = judge.gpu_capacity(nodes, sample_nodes(ctx.cluster, nodes, resources, {}), {}, baseline, resources,
                                   everywhere=True)
        return check if check.status == "pass" else None

    capacity = wait_for(ctx.clock, timeout=ctx.settings.ready_timeout, interval=ctx.settings.poll_interval, probe=capacity_back)
    if capacity is None:
        capacity = judge.gpu_capacity(nodes, sample_nodes(ctx.cluster, nodes, resources, {}), {}, baseline, resources,
                                      everywhere=True)
    snap = observe(ctx.cluster, ctx.run.target.namespace, ctx.run.target.name)
    wrong = {}
    for node in nodes:
        pod = snap.pod_on(node)
        base = baseline.node(node) if baseline else None
        want = {**base.images, **{c: i for c, i in wanted_images.items() if "@" in i and c in base.images}} \
            if base else wanted_images  # a container pinned by the rollback runs its digest
        if pod is None or pod.deleting or pod.images != want:
            wrong[node] = f"{pod.images if pod else 'no pod'} (want {want})"
    if wrong:
        detail = "; ".join(f"{n}: {w}" for n, w in list(wrong.items())[:5])
        images = failed("rollback-images", (f"{problem}: " if problem else "") + detail, judge.ALL, nodes=wrong)
    else:
        images = passed("rollback-images", f"{plural(len(nodes), 'node')} run the previous images again", judge.ALL,
                        images=wanted_images)
    return [images, judge.pods_ready(snap, nodes, everywhere=True),
            capacity.model_copy(update={"name": "rollback-capacity"})]
