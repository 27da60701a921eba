"""The stability report's metric view: XID and ECC errors per node and hour, workload GPU
utilisation before the run and now, read from the policy's Prometheus.

Prometheus stamps its samples with its own (real) time, so the view never asks it for a
range: the values come from instant queries taken at the run's own moments and kept in the
run: before the run (the canary's ``metrics_before``), at the promotion
(``metrics_promoted``), each hour of monitoring (the collector's hourly sample, in the
tally) and now (at report time). Counts per hour are the differences between consecutive
samples. :func:`sample` queries (the source handed in); the rest is pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from runbooks.errors import plural
from runbooks.metrics import MetricSource
from runbooks.metrics.judging import measure
from runbooks.metrics.spec import DEFAULT_CHECKS
from runbooks.stability.reports import Finding, MetricHour, MetricNode, MetricView
from runbooks.stability.tallying import hour_moment

XID, ECC, UTIL = (c.name for c in DEFAULT_CHECKS)
SHOWN = 5


def sample(source: MetricSource, nodes: Sequence[str]) -> dict[str, dict[str, float]]:
    """The view's values on ``nodes`` now: ``{check: {node: value}}`` (MetricsUnavailable if no answer)."""
    return {spec.name: measure(source, spec, nodes, window=60) for spec in DEFAULT_CHECKS}


def _values(recorded: Any) -> dict[str, dict[str, float]]:
    if not isinstance(recorded, dict) or recorded.get("error"):
        return {}
    return {k: {n: float(v) for n, v in by.items()} for k, by in (recorded.get("values") or {}).items()}


def view_of(progress: dict[str, Any], *, nodes: Sequence[str], hourly: dict[str, dict[str, dict[str, float]]],
            now: dict[str, dict[str, float]] | None, error: str = "") -> MetricView:
    """The view from the run's recorded values, the tally's hourly samples and ``now`` (None: no answer, ``error``)."""
    before, promoted = _values(progress.get("metrics_before")), _values(progress.get("metrics_promoted"))
    start = promoted or before or (hourly[min(hourly)] if hourly else {})
    current = now or {}
    rows = []
    for node in sorted(nodes):
        def at(values: dict[str, dict[str, float]], check: str, node: str = node) -> float | None:
            return values.get(check, {}).get(node)

        rows.append(MetricNode(node=node, xid_start=at(start, XID), xid_now=at(current, XID), ecc_start=at(start, ECC),
                               ecc_now=at(current, ECC), util_before=at(before, UTIL), util_now=at(current, UTIL)))
    hours: list[MetricHour] = []
    previous = {check: dict(start.get(check, {})) for check in (XID, ECC)}
    for hour in sorted(hourly):
        for node in sorted(set(hourly[hour].get(XID, {})) | set(hourly[hour].get(ECC, {}))):
            counts = []
            for check in (XID, ECC):
                value = hourly[hour].get(check, {}).get(node)
                last = previous[check].get(node)
                counts.append(max(0.0, value - last) if value is not None and last is not None else 0.0)
                if value is not None:
                    previous[check][node] = value
            if any(counts):
                hours.append(MetricHour(hour=hour_moment(hour), node=node, xid=counts[0], ecc=counts[1]))
    return MetricView(nodes=rows, hours=hours, error=error, recorded=bool(start))


def metric_findings(view: MetricView | None) -> list[Finding]:
    """New XID or ECC errors on a node since the promotion (failing); a node's workload GPU
    utilisation under half of what it was before the run (degraded)."""
    if view is None:
        return []
    out: list[Finding] = []
    for label, code, new in (("XID", "xid-errors", lambda r: _new(r.xid_start, r.xid_now)),
                             ("double-bit ECC", "ecc-errors", lambda r: _new(r.ecc_start, r.ecc_now))):
        bad = [(r.node, n) for r in view.nodes if (n := new(r)) > 0]
        if bad:
            said = ", ".join(f"{node} ({plural(int(n), label + ' error')})" for node, n in bad[:SHOWN])
            out.append(Finding(severity="failing", code=code, nodes=[b[0] for b in bad],
                               text=f"new {label} errors since the promotion on {said}"))
    dropped = [r for r in view.nodes if r.util_before and r.util_now is not None and r.util_now < r.util_before / 2]
    if dropped:
        said = ", ".join(f"{r.node} ({r.util_before:g}% -> {r.util_now:g}%)" for r in dropped[:SHOWN])
        out.append(Finding(severity="degraded", code="gpu-utilisation-dropped", nodes=[r.node for r in dropped],
                           text=f"workload GPU utilisation fell below half of what it was before the run on {said}"))
    return out


def _new(start: float | None, now: float | None) -> float:
    return 0.0 if now is None or start is None else now - start
