"""A migration as a run of its own: approved, applied, verified, rolled back on failure.

:class:`MigrationSteps` implements :class:`runbooks.engine.steps.ChangeSteps` for a
Deployment or a StatefulSet (the workloads whose pod template changes in place and whose
rollout the bot can follow; a Job's or a Pod's cannot change in place, so ``migrate``
plans them but a run does not apply them: the refusal says so).

- ``plan`` (at request time, read-only): the plan of :mod:`runbooks.dra.migrating`, refused
  unless the server's dry run accepted every object; the run stores the ResourceClaimTemplates
  to create (labelled with the run), the new pod template and the pod template it was
  planned from. The approvers approve exactly that.
- ``apply``: refuses when the workload's pod template is no longer the one planned from
  (someone changed it since: nothing is written). Saves the pod template first, then
  creates the templates (a template of the same name that is not this run's stops the
  step), then replaces the pod template with a JSON patch whose ``test`` is the saved
  template, so a concurrent change is never overwritten.
- ``verify_all``: waits (``steps.ready_timeout``) for the rollout to finish (as
  :mod:`runbooks.rollouts` reads it), stopping early on a Deployment's
  ``ProgressDeadlineExceeded``; then every pod of the new template must be Running and
  Ready with each of its claims allocated and reserved for it, and no pod may still ask for
  the extended resource. Pods left pending say why (the scheduler's message).
- ``rollback``: the saved pod template back (only if the run changed it), the rollout
  followed back, and the templates this run created deleted.

What the steps keep in ``run.progress``: ``saved`` (``template``, ``generation``),
``created`` (the templates this run created or was about to), ``applied_at``,
``rollback_started_at``.
"""

from __future__ import annotations

import contextlib
from typing import Any

from runbooks import rollouts
from runbooks.cluster import Cluster
from runbooks.cluster.resources import PODS, REPLICASETS, WORKLOADS, Resource
from runbooks.daemonset.dra_smoke import allocated
from runbooks.daemonset.smoke_testing import pending_reason
from runbooks.dra import migration_canary as canaries
from runbooks.dra.migrating import MigrationError, find_workload, migrate
from runbooks.engine.recording import failed, note, note_checks, passed, result
from runbooks.engine.runs import Run
from runbooks.engine.steps import Check, CheckStatus, StepContext, StepResult, StepSettings
from runbooks.errors import ClusterError, NotFound, plural, shorten
from runbooks.inventory.reading import container_requests
from runbooks.rollouts import template_of
from runbooks.templates import same

RUN_LABEL = "upgradebot.io/run"
"""On the ResourceClaimTemplates a migration run creates: only those are deleted by its rollback."""
APPLIED_KINDS = ("Deployment", "StatefulSet")
"""The workloads a migration run applies to; the others are planned only."""


class MigrationSteps:
    """Plan, apply, verify and roll back the migration of one Deployment or StatefulSet to ResourceClaims."""

    # ------------------------------------------------------------------ request
    def plan(self, cluster: Cluster, run: Run, settings: StepSettings) -> tuple[Run, str]:
        target = run.target
        kind, workload = find_workload(cluster, target.namespace, target.name, target.kind or None)
        if kind not in APPLIED_KINDS:
            raise MigrationError(f"a migration run applies to a Deployment or StatefulSet; {kind} {target.ref} is "
                                 "planned only: "
                                 f"`migrate {target.namespace}/{kind.lower()}/{target.name}` shows the objects to apply "
                                 "(a Job's or a Pod's template cannot change in place)")
        plan = migrate(cluster, target.namespace, target.name, kind=kind,
                       device_class=run.change.get("device_class"), resources=settings.gpu_resources)
        refused = [d for d in plan.dry_runs if not d.accepted]
        if refused:
            raise MigrationError("the server refused the plan in its dry run, nothing was stored: " + "; ".join(
                f"{d.subject}: {shorten(d.answer, 300)}" for d in refused))
        templates = []
        for obj in plan.objects[:-1]:
            labels = {**(obj["metadata"].get("labels") or {}), RUN_LABEL: run.id}
            templates.append({**obj, "metadata": {**obj["metadata"], "labels": labels}})
        change: dict[str, Any] = {
            "version": plan.version, "device_class": plan.device_class,
            "claims": [c.model_dump() for c in plan.claims], "templates": templates,
            "template": template_of(plan.objects[-1]), "from_template": template_of(workload),
        }
        change.update(canaries.plan_if_asked(run.model_copy(update={"target": target.model_copy(update={"kind": kind})}),
                                             workload, change["template"]))
        planned = run.model_copy(update={
            "target": target.model_copy(update={"kind": kind, "cluster": cluster.context}), "change": change})
        summary = "; ".join(f"{c.container}: {c.resource} {c.count} -> claim {c.claim} (ResourceClaimTemplate "
                            f"{c.template})" for c in plan.claims)
        canary = change.get("canary")
        first = (f"; first a canary: {kind} {target.namespace}/{canary['name']} with {canary['replicas']} replica(s) "
                 "runs the plan, then the switch waits for its approval" if canary else "")
        return planned, f"{summary}, {plan.device_class} devices in resource.k8s.io/{plan.version}; the server " \
                        f"accepted every object in a dry run{first}"

    def check_request(self, cluster: Cluster, run: Run, settings: StepSettings) -> list[Check]:
        """Each template name free (or this run's), and the workload as planned."""
        checks = [self._template_free(cluster, run, obj) for obj in run.change.get("templates") or []]
        return [c for c in checks if c is not None]

    # ------------------------------------------------------------------ apply
    def apply(self, ctx: StepContext) -> StepResult:
        run, target = ctx.run, ctx.run.target
        resource = WORKLOADS[target.kind]
        try:
            workload = ctx.cluster.get(resource, target.name, target.namespace)
        except NotFound:
            check = failed("workload-exists", f"{target.kind} {target.ref} does not exist on {ctx.cluster.context}")
            note_checks(ctx, "apply", [check])
            return result([check], what="the migration")
        current, change = template_of(workload), run.change
        if "saved" not in ctx.run.progress:
            if not same(current, change["from_template"]):
                check = failed("workload-unchanged", f"the pod template of {target.kind} {target.ref} changed since "
                               "the migration was planned and approved: nothing was applied; request it again")
                note_checks(ctx, "apply", [check])
                return result([check], what="the migration")
            ctx.run = ctx.save_progress({
                "saved": {"template": current, "generation": workload["metadata"].get("generation")},
                "applied_at": ctx.cluster.server_time().isoformat()})
        checks: list[Check] = []
        made = self._create_templates(ctx, "apply")
        if made.status == CheckStatus.FAIL:
            note_checks(ctx, "apply", [made])
            return result([made], what="the migration")
        checks.append(made)
        saved = ctx.run.progress["saved"]["template"]
        if same(current, change["template"]):
            note(ctx, "apply.workload", "info", f"{target.kind} {target.ref} already has the migrated pod template")
        else:
            ctx.cluster.patch(resource, target.name, [
                {"op": "test", "path": "/spec/template", "value": saved},
                {"op": "replace", "path": "/spec/template", "value": change["template"]},
            ], namespace=target.namespace, patch_type="json")
            note(ctx, "apply.workload", "ok", f"{target.kind} {target.ref}: the pod template now names its claims "
                 "instead of the extended resource", kind="mutation")
        checks.append(passed("workload-changed", f"{target.kind} {target.ref} has the migrated pod template", target.ref))
        return result(checks, what="the migration")

    def _create_templates(self, ctx: StepContext, step: str) -> Check:
        """The plan's ResourceClaimTemplates created (each name saved first; one made before a restart kept)."""
        run, target = ctx.run, ctx.run.target
        templates = _resource(ctx.cluster, run.change["version"])
        created = list(run.progress.get("created") or [])
        for obj in run.change.get("templates") or []:
            name = obj["metadata"]["name"]
            blocked = self._template_free(ctx.cluster, ctx.run, obj)
            if blocked is not None:
                return blocked
            try:
                ctx.cluster.get(templates, name, target.namespace)
                continue  # made by this run before a restart (or by its canary)
            except NotFound:
                pass
            if name not in created:
                created.append(name)
                ctx.run = ctx.save_progress({"created": created})
            ctx.cluster.create(templates, {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")},
                               namespace=target.namespace)
            note(ctx, f"{step}.template", "ok", f"created ResourceClaimTemplate {target.namespace}/{name}",
                 kind="mutation")
        return passed("claim-templates", f"ResourceClaimTemplate(s) {', '.join(created) or 'none new'} in "
                      f"{target.namespace}", target.ref)

    # ------------------------------------------------------------------ canary
    def canary(self, ctx: StepContext) -> StepResult:
        """The plan's templates, then the duplicate running the plan; the original untouched."""
        checks = [self._create_templates(ctx, "canary")]
        if checks[0].status != CheckStatus.FAIL:
            checks.append(canaries.create_duplicate(ctx))
        note_checks(ctx, "canary", checks)
        return result(checks, what="the migration canary")

    def verify_canary(self, ctx: StepContext) -> StepResult:
        """The duplicate rolled out, its pods Running and Ready with their claims allocated and reserved;
        then, with ``prometheus``, the metric checks over the window (:func:`canaries.compare_metrics`)."""
        run = ctx.run
        checks = [canaries.follow_duplicate(ctx)]
        pods = self._pods(ctx.cluster, run, name=run.change["canary"]["name"])
        checks.append(self._claims_allocated(ctx.cluster, run, pods))
        compared = all(c.status is CheckStatus.PASS for c in checks)
        if compared:  # the pods run: their GPU metrics side by side with the original's, over the window
            checks += canaries.compare_metrics(ctx, canary=pods, original=self._pods(ctx.cluster, run))
        note_checks(ctx, "verify_canary", checks)
        outcome = result(checks, what=f"the migration canary of {run.target.kind} {run.target.ref}",
                         unknown_blocks=ctx.settings.unknown_blocks)
        if outcome.ok:
            said = " and their GPU metrics match the original's" if compared and len(checks) > 2 else ""
            return outcome.model_copy(update={"reason": f"the canary's {plural(len(pods), 'pod')} run with allocated "
                                                        f"claims{said}: the switch waits for its approval"})
        return outcome

    # ------------------------------------------------------------------ verify
    def verify_all(self, ctx: StepContext) -> StepResult:
        run, target = ctx.run, ctx.run.target
        rollout = self._follow(ctx, want=run.change["template"])
        checks = [rollout]
        pods = self._pods(ctx.cluster, run)
        claims = run.change.get("claims") or []
        names = {c["claim"] for c in claims}
        new = [p for p in pods if names <= {c.get("name") for c in (p.get("spec") or {}).get("resourceClaims") or []}]
        resources = tuple({c["resource"] for c in claims})
        old = [p["metadata"]["name"] for p in pods if p not in new and _asks(p, resources)]
        checks.append(failed("old-pods-gone", f"{plural(len(old), 'pod')} still ask for {', '.join(resources)}: "
                             f"{', '.join(sorted(old)[:5])}", target.ref) if old else
                      passed("old-pods-gone", f"no pod of {target.ref} asks for {', '.join(resources)} any more",
                             target.ref))
        checks.append(self._claims_allocated(ctx.cluster, run, new))
        outcome = result(checks, what=f"the migration of {target.kind} {target.ref}")
        note_checks(ctx, "verify", checks)
        if outcome.ok and run.change.get("canary"):  # switched and verified: the duplicate is done with
            gone = canaries.delete_duplicate(ctx, "verify")
            if gone is not None:
                note_checks(ctx, "verify", [gone])
        if outcome.ok:
            return outcome.model_copy(update={"reason": f"{plural(len(new), 'pod')} of {target.ref} run with allocated claims"})
        return outcome

    def _follow(self, ctx: StepContext, *, want: dict[str, Any]) -> Check:
        """Wait until the workload's rollout of ``want`` is complete (or stuck past its deadline)."""
        target = ctx.run.target
        read = rollouts.reader(ctx.cluster, WORKLOADS[target.kind], target.namespace, target.name)
        state, last = rollouts.follow(read, want, clock=ctx.clock, timeout=ctx.settings.ready_timeout,
                                      interval=ctx.settings.poll_interval)
        what = f"{target.kind} {target.ref}"
        if state == rollouts.COMPLETE:
            return passed("rollout", f"{what} rolled out: {rollouts.counts(last)}", target.ref)
        if state == rollouts.CHANGED:
            return failed("rollout", f"the pod template of {what} was changed by someone else during the step",
                          target.ref)
        why = (rollouts.progressing(last).get("message") if state == rollouts.STUCK
               else f"not finished in {ctx.settings.ready_timeout:g}s")
        return failed("rollout", f"{what} did not roll out ({rollouts.counts(last)}): {why}", target.ref)

    @staticmethod
    def _pods(cluster: Cluster, run: Run, *, name: str | None = None) -> list[dict[str, Any]]:
        """The workload's (or its canary's, ``name``) live pods, by owner (a label match alone may catch others')."""
        namespace = run.target.namespace
        workload = cluster.get(WORKLOADS[run.target.kind], name or run.target.name, namespace)
        match = ((workload.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        selector = ",".join(f"{k}={v}" for k, v in sorted(match.items())) or None
        owners = {workload["metadata"]["uid"]}  # a StatefulSet owns its pods
        if run.target.kind == "Deployment":  # a Deployment's are its ReplicaSets'
            owners = {rs["metadata"]["uid"] for rs in cluster.list_objects(REPLICASETS, namespace=namespace,
                                                                            label_selector=selector)
                      if _controller(rs) == workload["metadata"]["uid"]}
        pods = cluster.list_objects(PODS, namespace=namespace, label_selector=selector)
        return [p for p in pods if _controller(p) in owners and not p["metadata"].get("deletionTimestamp")
                and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]

    def _claims_allocated(self, cluster: Cluster, run: Run, pods: list[dict[str, Any]]) -> Check:
        target = run.target
        if not pods:
            return failed("claims-allocated", f"no pod of {target.ref} runs the migrated template", target.ref)
        claims = _resource(cluster, run.change["version"], "ResourceClaim")
        wanted = [c["claim"] for c in run.change.get("claims") or []]
        problems: list[str] = []
        devices: dict[str, list[str]] = {}
        for pod in pods:
            name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
            ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                        for c in (pod.get("status") or {}).get("conditions") or [])
            phase = (pod.get("status") or {}).get("phase")
            if phase != "Running" or not ready:
                problems.append(f"{name} is {phase}{'' if phase != 'Running' else ', not Ready'}{pending_reason(pod)}")
                continue
            for pod_claim in wanted:
                claim = _claim_of(cluster, pod, pod_claim, claims)
                if claim is None:
                    problems.append(f"{name}: no ResourceClaim was made for {pod_claim}")
                    continue
                got = allocated(claim)
                holders = {r.get("uid") for r in (claim.get("status") or {}).get("reservedFor") or []}
                if not got:
                    problems.append(f"{name}: claim {claim['metadata']['name']} is not allocated")
                elif uid not in holders:
                    problems.append(f"{name}: claim {claim['metadata']['name']} is not reserved for it")
                else:
                    devices[name] = [d[2] or d[0] for d in got]
        if problems:
            return failed("claims-allocated", "; ".join(problems[:5]) + (f" (and {len(problems) - 5} more)"
                          if len(problems) > 5 else ""), target.ref, pods=len(pods))
        shown = ", ".join(f"{p}: {', '.join(d)}" for p, d in sorted(devices.items())[:5])
        return passed("claims-allocated", f"{plural(len(pods), 'pod')} Running and Ready with their claims allocated and "
                      f"reserved ({shown})", target.ref, devices=devices)

    # ------------------------------------------------------------------ rollback
    def rollback(self, ctx: StepContext) -> StepResult:
        run, target = ctx.run, ctx.run.target
        saved = (run.progress.get("saved") or {}).get("template")
        gone = canaries.delete_duplicate(ctx, "rollback")
        if saved is None and (gone is not None or run.progress.get("created")):  # a canary: the original untouched
            cleaned = [c for c in (gone, self._delete_templates(ctx)) if c is not None]
            note_checks(ctx, "rollback", cleaned)
            outcome = result(cleaned, what=f"rollback of the migration canary of {target.kind} {target.ref}")
            return outcome.model_copy(update={"reason": f"{target.kind} {target.ref} was never changed; the canary and "
                                                        "its templates are deleted"}) if outcome.ok else outcome
        if saved is None:
            check = passed("nothing-to-roll-back", f"the run changed nothing on {target.kind} {target.ref} (it stopped "
                           "before its first change, which it saves the pod template for first)", target.ref)
            note_checks(ctx, "rollback", [check])
            return StepResult(ok=True, reason="the run changed nothing: nothing to roll back", checks=[check])
        if "rollback_started_at" not in run.progress:
            ctx.run = ctx.save_progress({"rollback_started_at": ctx.cluster.server_time().isoformat()})
        resource = WORKLOADS[target.kind]
        checks: list[Check] = []
        try:
            workload = ctx.cluster.get(resource, target.name, target.namespace)
        except NotFound:
            return StepResult(ok=False, reason=f"{target.kind} {target.ref} does not exist on {ctx.cluster.context}: "
                              "nothing to roll back")
        current = template_of(workload)
        if same(current, saved):
            note(ctx, "rollback.workload", "info", f"{target.kind} {target.ref} has its saved pod template already")
        elif same(current, run.change["template"]):
            ctx.cluster.patch(resource, target.name, [
                {"op": "test", "path": "/spec/template", "value": current},
                {"op": "replace", "path": "/spec/template", "value": saved},
            ], namespace=target.namespace, patch_type="json")
            note(ctx, "rollback.workload", "ok", f"{target.kind} {target.ref}: the pod template saved before the "
                 "migration is back", kind="mutation")
        else:
            reason = (f"the pod template of {target.kind} {target.ref} is neither the migrated one nor the saved one: "
                      "someone changed it since; left as it is for a person to decide")
            note(ctx, "rollback.workload", "failed", reason)
            return StepResult(ok=False, reason=reason)
        checks.append(self._follow(ctx, want=saved))
        checks.append(self._delete_templates(ctx))
        if gone is not None:
            checks.append(gone)
        note_checks(ctx, "rollback", checks)
        return result(checks, what=f"rollback of {target.kind} {target.ref}")

    def _delete_templates(self, ctx: StepContext) -> Check:
        run, target = ctx.run, ctx.run.target
        templates = _resource(ctx.cluster, run.change["version"])
        deleted, left = [], []
        for name in run.progress.get("created") or []:
            try:
                obj = ctx.cluster.get(templates, name, target.namespace)
            except NotFound:
                continue
            if (obj["metadata"].get("labels") or {}).get(RUN_LABEL) != run.id:
                left.append(f"{name} (not this run's)")
                continue
            try:
                ctx.cluster.delete(templates, name, namespace=target.namespace, uid=obj["metadata"]["uid"])
                deleted.append(name)
                note(ctx, "rollback.template", "ok", f"deleted ResourceClaimTemplate {target.namespace}/{name}",
                     kind="mutation")
            except NotFound:
                continue
            except ClusterError as exc:
                left.append(f"{name} ({shorten(str(exc), 200)})")
        if left:
            return failed("claim-templates-deleted", f"not deleted: {', '.join(left)}", target.ref)
        return passed("claim-templates-deleted", f"the run's ResourceClaimTemplate(s) are gone "
                      f"({', '.join(deleted) or 'none were left'})", target.ref)

    # ------------------------------------------------------------------ helpers
    @staticmethod
    def _template_free(cluster: Cluster, run: Run, obj: dict[str, Any]) -> Check | None:
        """A failed check when a template of that name exists and is not this run's."""
        name, namespace = obj["metadata"]["name"], run.target.namespace
        with contextlib.suppress(NotFound):
            existing = cluster.get(_resource(cluster, run.change["version"]), name, namespace)
            if (existing["metadata"].get("labels") or {}).get(RUN_LABEL) != run.id:
                return failed("claim-template-free", f"a ResourceClaimTemplate {namespace}/{name} exists already and "
                              "is not this run's: delete or rename it first", run.target.ref)
        return None


def _resource(cluster: Cluster, version: str, kind: str = "ResourceClaimTemplate") -> Resource:
    chosen = cluster.dra_apis().chosen
    served = chosen.get(kind)
    if served is not None and served.version == version:
        return served
    plural = {"ResourceClaimTemplate": "resourceclaimtemplates", "ResourceClaim": "resourceclaims"}[kind]
    return Resource("resource.k8s.io", version, plural, kind, True)


def _claim_of(cluster: Cluster, pod: dict[str, Any], pod_claim: str, claims: Resource) -> dict[str, Any] | None:
    """The claim made for ``pod_claim`` of the pod (its status names it; 1.27 names it ``<pod>-<claim>``)."""
    namespace = pod["metadata"]["namespace"]
    for entry in (pod.get("status") or {}).get("resourceClaimStatuses") or []:
        if entry.get("name") == pod_claim and entry.get("resourceClaimName"):
            with contextlib.suppress(NotFound):
                return cluster.get(claims, entry["resourceClaimName"], namespace)
            return None
    try:
        return cluster.get(claims, f"{pod['metadata']['name']}-{pod_claim}", namespace)
    except NotFound:
        return None


def _controller(obj: dict[str, Any]) -> str | None:
    return next((str(r.get("uid")) for r in obj["metadata"].get("ownerReferences") or [] if r.get("controller")), None)


def _asks(pod: dict[str, Any], resources: tuple[str, ...]) -> bool:
    return any(any(container_requests(c, resources).values()) for c in (pod.get("spec") or {}).get("containers") or [])
