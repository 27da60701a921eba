"""The mutations of the upgrade steps, each made only when the cluster still needs it.

Every function reads the DaemonSet (or takes the pod it was given), returns ``False``
without writing when the change is already there, and otherwise writes once and records
the mutation. Only the image is patched with a ``resourceVersion`` precondition (the
strategy must still be OnDelete when the new template lands: a race with RollingUpdate
would roll every node); a 409 re-reads and decides again. Pods are deleted with their
``uid`` as precondition, so a replacement with the same name is never deleted. Nothing
here touches the nodeSelector or affinity: they stay as the owners wrote them.
"""

from __future__ import annotations

from typing import Any

from runbooks.cluster.resources import DAEMONSETS, PODS
from runbooks.daemonset.checks import listing
from runbooks.engine.recording import note
from runbooks.engine.steps import StepContext
from runbooks.errors import Conflict, NotFound, plural
from runbooks.inventory import PluginPod
from runbooks.inventory.reading import images_of
from runbooks.templates import same

MAX_CONFLICTS = 5
ON_DELETE = {"type": "OnDelete"}


class StrategyChanged(RuntimeError):
    """The DaemonSet is no longer OnDelete: setting the image now would roll every node."""


def same_strategy(current: dict[str, Any], wanted: dict[str, Any]) -> bool:
    kind = wanted.get("type") or "RollingUpdate"
    if (current.get("type") or "RollingUpdate") != kind:
        return False
    return kind == "OnDelete" or current.get("rollingUpdate") == wanted.get("rollingUpdate") or not wanted.get("rollingUpdate")


def _ds(ctx: StepContext) -> dict[str, Any]:
    target = ctx.run.target
    ds: dict[str, Any] = ctx.cluster.get(DAEMONSETS, target.name, target.namespace)
    return ds


def set_strategy(ctx: StepContext, wanted: dict[str, Any], *, step: str) -> bool:
    """``spec.updateStrategy`` := ``wanted`` (a JSON merge patch; absent fields removed)."""
    target = ctx.run.target
    current = (_ds(ctx).get("spec") or {}).get("updateStrategy") or {}
    if same_strategy(current, wanted):
        note(ctx, step, "info", f"updateStrategy is already {wanted.get('type')}", strategy=current)
        return False
    body = {"spec": {"updateStrategy": {"type": None, "rollingUpdate": None, **wanted}}}
    ctx.cluster.patch(DAEMONSETS, target.name, body, namespace=target.namespace, patch_type="merge")
    note(ctx, step, "ok", kind="mutation", detail=f"updateStrategy {current.get('type', 'RollingUpdate')} -> {wanted.get('type')}",
         before=current, after=wanted)
    return True


def set_image(ctx: StepContext, container: str, image: str, *, step: str) -> bool:
    """The container's image := ``image``, only while the DaemonSet is OnDelete."""
    target = ctx.run.target
    for _ in range(MAX_CONFLICTS):
        ds = _ds(ctx)
        spec = ds.get("spec") or {}
        before = images_of((spec.get("template") or {}).get("spec") or {}).get(container)
        if before == image:
            note(ctx, step, "info", f"container {container} already has image {image}")
            return False
        if ((spec.get("updateStrategy") or {}).get("type")) != "OnDelete":
            raise StrategyChanged(
                f"{target.ref} is no longer OnDelete (someone changed its updateStrategy): the image was not set"
            )
        body = {"spec": {"template": {"spec": {"containers": [{"name": container, "image": image}]}}}}
        try:
            ctx.cluster.patch(DAEMONSETS, target.name, body, namespace=target.namespace,
                              resource_version=(ds.get("metadata") or {}).get("resourceVersion"))
        except Conflict:
            continue
        note(ctx, step, "ok", kind="mutation", detail=f"container {container}: {before} -> {image}", container=container, before=before, after=image)
        return True
    raise Conflict(f"cannot patch {target.ref}: it kept changing ({MAX_CONFLICTS} conflicts); try again")


def set_template(ctx: StepContext, template: dict[str, Any], *, step: str, summary: str) -> bool:
    """``spec.template`` := ``template`` whole (a JSON patch with a ``resourceVersion`` test), only
    while the DaemonSet is OnDelete; the template the server stored is kept in the run's progress
    (``new_template``) for the checks that follow."""
    target = ctx.run.target
    for _ in range(MAX_CONFLICTS):
        ds = _ds(ctx)
        spec = ds.get("spec") or {}
        current = spec.get("template") or {}
        if same(current, template):
            note(ctx, step, "info", f"the template already has {summary}")
            if "new_template" not in ctx.run.progress:
                ctx.run = ctx.save_progress({"new_template": current})
            return False
        if ((spec.get("updateStrategy") or {}).get("type")) != "OnDelete":
            raise StrategyChanged(
                f"{target.ref} is no longer OnDelete (someone changed its updateStrategy): the template was not changed"
            )
        body = [{"op": "replace", "path": "/spec/template", "value": template}]
        version = (ds.get("metadata") or {}).get("resourceVersion")
        try:  # first as a dry run: the template as the server would store it (quantities, defaults,
            # webhooks) is saved before the write, so a resumed canary compares with the server's form
            dry = ctx.cluster.patch(DAEMONSETS, target.name, body, namespace=target.namespace, patch_type="json",
                                    resource_version=version, dry_run=True)
            ctx.run = ctx.save_progress({"new_template": (dry.get("spec") or {}).get("template") or template})
            answer = ctx.cluster.patch(DAEMONSETS, target.name, body, namespace=target.namespace, patch_type="json",
                                       resource_version=version)
        except Conflict:
            continue
        stored = (answer.get("spec") or {}).get("template") or template
        ctx.run = ctx.save_progress({"new_template": stored})
        note(ctx, step, "ok", kind="mutation", detail=f"template: {summary}",
             before=images_of(current.get("spec") or {}), after=images_of(stored.get("spec") or {}))
        return True
    raise Conflict(f"cannot patch {target.ref}: it kept changing ({MAX_CONFLICTS} conflicts); try again")


def restore_template(ctx: StepContext, template: dict[str, Any], patch: dict[str, Any], *, step: str, source: str) -> bool:
    """``spec.template`` := ``template`` by the strategic merge ``patch`` (``{"spec": {"template":
    {..., "$patch": "replace"}}}``, what ``kubectl rollout undo`` applies)."""
    target = ctx.run.target
    current = (_ds(ctx).get("spec") or {}).get("template") or {}
    if current == template:
        note(ctx, step, "info", f"the template is already the previous one ({source})")
        return False
    ctx.cluster.patch(DAEMONSETS, target.name, patch, namespace=target.namespace)
    note(ctx, step, "ok", kind="mutation", detail=f"template restored from {source}",
         before=images_of(current.get("spec") or {}), after=images_of(template.get("spec") or {}))
    return True


def undo_patch(template: dict[str, Any]) -> dict[str, Any]:
    """The patch that puts ``template`` back whole, as a ControllerRevision's ``data`` holds it."""
    return {"spec": {"template": {**template, "$patch": "replace"}}}


def _delete(ctx: StepContext, pod: PluginPod) -> str:
    """Delete exactly this pod (uid precondition): ``""`` when deleted, else why not."""
    if pod.deleting:
        return "already terminating"
    try:
        ctx.cluster.delete(PODS, pod.name, namespace=ctx.run.target.namespace, uid=pod.uid)
    except (NotFound, Conflict):
        return "already replaced"
    return ""


def delete_pod(ctx: StepContext, pod: PluginPod, *, step: str, why: str) -> bool:
    """Delete exactly this pod (uid precondition); ``False`` if it is gone or already terminating."""
    not_deleted = _delete(ctx, pod)
    if not_deleted:
        verb = "is" if pod.deleting else "was"
        note(ctx, step, "info", f"pod {pod.name} on {pod.node} {verb} {not_deleted}", node=pod.node, pod=pod.name)
        return False
    note(ctx, step, "ok", kind="mutation", detail=f"deleted pod {pod.name} on {pod.node} ({why})", node=pod.node, pod=pod.name, uid=pod.uid,
         revision=pod.revision_hash)
    return True


def delete_pods(ctx: StepContext, pods: list[PluginPod], *, step: str, why: str) -> list[PluginPod]:
    """Delete each of ``pods`` as :func:`delete_pod` does (uid precondition), recording the
    batch as one entry (its pods, nodes, uids and revisions in the evidence) rather than one
    entry per pod: a wave of 250 nodes is one line of the trail. The pods deleted."""
    if len(pods) == 1:
        return pods if delete_pod(ctx, pods[0], step=step, why=why) else []
    deleted: list[PluginPod] = []
    skipped: list[PluginPod] = []
    for pod in pods:
        # a pod replaced meanwhile: the caller sees the new one in its next snapshot
        (skipped if _delete(ctx, pod) else deleted).append(pod)
    if deleted:
        nodes = [p.node for p in deleted]
        note(ctx, step, "ok", kind="mutation", detail=f"deleted the plugin pods on {plural(len(nodes), 'node')}: "
             f"{listing(nodes)} ({why})", nodes=nodes,
             pods=[{"pod": p.name, "node": p.node, "uid": p.uid, "revision": p.revision_hash} for p in deleted])
    if skipped:
        note(ctx, step, "info", f"{plural(len(skipped), 'pod')} already terminating or replaced: "
             f"{listing([p.name for p in skipped])}", nodes=[p.node for p in skipped])
    return deleted
