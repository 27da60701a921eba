"""Draining a node before its plugin pod is replaced (policy ``targets[].drain``), and
giving it back afterwards.

A run whose target drains (``run.target.drain``, fixed when it was requested) does, for each
batch of nodes whose plugin pods it is about to delete (the canary's node, then each
promotion batch):

1. refuses, before changing anything, a node that runs a pod using its devices without a
   controller: evicting it would delete it for good (``kubectl drain`` refuses it too unless
   forced);
2. records in ``run.progress.drained`` whether the node was already cordoned, *then*
   cordons it (``spec.unschedulable``, as ``kubectl cordon``);
3. evicts, through the eviction API, every pod on it that uses the devices (a device
   plugin's: requests one of ``settings.gpu_resources``; a DRA driver's: names a
   ResourceClaim), DaemonSet pods and mirror pods
   left alone; a budget that allows no disruption now (429) is asked again every poll until
   ``drain.timeout``; the node is drained when none of those pods is left.

Once the node's new plugin is verified (the canary's verification, its wave's) it is
uncordoned. A rollback uncordons every node the run cordoned, except, with
``drain.keep_failed_cordoned``, those whose new plugin failed: they stay cordoned for a
person. A node that was cordoned before the run is never uncordoned by it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from runbooks.cluster.resources import NODES, PODS
from runbooks.daemonset.checks import listing
from runbooks.engine.recording import failed, note, passed
from runbooks.engine.steps import Check, CheckStatus, StepContext, StepSettings
from runbooks.errors import Conflict, DisruptionRefused, Forbidden, NotFound, plural
from runbooks.inventory.reading import controller_of, requested
from runbooks.policy_checks import duration_seconds
from runbooks.policy_rollout import Drain

MIRROR = "kubernetes.io/config.mirror"


@dataclass(frozen=True)
class DevicePod:
    """A pod on a node being drained that uses the node's devices."""

    namespace: str
    name: str
    uid: str
    node: str
    controller: str
    """``Kind/name`` of its controller, "" for a bare pod."""
    terminating: bool

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"


def drain_of(ctx: StepContext) -> Drain | None:
    """The drain settings of the run's target, None when the run does not drain."""
    if not ctx.run.target.drain:
        return None
    entry = ctx.settings.targets.get(ctx.run.target.ref)
    return entry.drain if entry is not None and entry.drain is not None else Drain()


def _device_pod(obj: dict[str, Any], resources: tuple[str, ...], claims: bool) -> DevicePod | None:
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    if not (requested(spec, resources) or (claims and spec.get("resourceClaims"))):
        return None
    if MIRROR in (meta.get("annotations") or {}):
        return None  # a static pod: the kubelet owns it, the API cannot evict it
    owner = controller_of(obj)
    if owner is not None and owner.get("kind") == "DaemonSet":
        return None  # it would come straight back (kubectl drain --ignore-daemonsets)
    return DevicePod(namespace=str(meta.get("namespace", "")), name=str(meta.get("name", "")),
                     uid=str(meta.get("uid", "")), node=str(spec.get("nodeName") or ""),
                     controller=f"{owner.get('kind')}/{owner.get('name')}" if owner else "",
                     terminating=bool(meta.get("deletionTimestamp")))


def device_pods(cluster: Any, node: str, gpu_resources: Sequence[str], *, dra: bool = False) -> list[DevicePod]:
    """The unfinished pods on ``node`` that use its devices and an eviction would move: those
    requesting ``gpu_resources`` (a device plugin's), for a ``dra`` driver those naming
    ResourceClaims."""
    resources = () if dra else tuple(gpu_resources)
    selector = f"spec.nodeName={node},status.phase!=Succeeded,status.phase!=Failed"
    found = cluster.list_objects(PODS, field_selector=selector, project=lambda o: _device_pod(o, resources, dra))
    return sorted((p for p in found if p is not None), key=lambda p: p.ref)


def _drained(ctx: StepContext) -> dict[str, dict[str, Any]]:
    return {k: dict(v) for k, v in (ctx.run.progress.get("drained") or {}).items()}


def _save(ctx: StepContext, node: str, **fields: Any) -> None:
    drained = _drained(ctx)
    drained[node] = {**drained.get(node, {}), **fields}
    ctx.run = ctx.save_progress({"drained": drained})


def drain_nodes(ctx: StepContext, nodes: Sequence[str], *, step: str) -> str:
    """Cordon and drain ``nodes`` (see the module's docstring): "" once none of their pods uses
    the devices any more (or the run does not drain), else what stopped it, in a sentence."""
    policy = drain_of(ctx)
    if policy is None or not nodes:
        return ""
    dra = (ctx.run.progress.get("baseline") or {}).get("kind") == "dra-kubelet-plugin"
    pods = [p for node in nodes for p in device_pods(ctx.cluster, node, ctx.settings.gpu_resources, dra=dra)]
    bare = [p for p in pods if not p.controller and not p.terminating]
    if bare:
        problem = (f"cannot drain {listing(list(nodes))}: {listing([f'{p.ref} on {p.node}' for p in bare])} "
                   "uses the devices and has no controller, so an eviction would delete it for good; move or "
                   "delete it yourself, then try again")
        note(ctx, step, "failed", problem, nodes=list(nodes), pods=[p.ref for p in bare])
        return problem
    for node in nodes:
        _cordon(ctx, node, step=f"{step}.cordon")
    return _evict_all(ctx, list(nodes), dra, timeout=duration_seconds(policy.timeout), step=step)


def _cordon(ctx: StepContext, node: str, *, step: str) -> None:
    obj = ctx.cluster.get(NODES, node)
    cordoned = bool((obj.get("spec") or {}).get("unschedulable"))
    record = _drained(ctx).get(node) or {}
    if record.get("state") in (None, "uncordoned"):
        was = bool(record["was_cordoned"]) if "was_cordoned" in record else cordoned
        _save(ctx, node, was_cordoned=was, state="cordoned")  # before the write: a resumed run knows it is ours
        record = {"was_cordoned": was}
    if cordoned:
        why = "cordoned before the run: it stays cordoned after" if record.get("was_cordoned") else "already cordoned"
        note(ctx, step, "info", f"{node} is {why}", node=node)
        return
    ctx.cluster.patch(NODES, node, {"spec": {"unschedulable": True}}, patch_type="merge")
    note(ctx, step, "ok", kind="mutation", detail=f"cordoned {node} (no new pods are scheduled there)", node=node)


def _evict_all(ctx: StepContext, nodes: list[str], dra: bool, *, timeout: float, step: str) -> str:
    deadline = ctx.clock.now() + dt.timedelta(seconds=timeout)
    refused: dict[str, str] = {}
    evicted: set[str] = set()
    while True:
        pods = [p for node in nodes for p in device_pods(ctx.cluster, node, ctx.settings.gpu_resources, dra=dra)]
        if not pods:
            for node in nodes:
                _save(ctx, node, state="drained")
            note(ctx, f"{step}.done", "ok", f"{listing(nodes)} drained: no pod uses their devices any more "
                 f"({len(evicted)} evicted)", nodes=nodes, evicted=sorted(evicted))
            return ""
        for pod in pods:
            if pod.terminating or pod.uid in evicted:
                continue
            reason = _evict(ctx, pod, step=f"{step}.evict")
            if reason is None:
                evicted.add(pod.uid)
                refused.pop(pod.ref, None)
            elif reason and refused.get(pod.ref) != reason:
                refused[pod.ref] = reason
                note(ctx, f"{step}.evict", "info", f"{pod.ref} on {pod.node} waits: {reason}", node=pod.node,
                     pod=pod.ref)
        if ctx.clock.now() >= deadline:
            left = [f"{p.ref} on {p.node}" + (f" ({refused[p.ref]})" if p.ref in refused else
                                              " (terminating)" if p.terminating else "") for p in pods]
            problem = (f"the drain of {listing(nodes)} did not finish in {timeout:g}s (drain.timeout): "
                       f"{plural(len(pods), 'pod')} still use the devices: {listing(left, 3)}")
            note(ctx, step, "failed", problem, nodes=nodes, pods=[p.ref for p in pods])
            return problem
        ctx.clock.sleep(ctx.settings.poll_interval)


def _evict(ctx: StepContext, pod: DevicePod, *, step: str) -> str | None:
    """None when the eviction was accepted; the budget's words when it refused; "" when the pod
    had gone or been replaced meanwhile."""
    try:
        ctx.cluster.evict(pod.name, namespace=pod.namespace, uid=pod.uid)
    except DisruptionRefused as exc:
        return exc.detail or str(exc)
    except (NotFound, Conflict):
        return ""
    note(ctx, step, "ok", kind="mutation", detail=f"evicted {pod.ref} ({pod.controller}) from {pod.node}",
         node=pod.node, pod=pod.ref, uid=pod.uid)
    return None


def request_checks(cluster: Any, node: str, *, dra: bool, settings: StepSettings) -> list[Check]:
    """Read-only, before anyone approves a canary that drains ``node``: no pod using its devices
    lacks a controller, the bot may cordon it (a server-side dry run, authorized like the write),
    and what the drain will evict, each pod's budget asked by a dry-run eviction (one that
    refuses now is a warning: the drain waits for it up to its timeout)."""
    pods = device_pods(cluster, node, settings.gpu_resources, dra=dra)
    bare = [p.ref for p in pods if not p.controller and not p.terminating]
    if bare:
        return [failed("drain-possible", f"{listing(bare)} on {node} uses its devices and has no controller: draining "
                       "the node would delete it for good; move or delete it first, or pick another node", node,
                       pods=bare)]
    try:
        cluster.patch(NODES, node, {"spec": {"unschedulable": True}}, patch_type="merge", dry_run=True)
        waiting: list[str] = []
        for pod in pods:
            if pod.terminating:
                continue
            try:
                cluster.evict(pod.name, namespace=pod.namespace, dry_run=True)
            except DisruptionRefused as exc:
                waiting.append(f"{pod.ref} ({exc.detail})")
            except (NotFound, Conflict):
                continue
    except Forbidden as exc:
        return [failed("drain-allowed", f"the target drains its nodes, but {exc}", node)]
    what = (f"{plural(len(pods), 'pod')} using its devices are evicted first: {listing([p.ref for p in pods])}" if pods
            else "no pod uses its devices now")
    checks = [passed("drain-possible", f"{node} is cordoned and drained before its plugin pod is replaced; {what}",
                     node, pods=[p.ref for p in pods])]
    if waiting:
        checks.append(Check(name="drain-budgets", status=CheckStatus.WARN, scope=node,
                            detail=f"a budget refuses an eviction now, so the drain will wait for it: {listing(waiting, 3)}"))
    return checks


def mark_failed(ctx: StepContext, nodes: Iterable[str]) -> None:
    """``nodes``' new plugin failed: with ``drain.keep_failed_cordoned`` a rollback leaves them cordoned."""
    drained = _drained(ctx)
    for node in nodes:
        if node in drained and not drained[node].get("failed"):
            _save(ctx, node, failed=True)


NODE_EVIDENCE = ("nodes", "behind", "wrong_image", "missing", "rose", "replaced", "unread")
"""The evidence keys under which the verification checks name the nodes they failed on."""


def failed_nodes(checks: Iterable[Check], candidates: Sequence[str]) -> list[str]:
    """The ``candidates`` the failing checks name in their evidence (never their scope, which
    lists every node checked); all of them when the checks name none of them."""
    named: set[str] = set()
    for check in checks:
        if check.status not in (CheckStatus.FAIL, CheckStatus.UNKNOWN):
            continue
        for key in NODE_EVIDENCE:
            value = check.evidence.get(key)
            if isinstance(value, (dict, list, tuple)):
                named.update(str(n) for n in value)
    return [n for n in candidates if n in named] or list(candidates)


def uncordon(ctx: StepContext, nodes: Iterable[str] | None = None, *, step: str, rolling_back: bool = False) -> list[str]:
    """Give back the nodes the run cordoned (``nodes``, default all of them): uncordoned, except
    those cordoned before the run and, on a rollback with ``drain.keep_failed_cordoned``, those
    whose new plugin failed. Returns the nodes left cordoned by choice."""
    drained = _drained(ctx)
    policy = drain_of(ctx) or Drain()
    kept: list[str] = []
    for node in list(nodes) if nodes is not None else sorted(drained):
        record = drained.get(node)
        if record is None or record.get("state") in ("uncordoned", "kept"):
            continue
        if record.get("was_cordoned"):
            _save(ctx, node, state="uncordoned")
            note(ctx, step, "info", f"{node} was cordoned before the run: left cordoned", node=node)
            continue
        if rolling_back and record.get("failed") and policy.keep_failed_cordoned:
            _save(ctx, node, state="kept")
            note(ctx, step, "info", f"{node} stays cordoned: its new plugin failed (drain.keep_failed_cordoned); "
                 f"`kubectl uncordon {node}` once it is looked at", node=node)
            kept.append(node)
            continue
        try:
            obj = ctx.cluster.get(NODES, node)
        except NotFound:
            _save(ctx, node, state="uncordoned")
            continue
        if (obj.get("spec") or {}).get("unschedulable"):
            ctx.cluster.patch(NODES, node, {"spec": {"unschedulable": None}}, patch_type="merge")
            note(ctx, step, "ok", kind="mutation", detail=f"uncordoned {node}", node=node)
        _save(ctx, node, state="uncordoned")
    return kept


def still_cordoned(progress: dict[str, Any]) -> list[str]:
    """The nodes the run cordoned and has not given back yet (what a halted run must say)."""
    return sorted(n for n, r in (progress.get("drained") or {}).items()
                  if r.get("state") in ("cordoned", "drained") and not r.get("was_cordoned"))
