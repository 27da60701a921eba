"""Measuring and judging the metric checks, pure but for the :class:`MetricSource` handed in.

:func:`measure` runs a check's query for the nodes in scope (``$nodes``: one query;
``$node``: one per node, at most :data:`PER_NODE`); :func:`record_baseline` keeps every
check's values before the run (stored in the run's progress at the canary's start), with the
labels and queries it measured them with; :class:`MetricWatch` measures each check every
``interval`` of verify's window and once at its end, then judges it:

- ``fail`` naming each node (or GPU) and its value once more measurements failed than
  ``failure_limit`` allows;
- ``unknown`` with the reason when the source did not answer, when a node in scope has
  nothing to judge (its exporter exports none of the check's series, its series vanished
  after the values before the run were taken, or it had none at all), when a value cannot be
  compared (no value before the run), and for a workload check when no workload used a GPU
  on any node in scope;
- ``pass`` only when every node in scope was measured and met the condition.

No data is never a pass: a check that cannot fail says so.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from runbooks.engine.recording import failed, passed, unknown
from runbooks.engine.steps import Check
from runbooks.errors import plural
from runbooks.metrics import MetricSource, MetricsUnavailable, key_text, node_of, node_regex
from runbooks.metrics.probing import Probe, SeriesLabels, adapt, probe, probed_metrics
from runbooks.metrics.spec import XID_LAST, MetricCheckSpec

PER_NODE = 50
"""A ``$node`` query runs once per node for at most this many nodes (use ``$nodes`` for more)."""
SHOWN = 5
"""Nodes a step message names at most (the evidence keeps them all)."""


def render(query: str, *, nodes: Sequence[str], window: float, node: str = "",
           pods: PodScope | None = None, labels: SeriesLabels | None = None) -> str:
    """``query`` with its placeholders filled; ``$pods``/``$namespace`` match any pod (``.+``)
    unless ``pods`` names the ones in scope; the ``$*_label`` ones from ``labels``."""
    labels = labels or SeriesLabels()
    return (query.replace("$node_label", labels.node).replace("$pod_label", labels.pod)
            .replace("$namespace_label", labels.namespace)
            .replace("$nodes", node_regex(nodes)).replace("$node", node)
            .replace("$pods", node_regex(pods.names) if pods else ".+")
            .replace("$namespace", node_regex([pods.namespace]) if pods else ".+")
            .replace("$window", f"{max(1, round(window))}s"))


@dataclass(frozen=True)
class PodScope:
    """The pods a query's ``$pods`` and ``$namespace`` stand for (one namespace)."""

    namespace: str
    names: tuple[str, ...]


def is_workload_check(spec: MetricCheckSpec) -> bool:
    """A check over pods (its query names ``$pods``) rather than over nodes."""
    return "$pods" in spec.query


def measure(source: MetricSource, spec: MetricCheckSpec, nodes: Sequence[str], *, window: float,
            pods: PodScope | None = None, labels: SeriesLabels | None = None) -> dict[str, float]:
    """``{key: value}`` of ``spec`` on ``nodes`` now (keys of nodes the answer does not name are
    left out); :class:`MetricsUnavailable` when the source does not answer."""
    wanted = set(nodes)
    if "$nodes" not in spec.query and "$node" in spec.query:
        found: dict[str, float] = {}
        for node in sorted(wanted)[:PER_NODE]:
            answer = source.vector(render(spec.query, nodes=nodes, window=window, node=node, pods=pods, labels=labels))
            if len(answer) == 1 and node_of(next(iter(answer))) not in wanted:  # a scalar, or a node-less row
                found[node] = next(iter(answer.values()))
            else:
                found.update({k: v for k, v in answer.items() if node_of(k) == node})
        return found
    answer = source.vector(render(spec.query, nodes=nodes, window=window, pods=pods, labels=labels))
    return {k: v for k, v in answer.items() if node_of(k) in wanted}


def record_baseline(source: MetricSource, specs: Sequence[MetricCheckSpec], nodes: Sequence[str], *,
                    window: float, at: dt.datetime, found: Probe | None = None) -> dict[str, Any]:
    """Every check's values on ``nodes`` before the run: ``{taken_at, values: {check: {key: v}},
    labels, queries: {check: query}}``, with ``error`` (the reason) when the source did not answer."""
    found = found or probe(source, probed_metrics(specs), nodes)
    fitted = adapt(specs, found)
    values: dict[str, dict[str, float]] = {}
    recorded: dict[str, Any] = {"taken_at": at.isoformat(), "values": values, "labels": found.labels.as_json(),
                                "queries": {spec.name: spec.query for spec in fitted}}
    if all(spec.name != XID_LAST.name for spec in fitted):
        fitted = [*fitted, XID_LAST]  # what the stability reports tell new XIDs from, whatever the checks are
    try:
        for spec in fitted:
            values[spec.name] = measure(source, spec, nodes, window=window, labels=found.labels)
    except MetricsUnavailable as exc:
        return {**recorded, "error": str(exc)}
    return recorded


def show(value: float, unit: str) -> str:
    """``3 XIDs``, ``1 XID``, ``40% workload GPU utilisation``, ``last XID 79`` (units are given
    in the plural; ``{}`` marks where the number goes)."""
    text = f"{value:g}"
    if not unit:
        return text
    if "{}" in unit:
        return unit.replace("{}", text)
    if unit.startswith("%"):
        return f"{text}{unit}"
    return f"{text} {unit[:-1] if value == 1 and unit.endswith('s') else unit}"


@dataclass
class _Tally:
    spec: MetricCheckSpec
    measurements: int = 0
    failures: int = 0
    worst: dict[str, tuple[float, float | None]] = field(default_factory=dict)
    """key -> (value, value before the run) of its latest failed measurement."""
    last: dict[str, float] = field(default_factory=dict)
    error: str = ""
    not_compared: set[str] = field(default_factory=set)
    next_at: float = 0.0
    previous: dict[str, float] = field(default_factory=dict)
    """Each key's value at the measurement before (a ``windowed`` check fails on a rise from it)."""
    rose: set[str] = field(default_factory=set)
    """Keys whose latest failure was a rise from the measurement before (``worst`` holds that value)."""


class MetricWatch:
    """The metric checks over verify's window: :meth:`tick` as the window samples, :meth:`checks` at its end."""

    def __init__(self, source: MetricSource, specs: Sequence[MetricCheckSpec], nodes: Sequence[str], *,
                 window: float, scope: str, baseline: dict[str, Any] | None,
                 elapsed: Callable[[], float], found: Probe | None = None) -> None:
        self.source, self.nodes, self.window, self.scope = source, list(nodes), window, scope
        self.elapsed = elapsed
        self.found = found or probe(source, probed_metrics(specs), self.nodes)
        self.labels = self.found.labels
        prefer = baseline.get("queries") if isinstance(baseline, dict) else None
        self.tallies = [_Tally(spec) for spec in adapt(specs, self.found,
                                                         prefer=prefer if isinstance(prefer, dict) else None)]
        self.before: dict[str, dict[str, float]] = {}
        self.before_error = ""
        if baseline is not None:
            self.before = {k: {n: float(v) for n, v in vals.items()} for k, vals in (baseline.get("values") or {}).items()}
            self.before_error = str(baseline.get("error") or "")
        else:  # outside a run: the values at the window's start are the baseline
            taken = record_baseline(source, specs, self.nodes, window=window, at=dt.datetime.now(dt.UTC),
                                    found=self.found)
            self.before, self.before_error = taken["values"], str(taken.get("error") or "")

    def tick(self, *, final: bool = False) -> None:
        now = self.elapsed()
        for tally in self.tallies:
            if not final and now < tally.next_at:
                continue
            tally.next_at = now + tally.spec.every
            self._measure(tally)

    def _measure(self, tally: _Tally) -> None:
        spec = tally.spec
        try:
            values = measure(self.source, spec, self.nodes, window=self.window, labels=self.labels)
        except MetricsUnavailable as exc:
            tally.error = str(exc)
            return
        tally.measurements += 1
        tally.last, tally.error = values, ""  # a later answer makes up for a missed one
        condition = spec.parsed
        bad: dict[str, tuple[float, float | None]] = {}
        for key, value in values.items():
            base = self.before.get(spec.name, {}).get(key)
            verdict = condition.judge(value, base)
            if verdict is None:
                tally.not_compared.add(key)
            elif not verdict:
                bad[key] = (value, base)
                tally.rose.discard(key)
            elif spec.windowed and key in tally.previous and value > tally.previous[key]:
                bad[key] = (value, tally.previous[key])  # a new event, whatever left the window meanwhile
                tally.rose.add(key)
        tally.previous = dict(values)
        if bad:
            tally.failures += 1
            tally.worst.update(bad)

    def checks(self) -> list[Check]:
        self.tick(final=True)
        return [self._judge(t) for t in self.tallies]

    def blind(self, tally: _Tally) -> dict[str, str]:
        """node -> why the check has nothing to judge there, for the nodes in scope."""
        spec = tally.spec
        missing = {} if self.found.error else self.found.blind(spec, self.nodes)
        have = {node_of(k) for k in tally.last}
        vanished: dict[str, list[str]] = {}
        for key in sorted(set(self.before.get(spec.name, {})) - set(tally.last)):  # a node, or one of its GPUs
            vanished.setdefault(node_of(key), []).append(key)
        out: dict[str, str] = {}
        for node in self.nodes:
            gone = vanished.get(node)
            if gone and node not in have:
                out[node] = (f"{node} had series before the run and has none now (its workloads gone, or its "
                             "exporter down or no longer scraped)")
            elif gone:
                out[node] = (f"{', '.join(key_text(k) for k in gone[:SHOWN])} had series before the run and "
                             f"{'has' if len(gone) == 1 else 'have'} none now (the GPU gone from its exporter, "
                             "or its series dropped)")
            elif node in missing:
                out[node] = missing[node]
            elif node not in have and node in self.unasked(spec):
                out[node] = (f"{node} was not asked: a $node query runs for {PER_NODE} nodes at most "
                             "(use $nodes)")
            elif node not in have and not is_workload_check(spec):
                out[node] = f"the query answered no series for {node}"
        return out

    def unasked(self, spec: MetricCheckSpec) -> set[str]:
        """The nodes in scope a per-node (``$node``) query is not run for (past :data:`PER_NODE`)."""
        if "$nodes" in spec.query or "$node" not in spec.query:
            return set()
        return set(sorted(self.nodes)[PER_NODE:])

    def _judge(self, tally: _Tally) -> Check:
        spec, name = tally.spec, f"metric:{tally.spec.name}"
        before = self.before.get(spec.name, {})
        evidence: dict[str, Any] = {"query": spec.query, "condition": spec.condition, "measurements": tally.measurements,
                                    "failed_measurements": tally.failures, "values": dict(sorted(tally.last.items())),
                                    "before": dict(sorted(before.items())), "labels": self.labels.as_json()}
        if tally.failures > spec.failure_limit:
            keys = sorted(tally.worst)
            said = ", ".join(f"{key_text(k)}: {show(tally.worst[k][0], spec.unit)}{_compared(tally, k)}"
                             for k in keys[:SHOWN])
            more = f" and {len(keys) - SHOWN} more" if len(keys) > SHOWN else ""
            nodes = sorted({node_of(k) for k in keys})
            rule = f"{spec.condition}, and no rise between measurements" if spec.windowed else spec.condition
            detail = (f"{said}{more}: not {rule} in {tally.failures} of "
                      f"{plural(tally.measurements, 'measurement')} (failure limit {spec.failure_limit})")
            return failed(name, detail, ", ".join(nodes[:SHOWN]) + (f" and {len(nodes) - SHOWN} more"
                                                                     if len(nodes) > SHOWN else ""),
                          nodes=nodes, **evidence)
        if tally.error:
            return unknown(name, f"Prometheus did not answer, so {spec.name} was not measured: {tally.error}",
                           self.scope, **evidence)
        if spec.parsed.needs_baseline and self.before_error and not before:
            return unknown(name, f"no value before the run to compare with (Prometheus did not answer at the "
                                 f"canary's start: {self.before_error})", self.scope, **evidence)
        blind = self.blind(tally)
        if blind:
            nodes = sorted(blind)
            said = "; ".join(blind[n] for n in nodes[:SHOWN])
            more = f" (and {plural(len(nodes) - SHOWN, 'more node')})" if len(nodes) > SHOWN else ""
            return unknown(name, f"{spec.name} not measured on {plural(len(nodes), 'node')}: {said}{more}",
                           ", ".join(nodes[:SHOWN]), blind=blind, **evidence)
        compared = sorted(set(tally.last) - tally.not_compared)
        if tally.not_compared and not is_workload_check(spec):
            keys = sorted(tally.not_compared)
            return unknown(name, f"{', '.join(key_text(k) for k in keys[:SHOWN])}"
                                 f"{' …' if len(keys) > SHOWN else ''}: no value before the run to compare with, "
                                 f"so {spec.condition} could not be judged", self.scope, **evidence)
        if not compared:
            return unknown(name, "no workload used a GPU on the nodes in scope before the run: nothing to compare "
                                 f"({spec.condition} cannot be judged)", self.scope, **evidence)
        values = ", ".join(f"{key_text(k)}: {show(tally.last[k], spec.unit)}" for k in compared[:SHOWN])
        extra = (f"; {plural(len(tally.not_compared), 'node')} had no workload on a GPU before the run"
                 if tally.not_compared else "")
        return passed(name, f"{spec.condition} on {plural(len(compared), 'series', 'series')} ({values}"
                            f"{' …' if len(compared) > SHOWN else ''}){extra}", self.scope, **evidence)


def _compared(tally: _Tally, key: str) -> str:
    """What ``key``'s failed value was compared with, as the failure says it."""
    spec, base = tally.spec, tally.worst[key][1]
    if base is None:
        return ""
    if key in tally.rose:
        return f" (up from {show(base, spec.unit)} at the measurement before)"
    return f" (before the run {show(base, spec.unit)})" if spec.parsed.needs_baseline else ""

