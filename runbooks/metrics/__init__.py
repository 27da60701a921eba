"""Metric checks: GPU health (DCGM) read from Prometheus, judged per node (or per GPU).

:mod:`runbooks.metrics.spec` holds the policy's models (``prometheus``, ``verify.metrics``)
and the built-in checks; :mod:`runbooks.metrics.probing` finds which of the checks' series
exist and under which labels; :mod:`runbooks.metrics.judging` measures and judges them, pure
but for the :class:`MetricSource` it is handed; :mod:`runbooks.metrics.prometheus` is the one
module that speaks HTTP to a Prometheus.

A value is keyed by its node (``gpu-node2``), or by its node and GPU (``gpu-node2/0``) when the
query's answer keeps dcgm-exporter's ``gpu`` label: :func:`key_of`, :func:`node_of`, :func:`key_text`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol


class MetricsUnavailable(Exception):
    """The metric source did not answer, or answered what is not a vector; the message says
    why (never a credential)."""


class MetricSource(Protocol):
    """Where the checks read metrics: one value per node (or per node and GPU) for a PromQL query."""

    def vector(self, promql: str) -> dict[str, float]:
        """``{key: value}`` of an instant query (:func:`key_of`: the node from the ``Hostname``,
        ``hostname``, ``node`` or ``instance`` label, and the ``gpu`` label where the answer has
        one); :class:`MetricsUnavailable` when the source does not answer."""
        ...


GPU_SEP = "/"
"""Between a node's name and a GPU's index in a key (a node's name never holds a ``/``)."""


def key_of(node: str, gpu: str | None = None) -> str:
    return node if gpu is None or gpu == "" else f"{node}{GPU_SEP}{gpu}"


def node_of(key: str) -> str:
    return key.split(GPU_SEP, 1)[0]


def key_text(key: str) -> str:
    """``gpu-node2`` or ``gpu-node2 GPU 0``."""
    node, _, gpu = key.partition(GPU_SEP)
    return f"{node} GPU {gpu}" if gpu else node


def node_regex(nodes: Iterable[str]) -> str:
    """Node names as a PromQL regex alternation (dots escaped, as a PromQL string holds them)."""
    return "|".join(n.replace(".", "\\\\.") for n in sorted(nodes))
