"""Prometheus metrics of the bot, served on ``GET /metrics``.

One :class:`Metrics` per process, on its own registry (tests build as many as they
like). What the run engine knows is read when scraped: :func:`runs_by_state` counts the
store's active runs for the ``upgradebot_runs`` gauge. :class:`StepTimer`, an observer
of the engine, notes when a run enters a working state and, when the step's result line
arrives (``canary``, ``verify_canary``, ``promote``, ``verify_all``, ``rollback``),
observes the time between the two in ``upgradebot_step_duration_seconds``; a step whose
start this process did not see (it resumed the run after a restart) is not observed.
Approvals are counted by the Slack listeners (:attr:`Metrics.approvals`).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import prometheus_client
from prometheus_client import (
    CollectorRegistry,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from runbooks.engine.runs import STEP_OF, Gate, Run, RunState, Step
from runbooks.engine.store import RunStore

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


class _WithWorkers:
    """This process's families and the worker processes' (prometheus_client's multiprocess
    files in ``path``), one family per name: a sample both have is summed. Gauges are this
    process's alone (a worker's would be one series per pid, and the workers set none)."""

    def __init__(self, registry: CollectorRegistry, path: str) -> None:
        self.registry, self.path = registry, path

    def collect(self) -> Iterator[Metric]:
        families: dict[str, Metric] = {}
        values: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], Any]] = {}
        for family in self.registry.collect():
            families[family.name] = family
            values[family.name] = {(s.name, tuple(sorted(s.labels.items()))): s for s in family.samples}
        for family in MultiProcessCollector(None, path=self.path).collect():
            if family.type == "gauge":
                continue
            if family.name not in families:
                families[family.name] = Metric(family.name, family.documentation, family.type)
                values[family.name] = {}
            mine = values[family.name]
            for sample in family.samples:
                key = (sample.name, tuple(sorted(sample.labels.items())))
                known = mine.get(key)
                mine[key] = sample if known is None else known._replace(value=known.value + sample.value)
        for name, family in families.items():
            family.samples = list(values[name].values())
            yield family


class Metrics:
    def __init__(self, *, registry: CollectorRegistry | None = None, workers_dir: str | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.workers_dir = workers_dir
        """Where the worker processes ``serve`` started write their metrics (served with these)."""
        self.commands = prometheus_client.Counter(
            "upgradebot_commands", "Commands received, by verb and outcome", ["verb", "outcome", "surface"],
            registry=self.registry,
        )
        self.approvals = prometheus_client.Counter(
            "upgradebot_approvals", "Approve/Reject clicks, by action and whether they counted", ["action", "outcome"],
            registry=self.registry,
        )
        self.step_seconds = Histogram(
            "upgradebot_step_duration_seconds", "Duration of run steps", ["step", "result"],
            buckets=(1, 5, 15, 30, 60, 120, 300, 600, 1200, 3600), registry=self.registry,
        )
        self.slack_api_errors = prometheus_client.Counter(
            "upgradebot_slack_api_errors", "Slack Web API calls that failed, by method and error", ["method", "error"],
            registry=self.registry,
        )
        self.slack_duplicates = prometheus_client.Counter(
            "upgradebot_slack_duplicates", "Deliveries dropped as already claimed (Slack retries)", ["kind"],
            registry=self.registry,
        )
        self.slack_request_seconds = Histogram(
            "upgradebot_slack_request_seconds", "Time to answer a request on /slack/events (the ack)",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 3), registry=self.registry,
        )
        self.job_wait_seconds = Histogram(
            "upgradebot_job_wait_seconds", "From a request queued by the front end to a worker taking it, by lane",
            ["lane"], buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
            registry=self.registry,
        )
        self.run_save_bytes = Histogram(
            "upgradebot_run_save_bytes", "Bytes each save of a run sent to Redis: its changed parts and audit lines "
            "(a run's baseline is sent once; a save resending it shows in the top buckets)",
            buckets=(1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216), registry=self.registry,
        )
        # Socket Mode (bot/slack/socket_mode.py): what came over the WebSocket and how fast it was acked
        self.socket_envelopes = prometheus_client.Counter(
            "upgradebot_socket_mode_envelopes", "Socket Mode envelopes received, by type and whether Slack retried it",
            ["type", "retry"], registry=self.registry,
        )
        self.socket_acks = prometheus_client.Counter(
            "upgradebot_socket_mode_acks", "Socket Mode envelopes acknowledged", registry=self.registry,
        )
        self.socket_ack_seconds = Histogram(
            "upgradebot_socket_mode_ack_seconds", "From an envelope's arrival on the socket to its ack (queueing included)",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5), registry=self.registry,
        )
        self.socket_reconnects = prometheus_client.Counter(
            "upgradebot_socket_mode_reconnects", "New Socket Mode connections after the first, and failed attempts, "
            "by why (warning, refresh_requested: Slack's disconnect; dropped: the connection was lost)",
            ["outcome", "reason"], registry=self.registry,
        )
        self.socket_disconnects = prometheus_client.Counter(
            "upgradebot_socket_mode_disconnects", "disconnect messages from Slack, by reason", ["reason"],
            registry=self.registry,
        )
        self.socket_connected = prometheus_client.Gauge(
            "upgradebot_socket_mode_connected", "1 while a Socket Mode connection is up", registry=self.registry,
        )
        self.slack_up = prometheus_client.Gauge(
            "upgradebot_slack_up", "1 when Slack's auth.test last answered (readiness reports it, never fails on it)",
            registry=self.registry,
        )
        self.jobs_dead_lettered = prometheus_client.Counter(
            "upgradebot_jobs_dead_lettered", "Queued jobs a worker could not decode, moved to the dead-letter list, "
            "by lane and reason", ["lane", "reason"], registry=self.registry,
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
        if self.workers_dir is None:
            return generate_latest(self.registry), CONTENT_TYPE_LATEST
        return generate_latest(_WithWorkers(self.registry, self.workers_dir)), CONTENT_TYPE_LATEST


class StepTimer:
    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self._started: dict[str, tuple[RunState, float]] = {}
        self._lock = threading.Lock()

    def on_state(self, run: Run) -> None:
        with self._lock:
            if run.state in STEP_OF:
                self._started[run.id] = (run.state, run.updated_at.timestamp())
            else:
                self._started.pop(run.id, None)

    def on_step(self, run: Run, step: Step) -> None:
        if step.kind != "step" or step.name not in STEP_OF.values():
            return
        with self._lock:
            started = self._started.get(run.id)
        if started is None or STEP_OF[started[0]] != step.name:
            return
        seconds = max(0.0, step.at.timestamp() - started[1])
        self.metrics.observe_step(step.name, seconds, result="ok" if step.status == "ok" else "failed")

    def on_gate(self, run: Run, gate: Gate) -> None:
        pass

    def on_progress(self, run: Run) -> None:
        pass


def runs_by_state(store: RunStore) -> Callable[[], Mapping[str, int]]:
    """``{state: count}`` of the runs not yet ended, read from the store at each scrape."""

    def count() -> Mapping[str, int]:
        return Counter(run.state.value for run in store.list_runs(active_only=True, limit=100_000, whole=False))

    return count
