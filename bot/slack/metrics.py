"""Prometheus metrics of the bot, served on ``GET /metrics``.

One :class:`Metrics` per process, on its own registry (tests build as many as they
like). What the run engine knows is read when scraped: ``runs_by_state`` is a callable
the engine wiring plugs in (the store's counts); step durations and approvals are
recorded by the wiring's observers through :meth:`Metrics.observe_step` and
:attr:`Metrics.approvals`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

RunsByState = Callable[[], Mapping[str, int]]

disable_created_metrics()  # no ``*_created`` series: they double the exposition for nothing


class _RunsCollector(Collector):
    def __init__(self) -> None:
        self.source: RunsByState | None = None

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily("upgradebot_runs", "Runs by state, as the run store counts them", labels=["state"])
        if self.source is not None:
            try:
                counts = dict(self.source())
            except Exception:  # a scrape must not fail because the store is down
                counts = {}
            for state, count in sorted(counts.items()):
                family.add_metric([state], count)
        yield family


class Metrics:
    def __init__(self, *, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.commands = Counter(
            "upgradebot_commands", "Commands received, by verb and outcome", ["verb", "outcome", "surface"],
            registry=self.registry,
        )
        self.approvals = Counter(
            "upgradebot_approvals", "Approve/Reject clicks, by action and whether they counted", ["action", "outcome"],
            registry=self.registry,
        )
        self.step_seconds = Histogram(
            "upgradebot_step_duration_seconds", "Duration of run steps", ["step", "result"],
            buckets=(1, 5, 15, 30, 60, 120, 300, 600, 1200, 3600), registry=self.registry,
        )
        self.slack_api_errors = Counter(
            "upgradebot_slack_api_errors", "Slack Web API calls that failed, by method and error", ["method", "error"],
            registry=self.registry,
        )
        self.slack_duplicates = Counter(
            "upgradebot_slack_duplicates", "Deliveries dropped as already claimed (Slack retries)", ["kind"],
            registry=self.registry,
        )
        self.slack_request_seconds = Histogram(
            "upgradebot_slack_request_seconds", "Time to answer a request on /slack/events (the ack)",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 3), registry=self.registry,
        )
        self._runs = _RunsCollector()
        self.registry.register(self._runs)

    def set_runs_source(self, source: RunsByState | None) -> None:
        """Plug the run store's ``{state: count}`` in; read on every scrape."""
        self._runs.source = source

    def observe_step(self, step: str, seconds: float, *, result: str = "ok") -> None:
        self.step_seconds.labels(step=step, result=result).observe(seconds)

    def exposition(self) -> tuple[bytes, str]:
        """The body and content type of ``GET /metrics``."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
