"""Verify: the checks that prove a plugin works, on the canary node or on every node.

:func:`verify` reads the DaemonSet and its pods at the start of an observation window
(``settings.observe_window``) and keeps the pods from a watch, samples the GPU capacity of
the nodes in scope every ``poll_interval`` during it, reads the plugin logs, reads the
DaemonSet again at its end with what the watches kept, then judges
(:mod:`runbooks.daemonset.checks`, :mod:`runbooks.daemonset.events`): rollout progress from pod revision
hashes, pods Running and Ready, no CrashLoopBackOff, no restarts during the window, the
registration line in each plugin log, capacity and allocatable against the baseline,
other nodes untouched (canary scope), DRA slices and claims, no new warning events,
and the optional smoke-test pod. ``upgradebot verify`` calls it outside a run;
:func:`verify_canary` and :func:`verify_all` inside one, with the run's baseline.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from runbooks.cluster import Cluster
from runbooks.cluster.decoding import NodeShape
from runbooks.cluster.informing import ClusterWatches, Informer, held_informer
from runbooks.cluster.resources import NODES
from runbooks.daemonset import checks as judge
from runbooks.daemonset import companions, dra_registered, metric_checks, pinning
from runbooks.daemonset.baselines import Baseline
from runbooks.daemonset.dra_smoke import dra_smoke_test
from runbooks.daemonset.events import WATCHED, Event, event_checks
from runbooks.daemonset.evidence import attach as attach_evidence
from runbooks.daemonset.observing import Following, Snapshot
from runbooks.daemonset.smoke_testing import runtime_class, smoke_test
from runbooks.daemonset.watched import EndReads
from runbooks.daemonset.window_logs import WindowLogs
from runbooks.engine.clocks import SystemClock
from runbooks.engine.recording import failed, note_checks, result, unknown
from runbooks.engine.steps import Check, CheckStatus, Clock, StepContext, StepResult, StepSettings
from runbooks.errors import Forbidden, NotFound, plural
from runbooks.inventory import Node, PluginPod, ResourceClaim, ResourceSlice
from runbooks.inventory.plugins import (
    LOG_BUDGET,
    LogRead,
    LogResult,
    classify,
    drivers_by_slices,
    serving,
    template_drivers,
)
from runbooks.inventory.reading import node_from, parse_time
from runbooks.inventory.registration import CLOCK_SKEW, KUBELET_WIPING_DELAY

T = TypeVar("T")
NODE_GETS = 20
"""Up to this many nodes are read one by one; more are listed."""


def verify(
    cluster: Cluster,
    target: str,
    *,
    nodes: Sequence[str] | None = None,
    baseline: Baseline | None = None,
    since: dt.datetime | None = None,
    settings: StepSettings = StepSettings(),  # noqa: B008 - frozen dataclass, never mutated
    clock: Clock | None = None,
    image: str | None = None,
    container: str | None = None,
    others: Sequence[str] | None = None,
    watches: ClusterWatches | None = None,
    metrics_before: dict[str, Any] | None = None,
) -> StepResult:
    """The checks on ``nodes`` (default: every node the DaemonSet ``namespace/name`` runs on).

    ``baseline`` (from the canary) makes capacity compare against the numbers before the
    upgrade, and with ``nodes`` adds a check that no other node changed (``others``: only
    those nodes, e.g. a promotion's later waves; default: every node not in scope); without it
    allocatable must equal capacity. Events count from ``since`` (default: now, on the
    API server's clock). ``image``/``container`` name what the pods in scope must run.
    ``watches``: the process's watch cache of this cluster (a run's), whose plugin pods and
    nodes the window follows and whose events and DRA objects its end reads
    (:mod:`runbooks.daemonset.watched`); without it the window keeps caches of its own and
    lists the rest once at its end. With a ``prometheus`` in ``settings`` the metric checks
    are measured over the window, against ``metrics_before`` (a run's; default: the values
    at the window's start).

    The window (issue 39) begins when the start is in hand: the plugin's pods and the nodes,
    listed at once, each from the moment its list shows (its first page; the watch that keeps
    it goes on from that list's resourceVersion, so nothing is read twice), and ends
    ``observe_window`` later with what the watches kept by then; the plugin logs of the
    registration check are read during it, and only those that did not show the registration
    (or whose pod changed) again at its end.
    """
    clock = clock or SystemClock()
    namespace, _, name = target.partition("/")
    since = since or cluster.server_time()
    shown: dict[str, dt.datetime] = {}

    def showing(what: str) -> Callable[[], None]:
        return lambda: shown.__setitem__(what, clock.now())

    resources = tuple(baseline.gpu_resources if baseline else settings.gpu_resources)
    lowest: dict[str, dict[str, int]] = {}
    with contextlib.ExitStack() as held:
        try:  # the DaemonSet first (what its pods are found by); its pods and the nodes then listed at once
            following = Following(cluster, namespace, name, watches=watches, first_page=showing("pods"),
                                  pods_only=True)
        except NotFound:
            missing = failed("daemonset-exists", f"daemonset {target} does not exist on {cluster.context}: check the name")
            return result([missing], what=f"verify of {target}")
        sampler = NodeSampler(cluster, list(nodes or ()), resources, lowest, watches=watches,
                              first_page=showing("nodes"))
        held.callback(sampler.close)
        expected = len(nodes) if nodes is not None else max(following.desired, len(baseline.nodes) if baseline else 0)
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="verify-nodes") as pool:
            listing = pool.submit(sampler.open, expected)
            try:
                held.enter_context(following)
                start, since_pods = _start(following, clock, shown.get("pods"))
            finally:
                listing.result()
        opened = max(since_pods, shown.get("nodes", since_pods))
        return _verify(cluster, target, start=start, opened=opened, following=following, sampler=sampler,
                       nodes=nodes, baseline=baseline, since=since, settings=settings, clock=clock, image=image,
                       container=container, others=others, watches=watches, metrics_before=metrics_before)


def _start(following: Following, clock: Clock, listed: dt.datetime | None) -> tuple[Snapshot, dt.datetime]:
    """The window's start snapshot, and the moment from which its pods are known: when their
    list showed (``listed``: its first page) while the cache still holds exactly that list, else
    (a change already kept, a cache shared from before, a watch away) when the snapshot was taken."""
    pods = following.pods
    before = pods.version if pods is not None else -1
    start = following.snapshot(read_daemonset=True)
    taken = clock.now()
    as_listed = pods is not None and not pods.stale and before == pods.version == pods.listed_version
    return start, listed if as_listed and listed is not None else taken


def _verify(
    cluster: Cluster, target: str, *, start: Snapshot, opened: dt.datetime, following: Following,
    sampler: NodeSampler, nodes: Sequence[str] | None, baseline: Baseline | None, since: dt.datetime,
    settings: StepSettings, clock: Clock, image: str | None, container: str | None, others: Sequence[str] | None,
    watches: ClusterWatches | None, metrics_before: dict[str, Any] | None,
) -> StepResult:
    namespace, _, name = target.partition("/")
    everywhere = nodes is None
    scope = list(nodes) if nodes is not None else sorted(set(start.nodes) | set(baseline.nodes if baseline else ()))
    sampler.scope(scope)
    if sampler.cache is None and len(scope) > NODE_GETS:  # more nodes than the DaemonSet's status counted
        sampler.open(len(scope))
    resources, lowest = sampler.resources, sampler.lowest
    kind = baseline.kind if baseline else (classify(start.ds) or "device-plugin")
    window = settings.observe_window
    dra = kind == "dra-kubelet-plugin"
    reasons = [r for r in WATCHED if dra or r != "FailedPrepareDynamicResources"]
    pattern = settings.registration.get(f"{namespace}/{name}")
    with EndReads(cluster, reasons, dra=dra, watches=watches) as reads, WindowLogs(cluster) as logs:
        final = sampler.sample()
        _, chosen, early = log_reads(start, scope, final, kind=kind, pattern=pattern, budget=settings.log_budget)
        logs.start(early, {pod.name: pod for _, pod in chosen})  # read while the window runs
        gpu_nodes = metric_checks.with_gpus(scope, baseline=baseline.nodes if baseline else None, sample=final)
        metrics = metric_checks.watch(settings, gpu_nodes, scope=judge.scope_of(scope, everywhere),
                                      baseline=metrics_before, clock=clock)
        end_at = opened + dt.timedelta(seconds=window)
        while (left := (end_at - clock.now()).total_seconds()) > 0:
            clock.sleep(min(settings.poll_interval, left))
            final = sampler.sample()
            if metrics is not None:
                metrics.tick()
        end = following.snapshot(read_daemonset=True)
        events = _or_forbidden(reads.events)
        dra_objects = _or_forbidden(lambda: (reads.slices(), reads.claims(since))) if dra else None
        seen = _dra_seen(cluster, start, end, dra_objects, baseline=baseline, container=container)
        registration = _registration(end, scope, kind=kind, everywhere=everywhere, pattern=pattern, final=final,
                                     resources=resources, budget=settings.log_budget, logs=logs, dra=seen)
        # A DRA driver whose slices predate its new plugin is proven registered only once the
        # kubelet's wiping delay has passed (or the plugin publishes again): wait for that,
        # bounded, rather than leave a fresh rollout "not proven yet".
        until = clock.now() + dt.timedelta(seconds=KUBELET_WIPING_DELAY + CLOCK_SKEW)
        while seen is not None and _unproven(registration) and clock.now() < until:
            clock.sleep(min(settings.poll_interval, max((until - clock.now()).total_seconds(), 0.0)))
            end = following.snapshot(read_daemonset=True)
            dra_objects = _or_forbidden(lambda: (reads.slices(), reads.claims(since)))
            seen = _dra_seen(cluster, start, end, dra_objects, baseline=baseline, container=container)
            registration = _registration(end, scope, kind=kind, everywhere=everywhere, pattern=pattern, final=final,
                                         resources=resources, budget=settings.log_budget, logs=logs, dra=seen)
    where = judge.scope_of(scope, everywhere)

    checks: list[Check] = [
        judge.rollout(end, scope, image=image, container=container, everywhere=everywhere),
        judge.pods_ready(end, scope, everywhere=everywhere),
        judge.no_crashloop([start, end], scope, everywhere=everywhere),
        judge.restarts_stable(start, end, scope, window=window, everywhere=everywhere),
        registration,
        judge.gpu_capacity(scope, final, lowest, baseline, resources, everywhere=everywhere),
    ]
    checks = attach_evidence(cluster, end, checks, scope=scope, container=container)
    if not everywhere:
        if others is None:
            others = [n for n in (baseline.nodes if baseline else end.nodes) if n not in scope]
        checks.append(judge.others_unchanged(end, others, sample_nodes(cluster, others, resources, {}), baseline, resources))
    drivers: list[str] = list(baseline.drivers) if baseline else []
    if isinstance(dra_objects, Forbidden):
        checks.append(unknown("dra-slices", f"cannot read the DRA objects: {dra_objects}", where))
    elif dra_objects is not None:
        slices, claims = dra_objects
        drivers = drivers or _drivers(start, slices or [])
        failed_scheduling = [] if isinstance(events, Forbidden) else events.get("FailedScheduling", [])
        checks += [judge.dra_slices(scope, slices, drivers, baseline, everywhere=everywhere),
                   judge.dra_claims(claims, baseline, drivers),
                   judge.dra_new_claims(claims, since, end_time=cluster.server_time(),
                                        grace=settings.claim_grace, drivers=drivers,
                                        scheduling=_scheduling_messages(failed_scheduling, claims or [], since))]
    if isinstance(events, Forbidden):
        checks.append(unknown("events", f"cannot read events, so new warnings were not looked for: {events}", where))
    else:
        checks += event_checks(events, since=since, nodes=scope, scope=where, gpu_resources=resources, dra=dra)
    if metrics is not None:
        checks += metrics.checks()
    if settings.smoke_test:
        on = scope[0] if len(scope) == 1 and not everywhere else None
        klass = runtime_class(settings.smoke_test, end.ds)
        if dra:  # a DRA driver's devices come through a claim, never through an extended resource
            served = list(seen.drivers) if seen is not None and seen.drivers else drivers  # a canaried container's
            checks.append(dra_smoke_test(cluster, {**settings.smoke_test, "runtime_class": klass}, node=on,
                                         drivers=served, clock=clock, interval=settings.poll_interval))
        else:
            checks.append(smoke_test(cluster, settings.smoke_test, node=on, resource=resources[0], clock=clock,
                                     interval=settings.poll_interval, runtime_class=klass))
    return result(checks, what=f"verify of {target} on {where}", unknown_blocks=settings.unknown_blocks)


def _unproven(check: Check) -> bool:
    """A DRA registration left unknown only because the kubelet's wiping delay has not passed."""
    return check.status is CheckStatus.UNKNOWN and bool(check.evidence.get("unproven"))


def _or_forbidden(read: Callable[[], T]) -> T | Forbidden:
    """What ``read`` returns, or the refusal it raised (judged ``unknown`` once the window's reads are done)."""
    try:
        return read()
    except Forbidden as exc:
        return exc


def sample_nodes(
    cluster: Cluster, names: Sequence[str], resources: tuple[str, ...], lowest: dict[str, dict[str, int]],
) -> dict[str, Node]:
    """The nodes ``names`` now; ``lowest`` keeps the smallest allocatable seen per node and resource."""
    wanted = set(names)
    if not wanted:
        return {}
    if len(wanted) <= NODE_GETS:
        found = {}
        for node in sorted(wanted):
            try:
                found[node] = node_from(cluster.get(NODES, node), resources)
            except NotFound:
                continue
    else:
        found = {n.name: n for n in cluster.list_objects(NODES, project=lambda o: node_from(o, resources)) if n.name in wanted}
    _lowest(found, resources, lowest)
    return found


class NodeSampler:
    """:func:`sample_nodes` over a window: up to :data:`NODE_GETS` nodes read one by one each
    time; more from a watch cache of the nodes (listed once, then watched; with ``watches``,
    the process's, shared with every other window on this cluster), so a 30 s window on 5,000
    nodes reads them once, not thirty times, and a sample when nothing changed costs nothing.
    ``first_page()``: when the cache is in hand (:meth:`Watches.share`). As a context manager
    it opens for ``names``; :meth:`open` for a count known before the names (verify's, while its
    plugin pods are listed), then :meth:`scope` names them."""

    def __init__(self, cluster: Cluster, names: Sequence[str], resources: tuple[str, ...],
                 lowest: dict[str, dict[str, int]], *, watches: ClusterWatches | None = None,
                 first_page: Callable[[], None] | None = None) -> None:
        self.cluster, self.resources, self.lowest = cluster, resources, lowest
        self.names: Sequence[str] = names
        self.wanted = set(names)
        self.watches, self.first_page = watches, first_page
        self.cache: Informer[Node] | None = None
        self._held = contextlib.ExitStack()
        self._seen: tuple[int, dict[str, Node]] = (-1, {})

    def __enter__(self) -> NodeSampler:
        return self.open(len(self.wanted))

    def open(self, expected: int) -> NodeSampler:
        """The watch cache of the nodes when more than :data:`NODE_GETS` are ``expected``."""
        if expected <= NODE_GETS:
            return self
        resources = self.resources
        project: Callable[[Any], Node] = lambda o: node_from(o, resources)  # noqa: E731
        self.cache = held_informer(self._held, self.cluster, NODES, watches=self.watches, kept=("nodes", resources),
                                   project=project, first_page=self.first_page, item=NodeShape)
        return self

    def scope(self, names: Sequence[str]) -> None:
        """The nodes sampled from now on."""
        self.names, self.wanted, self._seen = names, set(names), (-1, {})

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._held.close()

    def sample(self) -> dict[str, Node]:
        if self.cache is None or self.cache.stale:  # few nodes, or the watch is away: read them now
            return sample_nodes(self.cluster, self.names, self.resources, self.lowest)
        version = self.cache.version
        if version == self._seen[0]:
            return self._seen[1]
        found = {n.name: n for n in self.cache.items() if n.name in self.wanted}
        _lowest(found, self.resources, self.lowest)
        self._seen = (version, found)
        return found


def _lowest(found: dict[str, Node], resources: tuple[str, ...], lowest: dict[str, dict[str, int]]) -> None:
    for node, info in found.items():
        low = lowest.setdefault(node, {})
        for res in resources:
            value = info.allocatable.get(res, 0)
            low[res] = min(low.get(res, value), value)


DOMAIN_LABELS = ("topology.kubernetes.io/zone", "nvidia.com/gpu.product")
"""What tells failure domains apart, with the kubelet's version: the log sample covers each."""


def domain_of(node: Node | None) -> str:
    """A node's failure domain for the log sample: zone, GPU model, kubelet version."""
    if node is None:
        return "unknown"
    parts = [node.labels.get(label, "") for label in DOMAIN_LABELS] + [node.kubelet_version]
    return " / ".join(p for p in parts if p) or "-"


def log_sample(pods: Sequence[tuple[str, Any]], nodes: dict[str, Node], budget: int) -> list[tuple[str, Any]]:
    """At most ``budget`` of ``(node, pod)``, taken in turn from each failure domain (so each
    domain has its logs read whatever the size), in node order within a domain."""
    if len(pods) <= budget:
        return list(pods)
    groups: dict[str, list[tuple[str, Any]]] = {}
    for pair in pods:
        groups.setdefault(domain_of(nodes.get(pair[0])), []).append(pair)
    queues = [groups[d][::-1] for d in sorted(groups)]
    chosen: list[tuple[str, Any]] = []
    while len(chosen) < budget and any(queues):
        for queue in queues:
            if queue and len(chosen) < budget:
                chosen.append(queue.pop())
    return chosen


def log_reads(snap: Snapshot, nodes: Sequence[str], final: dict[str, Node], *, kind: str, pattern: str | None,
              budget: int = LOG_BUDGET) -> tuple[list[tuple[str, PluginPod]], list[tuple[str, PluginPod]], list[LogRead]]:
    """The plugin pods on ``nodes`` (``(node, pod)``, terminating ones left out), the sample of
    them whose logs the registration check reads (:func:`log_sample`), and those reads."""
    namespace = snap.meta.get("namespace", "")
    ref = f"{namespace}/{snap.meta.get('name', '')}"
    pods = [(node, pod) for node in nodes if (pod := snap.pod_on(node)) is not None and not pod.deleting]
    chosen = log_sample(pods, final, budget)
    reads = [LogRead(ref, namespace, pod.name, sorted(pod.images), kind, pattern)  # type: ignore[arg-type]
             for _, pod in chosen]
    return pods, chosen, reads


@dataclass(frozen=True)
class DraSeen:
    """What a DRA driver's registration is judged by (:mod:`runbooks.daemonset.dra_registered`):
    every ResourceSlice (None: unreadable, ``problem`` says why), the drivers judged with the
    containers serving each, and the API server's time."""

    slices: list[ResourceSlice] | None
    drivers: dict[str, list[str]]
    now: dt.datetime
    problem: str = ""


def _dra_seen(cluster: Cluster, start: Snapshot, end: Snapshot, dra_objects: Any, *, baseline: Baseline | None,
              container: str | None) -> DraSeen | None:
    """None when the registration is read from logs: a device plugin, or DRA before ResourceSlices (1.30)."""
    if dra_objects is None:
        return None
    if isinstance(dra_objects, Forbidden):
        return DraSeen(None, {}, cluster.server_time(), problem=str(dra_objects))
    slices = dra_objects[0]
    if slices is None:
        return None
    drivers = list(baseline.drivers) if baseline else _drivers(start, slices)
    return DraSeen(list(slices), serving(end.ds, drivers, container=container), cluster.server_time())


def _registration(snap: Snapshot, nodes: Sequence[str], *, kind: str, everywhere: bool,
                  pattern: str | None, final: dict[str, Node], resources: Sequence[str], logs: WindowLogs,
                  budget: int = LOG_BUDGET, dra: DraSeen | None = None) -> Check:
    """The registration of the plugin on every node in scope. A DRA driver's (``dra``), from its
    ResourceSlices on each node, the logs read being supporting evidence only. Else from its log on
    a sample of at most ``budget`` nodes covering every failure domain (``logs``: those read during
    the window, read again only where they did not show it), and (a device plugin) from what each
    other node advertises (allocatable GPUs, read at the end of the window)."""
    namespace = snap.meta.get("namespace", "")
    pods, chosen, reads = log_reads(snap, nodes, final, kind=kind, pattern=pattern, budget=budget)
    by_pod = logs.results(reads, {pod.name: pod for _, pod in chosen})
    found: dict[str, LogResult] = {node: by_pod[(namespace, pod.name)] for node, pod in chosen
                                   if (namespace, pod.name) in by_pod}
    if dra is not None:
        if dra.slices is None:
            return unknown("plugin-registered", "cannot read the ResourceSlices by which a DRA driver's registration "
                           f"is seen: {dra.problem}", judge.scope_of(nodes, everywhere))
        return dra_registered.judge(snap, nodes, dra.slices, drivers=dra.drivers, logs=found, now=dra.now,
                                    everywhere=everywhere, pattern=pattern)
    sampled = {n for n, _ in chosen}
    rest = [n for n, _ in pods if n not in sampled]
    advertised = ({n: sum(final[n].allocatable.get(r, 0) for r in resources) for n in rest if n in final}
                  if kind == "device-plugin" else {})
    judged = [n for n, _ in chosen] + (rest if advertised else []) + [n for n in nodes if snap.pod_on(n) is None]
    check = judge.registered(snap, judged, found, kind=kind, everywhere=everywhere, pattern=pattern,
                             advertised=advertised, resources=resources)
    if not rest:
        return check
    domains: dict[str, dict[str, int]] = {}
    for node, _ in pods:
        entry = domains.setdefault(domain_of(final.get(node)), {"nodes": 0, "logs": 0})
        entry["nodes"] += 1
        entry["logs"] += node in sampled
    extra: dict[str, Any] = {"logs_read": len(chosen), "pods": len(pods), "by_capacity": len(advertised),
                             "domains": dict(sorted(domains.items())[:50])}
    how = (f"logs of {len(chosen)} of {len(pods)} pods read, covering all {plural(len(domains), 'failure domain')} "
           f"(zone, GPU model, kubelet)")
    return check.model_copy(update={"detail": f"{check.detail} ({how})", "evidence": {**check.evidence, **extra}})


def _scheduling_messages(events: Sequence[Event], claims: Sequence[ResourceClaim], since: dt.datetime) -> dict[str, str]:
    """``{namespace/pod: message}`` of the newest of the FailedScheduling ``events`` of each pod
    waiting on a pending claim made since ``since`` (the scheduler's own words: ``cannot allocate all claims``)."""
    waiting = {f"{c.namespace}/{p}" for c in claims if c.state == "pending" and c.created and c.created >= since
               for p in c.waiting_pods}
    if not waiting:
        return {}
    out: dict[str, tuple[dt.datetime, str]] = {}
    for event in events:
        key = f"{event.namespace}/{event.name}"
        if key in waiting and event.last and (key not in out or event.last > out[key][0]):
            out[key] = (event.last, event.message)
    return {k: v[1] for k, v in out.items()}


def _drivers(snap: Snapshot, slices: Sequence[ResourceSlice]) -> list[str]:
    """Without a baseline: the drivers the template names, else those with slices on its nodes."""
    known = {s.driver for s in slices}
    named = template_drivers(snap.ds, known)
    if named:
        return named
    slice_nodes: dict[str, set[str]] = {}
    for s in slices:
        if s.node:
            slice_nodes.setdefault(s.driver, set()).add(s.node)
    return drivers_by_slices(set(snap.nodes), slice_nodes)


# ------------------------------------------------------------------ in a run
def _baseline(progress: dict[str, Any]) -> Baseline | None:
    data = progress.get("baseline")
    return Baseline.model_validate(data) if data else None


def _moment(progress: dict[str, Any], *keys: str) -> dt.datetime | None:
    for key in keys:
        moment = parse_time(progress.get(key))
        if moment is not None:
            return moment
    return None


def verify_canary(ctx: StepContext) -> StepResult:
    """The checks on the canary node (and that no other node changed), events since the canary began."""
    run, progress = ctx.run, ctx.run.progress
    container = (progress.get("saved") or {}).get("container") or run.container or None
    outcome = verify(
        ctx.cluster, run.target.ref, nodes=run.canary_nodes, baseline=_baseline(progress),
        since=_moment(progress, "canary_started_at"), settings=ctx.settings, clock=ctx.clock,
        image=run.image, container=container, watches=ctx.watches, metrics_before=progress.get("metrics_before"),
    )
    outcome = _with_parts(outcome, companions.verify(ctx, before_only=True))
    note_checks(ctx, "verify_canary", outcome.checks)
    return outcome


def verify_all(ctx: StepContext) -> StepResult:
    """The checks on every node, events since the promotion began."""
    run, progress = ctx.run, ctx.run.progress
    container = (progress.get("saved") or {}).get("container") or run.container or None
    outcome = verify(
        ctx.cluster, run.target.ref, baseline=_baseline(progress),
        since=_moment(progress, "promote_started_at", "canary_started_at"), settings=ctx.settings, clock=ctx.clock,
        image=pinning.promoted(run, ctx.settings), container=container, watches=ctx.watches, metrics_before=progress.get("metrics_before"),
    )
    outcome = _with_parts(outcome, companions.verify(ctx))
    note_checks(ctx, "verify_all", outcome.checks)
    return outcome


def _with_parts(outcome: StepResult, parts: list[Check]) -> StepResult:
    """The DaemonSet's verification and that of the target's other workloads, as one result."""
    if not parts:
        return outcome
    bad = [c for c in parts if c.status != CheckStatus.PASS]
    checks = [*outcome.checks, *parts]
    if not bad:
        return outcome.model_copy(update={"checks": checks})
    said = "; ".join(f"{c.name} ({c.scope}): {c.detail}" for c in bad)
    reason = f"{outcome.reason}; {said}" if not outcome.ok and outcome.reason else said
    return StepResult(ok=False, reason=reason, checks=checks)
