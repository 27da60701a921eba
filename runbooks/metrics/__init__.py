"""Metric checks: GPU health (DCGM) read from Prometheus, judged per node.

:mod:`runbooks.metrics.spec` holds the policy's models (``prometheus``, ``verify.metrics``)
and the built-in checks; :mod:`runbooks.metrics.judging` measures and judges them, pure
but for the :class:`MetricSource` it is handed; :mod:`runbooks.metrics.prometheus` is the
one module that speaks HTTP to a Prometheus.
"""

from __future__ import annotations

from typing import Protocol


class MetricsUnavailable(Exception):
    """The metric source did not answer; the message says why (never a credential)."""


class MetricSource(Protocol):
    """Where the checks read metrics: one value per node for a PromQL query."""

    def vector(self, promql: str) -> dict[str, float]:
        """``{node: value}`` of an instant query (the node from the ``Hostname``, ``node`` or
        ``instance`` label); :class:`MetricsUnavailable` when the source does not answer."""
        ...
