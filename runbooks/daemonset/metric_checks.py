"""The policy's metric checks in a run: the values before it, the watch over verify's window.

:func:`metrics_before` is called by the canary as it records its baseline: every check's
value on every node of the plugin, stored in the run's progress as ``metrics_before`` (the
node's own baseline that verify and the stability reports compare with). :func:`watch`
gives verify a :class:`~runbooks.metrics.judging.MetricWatch` when the policy names a
Prometheus. The HTTP client comes from :mod:`runbooks.metrics.prometheus`, the only module
that speaks to it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from runbooks.engine.steps import Clock, StepSettings
from runbooks.metrics.judging import MetricWatch, record_baseline
from runbooks.metrics.prometheus import client_of


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
