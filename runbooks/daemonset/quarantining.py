"""Quarantine and release runs: one node taken out of a plugin DaemonSet's reach while the others
keep working (``quarantine <target> node=<n>``), and given back (``release <target> node=<n>``):
:class:`QuarantineSteps` and :class:`ReleaseSteps` for the run engine.

A quarantine, once approved:

1. saves the pre-run state (the DaemonSet's ``updateStrategy``, template ``affinity`` and
   :data:`~runbooks.daemonset.quarantine_marks.SAVED` annotation; the node's quarantine label,
   annotation and ``spec.unschedulable``) and the baseline of every other node (its plugin pod's
   uid, its GPUs allocatable);
2. patches the DaemonSet once (a JSON patch with the resourceVersion as precondition): the
   template's required node affinity gains ``<key> DoesNotExist``, ``updateStrategy`` becomes
   ``OnDelete``, and the annotation keeps what both were (the first quarantine of the DaemonSet
   only; a second node's quarantine finds them there and changes nothing in the DaemonSet);
3. patches the node once (a merge patch): the label, the annotation saying whether this run
   cordons it, and the cordon;
4. verifies: the node's plugin pod is gone (the DaemonSet controller deletes it), every other
   node keeps the very pod it had (same uid: not restarted) and the GPUs it offered, and tells
   who is affected: the pods using the node's GPUs, listed in the run's thread.

Why ``OnDelete``: the new term changes the pod template, so its hash; under ``RollingUpdate`` the
controller would replace the pod on every node. Under ``OnDelete`` it replaces none, but still
deletes the pod from a node that no longer matches the affinity. The last release writes back the
template exactly as it was: its hash is the old revision's again (the controller renumbers that
ControllerRevision rather than making a new one), so every other node's pod is current, and the
strategy put back rolls nothing.

A release, once approved, removes the node's label and annotation and uncordons it if its
quarantine cordoned it; when no other node stays quarantined from the DaemonSet it also writes
back the saved ``updateStrategy`` and ``affinity`` and removes the annotation. It verifies that
the node runs a Ready plugin pod again and that the other nodes kept theirs. Either run's rollback
writes back its own saved pre-run state.
"""

from __future__ import annotations

import json
from typing import Any

from runbooks.cluster import Cluster
from runbooks.cluster.resources import DAEMONSETS, NODES
from runbooks.daemonset.checks import listing
from runbooks.daemonset.draining import device_pods
from runbooks.daemonset.observing import Snapshot, observe, wait_for
from runbooks.daemonset.quarantine_marks import (
    ON_DELETE,
    SAVED,
    BadMark,
    escape,
    label_key,
    node_mark,
    saved_of,
    with_term,
    without_term,
)
from runbooks.engine.recording import failed, note, note_checks, passed, result, warned
from runbooks.engine.refusals import Refused
from runbooks.engine.runs import Run
from runbooks.engine.steps import Check, StepContext, StepResult, StepSettings
from runbooks.errors import Forbidden, NotFound, plural
from runbooks.inventory.reading import controller_of, node_from

State = dict[str, Any]


# ------------------------------------------------------------------ reading
def ds_state(ds: dict[str, Any]) -> State:
    spec = ds.get("spec") or {}
    return {"affinity": ((spec.get("template") or {}).get("spec") or {}).get("affinity"),
            "updateStrategy": spec.get("updateStrategy") or {},
            "saved": ((ds.get("metadata") or {}).get("annotations") or {}).get(SAVED)}


def node_state(node: dict[str, Any], key: str) -> State:
    meta = node.get("metadata") or {}
    return {"label": (meta.get("labels") or {}).get(key), "annotation": (meta.get("annotations") or {}).get(key),
            "unschedulable": bool((node.get("spec") or {}).get("unschedulable"))}


def _read_node(cluster: Cluster, node: str) -> dict[str, Any]:
    try:
        obj: dict[str, Any] = cluster.get(NODES, node)
    except NotFound as exc:
        raise Refused(f"node {node} does not exist on {cluster.context}: `inventory` lists the nodes") from exc
    return obj


def _observe(cluster: Cluster, run: Run) -> Snapshot:
    try:
        return observe(cluster, run.target.namespace, run.target.name)
    except NotFound as exc:
        raise Refused(f"daemonset {run.target.ref} does not exist on {cluster.context}") from exc


def _key(run: Run) -> str:
    try:
        return label_key(run.target.namespace, run.target.name)
    except BadMark as exc:
        raise Refused(str(exc)) from exc


def quarantined_nodes(cluster: Cluster, key: str) -> list[str]:
    """The nodes carrying the target's quarantine label."""
    return sorted(str((n.get("metadata") or {}).get("name")) for n in cluster.list_objects(NODES, label_selector=key))


def _baseline(cluster: Cluster, snap: Snapshot, node: str, resources: tuple[str, ...]) -> State:
    """Every other node's plugin pod uid and GPUs allocatable, as the run found them."""
    others = [n for n in snap.nodes if n != node]
    pods = {n: (p.uid if (p := snap.pod_on(n)) is not None else None) for n in others}
    offered = {n.name: dict(n.allocatable) for n in cluster.list_objects(NODES, project=lambda o: node_from(o, resources))}
    return {"pods": pods, "allocatable": {n: offered.get(n, {}) for n in others}}


# ------------------------------------------------------------------ writing
def write_ds(ctx: StepContext, wanted: State, *, step: str, why: str) -> bool:
    """The DaemonSet's affinity, strategy and saved annotation := ``wanted`` in one JSON patch
    (with the resourceVersion read as precondition); False when they are so already."""
    target = ctx.run.target
    ds = ctx.cluster.get(DAEMONSETS, target.name, target.namespace)
    current = ds_state(ds)
    if current == wanted:
        note(ctx, step, "info", f"{target.ref}: {why} already")
        return False
    ops: list[dict[str, Any]] = []
    if current["affinity"] != wanted["affinity"]:
        if wanted["affinity"] is None:
            ops.append({"op": "remove", "path": "/spec/template/spec/affinity"})
        else:
            ops.append({"op": "add", "path": "/spec/template/spec/affinity", "value": wanted["affinity"]})
    if current["updateStrategy"] != wanted["updateStrategy"]:
        ops.append({"op": "add", "path": "/spec/updateStrategy", "value": wanted["updateStrategy"]})
    if current["saved"] != wanted["saved"]:
        annotations = (ds.get("metadata") or {}).get("annotations")
        if wanted["saved"] is None:
            ops.append({"op": "remove", "path": f"/metadata/annotations/{escape(SAVED)}"})
        elif annotations is None:
            ops.append({"op": "add", "path": "/metadata/annotations", "value": {SAVED: wanted["saved"]}})
        else:
            ops.append({"op": "add", "path": f"/metadata/annotations/{escape(SAVED)}", "value": wanted["saved"]})
    rv = (ds.get("metadata") or {}).get("resourceVersion")
    ctx.cluster.patch(DAEMONSETS, target.name, ops, namespace=target.namespace, patch_type="json", resource_version=rv)
    note(ctx, step, "ok", kind="mutation", detail=f"{target.ref}: {why}", before=current, after=wanted)
    return True


def write_node(ctx: StepContext, node: str, key: str, wanted: State, *, step: str, why: str) -> bool:
    """The node's quarantine label, annotation and cordon := ``wanted`` in one merge patch."""
    current = node_state(ctx.cluster.get(NODES, node), key)
    body: dict[str, Any] = {}
    if current["label"] != wanted["label"]:
        body.setdefault("metadata", {})["labels"] = {key: wanted["label"]}
    if current["annotation"] != wanted["annotation"]:
        body.setdefault("metadata", {})["annotations"] = {key: wanted["annotation"]}
    if current["unschedulable"] != wanted["unschedulable"]:
        body["spec"] = {"unschedulable": True if wanted["unschedulable"] else None}
    if not body:
        note(ctx, step, "info", f"{node}: {why} already", node=node)
        return False
    ctx.cluster.patch(NODES, node, body, patch_type="merge")
    note(ctx, step, "ok", kind="mutation", detail=f"{node}: {why}", node=node, before=current, after=wanted)
    return True


def _dry_run(cluster: Cluster, run: Run, key: str, *, ds: bool) -> Check:
    """The run's writes made as server-side dry runs (authorized like the writes): a missing
    RBAC rule refuses the request, naming it, before anyone approves."""
    try:
        cluster.patch(NODES, run.node, {"metadata": {"labels": {key: run.id}}}, patch_type="merge", dry_run=True)
        if ds:
            cluster.patch(DAEMONSETS, run.target.name, {"metadata": {"annotations": {SAVED: "{}"}}},
                          namespace=run.target.namespace, patch_type="merge", dry_run=True)
    except Forbidden as exc:
        return failed(f"{run.kind.value}-allowed", str(exc), run.node)
    return passed(f"{run.kind.value}-allowed", f"the node{' and the DaemonSet' if ds else ''} may be patched "
                  "(a server-side dry run of each)", run.node)


# ------------------------------------------------------------------ checks
def _workloads(cluster: Cluster, node: str, settings: StepSettings) -> list[str]:
    return [f"{p.ref} ({p.controller or 'no controller'})" for p in device_pods(cluster, node, settings.gpu_resources)]


def others_untouched(cluster: Cluster, run: Run, baseline: State, settings: StepSettings) -> list[Check]:
    """Every other node still runs the very plugin pod it had (same uid) and offers the GPUs it did."""
    snap = observe(cluster, run.target.namespace, run.target.name)
    pods: dict[str, str | None] = baseline.get("pods") or {}
    moved = [n for n, uid in pods.items() if (p := snap.pod_on(n)) is None or p.uid != uid or p.deleting]
    offered = {n.name: dict(n.allocatable)
               for n in cluster.list_objects(NODES, project=lambda o: node_from(o, tuple(settings.gpu_resources)))}
    before: dict[str, dict[str, int]] = baseline.get("allocatable") or {}
    dropped = [f"{n} ({before[n]} -> {offered.get(n, {})})" for n in before if offered.get(n, {}) != before[n]]
    scope = f"{plural(len(pods), 'other node')}"
    return [
        failed("others-untouched", f"the plugin pod was replaced or removed on {listing(moved)}", scope, nodes=moved)
        if moved else passed("others-untouched", f"the plugin pods of the {scope} are the ones they had (same uids: "
                             "none restarted)", scope),
        failed("gpus-unchanged", f"GPUs allocatable changed on {listing(dropped)}", scope, nodes=dropped)
        if dropped else passed("gpus-unchanged", f"the {scope} offer the GPUs they did", scope),
    ]


def _pod_gone(ctx: StepContext) -> Check:
    run, settings = ctx.run, ctx.settings

    def gone() -> bool | None:
        return True if observe(ctx.cluster, run.target.namespace, run.target.name).pod_on(run.node) is None else None

    if wait_for(ctx.clock, timeout=settings.ready_timeout, interval=settings.poll_interval, probe=gone):
        return passed("node-pod-gone", f"{run.target.ref} runs no pod on {run.node} any more", run.node)
    return failed("node-pod-gone", f"the plugin pod on {run.node} is still there after {settings.ready_timeout:g}s",
                  run.node)


def _pods_back(ctx: StepContext) -> list[Check]:
    """The run's node runs a Running and Ready plugin pod again, and so does each node whose pod
    the last release renews (made from the quarantine's template when its node was released)."""
    run, settings = ctx.run, ctx.settings
    renewed = [n for n in run.progress.get("renewed") or [] if n != run.node]
    last: dict[str, str] = {}

    def ready() -> bool | None:
        snap = observe(ctx.cluster, run.target.namespace, run.target.name)
        for node in (run.node, *renewed):
            pod = snap.pod_on(node)
            last[node] = "no pod" if pod is None else f"{pod.name} is {pod.phase}, {'Ready' if pod.ready else 'not Ready'}"
            if pod is None or pod.deleting or not (pod.phase == "Running" and pod.ready) or \
                    (node in renewed and pod.uid == (run.progress.get("baseline") or {}).get("pods", {}).get(node)):
                return None
        return True

    done = wait_for(ctx.clock, timeout=settings.ready_timeout, interval=settings.poll_interval, probe=ready)
    checks = [passed("node-pod-back", f"{run.target.ref} runs again on {run.node}: {last[run.node]}", run.node)
              if done else failed("node-pod-back", f"no Ready plugin pod on {run.node} after {settings.ready_timeout:g}s "
                                  f"({last.get(run.node, 'not read')})", run.node)]
    if renewed:
        scope = listing(renewed)
        states = "; ".join(f"{n}: {last.get(n, 'not read')}" for n in renewed)
        checks.append(passed("renewed-ready", f"the pods made from the quarantine's template on {scope} were replaced "
                             "by pods of the restored template, Running and Ready", scope) if done else
                      failed("renewed-ready", f"not all replaced and Ready after {settings.ready_timeout:g}s: {states}",
                             scope))
    return checks


def _told(ctx: StepContext) -> Check:
    pods = _workloads(ctx.cluster, ctx.run.node, ctx.settings)
    if not pods:
        return passed("workloads-told", f"no pod uses the GPUs of {ctx.run.node}", ctx.run.node, pods=[])
    uses = "uses" if len(pods) == 1 else "use"
    return warned("workloads-told", f"{plural(len(pods), 'pod')} {uses} the GPUs of {ctx.run.node} and keep running there "
                  f"(cordoned: nothing new is scheduled, and no GPU is allocated without its plugin): {listing(pods, 10)}",
                  ctx.run.node, pods=pods)


def _restore(ctx: StepContext, *, what: str) -> StepResult:
    """Either run's rollback: the DaemonSet (when this run changed it) and the node as the run found them."""
    run = ctx.run
    saved = run.progress.get("saved")
    if not saved:
        note(ctx, f"rollback.{run.kind.value}", "info", f"the {what} changed nothing yet: nothing to put back")
        return StepResult(ok=True, reason=f"nothing to roll back: the {what} changed nothing")
    key = saved["key"]
    later = set(quarantined_nodes(ctx.cluster, key)) - {run.node} - set(saved.get("quarantined") or [])
    if later:
        note(ctx, "rollback.daemonset", "info", f"{listing(sorted(later))} were quarantined since: the DaemonSet's "
             "template keeps its term")
    else:
        write_ds(ctx, saved["ds"], step="rollback.daemonset", why="template affinity, updateStrategy and "
                 "annotation as they were before the run")
    write_node(ctx, run.node, key, saved["node"], step="rollback.node-marks", why="quarantine label, annotation and "
               "cordon as they were before the run")
    return StepResult(ok=True)


def _save_before(ctx: StepContext, key: str) -> tuple[State, State]:
    """The pre-run state (saved once, before the first write) and the DaemonSet as it is now."""
    run = ctx.run
    ds = ctx.cluster.get(DAEMONSETS, run.target.name, run.target.namespace)
    if "saved" not in run.progress:
        snap = observe(ctx.cluster, run.target.namespace, run.target.name)
        saved = {"key": key, "ds": ds_state(ds), "node": node_state(ctx.cluster.get(NODES, run.node), key),
                 "quarantined": [n for n in quarantined_nodes(ctx.cluster, key) if n != run.node]}
        baseline = _baseline(ctx.cluster, snap, run.node, tuple(ctx.settings.gpu_resources))
        ctx.run = ctx.save_progress({"saved": saved, "baseline": baseline})
    return ctx.run.progress["saved"], ds_state(ds)


# ------------------------------------------------------------------ runs
class QuarantineSteps:
    """Plan, apply, verify and rollback of a quarantine run, as the run engine calls them."""

    def plan(self, cluster: Cluster, run: Run, settings: StepSettings) -> tuple[Run, str]:
        snap, key = _observe(cluster, run), _key(run)
        owner = controller_of(snap.ds)
        if owner is not None:
            raise Refused(f"{run.target.ref} is rendered by {owner.get('kind')} {owner.get('name')}, which would put its "
                          "template back: quarantine the node there")
        node = _read_node(cluster, run.node)
        label, _ = node_mark(node, key)
        if label:
            raise Refused(f"{run.node} is quarantined from {run.target.ref} already (by run {label}): "
                          f"`release {run.target.ref} node={run.node}` gives it back")
        pod = snap.pod_on(run.node)
        if pod is None:
            raise Refused(f"{run.target.ref} runs no pod on {run.node}: nothing to keep off it "
                          f"(it runs on {listing(snap.nodes) or 'no node'})")
        current = ds_state(snap.ds)
        first = saved_of(snap.ds) is None
        cordoned = bool((node.get("spec") or {}).get("unschedulable"))
        others = [n for n in snap.nodes if n != run.node]
        workloads = _workloads(cluster, run.node, settings)
        change = {"node": run.node, "key": key, "pod": pod.name, "template": first, "cordoned": cordoned,
                  "others": len(others), "workloads": workloads, "strategy": current["updateStrategy"]}
        template = (f"add `{key} DoesNotExist` to the pod template's required node affinity, with updateStrategy "
                    f"OnDelete until the last release (the {plural(len(others), 'other node')} keep their pods: none is "
                    "restarted)" if first else "the pod template keeps its quarantine term (another node is "
                    "quarantined): only the node changes")
        summary = (f"take {run.node} out of {run.target.ref}'s reach: {'cordon it, ' if not cordoned else ''}label it "
                   f"`{key}={run.id}`, {template}; the DaemonSet controller then deletes {pod.name} from {run.node}; "
                   + (f"pods using its GPUs, told in the thread: {listing(workloads, 10)}" if workloads
                      else "no pod uses its GPUs"))
        return run.model_copy(update={"change": {**change, "summary": summary}}), summary

    def check_request(self, cluster: Cluster, run: Run, settings: StepSettings) -> list[Check]:
        return [_dry_run(cluster, run, run.change["key"], ds=bool(run.change.get("template")))]

    def apply(self, ctx: StepContext) -> StepResult:
        run = ctx.run
        key = run.change["key"]
        saved, current = _save_before(ctx, key)
        before = saved["ds"]
        if before["saved"] is None:
            record = json.dumps({"run": run.id, "updateStrategy": before["updateStrategy"],
                                 "affinity": before["affinity"]}, sort_keys=True)
        else:
            record = before["saved"]
        write_ds(ctx, {"affinity": with_term(current["affinity"], key), "updateStrategy": ON_DELETE, "saved": record},
                 step="quarantine.daemonset", why=f"`{key} DoesNotExist` in the template's required node affinity, "
                 "updateStrategy OnDelete (no other node's pod is replaced)")
        mark = json.dumps({"run": run.id, "cordoned": not saved["node"]["unschedulable"]}, sort_keys=True)
        write_node(ctx, run.node, key, {"label": run.id, "annotation": mark, "unschedulable": True},
                   step="quarantine.node-marks", why=f"labelled {key}={run.id}" + (
                       ", cordoned" if not saved["node"]["unschedulable"] else " (cordoned before the run)"))
        return StepResult(ok=True)

    def verify_all(self, ctx: StepContext) -> StepResult:
        checks = [_pod_gone(ctx), *others_untouched(ctx.cluster, ctx.run, ctx.run.progress.get("baseline") or {},
                                                   ctx.settings), _told(ctx)]
        note_checks(ctx, "verify", checks)
        return result(checks, what=f"the quarantine of {ctx.run.node}", unknown_blocks=ctx.settings.unknown_blocks)

    def rollback(self, ctx: StepContext) -> StepResult:
        return _restore(ctx, what="quarantine")


class ReleaseSteps:
    """Plan, apply, verify and rollback of a release run, as the run engine calls them."""

    def plan(self, cluster: Cluster, run: Run, settings: StepSettings) -> tuple[Run, str]:
        snap, key = _observe(cluster, run), _key(run)
        node = _read_node(cluster, run.node)
        label, mark = node_mark(node, key)
        if not label:
            raise Refused(f"{run.node} is not quarantined from {run.target.ref}: nothing to release "
                          f"(`quarantine {run.target.ref} node={run.node}` would take it out)")
        others = [n for n in quarantined_nodes(cluster, key) if n != run.node]
        saved = saved_of(snap.ds)
        uncordon = bool((mark or {}).get("cordoned")) and bool((node.get("spec") or {}).get("unschedulable"))
        change = {"node": run.node, "key": key, "quarantined_by": label, "last": not others, "uncordon": uncordon,
                  "saved": saved is not None}
        if others:
            template = f"the pod template keeps its quarantine term ({listing(others)} stay quarantined)"
        elif saved is not None:
            template = (f"the pod template's affinity and updateStrategy "
                        f"{(saved.get('updateStrategy') or {}).get('type') or 'RollingUpdate'} are put back as they "
                        "were before the quarantine (the other nodes' pods are current again: none is restarted)")
        else:
            template = "the quarantine term is taken out of the pod template (no saved strategy: it is left as it is)"
        summary = (f"give {run.node} back to {run.target.ref} (quarantined by run {label}): remove its label"
                   f"{', uncordon it' if uncordon else ' (it stays cordoned: the quarantine did not cordon it)'}; "
                   f"{template}; the DaemonSet controller then creates its plugin pod there")
        return run.model_copy(update={"change": {**change, "summary": summary}}), summary

    def check_request(self, cluster: Cluster, run: Run, settings: StepSettings) -> list[Check]:
        return [_dry_run(cluster, run, run.change["key"], ds=bool(run.change.get("last")))]

    def apply(self, ctx: StepContext) -> StepResult:
        run = ctx.run
        key = run.change["key"]
        saved, current = _save_before(ctx, key)
        others = set(quarantined_nodes(ctx.cluster, key)) - {run.node}
        if others:
            note(ctx, "release.daemonset", "info", f"{listing(sorted(others))} stay quarantined: the template keeps "
                 "its term")
        else:
            if "renewed" not in ctx.run.progress:  # pods made from the quarantine's template: replaced once
                snap = observe(ctx.cluster, run.target.namespace, run.target.name)
                revision = snap.current_revision
                renewed = [n for n in snap.nodes if n != run.node and revision is not None
                           and (p := snap.pod_on(n)) is not None and p.revision_hash == revision.hash]
                ctx.run = ctx.save_progress({"renewed": renewed})
            record = saved_of({"metadata": {"annotations": {SAVED: current["saved"]}}}) if current["saved"] else None
            if record is not None and current["affinity"] == with_term(record.get("affinity"), key):
                affinity = record.get("affinity")  # exactly as before the first quarantine
            else:
                affinity = without_term(current["affinity"], key)
            strategy = record["updateStrategy"] if record is not None else current["updateStrategy"]
            write_ds(ctx, {"affinity": affinity, "updateStrategy": strategy, "saved": None}, step="release.daemonset",
                     why="template affinity and updateStrategy as before the quarantine")
        node = saved["node"]
        _, mark = node_mark({"metadata": {"annotations": {key: node["annotation"]}}}, key)
        uncordon = bool((mark or {}).get("cordoned"))
        write_node(ctx, run.node, key, {"label": None, "annotation": None,
                                        "unschedulable": node["unschedulable"] and not uncordon},
                   step="release.node-marks", why="quarantine label removed" + (", uncordoned" if uncordon and
                                                                          node["unschedulable"] else ""))
        return StepResult(ok=True)

    def verify_all(self, ctx: StepContext) -> StepResult:
        baseline = dict(ctx.run.progress.get("baseline") or {})
        renewed = set(ctx.run.progress.get("renewed") or [])
        baseline = {part: {n: v for n, v in (baseline.get(part) or {}).items() if n not in renewed}
                    for part in ("pods", "allocatable")}
        checks = [*_pods_back(ctx), *others_untouched(ctx.cluster, ctx.run, baseline, ctx.settings)]
        note_checks(ctx, "verify", checks)
        return result(checks, what=f"the release of {ctx.run.node}", unknown_blocks=ctx.settings.unknown_blocks)

    def rollback(self, ctx: StepContext) -> StepResult:
        return _restore(ctx, what="release")
