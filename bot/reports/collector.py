"""The event collectors: one per run in ``monitoring``, in the process that holds the lease.

:class:`Collectors` is driven by the report scheduler's leader loop (:mod:`bot.reports.scheduler`):
each :meth:`~Collectors.sync` starts a :class:`~runbooks.stability.collecting.Collector`
for every run that entered ``monitoring`` and stops the ones whose run left it (their
last changes are stored, their dedupe state dropped, their tally kept for later
``report`` commands). Threaded (``serve``), each collector watches in its own thread;
unthreaded (the demo and tests, which fake the clock), :meth:`~Collectors.catch_up`
reads every event the cluster has now, synchronously, before a report is built.

Every write of a collector is fenced by the leader lease (``{upgradebot}:leader``): a
process that lost it can no longer store a count, so two processes never both count.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from bot.storage.redis_store import RedisRunStore
from runbooks.cluster import Cluster
from runbooks.engine.refusals import Refused
from runbooks.engine.runs import Run, RunState
from runbooks.engine.steps import Clock
from runbooks.errors import ClusterError, shorten
from runbooks.stability.collecting import Collector, LeaseLost
from runbooks.stability.reporting import scope_of
from runbooks.stability.tallying import stamp_of

log = logging.getLogger("upgradebot.collector")
KEEP_TALLY = dt.timedelta(days=30)


@dataclass
class _Running:
    collector: Collector
    cluster: Cluster
    thread: threading.Thread | None


class Collectors:
    def __init__(
        self, *, store: RedisRunStore, connect: Callable[[str | None], Cluster], owner: str, clock: Clock,
        threaded: bool = True, flush_every: float = 2.0, watch_timeout: int = 60, retry_delay: float = 5.0,
        metrics: Callable[[list[str]], dict[str, dict[str, float]]] | None = None,
    ) -> None:
        self.store, self.connect, self.owner, self.clock, self.threaded = store, connect, owner, clock, threaded
        self.metrics = metrics
        """The metric view's hourly sample (policy ``prometheus``; ``reporting.metric_sampler``)."""
        self.flush_every, self.watch_timeout, self.retry_delay = flush_every, watch_timeout, retry_delay
        self._running: dict[str, _Running] = {}
        self._lock = threading.Lock()

    def sync(self) -> None:
        """Collect for every run in monitoring, and for no other."""
        monitoring = {r.id: r for r in self.store.list_runs(active_only=True, limit=10_000)
                      if r.state is RunState.MONITORING}
        with self._lock:
            running = dict(self._running)
        for run_id, entry in running.items():
            gone = run_id not in monitoring
            if gone or (entry.thread is not None and not entry.thread.is_alive()) or entry.collector.stopped:
                self._stop(run_id)
                if gone:
                    self.store.end_collection(run_id, keep=KEEP_TALLY)
        for run_id, run in monitoring.items():
            if run_id not in self._running:
                self._start(run)

    def _start(self, run: Run) -> None:
        run_id = run.id
        try:
            scope = scope_of(run)
            cluster = self.connect(run.target.cluster or None)
        except (Refused, ClusterError) as exc:
            log.warning("run %s: cannot collect its events: %s", run_id, shorten(str(exc)))
            return
        collector = Collector(run_id=run_id, scope=scope, cluster=cluster, store=self.store, owner=self.owner,
                              flush_every=self.flush_every, watch_timeout=self.watch_timeout,
                              retry_delay=self.retry_delay, now_stamp=lambda: stamp_of(self.clock.now()),
                              metrics=self.metrics)
        thread = None
        if self.threaded:
            thread = threading.Thread(target=self._watch, args=(run_id, collector), name=f"events-{run_id}", daemon=True)
        with self._lock:
            self._running[run_id] = _Running(collector, cluster, thread)
        if thread is not None:
            thread.start()
        log.info("run %s: collecting its events from %s", run_id, scope.since)

    @staticmethod
    def _watch(run_id: str, collector: Collector) -> None:
        try:
            collector.run()
        except Exception:  # the next sync starts a fresh collector from what was stored
            log.exception("run %s: the event collector stopped", run_id)

    def _stop(self, run_id: str) -> None:
        with self._lock:
            entry = self._running.pop(run_id, None)
        if entry is None:
            return
        entry.collector.stop()
        if entry.thread is not None:
            entry.thread.join(timeout=30)
        else:
            self._flush(entry.collector)
        entry.cluster.close()

    @staticmethod
    def _flush(collector: Collector) -> None:
        try:
            collector.flush()
        except LeaseLost:
            log.info("run %s: another process collects its events now", collector.run_id)

    def flush(self, run_id: str) -> None:
        """Store what the collector of ``run_id`` holds (before a report reads the tally)."""
        with self._lock:
            entry = self._running.get(run_id)
        if entry is not None and not entry.collector.stopped:
            self._flush(entry.collector)

    def catch_up(self, timeout_seconds: int = 1) -> None:
        """Every collector stores what it has; unthreaded ones first read what the cluster has now."""
        with self._lock:
            entries = list(self._running.values())
        for entry in entries:
            if entry.thread is not None:
                self._flush(entry.collector)
                continue
            try:
                entry.collector.catch_up(timeout_seconds)
            except LeaseLost:
                log.info("run %s: another process collects its events now", entry.collector.run_id)

    def stop_all(self) -> None:
        for run_id in list(self._running):
            self._stop(run_id)

    @property
    def runs(self) -> list[str]:
        with self._lock:
            return sorted(self._running)
