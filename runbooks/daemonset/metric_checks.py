"""The policy's metric checks in a run: the values before it, the watch over verify's window.

:func:`metrics_before` is called by the canary as it records its baseline: every check's
value on every node of the plugin, stored in the run's progress as ``metrics_before`` (the
node's own baseline that verify and the stability reports compare with). :func:`watch`
gives verify a :class:`~runbooks.metrics.judging.MetricWatch` when the policy names a
Prometheus. :func:`request_checks` tells, before anyone approves, which checks will be blind. The HTTP client comes from :mod:`runbooks.metrics.prometheus`, the only module
that speaks to it. Both measure the plugin's nodes that have GPUs (:func:`with_gpus`): a node
without GPUs runs no dcgm-exporter, so there is nothing to measure there, while a GPU node
without series makes a check ``unknown``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from runbooks.engine.recording import passed, unknown
from runbooks.engine.steps import Check, Clock, StepSettings
from runbooks.errors import plural
from runbooks.inventory.models import MetricCoverage, MetricsInfo, Node
from runbooks.metrics.judging import MetricWatch, record_baseline
from runbooks.metrics.probing import Probe, adapt, probe, probed_metrics
from runbooks.metrics.prometheus import client_of
from runbooks.metrics.spec import DEFAULT_CHECKS, MetricCheckSpec, PrometheusPolicy, metrics_of


def with_gpus(nodes: Sequence[str], *, baseline: Mapping[str, Any] | None = None,
              sample: Mapping[str, Node] | None = None) -> list[str]:
    """``nodes`` less those known to have no GPU: neither GPU hardware nor GPU capacity in
    ``sample`` (the nodes as read now), nor GPU capacity or DRA devices in ``baseline`` (the
    run's baseline's nodes, as models or as stored). A node neither knows is kept."""
    out = []
    for name in nodes:
        seen = (sample or {}).get(name)
        base = (baseline or {}).get(name)
        if base is not None and not isinstance(base, dict):
            base = base.model_dump()
        unknown = seen is None and base is None
        gpus_now = seen is not None and (seen.gpu_hardware or any(seen.capacity.values()))
        gpus_before = base is not None and (any((base.get("capacity") or {}).values())
                                            or any((base.get("slices") or {}).values()))
        if unknown or gpus_now or gpus_before:
            out.append(name)
    return out


def metrics_before(settings: StepSettings, nodes: Sequence[str], *, at: dt.datetime) -> dict[str, Any]:
    """``{"metrics_before": …}`` for the run's progress; nothing without ``prometheus``/checks."""
    source = client_of(settings.prometheus)
    if source is None or not settings.metric_checks:
        return {}
    return {"metrics_before": record_baseline(source, settings.metric_checks, nodes, window=settings.observe_window,
                                              at=at)}


def watch(settings: StepSettings, nodes: Sequence[str], *, scope: str, baseline: dict[str, Any] | None,
          clock: Clock) -> MetricWatch | None:
    """The metric checks on ``nodes`` over verify's window (``baseline``: the run's
    ``metrics_before``; None outside a run: the values at the window's start)."""
    source = client_of(settings.prometheus)
    if source is None or not settings.metric_checks:
        return None
    started = clock.now()
    return MetricWatch(source, settings.metric_checks, nodes, window=settings.observe_window, scope=scope,
                       baseline=baseline, elapsed=lambda: (clock.now() - started).total_seconds())


def request_checks(settings: StepSettings, nodes: Sequence[str]) -> list[Check]:
    """Before anyone approves: for each metric check, whether Prometheus holds its series for
    ``nodes`` and under which labels, ``unknown`` naming the nodes it will be blind on and why
    (no ``prometheus``/checks: none)."""
    found = _probed(settings.prometheus, settings.metric_checks, nodes) if nodes else None
    if found is None:
        return []
    where = ", ".join(nodes)
    out = []
    for spec, blind in found.checks:
        name = f"metric:{spec.name}"
        if found.probe.error:
            out.append(unknown(name, f"Prometheus did not answer, so what {spec.name} reads is not known: "
                                     f"{found.probe.error}", where))
        elif blind:
            said = "; ".join(blind[n] for n in sorted(blind)[:5])
            out.append(unknown(name, f"{spec.name} will be blind on {plural(len(blind), 'node')} (unknown in "
                                     f"verify): {said}", ", ".join(sorted(blind)), blind=blind))
        else:
            labels = found.probe.labels
            read = ", ".join(metrics_of(spec.query)) or spec.query
            out.append(passed(name, f"{spec.name} reads {read} on {plural(len(nodes), 'node')}, the node in "
                                    f"{labels.node}" + (f", workloads in {labels.pod}" if "$pods" in spec.query
                                                        else ""), where, labels=labels.as_json()))
    return out


def coverage(prometheus: PrometheusPolicy | None, specs: Sequence[MetricCheckSpec] | None,
             nodes: Sequence[str]) -> MetricsInfo | None:
    """The inventory's Metrics section: for each metric check (``specs``, the policy's
    ``verify.metrics``; None: the built-in ones), what it reads on ``nodes`` (the GPU nodes) and
    where it would be blind (None without ``prometheus`` or checks)."""
    found = _probed(prometheus, DEFAULT_CHECKS if specs is None else specs, nodes)
    if found is None:
        return None
    labels, error = found.probe.labels, found.probe.error
    return MetricsInfo(prometheus=found.where, node_label=labels.node, pod_label=labels.pod, error=error,
                       checks=[] if error else [
                           MetricCoverage(check=spec.name, reads=metrics_of(spec.query),
                                          nodes=len(nodes) - len(blind), blind=blind)
                           for spec, blind in found.checks])


@dataclass(frozen=True)
class _Probed:
    where: str
    probe: Probe
    checks: list[tuple[MetricCheckSpec, dict[str, str]]]
    """Each check as fitted to what Prometheus holds, with the nodes it is blind on and why."""


def _probed(prometheus: PrometheusPolicy | None, specs: Sequence[MetricCheckSpec],
            nodes: Sequence[str]) -> _Probed | None:
    """What the request and the inventory say of the checks: Prometheus asked once for ``nodes``
    (None without ``prometheus`` or checks)."""
    source = client_of(prometheus)
    if source is None or not specs:
        return None
    found = probe(source, probed_metrics(specs), nodes)
    return _Probed(source.where, found, [(spec, found.blind(spec, nodes)) for spec in adapt(specs, found)])
