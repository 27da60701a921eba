"""Building a run's stability report: the collected tally, the cluster now, the verdict.

:func:`report_of` reads the cluster (:mod:`runbooks.stability.reading`) and calls
:func:`build_report`, which is pure. The window starts at the promotion (the API server's
time the promote step began, ``progress["promote_started_at"]``) and ends now on the API
server's clock; the reports are due at :func:`due_times` after it (``reports.after``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from runbooks.cluster import Cluster
from runbooks.daemonset.baselines import Baseline
from runbooks.daemonset.metric_checks import with_gpus
from runbooks.engine.refusals import Refused
from runbooks.engine.runs import Run, RunState
from runbooks.inventory.reading import human_duration, parse_time
from runbooks.metrics import MetricsUnavailable
from runbooks.metrics.prometheus import client_of
from runbooks.policy import Policy, duration_seconds
from runbooks.stability import helm_check, judging
from runbooks.stability.helm_check import HelmCheck, notes_of, warnings_of
from runbooks.stability.metric_view import metric_findings, sample, view_of
from runbooks.stability.reading import ClusterNow, read_now
from runbooks.stability.reports import (
    Collection,
    Count,
    EventSummary,
    GpuSample,
    HourCount,
    MetricView,
    StabilityReport,
)
from runbooks.stability.tallying import (
    TOTAL,
    Scope,
    Tally,
    hour_moment,
    hour_of,
    lowest,
    moment_of,
    stamp_of,
)

TOP = 5
REPORTABLE = frozenset({RunState.MONITORING, RunState.DONE})
LATE = dt.timedelta(minutes=30)
"""A collection that began this long after the promotion may have missed expired events."""


def promoted_at(run: Run) -> dt.datetime:
    """When the promotion began (the API server's clock); the window starts there."""
    return parse_time(run.progress.get("promote_started_at")) or run.updated_at


def due_times(run: Run, policy: Policy) -> list[tuple[str, dt.datetime]]:
    """``(offset, when)`` of each scheduled report, earliest first."""
    start = promoted_at(run)
    return sorted(((after, start + dt.timedelta(seconds=duration_seconds(after))) for after in policy.reports.after),
                  key=lambda pair: pair[1])


def baseline_of(run: Run) -> Baseline:
    data = run.progress.get("baseline")
    if not data:
        raise Refused(f"run {run.id} has no baseline (it never ran its canary): there is nothing to report on")
    return Baseline.model_validate(data)


def scope_of(run: Run) -> Scope:
    """What matters among the events of ``run``'s cluster, from the promotion on."""
    return Scope.of(baseline_of(run), since=promoted_at(run))


def check_reportable(run: Run) -> None:
    if run.state not in REPORTABLE:
        raise Refused(f"run {run.id} is {run.state.value}: stability reports cover a promoted run "
                      "(monitoring, or done after it)")


def _top(counts: dict[str, int]) -> list[Count]:
    return [Count(name=k, count=v) for k, v in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP]]


def hourly_counts(tally: Tally, start: dt.datetime) -> list[HourCount]:
    """Each reason's occurrences per hour, from the hour of ``start`` on, oldest first."""
    first = hour_of(stamp_of(start))
    out = [HourCount(hour=hour_moment(hour), reason=reason, count=n)
           for reason, entry in tally.reasons.items() for hour, n in entry.hours.items() if hour >= first and n > 0]
    return sorted(out, key=lambda h: (h.hour, h.reason))


def gpu_samples(baseline: Baseline, tally: Tally | None, now: ClusterNow, start: dt.datetime) -> list[GpuSample]:
    """Allocatable GPUs of the run's nodes over the window: at the baseline (the window's
    start), as the collector sampled them each hour, and now; each node, and the total."""
    resources = baseline.gpu_resources

    def of(allocatable: dict[str, int]) -> int:
        return sum(int(allocatable.get(r, 0)) for r in resources)

    def point(at: dt.datetime, values: dict[str, int]) -> list[GpuSample]:
        return [GpuSample(at=at, allocatable=sum(values.values())),
                *(GpuSample(at=at, node=node, allocatable=n) for node, n in sorted(lowest(values).items()))]

    out = point(start, {n: of(b.allocatable) for n, b in baseline.nodes.items()})
    first = hour_of(stamp_of(start))
    for hour, values in sorted((tally.gpus if tally else {}).items()):
        if hour < first:
            continue
        at = hour_moment(hour)
        out += [GpuSample(at=at, node="" if node == TOTAL else node, allocatable=n) for node, n in values.items()]
    out += point(now.taken_at, {n: of(now.nodes[n].allocatable) if n in now.nodes else 0 for n in baseline.nodes})
    return out


def event_summaries(tally: Tally) -> list[EventSummary]:
    out = []
    for reason, entry in sorted(tally.reasons.items(), key=lambda kv: (-kv[1].count, kv[0])):
        if entry.count <= 0:
            continue
        out.append(EventSummary(
            reason=reason, count=entry.count, first=moment_of(entry.first), last=moment_of(entry.last),
            nodes=_top(entry.nodes), objects=_top(entry.objects),
            more_nodes=max(0, len(entry.nodes) - TOP) + (1 if entry.other_nodes else 0),
            more_objects=max(0, len(entry.objects) - TOP) + (1 if entry.other_objects else 0),
            samples=list(entry.samples),
        ))
    return out


def collection_of(tally: Tally | None, info: dict[str, str]) -> Collection:
    if tally is None:
        return Collection(collected=False)
    return Collection(collected=True, since=moment_of(info.get("since", "")), started=moment_of(info.get("started", "")),
                      flushed_at=moment_of(info.get("flushed_at", "")), relists=int(info.get("relists") or 0),
                      events=tally.events, occurrences=tally.total)


def build_report(
    run: Run, *, now: ClusterNow, tally: Tally | None, info: dict[str, str], policy: Policy, due: str | None = None,
    metrics: MetricView | None = None, helm: HelmCheck | None = None,
) -> StabilityReport:
    baseline = baseline_of(run)
    events = event_summaries(tally or Tally())
    drops = judging.capacity_drops(baseline, now)
    restarted = judging.restarts(baseline, now)
    pending = judging.pending_claims(baseline, now, older_than=duration_seconds(policy.reports.claims_pending_after))
    lost = judging.lost_claims(baseline, now)
    found = judging.findings(baseline, now, events=events, drops=drops, restarted=restarted, pending=pending, lost=lost)
    found += metric_findings(metrics, unknown=policy.verify.unknown)
    gaps = metrics.gaps if metrics is not None and policy.verify.unknown != "fail" else []
    notes = list(now.notes) + notes_of(helm) + gaps
    collection = collection_of(tally, info)
    if tally is None:
        notes.append("no bot process collected this run's events, so only the cluster's state now is judged")
    elif collection.started and collection.since and collection.started - collection.since > LATE:
        notes.append(f"the bot began watching events {human_duration(collection.started - collection.since)} after "
                     "the promotion: events older than the API server's event TTL (1 h by default) may be missing")
    kubelet = next((e for e in events if e.reason == "KubeletRestart"), None)
    if kubelet is not None:
        where = ", ".join(c.name for c in kubelet.nodes)
        notes.append(f"the kubelet restarted {kubelet.count} time(s) on {where}: plugin registrations were reset")
    return StabilityReport(
        warnings=warnings_of(helm, run.target.ref),
        run_id=run.id, target=run.target.ref, cluster=run.target.cluster, image=run.image, due=due,
        generated_at=now.taken_at, window_start=promoted_at(run), window_end=now.taken_at,
        verdict=judging.verdict_of(found), findings=found, events=events, collection=collection,
        restarts=restarted, capacity_drops=drops, claims_pending=pending, nodes=judging.comparisons(baseline, now),
        claims_lost=lost, notes=notes, hourly=hourly_counts(tally or Tally(), promoted_at(run)),
        gpu_samples=gpu_samples(baseline, tally, now, promoted_at(run)), metrics=metrics,
    )


def report_of(
    run: Run, *, cluster: Cluster, tally: Tally | None, info: dict[str, str], policy: Policy, due: str | None = None,
) -> StabilityReport:
    """The report of ``run`` now: its collected events and the cluster's state."""
    check_reportable(run)
    baseline = baseline_of(run)
    return build_report(run, now=read_now(cluster, baseline), tally=tally, info=info, policy=policy, due=due,
                        helm=helm_check.check(cluster, run), metrics=metrics_now(run, with_gpus(list(baseline.nodes), baseline=baseline.nodes),
                                                   tally=tally, policy=policy))


def metrics_now(run: Run, nodes: list[str], *, tally: Tally | None, policy: Policy) -> MetricView | None:
    """The metric view of ``run`` (None without ``prometheus`` in the policy): Prometheus asked now."""
    source = client_of(policy.prometheus)
    if source is None:
        return None
    try:
        now, error = sample(source, nodes), ""
    except MetricsUnavailable as exc:
        now, error = None, str(exc)
    return view_of(run.progress, nodes=nodes, hourly=tally.metrics if tally else {}, now=now, error=error)


def metric_sampler(policy: Policy) -> Callable[[list[str]], dict[str, dict[str, float]]] | None:
    """What the collector samples each hour for the metric view (None without ``prometheus``)."""
    source = client_of(policy.prometheus)
    if source is None:
        return None
    return lambda nodes: sample(source, nodes)
