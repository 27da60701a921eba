"""The promote step: the canary's template on every node.

A target whose policy gives ``waves`` is promoted wave by wave
(:mod:`runbooks.daemonset.waves`); the rest of this docstring is the promotion at once.

With ``images.pin_digest`` (:mod:`runbooks.daemonset.pinning`) the container's image is first set to
the digest the canary verified (``repository@sha256:…``), while the DaemonSet is still OnDelete:
a new revision, which every node, the canary's too, then moves to. The original update strategy
(saved by the canary) is put back. If it was RollingUpdate
the controller replaces the remaining old pods within its ``maxUnavailable`` and the step
follows it node by node; if it was OnDelete the step replaces them itself, one node at a
time. The step ends when every pod runs the new revision and is Ready, or fails naming
the nodes still behind. Re-entered, it only waits for what is still missing.
"""

from __future__ import annotations

from runbooks.daemonset import companions, pinning, through_operator, waves
from runbooks.daemonset.canarying import changed_template
from runbooks.daemonset.checks import listing
from runbooks.daemonset.following import follow_rollout, replace_node_by_node
from runbooks.daemonset.metric_checks import metrics_before, with_gpus
from runbooks.daemonset.observing import looking, wait_for
from runbooks.daemonset.patching import set_strategy
from runbooks.engine.recording import failed, note, note_checks, passed
from runbooks.engine.steps import StepContext, StepResult
from runbooks.errors import plural
from runbooks.rollouts import with_image
from runbooks.templates import same


def promote(ctx: StepContext) -> StepResult:
    run = ctx.run
    saved = run.progress.get("saved")
    if not saved:
        return StepResult(ok=False, reason="the run has no canary state (saved template and strategy): run the canary first")
    if "promote_started_at" not in run.progress:
        nodes = (run.progress.get("baseline") or {}).get("nodes") or {}
        recorded = metrics_before(ctx.settings, with_gpus(list(nodes), baseline=nodes),
                                  at=ctx.clock.now()).get("metrics_before")
        ctx.run = ctx.save_progress({"promote_started_at": ctx.cluster.server_time().isoformat(),
                                     **({"metrics_promoted": recorded} if recorded else {})})
    target = run.target
    # the plugin's pods from the cache the run's steps share (the rollout followed next reads it too,
    # issue 39); the DaemonSet and its revisions read now: what is promoted is judged on them
    with looking(ctx.cluster, target.namespace, target.name, watches=ctx.watches) as look:
        snap = wait_for(ctx.clock, timeout=ctx.settings.ready_timeout, interval=ctx.settings.poll_interval,
                        probe=lambda: s if (s := look(read_daemonset=True)).settled else None)
    new = snap.current_revision if snap else None
    container, image = saved["container"], pinning.promoted(run, ctx.settings)
    canary_template = changed_template(run)
    as_canary = (through_operator.rendered(snap, ctx, container) if snap and target.clusterpolicy
                 else snap is not None and (run.edits.empty or same(snap.template, canary_template)
                                            or same(snap.template, with_image(canary_template, container, image))))
    if snap is None or new is None or snap.images.get(container) not in (run.image, image) or not as_canary:
        reason = (f"{target.ref} no longer has the canary's template (container {saved['container']} should run "
                  f"{run.image}" + (f" with {run.edits.summary()}" if not run.edits.empty else "")
                  + "): someone changed it; nothing was promoted")
        note(ctx, "promote.precheck", "failed", reason)
        return StepResult(ok=False, reason=reason)
    if pinning.pin(ctx, snap, container):  # the verified digest in the template: a revision of its own
        with looking(ctx.cluster, target.namespace, target.name, watches=ctx.watches) as look:
            snap = wait_for(ctx.clock, timeout=ctx.settings.ready_timeout, interval=ctx.settings.poll_interval,
                            probe=lambda: s if (s := look(read_daemonset=True)).settled
                            and s.images.get(container) == image else None)
        new = snap.current_revision if snap else None
        if snap is None or new is None:
            return StepResult(ok=False, reason=f"the DaemonSet controller did not pick up {image} in {target.ref} in "
                              f"{ctx.settings.ready_timeout:g}s: is kube-controller-manager running?")
    if run.progress.get("waves") or waves.waves_of(ctx.settings, target.ref, drain=target.drain) is not None:
        return waves.promote_in_waves(ctx, snap, new)
    original = saved["update_strategy"]
    if target.clusterpolicy:  # OnDelete until every node is replaced; then the ClusterPolicy's strategy as it was
        note(ctx, "promote.strategy", "info", f"ClusterPolicy/{target.clusterpolicy} keeps OnDelete: replacing the "
             "pods node by node")
        outcome = replace_node_by_node(ctx, new.hash, step="promote.node")
        if outcome.ok:
            through_operator.put_back_strategy(ctx, step="promote.clusterpolicy")
    elif (original.get("type") or "RollingUpdate") == "OnDelete":
        note(ctx, "promote.strategy", "info", "the original strategy is OnDelete: replacing the pods node by node")
        outcome = replace_node_by_node(ctx, new.hash, step="promote.node")
    else:
        set_strategy(ctx, original, step="promote.strategy")
        outcome = follow_rollout(ctx, new.hash, step="promote.node", before=snap)
    nodes = outcome.snapshot.nodes
    if outcome.ok:
        check = passed("promotion", f"{plural(len(nodes), 'node')} run {image} (revision {new.number}) and are Ready",
                       "all nodes", revision=new.hash)
        after = companions.upgrade(ctx, before=False)
        note_checks(ctx, "promote", [check, *after])
        bad = [c for c in after if c.status != "pass"]
        if bad:
            return StepResult(ok=False, reason="; ".join(f"{c.scope}: {c.detail}" for c in bad), checks=[check, *after])
        return StepResult(ok=True, checks=[check, *after])
    behind = outcome.behind
    check = failed("promotion", f"{outcome.problem or 'not finished'}; {len(behind)} of {plural(len(nodes), 'node')} still behind: {listing(behind)}",
                   listing(behind), behind=behind, revision=new.hash)
    note_checks(ctx, "promote", [check])
    return StepResult(ok=False, reason=f"promotion failed: {check.detail}", checks=[check])
