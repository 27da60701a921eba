"""The stability reports' schedule: derived from the runs, kept by one leader, nothing pickled.

With several bot processes only the one holding the leader lease (``{upgradebot}:leader``
in Redis, renewed every ``tick``, lost after ``lease_ttl`` without renewal) schedules and
posts reports; the others take over when the lease expires. Each new holder gets a larger
fencing token (``{upgradebot}:leader:epoch``), which every report post is claimed with
(:mod:`bot.reports.posting`): a leader that was stopped past its lease posts nothing more.
The leader also runs the event collectors (:mod:`bot.reports.collector`), whose writes
are fenced by the same lease. A process believes it leads (:attr:`ReportScheduler.leading`)
only until ``lease_ttl`` after it asked for the lease, on its own monotonic clock, so two
processes never both believe it.

The schedule is not stored: each tick the leader *reconciles*, recomputing it from the runs
in Redis. Every run in ``monitoring`` has one report per offset (``reports.after``), due that
long after its promotion, unless the report is posted; a run that left monitoring has
none. So a report that fell due while no bot ran fires as soon as a leader starts, and a
report never needs a job that some process must read back (APScheduler's Redis job store
unpickled its jobs: whoever could write to Redis ran code as the bot; versions before 0.9
left it in ``{upgradebot}:scheduler:*``, which a new leader removes, logging it once).
A failed post, or one whose destination another claim holds, is tried again ``retry_after``
seconds later (kept in the leader's memory: a new leader tries at once).

The clock is injected. ``serve`` runs :meth:`ReportScheduler.start`: a background loop that
ticks and fires what is due every ``tick`` seconds (sooner when a report falls due first).
The demo and the tests fake the clock instead (:class:`runbooks.engine.clocks.ClusterClock`
over kubesim) and drive it: :meth:`run_due` ticks, then fires, synchronously, every report
due on that clock.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import socket
import threading
import time
from typing import Any

from bot.reports.collector import Collectors
from bot.reports.posting import ReportPoster
from bot.storage.layout import Keys
from bot.storage.redis_store import RedisRunStore
from runbooks.engine.leasing import owner_id
from runbooks.engine.refusals import Refused
from runbooks.engine.runs import Run, RunState
from runbooks.engine.steps import Clock
from runbooks.engine.store import StoreUnavailable
from runbooks.policy import Policy
from runbooks.stability.reporting import due_times

log = logging.getLogger("upgradebot.scheduler")
PREFIX = "report:"
Report = tuple[str, str]
"""``(run id, after)``: one scheduled report."""


def job_id(run_id: str, after: str) -> str:
    return f"{PREFIX}{run_id}:{after}"


class ReportScheduler:
    def __init__(
        self, *, store: RedisRunStore, poster: ReportPoster, policy: Policy, clock: Clock,
        collectors: Collectors | None = None, owner: str | None = None, lease_ttl: float = 15.0,
        tick: float = 5.0, retry_after: float = 60.0,
    ) -> None:
        self.store, self.poster, self.policy, self.clock, self.collectors = store, poster, policy, clock, collectors
        self.owner = owner or owner_id(socket.gethostname(), os.getpid())
        self.lease_ttl, self.tick_every, self.retry_after = lease_ttl, tick, retry_after
        self.token = 0
        """The lease's fencing token as last granted to us (0: not leading)."""
        self.automatic = False
        self._held_until = 0.0
        self._due: dict[Report, dt.datetime] = {}
        self._retry: dict[Report, dt.datetime] = {}
        self._unreadable: set[str] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._tick_lock = threading.RLock()

    @property
    def leading(self) -> bool:
        """Whether this process holds the lease, as far as it can know: granted, and not yet
        ``lease_ttl`` past the moment it asked (a process stopped longer knows it lost it)."""
        return self.token > 0 and time.monotonic() < self._held_until

    # ------------------------------------------------------------- lifecycle
    def start(self) -> ReportScheduler:
        """``serve``: the leader loop in the background."""
        self.automatic = True
        self._thread = threading.Thread(target=self._loop, name="report-scheduler", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.run_due()
            except Exception:  # Redis or the cluster failing for a moment: the next tick tries again
                log.exception("the report scheduler's tick failed")
            self._stop.wait(self._next_wait())

    def _next_wait(self) -> float:
        with self._tick_lock:
            first = min(self._due.values(), default=None)
        if first is None:
            return self.tick_every
        return min(self.tick_every, max(0.05, (first - self.clock.now()).total_seconds()))

    def stop(self) -> None:
        """Stop the loop and the collectors; give the lease up for the next leader."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        if self.collectors is not None:
            self.collectors.stop_all()
        if self.token:
            self.store.release_leader(self.owner)
        self.token, self._held_until = 0, 0.0

    # ---------------------------------------------------------------- a round
    def tick(self) -> bool:
        """Take or renew the lease; as leader reconcile the schedule and the collectors. Whether we lead."""
        with self._tick_lock:
            asked = time.monotonic()
            try:
                token = self.store.acquire_leader(self.owner, dt.timedelta(seconds=self.lease_ttl))
            except StoreUnavailable:
                log.warning("%s cannot reach Redis: not leading until it can", self.owner)
                token = 0
            if token and token != self.token:
                log.info("%s leads the report scheduler and the event collectors (token %d)", self.owner, token)
                self._drop_retired()
            if not token and self.token:
                self._lost()
            self.token, self._held_until = token, (asked + self.lease_ttl if token else 0.0)
            if not token:
                return False
            self.reconcile()
            if self.collectors is not None:
                self.collectors.sync()
            return True

    def _lost(self) -> None:
        log.warning("%s lost the report scheduler's lease", self.owner)
        self._due.clear()
        self._retry.clear()
        if self.collectors is not None:
            self.collectors.stop_all()

    def _drop_retired(self) -> None:
        dropped = self.store.drop_retired_schedule()
        if dropped:
            log.warning("removed %s and %s (%d keys): the job store of an older version, never read "
                        "(its jobs were pickled code)", Keys.scheduler_jobs, Keys.scheduler_times, dropped)

    def reconcile(self) -> None:
        """The schedule, recomputed from the runs: each report not yet posted of every run in
        monitoring (a failed one at its retry time); nothing for other runs."""
        monitoring = [r for r in self.store.list_runs(active_only=True, limit=10_000) if r.state is RunState.MONITORING]
        due: dict[Report, dt.datetime] = {}
        for run in monitoring:
            pending = [(after, when) for after, when in self._due_times(run) if not self.poster.posted(run.id, after)]
            if not pending:
                self.poster.finish_if_last(run.id)
            for after, when in pending:
                due[(run.id, after)] = max(when, self._retry.get((run.id, after), when))
        with self._tick_lock:
            self._retry = {key: when for key, when in self._retry.items() if key in due}
            self._due = due

    def _due_times(self, run: Run) -> list[tuple[str, dt.datetime]]:
        try:
            return due_times(run, self.policy)
        except (Refused, ValueError, KeyError, TypeError) as exc:  # a run stored without its promotion time
            if run.id not in self._unreadable:
                self._unreadable.add(run.id)
                log.warning("run %s: no report can be scheduled (%s); skipped", run.id, type(exc).__name__)
            return []

    # ----------------------------------------------------------------- firing
    def run_due(self) -> list[tuple[str, str, str]]:
        """Tick, then fire every report due on the injected clock, here and now, as leader only.
        ``(run, after, outcome)`` for each."""
        with self._tick_lock:
            if not self.tick():
                return []
            now = self.clock.now()
            due = sorted((when, key) for key, when in self._due.items() if when <= now)
            if due and self.collectors is not None:
                self.collectors.catch_up()
            fired = []
            for _, (run_id, after) in due:
                if not self.token:
                    break
                fired.append((run_id, after, self.fire(run_id, after)))
            return fired

    def fire(self, run_id: str, after: str) -> str:
        """Post the report (once); on failure, try again ``retry_after`` seconds later."""
        key = (run_id, after)
        with self._tick_lock:
            try:
                outcome: str = self.poster.post_due(run_id, after, token=self.token,
                                                    lease=dt.timedelta(seconds=self.lease_ttl))
            except Exception as exc:
                log.exception("run %s: the %s report failed; retrying in %.0fs", run_id, after, self.retry_after)
                self._retry[key] = self._due[key] = self.clock.now() + dt.timedelta(seconds=self.retry_after)
                return f"failed: {type(exc).__name__}"
            if outcome == "lost":
                self.token, self._held_until = 0, 0.0
                self._lost()
            elif outcome == "pending":  # another claim holds a destination: look again later
                self._retry[key] = self._due[key] = self.clock.now() + dt.timedelta(seconds=self.retry_after)
            else:
                self._due.pop(key, None)
            return outcome

    def jobs(self) -> list[dict[str, Any]]:
        """The scheduled reports: id and when each is due (for status and tests)."""
        with self._tick_lock:
            return [{"id": job_id(run_id, after), "due": when}
                    for (run_id, after), when in sorted(self._due.items(), key=lambda item: item[1])]
