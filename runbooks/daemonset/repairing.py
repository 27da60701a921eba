"""A repair run: the workload pods a plugin's outage left stuck, deleted so their controllers
recreate them (``repair <target>``), :class:`RepairSteps` for the run engine.

After a kubelet restart or a node reboot, pods asking for the plugin's resource that the
kubelet admitted before the plugin registered again fail with ``UnexpectedAdmissionError``
and stay Failed; pods scheduled while the node had no allocatable devices wait Pending
("Insufficient nvidia.com/gpu"). The guide's fix, once the plugin is healthy again, is to
delete them so their controllers make new ones. As a run:

- the plan (at request time, read-only): the plugin must be healthy on every node (each
  node's plugin pod Running and Ready, its devices allocatable again) else the request is
  refused; the stuck pods are those
  asking for one of ``gpu_resources`` that failed with ``UnexpectedAdmissionError`` on the
  plugin's nodes (those with a controller are deleted; bare pods, which nothing would
  recreate, are listed only), and the Pending ones the scheduler could not place for lack of
  that resource (listed only: the scheduler places them once devices are free). The plan is stored with the run
  (``run.change``), so the approvers approve exactly the pods deleted;
- apply: each listed pod read again and deleted only if it is still that pod and still
  stuck (its uid and resourceVersion as preconditions: a new pod of the same name, or one
  that started meanwhile, is never touched); the engine lets the run delete those pods and
  write nothing else;
- verify: every deleted pod is gone, and each controller's pods are Running and Ready again;
- rollback: nothing to restore (a deleted failed pod is what its controller replaces).
"""

from __future__ import annotations

import re
from typing import Any

from runbooks.characters import shown
from runbooks.cluster import Cluster
from runbooks.cluster.resources import NODES, PODS
from runbooks.daemonset.checks import listing
from runbooks.daemonset.observing import observe, wait_for
from runbooks.engine.recording import failed, note, note_checks, passed, result
from runbooks.engine.refusals import Refused
from runbooks.engine.runs import Run
from runbooks.engine.steps import Check, StepContext, StepResult, StepSettings
from runbooks.errors import Conflict, Forbidden, NotFound, plural
from runbooks.inventory.models import Node
from runbooks.inventory.reading import controller_of, node_from, pod_from, requested

STUCK_REASON = "UnexpectedAdmissionError"


def _owner(obj: dict[str, Any]) -> dict[str, str]:
    ref = controller_of(obj)
    return {"kind": str(ref.get("kind")), "name": str(ref.get("name")), "uid": str(ref.get("uid"))} if ref else {}


def _insufficient(message: str, resource: str) -> bool:
    """The scheduler's ``Insufficient <resource>`` for exactly that resource (not ``<resource>.shared``)."""
    return re.search(rf"Insufficient {re.escape(resource)}(?![\w./-])", message) is not None


def _why_stuck(obj: dict[str, Any], nodes: set[str], resources: tuple[str, ...]) -> tuple[str, bool]:
    """``(why the pod counts as stuck by the plugin's outage, whether a repair deletes it)``;
    ``("", False)`` when it does not count. A pod that failed admission on the plugin's nodes
    is deleted; a Pending pod waiting for the resource is listed only: the scheduler places it
    once devices are free (deleting it would gain nothing, and may hit one about to start)."""
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    wanted = requested(spec, resources)
    if not wanted or (obj.get("metadata") or {}).get("deletionTimestamp"):
        return "", False
    node = str(spec.get("nodeName") or "")
    if status.get("phase") == "Failed" and status.get("reason") == STUCK_REASON and node in nodes:
        return f"failed admission on {node} ({STUCK_REASON})", True
    if status.get("phase") == "Pending" and not node:
        for cond in status.get("conditions") or []:
            message = str(cond.get("message") or "")
            if cond.get("type") == "PodScheduled" and cond.get("status") == "False" and \
                    any(_insufficient(message, r) for r in wanted):
                return f"pending: {shown(message[:160])}", False
    return "", False


def _stuck(cluster: Cluster, nodes: set[str], resources: tuple[str, ...]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for phase in ("Failed", "Pending"):
        for obj in cluster.list_objects(PODS, field_selector=f"status.phase={phase}"):
            why, deletable = _why_stuck(obj, nodes, resources)
            if why:
                meta = obj.get("metadata") or {}
                found.append({"namespace": meta.get("namespace", ""), "name": meta.get("name", ""),
                              "uid": meta.get("uid", ""), "node": (obj.get("spec") or {}).get("nodeName") or "",
                              "owner": _owner(obj), "why": why, "deletable": deletable})
    return sorted(found, key=lambda p: (p["namespace"], p["name"]))


def _ref(pod: dict[str, Any]) -> str:
    owner = pod.get("owner") or {}
    by = f" ({owner['kind']} {owner['name']})" if owner else ""
    return f"{pod['namespace']}/{pod['name']}{by}"


def plan_lines(change: dict[str, Any]) -> tuple[list[str], list[str]]:
    """``(the pods a repair deletes, the pods it lists only, each with why)`` of its stored plan,
    as people read them (``ml-team/a-1 (ReplicaSet a)``)."""
    def kept(pod: dict[str, Any]) -> str:
        why = "pending: the scheduler places it" if str(pod.get("why", "")).startswith("pending") else "no controller"
        return f"{_ref(pod)} ({why})"
    return [_ref(p) for p in change.get("delete") or []], [kept(p) for p in change.get("listed") or []]


class RepairSteps:
    """Plan, apply and verify of a repair run, as the run engine calls them."""

    def plan(self, cluster: Cluster, run: Run, settings: StepSettings) -> tuple[Run, str]:
        try:
            snap = observe(cluster, run.target.namespace, run.target.name)
        except NotFound as exc:
            raise Refused(f"daemonset {run.target.ref} does not exist on {cluster.context}") from exc
        resources = tuple(settings.gpu_resources)
        offered = {n.name: n for n in cluster.list_objects(NODES, project=lambda o: node_from(o, resources))}
        unhealthy = [n for n in snap.nodes if (p := snap.pod_on(n)) is None or p.deleting
                     or not (p.phase == "Running" and p.ready) or _withheld(offered.get(n))]
        if not snap.nodes:
            raise Refused(f"{run.target.ref} runs on no node: nothing to repair")
        if unhealthy:
            raise Refused(f"the plugin {run.target.ref} is not healthy on {listing(unhealthy)} yet: a pod recreated "
                          "now would fail again; repair once it is Running and Ready there (`verify` shows it)")
        pods = _stuck(cluster, set(snap.nodes), resources)
        delete = [p for p in pods if p["owner"] and p["deletable"]]
        bare = [p for p in pods if not (p["owner"] and p["deletable"])]
        if not delete:
            more = (f"; left as they are: {listing([_ref(p) for p in bare])} (no controller would recreate a bare "
                    "pod; a pending one is placed by the scheduler once devices are free)" if bare else "")
            raise Refused(f"nothing to repair on the nodes of {run.target.ref}: no pod with a controller failed "
                          f"admission there after the plugin's outage{more}")
        change = {"delete": delete, "listed": bare, "nodes": list(snap.nodes)}
        deleting, listed = plan_lines(change)
        summary = (f"delete {plural(len(delete), 'stuck pod')} so their controllers recreate them: {listing(deleting)}"
                   + (f"; listed only: {listing(listed)}" if listed else ""))
        return run.model_copy(update={"change": change}), summary

    def check_request(self, cluster: Cluster, run: Run, settings: StepSettings) -> list[Check]:
        """Each deletion made as a server-side dry run first (authorized like the deletion), so a
        missing RBAC rule refuses the request, naming it, before anyone approves."""
        for pod in run.change.get("delete") or []:
            try:
                cluster.delete(PODS, pod["name"], namespace=pod["namespace"], uid=pod["uid"], dry_run=True)
            except Forbidden as exc:
                return [failed("repair-allowed", str(exc), _ref(pod))]
            except (NotFound, Conflict):
                continue  # gone meanwhile: apply says so
        return [passed("repair-allowed", f"{plural(len(run.change.get('delete') or []), 'pod')} may be deleted (a dry run "
                       f"of each), {len(run.change.get('listed') or [])} listed only")]

    def apply(self, ctx: StepContext) -> StepResult:
        """Each listed pod deleted, if it is still that pod and still stuck (read again; the
        deletion carries its uid and resourceVersion, so a pod that changed since is left)."""
        run = ctx.run
        if "repair_started_at" not in run.progress:
            ctx.run = ctx.save_progress({"repair_started_at": ctx.cluster.server_time().isoformat()})
        nodes, resources = set(run.change.get("nodes") or []), tuple(ctx.settings.gpu_resources)
        deleted = list(ctx.run.progress.get("deleted") or [])
        for pod in run.change.get("delete") or []:
            now = _current(ctx.cluster, pod)
            if now is None:
                note(ctx, "repair.delete-pod", "info", f"{_ref(pod)} is gone already", pod=_ref(pod))
                continue
            if not _why_stuck(now, nodes, resources)[1]:
                note(ctx, "repair.delete-pod", "info", f"{_ref(pod)} is no longer stuck: left as it is", pod=_ref(pod))
                continue
            try:
                ctx.cluster.delete(PODS, pod["name"], namespace=pod["namespace"], uid=pod["uid"],
                                   resource_version=(now.get("metadata") or {}).get("resourceVersion"))
            except (NotFound, Conflict):
                note(ctx, "repair.delete-pod", "info", f"{_ref(pod)} changed or went meanwhile: left", pod=_ref(pod))
                continue
            deleted.append(f"{pod['namespace']}/{pod['name']}")
            ctx.run = ctx.save_progress({"deleted": deleted})
            note(ctx, "repair.delete-pod", "ok", kind="mutation", detail=f"deleted {_ref(pod)}: {pod['why']}",
                 pod=f"{pod['namespace']}/{pod['name']}", uid=pod["uid"], node=pod["node"])
        return StepResult(ok=True)

    def verify_all(self, ctx: StepContext) -> StepResult:
        """The pods this repair deleted are gone, and every live pod of their controllers runs
        (none live: scaled down, or finished)."""
        gone_by_us = set(ctx.run.progress.get("deleted") or [])
        deleted = [p for p in ctx.run.change.get("delete") or [] if f"{p['namespace']}/{p['name']}" in gone_by_us]
        owners = {p["owner"]["uid"]: p for p in deleted}
        settings = ctx.settings
        last: dict[str, list[str]] = {}

        def back() -> bool | None:
            left = [_ref(p) for p in deleted if _current(ctx.cluster, p) is not None]
            waiting = []
            for uid, pod in owners.items():
                mine = [o for o in ctx.cluster.list_objects(PODS, namespace=pod["namespace"])
                        if _owner(o).get("uid") == uid and not _terminal(o)]
                if not all(_running(o) for o in mine):
                    waiting.append(f"{pod['owner']['kind']} {pod['namespace']}/{pod['owner']['name']}")
            last.update(left=left, waiting=waiting)
            return True if not left and not waiting else None

        wait_for(ctx.clock, timeout=settings.ready_timeout, interval=settings.poll_interval, probe=back)
        gone = (failed("stuck-pods-deleted", f"still there: {listing(last['left'])}", "stuck pods", pods=last["left"])
                if last["left"] else passed("stuck-pods-deleted", f"{plural(len(deleted), 'stuck pod')} deleted", "stuck pods"))
        running = (failed("workloads-running", f"not all Running and Ready after {settings.ready_timeout:g}s: "
                          f"{listing(last['waiting'])}", "workloads", waiting=last["waiting"]) if last["waiting"] else
                   passed("workloads-running", f"the pods of {plural(len(owners), 'controller')} are Running and Ready again",
                          "workloads"))
        checks = [gone, running]
        note_checks(ctx, "verify", checks)
        return result(checks, what=f"the repair of {ctx.run.target.ref}")

    def rollback(self, ctx: StepContext) -> StepResult:
        deleted = list(ctx.run.progress.get("deleted") or [])
        what = (f"it deleted {plural(len(deleted), 'stuck pod')} ({listing(deleted)}), which their controllers recreate"
                if deleted else "it deleted no pod")
        note(ctx, "rollback.repair", "info", f"a repair has nothing to put back: {what}")
        return StepResult(ok=True, reason=f"nothing to roll back: {what}")


def _withheld(node: Node | None) -> bool:
    """A GPU node whose devices are not offered yet (capacity without allocatable: the plugin has
    not registered again)."""
    return node is not None and any(c > 0 and node.allocatable.get(r, 0) == 0 for r, c in node.capacity.items())


def _current(cluster: Cluster, pod: dict[str, Any]) -> dict[str, Any] | None:
    """The listed pod as it is now, None once it is gone (a new pod of its name is another one)."""
    found = cluster.list_objects(PODS, namespace=pod["namespace"], field_selector=f"metadata.name={pod['name']}")
    return next((o for o in found if (o.get("metadata") or {}).get("uid") == pod["uid"]), None)


def _terminal(obj: dict[str, Any]) -> bool:
    return (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed") or \
        bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def _running(obj: dict[str, Any]) -> bool:
    pod = pod_from(obj)
    return pod.phase == "Running" and pod.ready

