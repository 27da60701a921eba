"""A target's other workloads, upgraded in the same run: a DRA driver's controller
Deployment beside its kubelet-plugin DaemonSet, say.

The policy lists them with the target (``workloads:``, in order, the DaemonSet among them);
the run keeps them as ``run.target.parts``. A part before the DaemonSet is upgraded in the
canary step, before the canary pod is replaced; a part after it in the promote step, once
every node runs the new revision. For each part the step saves its whole pod template
first (``run.progress["parts"][<kind>/<name>]``), then replaces the template with the new
image on one container (a JSON patch whose ``test`` is the saved template, so another
change is never overwritten) and follows its rollout (``steps.ready_timeout``; a
Deployment past its progress deadline stops early). The container is the one the policy
names, else the one running the same image repository as the target's container.

The rollback restores them with the DaemonSet, in the reverse order: the parts after it
first, then the DaemonSet, then the parts before it; each gets its saved template back
(only if it still has the run's), and its rollout is followed. Verification checks that
each part's rollout of the new template is complete.
"""

from __future__ import annotations

from typing import Any

from runbooks import rollouts
from runbooks.characters import shown
from runbooks.cluster.resources import DAEMONSETS, DEPLOYMENTS, Resource
from runbooks.engine.recording import failed, note, passed
from runbooks.engine.runs import Part, Run
from runbooks.engine.steps import Check, StepContext
from runbooks.errors import NotFound
from runbooks.rollouts import with_image

RESOURCES: dict[str, Resource] = {"DaemonSet": DAEMONSETS, "Deployment": DEPLOYMENTS}


def repository(image: str) -> str:
    """``registry/path/name`` of an image reference, without its tag or digest."""
    name = image.split("@", 1)[0]
    slash = name.rfind("/")
    colon = name.rfind(":")
    return name[:colon] if colon > slash else name


def containers_of(template: dict[str, Any]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = (template.get("spec") or {}).get("containers") or []
    return found


def container_for(template: dict[str, Any], part: Part, image: str) -> str | None:
    """The container of ``part`` to change: the named one, else the one running ``image``'s repository."""
    names = [str(c.get("name")) for c in containers_of(template)]
    if part.container:
        return part.container if part.container in names else None
    same_repo = [str(c.get("name")) for c in containers_of(template) if repository(str(c.get("image", ""))) ==
                 repository(image)]
    return same_repo[0] if len(same_repo) == 1 else None


def request_checks(cluster: Any, run: Run, current_image: str) -> list[Check]:
    """Each part exists in the target's namespace and has one container to change."""
    checks = []
    for part in run.target.parts:
        what = f"{part.kind} {run.target.namespace}/{part.name}"
        try:
            obj = cluster.get(RESOURCES[part.kind], part.name, run.target.namespace)
        except NotFound:
            checks.append(failed("workload-exists", f"{what}, listed with {run.target.ref} in the policy, does not "
                                 f"exist on {cluster.context}", part.ref))
            continue
        if container_for(rollouts.template_of(obj), part, current_image) is None:
            names = ", ".join(str(c.get("name")) for c in containers_of(rollouts.template_of(obj)))
            checks.append(failed("workload-container", f"{what} has no container {part.container}" if part.container
                                 else f"{what} has not exactly one container running {repository(current_image)} "
                                 f"(it has {names}): name it in the policy ({part.ref}:<container>)", part.ref))
    return checks


def _kept(ctx: StepContext) -> dict[str, Any]:
    parts: dict[str, Any] = ctx.run.progress.get("parts") or {}
    return parts


def upgrade(ctx: StepContext, *, before: bool) -> list[Check]:
    """Upgrade the parts on this side of the DaemonSet, in order; stops at the first that fails."""
    run = ctx.run
    old_image = str((run.progress.get("saved") or {}).get("image") or "")
    checks: list[Check] = []
    for part in [p for p in run.target.parts if p.before == before]:
        resource, namespace = RESOURCES[part.kind], run.target.namespace
        try:
            obj = ctx.cluster.get(resource, part.name, namespace)
        except NotFound:
            checks.append(failed("workload-exists", f"{part.kind} {namespace}/{part.name} does not exist", part.ref))
            return checks
        current = rollouts.template_of(obj)
        kept = _kept(ctx).get(part.ref)
        if kept is None:
            container = container_for(current, part, old_image)
            if container is None:
                checks.append(failed("workload-container", f"{part.kind} {namespace}/{part.name}: no container to "
                                     "change", part.ref))
                return checks
            kept = {"template": current, "container": container}
            ctx.run = ctx.save_progress({"parts": {**_kept(ctx), part.ref: kept}})
        wanted = with_image(kept["template"], kept["container"], run.image)
        if rollouts.same(current, kept["template"]):
            ctx.cluster.patch(resource, part.name, [
                {"op": "test", "path": "/spec/template", "value": current},
                {"op": "replace", "path": "/spec/template", "value": wanted},
            ], namespace=namespace, patch_type="json")
            note(ctx, f"{'canary' if before else 'promote'}.workload", "ok", f"{part.kind} {namespace}/{part.name}: "
                 f"container {kept['container']} set to {run.image}", kind="mutation")
        elif not rollouts.same(current, wanted):
            checks.append(failed("workload-unchanged", f"{part.kind} {namespace}/{part.name} changed since the run "
                                 "saved it (its template is neither the saved one nor that with the new image): "
                                 "someone else is changing it", part.ref))
            return checks
        checks.append(_followed(ctx, part, wanted, what=f"runs {run.image}"))
        if checks[-1].status != "pass":
            return checks
    return checks


def restore(ctx: StepContext, *, before: bool) -> list[Check]:
    """Put back the saved template of each part on this side of the DaemonSet, in reverse order."""
    run = ctx.run
    checks: list[Check] = []
    for part in reversed([p for p in run.target.parts if p.before == before]):
        kept = _kept(ctx).get(part.ref)
        if kept is None:
            continue  # never changed
        resource, namespace = RESOURCES[part.kind], run.target.namespace
        try:
            obj = ctx.cluster.get(resource, part.name, namespace)
        except NotFound:
            checks.append(failed("workload-restored", f"{part.kind} {namespace}/{part.name} is gone", part.ref))
            continue
        current = rollouts.template_of(obj)
        if rollouts.same(current, with_image(kept["template"], kept["container"], run.image)) and \
                not rollouts.same(current, kept["template"]):
            ctx.cluster.patch(resource, part.name, [
                {"op": "test", "path": "/spec/template", "value": current},
                {"op": "replace", "path": "/spec/template", "value": kept["template"]},
            ], namespace=namespace, patch_type="json")
            note(ctx, "rollback.workload", "ok", f"{part.kind} {namespace}/{part.name}: its saved template is back",
                 kind="mutation")
        elif not rollouts.same(current, kept["template"]):
            checks.append(failed("workload-restored", f"{part.kind} {namespace}/{part.name} has neither the run's "
                                 "template nor the saved one: someone changed it; left as it is", part.ref))
            continue
        checks.append(_followed(ctx, part, kept["template"], what="runs its saved template again",
                                name="workload-restored"))
    return checks


def verify(ctx: StepContext, *, before_only: bool = False) -> list[Check]:
    """Each changed part's rollout of the new template is complete."""
    run = ctx.run
    checks = []
    for part in run.target.parts:
        if before_only and not part.before:
            continue
        kept = _kept(ctx).get(part.ref)
        if kept is None:
            checks.append(failed("workload-rolled-out", f"{part.kind} {run.target.namespace}/{part.name} was not "
                                 "upgraded by this run", part.ref))
            continue
        wanted = with_image(kept["template"], kept["container"], run.image)
        obj = {**ctx.cluster.get(RESOURCES[part.kind], part.name, run.target.namespace), "kind": part.kind}
        state = rollouts.rollout_state(obj, wanted)
        what = f"{part.kind} {run.target.namespace}/{part.name}"
        checks.append(passed("workload-rolled-out", f"{what} runs {run.image}: {rollouts.counts(obj)}", part.ref)
                      if state == rollouts.COMPLETE else
                      failed("workload-rolled-out", f"{what}: {state} ({rollouts.counts(obj)})", part.ref))
    return checks


def _followed(ctx: StepContext, part: Part, want: dict[str, Any], *, what: str,
              name: str = "workload-rolled-out") -> Check:
    namespace = ctx.run.target.namespace
    read = rollouts.reader(ctx.cluster, RESOURCES[part.kind], namespace, part.name)
    state, last = rollouts.follow(read, want, clock=ctx.clock, timeout=ctx.settings.ready_timeout,
                                  interval=ctx.settings.poll_interval)
    label = f"{part.kind} {namespace}/{part.name}"
    if state == rollouts.COMPLETE:
        return passed(name, f"{label} {what}: {rollouts.counts(last)}", part.ref)
    if state == rollouts.CHANGED:
        return failed(name, f"{label} was changed by someone else during the step", part.ref)
    why = (shown(str(rollouts.progressing(last).get("message") or "")) if state == rollouts.STUCK
           else f"not finished in {ctx.settings.ready_timeout:g}s")
    return failed(name, f"{label} did not roll out ({rollouts.counts(last)}): {why}", part.ref)
