"""What Prometheus holds for the checks before they run: which series exist, under which labels.

A check that reads a series no exporter exports cannot fail: it has nothing to judge. So before
the checks are measured, :func:`probe` asks Prometheus, for the nodes in scope, which of the
checks' metrics each node's exporter exports and which labels name them:

- the node: ``Hostname`` (every dcgm-exporter release up to 4.5.3-4.8.2) or ``hostname`` (its main
  branch since commit d5e5f51);
- the workload: ``pod``/``namespace`` as dcgm-exporter writes them, or ``exported_pod``/
  ``exported_namespace`` where Prometheus scrapes the exporter through a ServiceMonitor with
  ``honorLabels: false`` (the GPU operator's and the dcgm-exporter chart's), which gives the
  exporter pod's own ``pod`` and ``namespace`` to the target and renames the exporter's.

:func:`adapt` then fits the built-in checks to what is there (``DCGM_EXP_XID_ERRORS_COUNT`` for
XIDs where it is exported), and the queries' ``$node_label``, ``$pod_label`` and
``$namespace_label`` are filled with the labels found (:func:`runbooks.metrics.judging.render`).
:meth:`Probe.blind` names, per check, the nodes it will be blind on, and why.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from runbooks.metrics import MetricSource, MetricsUnavailable, node_regex
from runbooks.metrics.spec import XID_CHECK, XID_COUNT, XID_COUNT_CHECK, MetricCheckSpec, metrics_of

NODE_LABELS = ("Hostname", "hostname")
"""dcgm-exporter's label for the node, newest last."""


@dataclass(frozen=True)
class SeriesLabels:
    """The labels that name a series' node, pod and namespace where the checks read."""

    node: str = "Hostname"
    pod: str = "pod"
    namespace: str = "namespace"

    def as_json(self) -> dict[str, str]:
        return {"node": self.node, "pod": self.pod, "namespace": self.namespace}


@dataclass(frozen=True)
class Probe:
    """What :func:`probe` found: the labels, and for each metric probed the nodes exporting it."""

    labels: SeriesLabels = field(default_factory=SeriesLabels)
    exported: dict[str, frozenset[str]] = field(default_factory=dict)
    error: str = ""
    """Why Prometheus could not be asked (then nothing is known of the series)."""

    def blind(self, spec: MetricCheckSpec, nodes: Iterable[str]) -> dict[str, str]:
        """node -> why ``spec`` cannot be measured there: a metric it reads is not exported."""
        out: dict[str, str] = {}
        probed = [m for m in metrics_of(spec.query) if m in self.exported]
        for node in nodes:
            missing = next((m for m in probed if node not in self.exported[m]), None)
            if missing is not None:
                out[node] = exports_no(node, missing)
        return out


def exports_no(node: str, metric: str) -> str:
    """The reason a check is blind on ``node``: its exporter's series of ``metric`` are not in Prometheus."""
    if metric.startswith("DCGM_"):
        return f"dcgm-exporter on {node} exports no {metric}: add it to the exporter's counters"
    return f"Prometheus has no {metric} series from {node}"


def probed_metrics(specs: Sequence[MetricCheckSpec]) -> list[str]:
    """The metrics :func:`probe` asks about for ``specs``: those their queries select, and the XID
    count where the built-in XID check could read it."""
    names = [m for spec in specs for m in metrics_of(spec.query)]
    if any(spec == XID_CHECK for spec in specs):
        names.append(XID_COUNT)
    return list(dict.fromkeys(names))


def probe(source: MetricSource, metrics: Sequence[str], nodes: Sequence[str]) -> Probe:
    """Ask ``source`` which of ``metrics`` each of ``nodes`` exports, and under which labels
    (a :class:`Probe` with ``error`` when it does not answer)."""
    wanted = set(nodes)
    if not wanted or not metrics:
        return Probe()
    regex = node_regex(nodes)
    try:
        found: dict[str, frozenset[str]] = {}
        node_label = NODE_LABELS[0]
        for label in NODE_LABELS:
            found = {m: frozenset(n for n in source.vector(f'count by ({label}) ({m}{{{label}=~"{regex}"}})')
                                  if n in wanted)
                     for m in metrics}
            if any(found.values()):
                node_label = label
                break
        names = "|".join(metrics)
        exported_pods = source.vector(
            f'count by ({node_label}) ({{__name__=~"{names}", {node_label}=~"{regex}", exported_pod!=""}})')
    except MetricsUnavailable as exc:
        return Probe(error=str(exc))
    labels = (SeriesLabels(node_label, "exported_pod", "exported_namespace") if exported_pods
              else SeriesLabels(node_label))
    return Probe(labels, found)


def adapt(specs: Sequence[MetricCheckSpec], found: Probe, *,
          prefer: dict[str, str] | None = None) -> list[MetricCheckSpec]:
    """``specs`` fitted to what ``found`` says is there: beside the built-in XID check, the XID
    count where the exporter exports it for a node in scope. ``prefer`` (check -> query, from the
    values recorded before the run) keeps to the checks the run's baseline was measured with, so
    the values stay comparable: the count is added only when it was recorded too."""
    out = []
    for spec in specs:
        out.append(spec)
        if spec == XID_CHECK and XID_COUNT_CHECK not in specs:
            counted = (XID_COUNT_CHECK.name in prefer) if prefer is not None else bool(found.exported.get(XID_COUNT))
            if counted:
                out.append(XID_COUNT_CHECK)
    return out
