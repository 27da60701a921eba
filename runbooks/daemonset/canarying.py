"""The canary step: the new image on one node, every other node untouched.

In order, each part done only if the cluster does not show it done yet (so a step
re-entered after a kill repeats nothing):

1. pre-checks and the baseline, then the saved state in the run's progress *before*
   any change: the whole pod template, the update strategy, the current revision
   (number, name, hash), the generation, the container and its image;
2. ``updateStrategy: OnDelete`` (the controller stops replacing pods by itself); a target the GPU
   operator renders (``owner: clusterpolicy/<name>``) is never patched: its ClusterPolicy's fields
   are written instead, OnDelete with the image, env and args (:mod:`runbooks.daemonset.through_operator`),
   and the step waits for the operator to render them;
3. the new image on the chosen container, or, when the run also edits the template (env,
   args, resources, security contexts, priority class, tolerations), the whole new
   template in one write (the template changes, no pod does);
4. with ``drain`` (:mod:`runbooks.daemonset.draining`) the canary node cordoned and the
   pods using its devices evicted; then the canary node's pod deleted, if it still runs another revision than the new one
   (uid precondition); the controller recreates it from the new template;
5. wait until the replacement is Running and Ready with the new image
   (``settings.ready_timeout``), failing early when it crash-loops, cannot pull its image, or
   cannot be scheduled (:mod:`runbooks.daemonset.unschedulable`: the scheduler's
   ``FailedScheduling`` words and the run's edit that caused them).

A run that edits the template (or keeps the image it did not name) starts only if the
DaemonSet's template is still the one its request's diff was made from.

The nodeSelector and affinity are never touched: pinning the DaemonSet to one hostname
would delete the plugin from every other node.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import runbooks.daemonset.evidence as failure
from runbooks import templates
from runbooks.daemonset import checks as judge
from runbooks.daemonset import companions, draining, pinning, through_operator, unschedulable
from runbooks.daemonset.metric_checks import metrics_before, with_gpus
from runbooks.daemonset.observing import Revision, Snapshot, looking, wait_for
from runbooks.daemonset.patching import ON_DELETE, delete_pod, set_image, set_strategy, set_template
from runbooks.daemonset.preflight import canary_prechecks, resolve_container
from runbooks.engine.recording import failed, note, note_checks, passed, result
from runbooks.engine.runs import Run
from runbooks.engine.steps import Check, StepContext, StepResult
from runbooks.errors import ClusterError, NotFound, plural
from runbooks.inventory import PluginPod
from runbooks.templates import same


def saved_state(snap: Snapshot, container: str) -> dict[str, Any]:
    current = snap.current_revision
    return {
        "template": snap.template,
        "update_strategy": snap.strategy,
        "revision": current.as_progress() if current else None,
        "generation": snap.generation,
        "container": container,
        "image": snap.images.get(container),
    }


def changed_template(run: Run) -> dict[str, Any]:
    """The pod template the canary writes: the saved one with the run's image and edits (once
    written, as the server stored it)."""
    stored: dict[str, Any] | None = run.progress.get("new_template")
    if stored:
        return stored
    saved = run.progress["saved"]
    return templates.apply(saved["template"], saved["container"], run.image, run.edits)


def touched(snap: Snapshot, saved: dict[str, Any]) -> bool:
    """Has the canary changed the DaemonSet already (strategy or template)?"""
    return snap.template != saved["template"] or snap.strategy_type != (saved["update_strategy"].get("type") or "RollingUpdate")


def canary(ctx: StepContext) -> StepResult:
    run = ctx.run
    with contextlib.ExitStack() as held:
        try:  # every look of the step (and of its verify) at the plugin's pods from the one cache (issue 39)
            look = held.enter_context(looking(ctx.cluster, run.target.namespace, run.target.name, watches=ctx.watches))
            # the DaemonSet and its revisions read now, not from a cache a moment behind: they are
            # what the step saves before changing anything
            snap = look(read_daemonset=True)
        except NotFound:
            check = failed("daemonset-exists", f"daemonset {run.target.ref} does not exist on {ctx.cluster.context}")
            note_checks(ctx, "canary.precheck", [check])
            return result([check], what="canary pre-checks")
        return _canary(ctx, snap, look)


def _canary(ctx: StepContext, snap: Snapshot, look: Callable[..., Snapshot]) -> StepResult:
    run = ctx.run
    saved = run.progress.get("saved")
    planned = run.progress.get("planned_from")
    if saved is None and run.target.clusterpolicy and (changed := through_operator.as_requested(ctx)):
        note(ctx, "canary.precheck", "failed", changed)
        return StepResult(ok=False, reason=changed, checks=[failed("clusterpolicy-as-requested", changed, judge.ALL)])
    if saved is None and planned and not same(snap.template, planned):
        reason = (f"the template of {run.target.ref} changed since the request (someone changed it): the diff the "
                  "approvers saw no longer says what the canary would write; nothing was changed, request it again")
        note(ctx, "canary.precheck", "failed", reason)
        return StepResult(ok=False, reason=reason, checks=[failed("template-as-requested", reason, judge.ALL)])
    if saved is None or not touched(snap, saved):
        checks, baseline = canary_prechecks(ctx.cluster, snap, run=run, settings=ctx.settings, clock=ctx.clock)
        note_checks(ctx, "canary.precheck", checks)
        if baseline is None:
            return result(checks, what="canary pre-checks")
        container = resolve_container(run.container, snap.template)
        assert container is not None  # the pre-checks said so
        saved = saved_state(snap, container)
        ctx.run = ctx.save_progress({
            "saved": saved, "baseline": baseline.model_dump(mode="json"), **pinning.save_pre_run(ctx, snap, container),
            "canary_started_at": ctx.cluster.server_time().isoformat(),
            **metrics_before(ctx.settings, with_gpus(list(baseline.nodes), baseline=baseline.nodes),
                             at=ctx.clock.now()),
        })
        owned = f"{through_operator.saved_fields(ctx)} and " if run.target.clusterpolicy else ""
        note(ctx, "canary.saved", "info", f"saved {owned}the template, strategy {saved['update_strategy'].get('type')} "
             f"and revision {(saved['revision'] or {}).get('number')} before changing anything",
             revision=saved["revision"], strategy=saved["update_strategy"], image=saved["image"])
    elif not same(snap.template, saved["template"]) and not (
            through_operator.rendered(snap, ctx, saved["container"]) if run.target.clusterpolicy
            else same(snap.template, changed_template(run))):
        reason = (f"{run.target.ref} changed since the canary began (its template is neither the saved one nor the "
                  "saved one with the new image): someone else is changing it; roll back and start again")
        note(ctx, "canary.drift", "failed", reason)
        return StepResult(ok=False, reason=reason)
    else:
        note(ctx, "canary.resume", "info", "resuming a canary that already changed the DaemonSet: doing only what is missing")
    container = saved["container"]
    before = companions.upgrade(ctx, before=True)
    if any(c.status != "pass" for c in before):
        note_checks(ctx, "canary", before)
        return result(before, what="the workloads upgraded before the canary")
    if run.target.clusterpolicy:  # the operator renders the DaemonSet from it: never patched here
        through_operator.change(ctx, step="canary.clusterpolicy")
    elif run.edits.empty:
        set_strategy(ctx, ON_DELETE, step="canary.strategy")
        set_image(ctx, container, run.image, step="canary.image")
    else:
        set_strategy(ctx, ON_DELETE, step="canary.strategy")
        set_template(ctx, changed_template(ctx.run), step="canary.template",
                     summary=f"{run.image} ({container}); {run.edits.summary()}")
    new = _new_revision(ctx, look, container)
    if run.target.clusterpolicy:
        through_operator.note_rendered(ctx, new, step="canary.rendered", what="change")
    if new is None and run.target.clusterpolicy:
        return StepResult(ok=False, reason=f"the GPU operator did not render ClusterPolicy/{run.target.clusterpolicy}'s "
                          f"change into {run.target.ref} in {ctx.settings.ready_timeout:g}s: is the operator running?")
    if new is None:
        return StepResult(ok=False, reason=f"the DaemonSet controller did not pick up the new template of "
                          f"{run.target.ref} in {ctx.settings.ready_timeout:g}s: is kube-controller-manager running?")
    return _replace_canary_pod(ctx, new, container, look)


def _new_revision(ctx: StepContext, look: Callable[..., Snapshot], container: str) -> Revision | None:
    run = ctx.run
    # the DaemonSet read, not cached: a cache a moment behind our own write would show it settled on the old
    # revision; a ClusterPolicy's change is waited for until the operator has rendered it
    ready: Callable[[Snapshot], bool] = ((lambda s: through_operator.rendered(s, ctx, container))
                                         if run.target.clusterpolicy else (lambda s: s.settled))
    snap = wait_for(ctx.clock, timeout=ctx.settings.ready_timeout, interval=ctx.settings.poll_interval,
                    probe=lambda: s if ready(s := look(read_daemonset=True)) else None)
    if snap is None or snap.current_revision is None:
        return None
    new = snap.current_revision
    if run.progress.get("new_revision") != new.as_progress():
        ctx.run = ctx.save_progress({"new_revision": new.as_progress()})
    return new


def _replace_canary_pod(ctx: StepContext, new: Revision, container: str, look: Callable[..., Snapshot]) -> StepResult:
    """The pod on each canary node (one per hardware class when the run names several) replaced,
    then followed until every one is Ready, or one crash-loops, or ``ready_timeout`` passes."""
    run, nodes = ctx.run, ctx.run.canary_nodes
    snap = look()
    for node in nodes:
        pod = snap.pod_on(node)
        if pod is not None and pod.revision_hash != new.hash:
            problem = draining.drain_nodes(ctx, [node], step="canary.drain")
            if problem:
                check = failed("drain", problem, node)
                return StepResult(ok=False, reason=f"canary on {node}: {problem}", checks=[check])
            delete_pod(ctx, pod, step="canary.delete-pod", why=f"revision {pod.revision_hash} -> {new.hash}")
        elif pod is None:
            note(ctx, "canary.delete-pod", "info", f"no plugin pod on {node} yet: waiting for the controller to create one")
        else:
            note(ctx, "canary.delete-pod", "info", f"the pod on {node} already runs revision {new.hash}", pod=pod.name)
    last: list[Snapshot] = [snap]

    def state(current: Snapshot, node: str) -> tuple[str, PluginPod] | None:
        p = current.pod_on(node)
        if p is None or p.deleting or p.revision_hash != new.hash:
            return None
        if p.phase == "Running" and p.ready and p.images.get(container) == run.image:
            return "ready", p
        if p.waiting_reason in failure.PULL_ERRORS:
            return "pull", p
        if p.unschedulable is not None:
            return "unschedulable", p
        if p.crashloop or (p.restarts >= 2 and not p.ready):
            return "crashloop", p
        return None

    def settled() -> dict[str, tuple[str, PluginPod] | None] | None:
        last[0] = current = look()
        states = {node: state(current, node) for node in nodes}
        done = all(s is not None for s in states.values()) or any(
            s and s[0] in ("crashloop", "pull", "unschedulable") for s in states.values())
        return states if done else None

    outcome = wait_for(ctx.clock, timeout=ctx.settings.ready_timeout, interval=ctx.settings.poll_interval, probe=settled)
    states = outcome or {node: state(last[0], node) for node in nodes}
    checks: list[Check] = []
    for node in nodes:
        checks += _pod_checks(ctx, node, states.get(node), last[0], new)
    others = [n for n in last[0].nodes if n not in nodes]
    checks.append(_others_on_old_revision(last[0], others, new))
    if all((states.get(node) or ("", None))[0] == "ready" for node in nodes):
        pulled = {c.scope: str(c.evidence.get("image_id") or "") for c in checks if c.name == "canary-pod-ready"}
        checks += [c for c in [pinning.verified_check(ctx, pulled)] if c is not None]
    note_checks(ctx, "canary", checks)
    failing = [node for node in nodes if (states.get(node) or ("", None))[0] != "ready"]
    if failing:
        draining.mark_failed(ctx, failing)
    return result(checks, what=f"canary on {', '.join(nodes)}")


def _pod_checks(ctx: StepContext, node: str, outcome: tuple[str, PluginPod] | None, last: Snapshot,
                new: Revision) -> list[Check]:
    if outcome is None:
        current = last.pod_on(node)
        state = f"{current.name} {current.phase}, ready={current.ready}" if current else "no pod"
        found = _evidence(ctx, current) if current is not None and current.restarts else {}
        said = f"; {failure.summary(found)}" if found and failure.summary(found) else ""
        return [failed("canary-pod-ready", f"the new pod on {node} was not Ready in {ctx.settings.ready_timeout:g}s "
                       f"({state}){said}", node, **found)]
    p = outcome[1]
    if outcome[0] == "pull":
        raw = _raw_pod(ctx, p)
        _, reason, message = (failure.pull_failure(raw) if raw else None) or ("", p.waiting_reason or "", "")
        return [failed("image-pull", f"{p.name} on {node} cannot pull {ctx.run.image}: {reason}"
                       f"{': ' + message if message else ''}", node, pod=p.name, reason=reason, message=message),
                failed("canary-pod-ready", f"{p.name} on {node} never became Ready", node, pod=p.name)]
    if outcome[0] == "unschedulable":
        raw = _raw_pod(ctx, p)
        found = unschedulable.gather(ctx.cluster, raw or {"metadata": {"name": p.name, "namespace": ctx.run.target.namespace}},
                                     node=node, edits=ctx.run.edits, condition=p.unschedulable or "")
        return [failed("pod-scheduled", unschedulable.detail(p.name, node, found), node, **found),
                failed("canary-pod-ready", f"{p.name} on {node} never became Ready", node, pod=p.name)]
    if outcome[0] == "crashloop":
        found = _evidence(ctx, p)
        said = failure.summary(found)
        return [failed("no-crashloop", f"{p.name} on {node} is crash-looping ({p.waiting_reason or 'restarting'}, "
                       f"{p.restarts} restart{'' if p.restarts == 1 else 's'}){'; ' + said if said else ''}", node,
                       pod=p.name, restarts=p.restarts, **found),
                failed("canary-pod-ready", f"{p.name} on {node} never became Ready", node, pod=p.name)]
    raw = _raw_pod(ctx, p)
    digest = failure.image_id(raw, ctx.run.progress["saved"]["container"]) if raw else ""
    return [passed("canary-pod-ready", f"{p.name} on {node} is Running and Ready with {ctx.run.image}", node,
                   pod=p.name, revision=new.hash, image_id=digest)]


def _raw_pod(ctx: StepContext, pod: PluginPod) -> dict[str, Any] | None:
    try:
        return failure.read_pod(ctx.cluster, ctx.run.target.namespace, pod.name)
    except ClusterError:
        return None


def _evidence(ctx: StepContext, pod: PluginPod) -> dict[str, Any]:
    """The failed container's last state, ``--previous`` log tail and known signatures."""
    raw = _raw_pod(ctx, pod)
    return failure.gather(ctx.cluster, raw, ctx.run.progress["saved"]["container"]) if raw else {}


def _others_on_old_revision(snap: Snapshot, others: list[str], new: Revision) -> Check:
    moved = [n for n in others if (p := snap.pod_on(n)) is not None and p.revision_hash == new.hash]
    if moved:
        return failed("other-nodes-unchanged", f"pods on {judge.listing(moved)} run the new revision too", judge.listing(moved))
    return passed("other-nodes-unchanged", f"{plural(len(others), 'other node')} still run the previous revision", "other nodes")
