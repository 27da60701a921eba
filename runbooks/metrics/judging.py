"""Measuring and judging the metric checks, pure but for the :class:`MetricSource` handed in.

:func:`measure` runs a check's query for the nodes in scope (``$nodes``: one query;
``$node``: one per node, at most :data:`PER_NODE`); :func:`record_baseline` keeps every
check's values before the run (stored in the run's progress at the canary's start);
:class:`MetricWatch` measures each check every ``interval`` of verify's window and once at
its end, then judges it: ``fail`` naming each node and its value once more measurements
failed than ``failure_limit`` allows, ``unknown`` with the reason when the source did not
answer (or no value before the run exists to compare with), else ``pass``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from runbooks.engine.recording import failed, passed, unknown
from runbooks.engine.steps import Check
from runbooks.errors import plural
from runbooks.metrics import MetricSource, MetricsUnavailable
from runbooks.metrics.spec import MetricCheckSpec

PER_NODE = 50
"""A ``$node`` query runs once per node for at most this many nodes (use ``$nodes`` for more)."""
SHOWN = 5
"""Nodes a step message names at most (the evidence keeps them all)."""


def _regex(nodes: Sequence[str]) -> str:
    """``$nodes``: the node names as a PromQL regex alternation (dots escaped)."""
    return "|".join(n.replace(".", "\\\\.") for n in sorted(nodes))


def render(query: str, *, nodes: Sequence[str], window: float, node: str = "",
           pods: PodScope | None = None) -> str:
    """``query`` with its placeholders filled; ``$pods``/``$namespace`` match any pod (``.+``)
    unless ``pods`` names the ones in scope."""
    return (query.replace("$nodes", _regex(nodes)).replace("$node", node)
            .replace("$pods", _regex(pods.names) if pods else ".+")
            .replace("$namespace", _regex([pods.namespace]) if pods else ".+")
            .replace("$window", f"{max(1, round(window))}s"))


@dataclass(frozen=True)
class PodScope:
    """The pods a query's ``$pods`` and ``$namespace`` stand for (one namespace)."""

    namespace: str
    names: tuple[str, ...]


def measure(source: MetricSource, spec: MetricCheckSpec, nodes: Sequence[str], *, window: float,
            pods: PodScope | None = None) -> dict[str, float]:
    """``{node: value}`` of ``spec`` on ``nodes`` now (nodes the answer does not name are left
    out); :class:`MetricsUnavailable` when the source does not answer."""
    wanted = set(nodes)
    if "$nodes" not in spec.query and "$node" in spec.query:
        found: dict[str, float] = {}
        for node in sorted(wanted)[:PER_NODE]:
            answer = source.vector(render(spec.query, nodes=nodes, window=window, node=node, pods=pods))
            if node in answer:
                found[node] = answer[node]
            elif len(answer) == 1:
                found[node] = next(iter(answer.values()))
        return found
    answer = source.vector(render(spec.query, nodes=nodes, window=window, pods=pods))
    return {n: v for n, v in answer.items() if n in wanted}


def record_baseline(source: MetricSource, specs: Sequence[MetricCheckSpec], nodes: Sequence[str], *,
                    window: float, at: dt.datetime) -> dict[str, Any]:
    """Every check's values on ``nodes`` before the run: ``{taken_at, values: {check: {node: v}}}``,
    with ``error`` (the reason) when the source did not answer."""
    values: dict[str, dict[str, float]] = {}
    try:
        for spec in specs:
            values[spec.name] = measure(source, spec, nodes, window=window)
    except MetricsUnavailable as exc:
        return {"taken_at": at.isoformat(), "values": values, "error": str(exc)}
    return {"taken_at": at.isoformat(), "values": values}


def show(value: float, unit: str) -> str:
    """``3 XIDs``, ``1 XID``, ``40% workload GPU utilisation`` (units are given in the plural)."""
    text = f"{value:g}"
    if not unit:
        return text
    if unit.startswith("%"):
        return f"{text}{unit}"
    return f"{text} {unit[:-1] if value == 1 and unit.endswith('s') else unit}"


@dataclass
class _Tally:
    spec: MetricCheckSpec
    measurements: int = 0
    failures: int = 0
    worst: dict[str, tuple[float, float]] = field(default_factory=dict)
    """node -> (value, bound) of its latest failed measurement."""
    last: dict[str, float] = field(default_factory=dict)
    error: str = ""
    not_compared: set[str] = field(default_factory=set)
    next_at: float = 0.0


class MetricWatch:
    """The metric checks over verify's window: :meth:`tick` as the window samples, :meth:`checks` at its end."""

    def __init__(self, source: MetricSource, specs: Sequence[MetricCheckSpec], nodes: Sequence[str], *,
                 window: float, scope: str, baseline: dict[str, Any] | None,
                 elapsed: Callable[[], float]) -> None:
        self.source, self.nodes, self.window, self.scope = source, list(nodes), window, scope
        self.elapsed = elapsed
        self.tallies = [_Tally(spec) for spec in specs]
        self.before: dict[str, dict[str, float]] = {}
        self.before_error = ""
        if baseline is not None:
            self.before = {k: {n: float(v) for n, v in vals.items()} for k, vals in (baseline.get("values") or {}).items()}
            self.before_error = str(baseline.get("error") or "")
        else:  # outside a run: the values at the window's start are the baseline
            taken = record_baseline(source, specs, self.nodes, window=window, at=dt.datetime.now(dt.UTC))
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
            values = measure(self.source, spec, self.nodes, window=self.window)
        except MetricsUnavailable as exc:
            tally.error = str(exc)
            return
        tally.measurements += 1
        tally.last, tally.error = values, ""  # a later answer makes up for a missed one
        condition = spec.parsed
        bad: dict[str, tuple[float, float]] = {}
        for node, value in values.items():
            base = self.before.get(spec.name, {}).get(node)
            bound = condition.bound(base)
            if bound is None:
                tally.not_compared.add(node)
            elif not condition.holds(value, bound):
                bad[node] = (value, bound)
        if bad:
            tally.failures += 1
            tally.worst.update(bad)

    def checks(self) -> list[Check]:
        self.tick(final=True)
        return [self._judge(t) for t in self.tallies]

    def _judge(self, tally: _Tally) -> Check:
        spec, name = tally.spec, f"metric:{tally.spec.name}"
        evidence: dict[str, Any] = {"query": spec.query, "condition": spec.condition, "measurements": tally.measurements,
                                    "failed_measurements": tally.failures, "values": dict(sorted(tally.last.items())),
                                    "before": dict(sorted(self.before.get(spec.name, {}).items()))}
        if tally.failures > spec.failure_limit:
            nodes = sorted(tally.worst)
            said = ", ".join(
                f"{n}: {show(tally.worst[n][0], spec.unit)}"
                + (f" (before the run {show(self.before[spec.name][n], spec.unit)})"
                   if spec.parsed.needs_baseline else "")
                for n in nodes[:SHOWN])
            more = f" and {len(nodes) - SHOWN} more" if len(nodes) > SHOWN else ""
            detail = (f"{said}{more}: not {spec.condition} in {tally.failures} of "
                      f"{plural(tally.measurements, 'measurement')} (failure limit {spec.failure_limit})")
            return failed(name, detail, ", ".join(nodes[:SHOWN]) + more, nodes=nodes, **evidence)
        if tally.error:
            return unknown(name, f"Prometheus did not answer, so {spec.name} was not measured: {tally.error}",
                           self.scope, **evidence)
        if spec.parsed.needs_baseline and self.before_error and not self.before.get(spec.name):
            return unknown(name, f"no value before the run to compare with (Prometheus did not answer at the "
                                 f"canary's start: {self.before_error})", self.scope, **evidence)
        compared = sorted(set(tally.last) - tally.not_compared)
        shown = ", ".join(f"{n}: {show(tally.last[n], spec.unit)}" for n in compared[:SHOWN])
        extra = f"; {plural(len(tally.not_compared), 'node')} without a value before the run" if tally.not_compared else ""
        if not tally.last:
            return passed(name, f"no series for the nodes in scope ({spec.condition} holds vacuously){extra}",
                          self.scope, **evidence)
        return passed(name, f"{spec.condition} on {plural(len(compared), 'node')} ({shown}"
                            f"{' …' if len(compared) > SHOWN else ''}){extra}", self.scope, **evidence)
