"""A migration canary's pods judged against the original's: the same metric checks, side by side.

A check whose query names ``$pods`` is a *workload* check: it is measured over the
canary's pods (``$pods``/``$namespace`` their names, ``$nodes`` their nodes) and over the
original's pods at the same moments, each side's value the mean of what the query answers
per node, and the condition judges the canary's value with the original's as its
``baseline`` (``result >= baseline * 0.5``: the canary's GPUs at least half as busy as the
original's). The other checks are *node* checks (XID and ECC errors): they are judged, as
``verify`` judges them, on the canary's nodes against their own values at the window's
start (:class:`~runbooks.metrics.judging.MetricWatch`), so a canary that makes its GPUs
fault fails even where the original never ran.

:class:`PodComparison` measures each workload check every ``interval`` of the window and
once at its end, and fails one once more measurements failed than its ``failure_limit``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from statistics import fmean
from typing import Any

from runbooks.engine.recording import failed, passed, unknown
from runbooks.engine.steps import Check
from runbooks.metrics import MetricSource, MetricsUnavailable, node_of
from runbooks.metrics.judging import (
    MetricWatch,
    PodScope,
    is_workload_check,
    measure,
    show,
)
from runbooks.metrics.probing import Probe, SeriesLabels, probe, probed_metrics
from runbooks.metrics.spec import MetricCheckSpec

POD_QUERIES = 500
"""Pods asked one by one, per side, at the window's end (more: the check says the rest were not asked)."""


@dataclass(frozen=True)
class PodGroup:
    """Pods of one workload, and the nodes they run on."""

    scope: PodScope
    nodes: tuple[str, ...]

    @classmethod
    def of(cls, namespace: str, pods: Sequence[dict[str, Any]]) -> PodGroup:
        names = tuple(sorted(str(p["metadata"]["name"]) for p in pods))
        nodes = tuple(sorted({str(n) for p in pods if (n := (p.get("spec") or {}).get("nodeName"))}))
        return cls(PodScope(namespace, names), nodes)


@dataclass
class _Side:
    spec: MetricCheckSpec
    measurements: int = 0
    failures: int = 0
    worst: tuple[float | None, float | None] | None = None
    """(canary, original) of the latest failed measurement."""
    last: tuple[float | None, float | None] = (None, None)
    unmeasured: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())
    silent: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())
    """(canary's, original's) pods with no series of their own at the window's end."""
    """(canary's, original's) nodes of pods in scope that answered no series at the last measurement."""
    error: str = ""
    next_at: float = 0.0


@dataclass
class PodComparison:
    """The workload checks, canary against original, over a window (:meth:`tick`, then :meth:`checks`)."""

    source: MetricSource
    specs: Sequence[MetricCheckSpec]
    canary: PodGroup
    original: PodGroup
    window: float
    elapsed: Callable[[], float]
    labels: SeriesLabels = field(default_factory=SeriesLabels)
    """The labels naming a series' node, pod and namespace (:mod:`runbooks.metrics.probing`)."""
    sides: list[_Side] = field(init=False)

    def __post_init__(self) -> None:
        self.sides = [_Side(spec) for spec in self.specs if is_workload_check(spec)]

    def _value(self, spec: MetricCheckSpec, group: PodGroup) -> tuple[float | None, tuple[str, ...]]:
        """The mean of the group's nodes' values, and the group's nodes that answered none."""
        if not group.nodes or not group.scope.names:
            return None, ()
        values = measure(self.source, spec, group.nodes, window=self.window, pods=group.scope, labels=self.labels)
        answered = {node_of(k) for k in values}
        return (fmean(values.values()) if values else None), tuple(n for n in group.nodes if n not in answered)

    def _silent_pods(self, spec: MetricCheckSpec, group: PodGroup) -> tuple[str, ...]:
        """The group's pods that answer no series of their own, asked one by one (those past
        :data:`POD_QUERIES` are not asked, and said so): a node's mean can hide a pod beside one
        that answers (a pod dcgm-exporter cannot tie a GPU to, as a plugin naming its devices
        anew makes), on the canary's side and on the original's, whose mean is the bar."""
        silent = []
        for pod in group.scope.names[:POD_QUERIES]:
            alone = PodScope(group.scope.namespace, (pod,))
            if not measure(self.source, spec, group.nodes, window=self.window, pods=alone, labels=self.labels):
                silent.append(pod)
        unasked = group.scope.names[POD_QUERIES:]
        return (*silent, *(f"{pod} (not asked: more than {POD_QUERIES} pods)" for pod in unasked[:1]))

    def tick(self, *, final: bool = False) -> None:
        now = self.elapsed()
        for side in self.sides:
            if not final and now < side.next_at:
                continue
            side.next_at = now + side.spec.every
            try:
                (canary, canary_gone), (original, original_gone) = (self._value(side.spec, self.canary),
                                                                    self._value(side.spec, self.original))
                silent = ((self._silent_pods(side.spec, self.canary), self._silent_pods(side.spec, self.original))
                          if final and canary is not None and original is not None else ((), ()))
            except MetricsUnavailable as exc:
                side.error = str(exc)
                continue
            side.measurements += 1
            side.last, side.error = (canary, original), ""
            side.unmeasured = (canary_gone, original_gone)
            side.silent = silent
            if canary is None:  # a series shows a scrape after the pod got its GPU: judged at the window's end
                bad = final and original is not None
            else:
                bad = side.spec.parsed.judge(canary, original) is False
            if bad:
                side.failures += 1
                side.worst = (canary, original)

    def checks(self) -> list[Check]:
        self.tick(final=True)
        return [self._judge(side) for side in self.sides]

    def _judge(self, side: _Side) -> Check:
        spec, name = side.spec, f"metric:{side.spec.name}"
        where = f"{len(self.canary.scope.names)} canary pod(s)"
        canary, original = side.last
        evidence: dict[str, Any] = {
            "query": spec.query, "condition": spec.condition, "measurements": side.measurements,
            "failed_measurements": side.failures, "canary": canary, "original": original,
            "canary_pods": list(self.canary.scope.names), "original_pods": list(self.original.scope.names)}
        if side.failures > spec.failure_limit and side.worst is not None:
            value, theirs = side.worst
            said = "no series for the canary's pods" if value is None else f"the canary's pods {show(value, spec.unit)}"
            than = "" if theirs is None else f", the original's {show(theirs, spec.unit)}"
            return failed(name, f"{said}{than}: "
                                f"not {spec.condition} (the original's value as baseline) in {side.failures} of "
                                f"{side.measurements} measurement(s) (failure limit {spec.failure_limit})",
                          where, **evidence)
        if side.error:
            return unknown(name, f"Prometheus did not answer, so {spec.name} was not compared: {side.error}",
                           where, **evidence)
        if canary is None:
            return unknown(name, f"no series for the canary's pods nor the original's in Prometheus (labels "
                                 f"{self.labels.pod}/{self.labels.namespace}): {spec.condition} cannot be judged",
                           where, **evidence)
        if original is None and spec.parsed.needs_baseline:
            return unknown(name, f"the canary's pods {show(canary, spec.unit)}; the original's pods have no series "
                                 "to compare with", where, **evidence)
        for whose, gone in zip(("canary's", "original's"), side.unmeasured, strict=True):
            if gone:  # a mean over the nodes that answered would judge part of the pods as if all
                return unknown(name, f"no series for the {whose} pods on {', '.join(gone)}: only part of them "
                                     f"was measured, so {spec.condition} cannot be judged", where,
                               unmeasured=list(gone), **evidence)
        for whose, pods in zip(("canary's", "original's"), side.silent, strict=True):
            if pods:
                return unknown(name, f"no series for the {whose} pod(s) {', '.join(pods[:5])}: only part of "
                                     f"them was measured, so {spec.condition} cannot be judged", where,
                               unmeasured_pods=list(pods), **evidence)
        than = f", the original's {show(original, spec.unit)}" if original is not None else ""
        return passed(name, f"{spec.condition}: the canary's pods {show(canary, spec.unit)}{than}", where, **evidence)


def canary_watches(source: MetricSource, specs: Sequence[MetricCheckSpec], *, canary: PodGroup, original: PodGroup,
                   window: float, elapsed: Callable[[], float]) -> tuple[MetricWatch, PodComparison]:
    """The node checks on the canary's nodes (against their values now) and the workload checks
    side by side, both to :meth:`tick` over the window."""
    nodes = [s for s in specs if not is_workload_check(s)]
    found: Probe = probe(source, probed_metrics(specs), sorted({*canary.nodes, *original.nodes}))
    watch = MetricWatch(source, nodes, canary.nodes, window=window, scope="the canary's nodes", baseline=None,
                        elapsed=elapsed, found=found)
    return watch, PodComparison(source, specs, canary, original, window, elapsed, found.labels)
