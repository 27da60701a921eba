"""The cluster steps for a plugin DaemonSet: :class:`DaemonSetSteps` implements
:class:`runbooks.engine.steps.Steps` for the run engine.

Each method delegates to the module that does the work (:mod:`runbooks.daemonset.canarying`,
:mod:`runbooks.daemonset.verifying`, :mod:`runbooks.daemonset.promoting`, :mod:`runbooks.daemonset.rolling_back`).
Every step reads the cluster first and does only what is missing, so the engine may call
it again after a kill. Errors that need a person (RBAC, a DaemonSet changed under us, a
bad request) come back as a failed :class:`~runbooks.engine.steps.StepResult` with the reason;
:class:`~runbooks.errors.TemporaryClusterError` (unreachable, overloaded, a conflict that
kept coming back) is raised, so the engine can run the step again later.

What the steps keep in ``run.progress``:

- ``saved``: ``template`` (the whole pod template), ``update_strategy``, ``revision``
  (``number``, ``name``, ``hash``), ``generation``, ``container``, ``image`` — before any change;
- ``baseline``: :class:`runbooks.daemonset.baselines.Baseline` (per node: GPU capacity and
  allocatable, plugin pod name, uid, restarts, images, registration; DRA slices);
- ``canary_started_at``, ``promote_started_at``, ``rollback_started_at``: the API
  server's time when each step began (events count from there);
- ``new_revision``: the canary's revision (``number``, ``name``, ``hash``);
- ``waves`` (a promotion in waves): the plan, made once the canary passed (per wave: ``size``,
  ``nodes``, ``soak`` seconds, ``approve_next``); ``wave`` the wave in progress,
  ``wave_started`` / ``wave_done`` per wave number (start on the API server's clock;
  ``verified_at``, ``soak_until``); ``approved_wave`` the last wave approved (by the engine);
- ``drained`` (a target that drains): per node the run cordoned, ``was_cordoned`` (before
  the run: never uncordoned by it), ``state`` (``cordoned``, ``drained``, ``uncordoned``,
  ``kept``) and ``failed`` (its new plugin failed);
- ``rollback_to``: the revision a rollback restores.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from runbooks.cluster import Cluster, permissions
from runbooks.cluster.informing import ClusterWatches
from runbooks.cluster.wrapping import forbidden_sentence
from runbooks.daemonset import (
    canarying,
    companions,
    dra_smoke,
    draining,
    evidence,
    metric_checks,
    preflight,
    promoting,
    rolling_back,
    smoke_testing,
    verifying,
    waves,
)
from runbooks.daemonset.observing import looking, observe
from runbooks.daemonset.patching import StrategyChanged
from runbooks.daemonset.quarantine_marks import quarantined_sentence, saved_of
from runbooks.engine.recording import failed, note
from runbooks.engine.refusals import Refused
from runbooks.engine.runs import Run
from runbooks.engine.scoping import SMOKE_NAMESPACE
from runbooks.engine.steps import Check, StepContext, StepResult, StepSettings
from runbooks.errors import NotFound, PermanentClusterError, plural
from runbooks.inventory import take_inventory
from runbooks.inventory.plugins import classify
from runbooks.inventory.stacks import hardware_classes


class DaemonSetSteps:
    """Canary, verify, promote and rollback of one DaemonSet, as the run engine calls them."""

    def check_request(self, cluster: Cluster, run: Run, settings: StepSettings, *,
                      watches: ClusterWatches | None = None,
                      keep: Callable[[dict[str, Any]], None] | None = None) -> list[Check]:
        """The canary's pre-checks, before any approver is asked (they run again after approval).
        With ``watches`` (the process's watch cache), the target's pods are read through the
        caches the canary's step follows after approval (issue 39: listed once for both). ``keep``
        is given what the pre-checks after approval reuse of the request's inventory
        (:func:`~runbooks.daemonset.preflight.requested_view`; issue 63: no node listed again)."""
        try:
            with looking(cluster, run.target.namespace, run.target.name, watches=watches) as look:
                snap = look(read_daemonset=True)
        except NotFound:
            return [failed("daemonset-exists", f"daemonset {run.target.ref} does not exist on {cluster.context}")]
        dra = classify(snap.ds) == "dra-kubelet-plugin"
        smoke = settings.smoke_test
        refused = permissions.refused_rule(cluster, permissions.run_actions(
            namespace=run.target.namespace, name=run.target.name, dra=dra, drain=run.target.drain,
            smoke_namespace=str(smoke.get("namespace") or SMOKE_NAMESPACE) if smoke else None,
            workloads=[p.name for p in run.target.parts if p.kind == "Deployment"],
            clusterpolicy=run.target.clusterpolicy or None))
        if refused is not None:  # issue 34: refused before an approver is asked, naming the rule
            return [failed("rbac", forbidden_sentence(refused, ""))]
        if saved_of(snap.ds) is not None:  # a quarantine keeps it OnDelete: a promotion would roll nothing
            return [failed("quarantined", quarantined_sentence(run.target.namespace, run.target.name))]
        checks, inventory = preflight.request_checks(cluster, snap, run=run, settings=settings, baseline=False)
        if inventory is not None and keep is not None:
            keep(preflight.requested_view(inventory, run))
        if smoke:  # a RuntimeClass the smoke pod would name and the cluster lacks; a DRA class not to be chosen
            checks += smoke_testing.request_check(cluster, smoke, snap.ds, resource=settings.gpu_resources[0])
            if dra:
                checks += dra_smoke.request_check(cluster, smoke, snap.ds, nodes=snap.nodes,
                                                  container=run.container or None)
        if run.target.drain and not any(c.status == "fail" for c in checks):
            for node in run.canary_nodes:
                checks += draining.request_checks(cluster, node, dra=dra,
                                                  settings=settings)
        return [*checks, *companions.request_checks(cluster, run, snap.images.get(run.container, "")),
                *metric_checks.request_checks(settings, list(run.canary_nodes))]

    def pick_node(self, cluster: Cluster, run: Run, settings: StepSettings) -> tuple[str, str]:
        """``node=auto``: in each hardware class of the target's nodes (GPU product x driver branch x
        runtime), the Ready, schedulable GPU node whose plugin pod is Ready and that has the fewest
        devices in use (GPUs its pods request, DRA devices allocated there); ties by name. Several
        classes give several nodes, joined by commas, in the classes' order."""
        try:
            snap = observe(cluster, run.target.namespace, run.target.name)
        except NotFound as exc:
            raise Refused(f"daemonset {run.target.ref} does not exist on {cluster.context}") from exc
        found = take_inventory(cluster, targets=[run.target.ref], gpu_resources=settings.gpu_resources,
                               owned={run.target.ref: snap.pods})  # every node's IN USE: the cluster's pods, once
        candidates = sorted(
            (n for n in found.nodes if n.ready and not n.unschedulable and n.gpu_hardware
             and (pod := snap.pod_on(n.name)) is not None and pod.ready and not pod.deleting),
            key=lambda n: (n.busy, n.name))
        if not candidates:
            raise Refused(f"node=auto found no Ready, schedulable GPU node with a Ready pod of {run.target.ref}: "
                          "`inventory` shows why; name the node")
        on = {p.node for p in snap.pods}
        classes = hardware_classes(n for n in found.nodes if n.name in on)
        picked = [(c, best) for c in classes
                  if (best := next((n for n in candidates if n.name in c.nodes), None)) is not None]
        if len(picked) <= 1:
            best = picked[0][1] if picked else candidates[0]
            return best.name, (f"node=auto chose {best.name}: Ready, schedulable, its plugin pod Ready, "
                               f"{plural(best.busy, 'device')} in use (the fewest of {plural(len(candidates), 'candidate')})")
        left = [c.name for c in classes if c not in [hw for hw, _ in picked]]
        chosen = "; ".join(f"{n.name} for {c.name} ({plural(n.busy, 'device')} in use)" for c, n in picked)
        return ",".join(n.name for _, n in picked), (
            f"node=auto chose one canary node per hardware class, each Ready, schedulable, its plugin pod Ready and "
            f"the least busy of its class: {chosen}"
            + (f"; no candidate in {', '.join(left)}" if left else ""))

    def canary(self, ctx: StepContext) -> StepResult:
        """canary_rolling: pre-checks, saved state, OnDelete, new image, the canary node's pod replaced and Ready."""
        return _guarded(ctx, "canary", canarying.canary)

    def verify_canary(self, ctx: StepContext) -> StepResult:
        """canary_verifying: the checks on the canary node, and that no other node changed."""
        result = _guarded(ctx, "verify_canary", verifying.verify_canary)
        if result.ok:
            draining.uncordon(ctx, ctx.run.canary_nodes, step="verify_canary.uncordon")
        else:
            draining.mark_failed(ctx, ctx.run.canary_nodes)
        target = waves.waves_of(ctx.settings, ctx.run.target.ref, drain=ctx.run.target.drain)
        if result.ok and target is not None and not ctx.run.progress.get("waves"):
            with looking(ctx.cluster, ctx.run.target.namespace, ctx.run.target.name, watches=ctx.watches) as look:
                snap = look(read_daemonset=True)
            planned = waves.plan(ctx.cluster, snap, canary=ctx.run.canary_nodes, target=target, settings=ctx.settings)
            ctx.run = ctx.save_progress({"waves": planned})
            note(ctx, "verify_canary.waves", "info", "the promotion goes in " + "; ".join(
                f"wave {i}: {plural(len(w['nodes']), 'node')}" for i, w in enumerate(planned, start=1)),
                waves=[len(w["nodes"]) for w in planned])
        return result

    def promote(self, ctx: StepContext) -> StepResult:
        """promoting: the original strategy back, the rollout followed node by node."""
        return _guarded(ctx, "promote", promoting.promote)

    def verify_all(self, ctx: StepContext) -> StepResult:
        """verifying: the checks on every node; a node the run still has cordoned is given back
        once they pass."""
        result = _guarded(ctx, "verify_all", verifying.verify_all)
        if result.ok:
            draining.uncordon(ctx, step="verify_all.uncordon")
        return result

    def rollback(self, ctx: StepContext) -> StepResult:
        """rolling_back: previous template and strategy back, new pods replaced, baseline confirmed."""
        return _guarded(ctx, "rollback", rolling_back.rollback)


def _guarded(ctx: StepContext, name: str, step: Callable[[StepContext], StepResult]) -> StepResult:
    """``step``'s result, with the evidence of its failed checks (:func:`evidence.of_checks`) for
    the run to keep; a cluster error that needs a person fails it with the reason."""
    try:
        result = step(ctx)
        return result if result.ok else result.model_copy(update={"evidence": evidence.of_checks(name, result.checks)})
    except (PermanentClusterError, StrategyChanged) as exc:
        reason = f"{name} stopped: {exc}"
        note(ctx, f"{name}.error", "failed", reason)
        return StepResult(ok=False, reason=reason)
