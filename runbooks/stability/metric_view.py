"""The stability report's metric view: new XIDs and double-bit ECC errors per node and hour,
workload GPU utilisation before the run and now, read from the policy's Prometheus.

Prometheus stamps its samples with its own (real) time, so the view never asks it for a
range: the values come from instant queries taken at the run's own moments and kept in the
run: before the run (the canary's ``metrics_before``), at the promotion
(``metrics_promoted``), each hour of monitoring (the collector's hourly sample, in the
tally) and now (at report time). :func:`sample` queries (the source handed in); the rest is pure.

XIDs are read from ``DCGM_FI_DEV_XID_ERRORS`` (``xid-last``: the code of each GPU's last XID,
in both of dcgm-exporter's default counters CSVs): a GPU whose code changed to one that is not
0 since the promotion raised at least one XID. ``DCGM_EXP_XID_ERRORS_COUNT`` counts only a
few minutes back, so it cannot tell a day's XIDs from hourly samples. A value that was not
measured (no series, the exporter exports no such field) is ``None`` and the report says
"not measured", never 0.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

from runbooks.errors import plural
from runbooks.metrics import MetricSource, key_text, node_of
from runbooks.metrics.judging import measure
from runbooks.metrics.probing import probe, probed_metrics
from runbooks.metrics.spec import DEFAULT_CHECKS, ECC_DBE, XID_GAUGE, XID_LAST, MetricCheckSpec
from runbooks.stability.reports import Finding, MetricHour, MetricNode, MetricView
from runbooks.stability.tallying import hour_moment

_, ECC_SPEC, UTIL_SPEC = DEFAULT_CHECKS
XID, ECC, UTIL = XID_LAST.name, ECC_SPEC.name, UTIL_SPEC.name
VIEW: tuple[MetricCheckSpec, ...] = (XID_LAST, ECC_SPEC, UTIL_SPEC)
SHOWN = 5


def sample(source: MetricSource, nodes: Sequence[str]) -> dict[str, dict[str, float]]:
    """The view's values on ``nodes`` now: ``{check: {key: value}}``, a check left out when no
    node in scope exports its field (MetricsUnavailable if no answer)."""
    found = probe(source, probed_metrics(VIEW), nodes)
    out = {}
    for spec in VIEW:
        if len(found.blind(spec, nodes)) < len(nodes):
            out[spec.name] = measure(source, spec, nodes, window=60, labels=found.labels)
    return out


def _values(recorded: Any) -> dict[str, dict[str, float]]:
    """The values recorded before the run or at the promotion, the ECC check's under the view's
    name whatever the policy named it (the one whose query reads the ECC field)."""
    if not isinstance(recorded, dict) or recorded.get("error"):
        return {}
    values = {k: {n: float(v) for n, v in by.items()} for k, by in (recorded.get("values") or {}).items()}
    queries: dict[str, Any] = recorded["queries"] if isinstance(recorded.get("queries"), dict) else {}
    ecc = next((name for name, query in queries.items() if ECC_DBE in str(query) and name in values), None)
    if ecc is not None and ECC not in values:
        values[ECC] = values[ecc]
    return values


def _by_node(values: dict[str, float]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for key, value in values.items():
        out.setdefault(node_of(key), {})[key] = value
    return out


def new_xids(start: dict[str, float] | None, now: dict[str, float] | None) -> list[str] | None:
    """GPUs (``gpu-node2 GPU 0: XID 79``) whose last XID code changed to one that is not 0
    between ``start`` and ``now`` (keys of one node), and GPUs that appeared since with a code
    that is not 0 (an XID that cannot be dated after the promotion is not let pass); None when
    either was not measured."""
    if start is None or now is None:
        return None
    return list(_xid_changes(start, now).values())


def _xid_changes(start: dict[str, float], now: dict[str, float]) -> dict[str, str]:
    """GPU key -> how its new XID reads, for :func:`new_xids` (sorted by key)."""
    return {k: f"{key_text(k)}: XID {code:g}" + ("" if k in start else " (no value at the promotion)")
            for k, code in sorted(now.items()) if code and start.get(k) != code}


def new_errors(start: dict[str, float] | None, now: dict[str, float] | None) -> float | None:
    """Double-bit ECC errors since ``start`` on the GPUs of one node, each GPU's own count
    compared (a volatile count that went down was reset: its value now is all new; a GPU with
    no value at the start counts all it holds); None when either was not measured."""
    if start is None or now is None:
        return None
    return sum(value - start[k] if k in start and value >= start[k] else value for k, value in now.items())


def vanished(start: dict[str, float] | None, now: dict[str, float] | None) -> list[str]:
    """GPUs (``gpu-node1 GPU 1``) that had a value at the start and have none now."""
    if not start or now is None:
        return []
    return [key_text(k) for k in sorted(start) if k not in now]


def _finite(values: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """``values`` without the NaN, infinite and negative ones (no count or XID code is: such a GPU
    is not measured)."""
    return {check: {k: v for k, v in by.items() if math.isfinite(v) and v >= 0} for check, by in values.items()}


def _seen(node: str, check: str, steps: list[dict[str, dict[str, float]]]) -> list[dict[str, float]] | None:
    """``node``'s values of ``check`` in each step that saw the node; None unless the first step
    (the promotion) and the last (now) both did."""
    taken = [_by_node(step[check]).get(node, {}) for step in steps if check in step]
    if len(taken) < 2 or check not in steps[0] or check not in steps[-1] or not taken[0] or not taken[-1]:
        return None
    return [values for values in taken if values]


def _walk(node: str, steps: list[dict[str, dict[str, float]]]) -> tuple[list[str] | None, float | None]:
    """(new XIDs, new ECC errors) of ``node`` over ``steps`` (the promotion's values, the hourly
    samples, now), each pair of consecutive samples that saw it compared GPU by GPU, so a count
    reset or a code raised again between two samples is not lost (a GPU's XID read as its latest
    new code); None where the first or last step did not measure the node's check."""
    xids, eccs = _seen(node, XID, steps), _seen(node, ECC, steps)
    codes: list[str] | None = None
    if xids is not None:
        latest: dict[str, str] = {}
        for earlier, later in itertools.pairwise(xids):
            latest.update(_xid_changes(earlier, later))
        codes = [latest[k] for k in sorted(latest)]
    errors = None if eccs is None else sum(new_errors(a, b) or 0.0 for a, b in itertools.pairwise(eccs))
    return codes, errors


def view_of(progress: dict[str, Any], *, nodes: Sequence[str], hourly: dict[str, dict[str, dict[str, float]]],
            now: dict[str, dict[str, float]] | None, error: str = "") -> MetricView:
    """The view from the run's recorded values, the tally's hourly samples and ``now`` (None: no answer, ``error``).

    A GPU that had values at the promotion and has none now is ``vanished`` (a node all of whose
    GPUs are gone too, or a check the exporter no longer exports at all). When Prometheus did not
    answer now, the hourly samples are judged as far as they go and nothing is said vanished.
    What could not be measured, and why, is in ``gaps`` (:func:`metric_findings` decides what it
    makes of them): a GPU node without values at the promotion or now, a check the run did not
    record, nothing recorded at all (the first hourly sample is then no baseline: it is not used)."""
    before, promoted = _values(progress.get("metrics_before")), _values(progress.get("metrics_promoted"))
    start = _finite(promoted or before)
    current = _finite(now or {})
    if now is not None:  # asked: a check the exporter no longer exports at all answered nothing
        current = {**{check: {} for check in (XID, ECC) if check in start}, **current}
    samples = [_finite(hourly[hour]) for hour in sorted(hourly)]
    steps = [start, *samples, current] if now is not None else [start, *samples]
    gaps: list[str] = []
    if not start:
        gaps.append("no GPU metrics were recorded before the run or at the promotion (Prometheus did not answer, or "
                    "the policy's checks read none of XIDs and ECC errors): XIDs and ECC errors since the promotion "
                    "are not measured")
    elif now is None:
        gaps.append(f"Prometheus did not answer now ({error or 'no answer'}): judged up to the last hourly sample")
    for check, said, field in ((XID, "XIDs", XID_GAUGE), (ECC, "double-bit ECC errors", ECC_DBE)):
        if start and check not in start:
            gaps.append(f"{said} not measured: the run recorded no {said} at the promotion (no such check in "
                        "verify.metrics)")
        elif start and not start[check]:
            gaps.append(f"{said} not measured: no node's dcgm-exporter exported {field} at the promotion (add it to "
                        "the exporter's counters)")
    rows = []
    for node in sorted(nodes):
        def at(values: dict[str, dict[str, float]], check: str, node: str = node) -> float | None:
            by = values.get(check)
            if by is None:
                return None
            found = [v for k, v in by.items() if node_of(k) == node]
            return sum(found) if found else None

        codes, errors = _walk(node, steps) if start and len(steps) > 1 else (None, None)
        gone = sorted({*vanished(_by_node(start.get(XID, {})).get(node), _by_node(current.get(XID, {})).get(node, {})
                                 if XID in current else None),
                       *vanished(_by_node(start.get(ECC, {})).get(node), _by_node(current.get(ECC, {})).get(node, {})
                                 if ECC in current else None)})
        latched = [k for k, code in sorted(_by_node(start.get(XID, {})).get(node, {}).items()) if code]
        if latched:  # the gauge holds the last code: the same XID raised again leaves no trace in it
            gaps.append(f"XIDs on {', '.join(key_text(k) for k in latched[:3])} not measured: "
                        f"{'its' if len(latched) == 1 else 'their'} last XID at the promotion was not 0, and "
                        "the same XID raised again does not change it (export DCGM_EXP_XID_ERRORS_COUNT)")
        for check, value, said in ((XID, codes, "XIDs"), (ECC, errors, "double-bit ECC errors")):
            if value is None and check in start and start[check] and not gone and now is not None:
                gaps.append(f"{said} on {node} not measured: no values "
                            + ("at the promotion" if not _by_node(start[check]).get(node) else "now"))
        rows.append(MetricNode(node=node, xid_new=None if codes is None else len(codes), xid_codes=codes or [],
                               ecc_start=at(start, ECC), ecc_now=at(current, ECC), ecc_new=errors,
                               vanished=gone, util_before=at(before, UTIL), util_now=at(current, UTIL)))
    hours: list[MetricHour] = []
    last = start
    for hour, sample in zip(sorted(hourly), samples, strict=True):
        for node in sorted({node_of(k) for check in (XID, ECC) for k in sample.get(check, {})}):
            codes, errors = _walk(node, [last, sample])
            if codes or errors:
                hours.append(MetricHour(hour=hour_moment(hour), node=node, xid=len(codes or []), ecc=errors or 0.0))
        last = {check: {**last.get(check, {}), **sample.get(check, {})} for check in {*last, *sample}}
    return MetricView(nodes=rows, hours=hours, error=error, recorded=bool(start), gaps=gaps)


def metric_findings(view: MetricView | None, *, unknown: str = "fail") -> list[Finding]:
    """New XIDs or ECC errors on a node since the promotion (failing); a node's workload GPU
    utilisation under half of what it was before the run, GPUs whose series vanished, and (with
    ``unknown`` ``fail``, policy ``verify.unknown``) anything not measured (degraded): no data is
    never a pass, here as in verify."""
    if view is None:
        return []
    out: list[Finding] = []
    if unknown == "fail" and (view.gaps or view.error):
        said = "; ".join(view.gaps[:3]) or f"Prometheus did not answer: {view.error}"
        more = f" (and {len(view.gaps) - 3} more)" if len(view.gaps) > 3 else ""
        out.append(Finding(severity="degraded", code="gpu-metrics-not-measured",
                           text=f"GPU metrics not measured, so not judged: {said}{more}"))
    xids = [r for r in view.nodes if r.xid_new]
    if xids:
        said = ", ".join(code for r in xids for code in r.xid_codes[:2])
        out.append(Finding(severity="failing", code="xid-errors", nodes=[r.node for r in xids],
                           text=f"new XID errors since the promotion: {said}"))
    ecc = [(r.node, r.ecc_new) for r in view.nodes if r.ecc_new]
    if ecc:
        said = ", ".join(f"{node} ({plural(int(n), 'double-bit ECC error')})" for node, n in ecc[:SHOWN])
        out.append(Finding(severity="failing", code="ecc-errors", nodes=[b[0] for b in ecc],
                           text=f"new double-bit ECC errors since the promotion on {said}"))
    gone = [r for r in view.nodes if r.vanished]
    if gone:
        said = ", ".join(g for r in gone for g in r.vanished[:2])
        out.append(Finding(severity="degraded", code="gpu-metrics-vanished", nodes=[r.node for r in gone],
                           text=f"GPUs whose metrics were there at the promotion and are gone now (not measured): "
                                f"{said}"))
    dropped = [r for r in view.nodes if r.util_before and r.util_now is not None and r.util_now < r.util_before / 2]
    if dropped:
        said = ", ".join(f"{r.node} ({r.util_before:g}% -> {r.util_now:g}%)" for r in dropped[:SHOWN])
        out.append(Finding(severity="degraded", code="gpu-utilisation-dropped", nodes=[r.node for r in dropped],
                           text=f"workload GPU utilisation fell below half of what it was before the run on {said}"))
    return out
