"""The stability reports' schedule: APScheduler 3 with its Redis job store, one leader.

APScheduler 3 cannot share a job store between running schedulers, so with several bot
processes only the one holding the leader lease (``{upgradebot}:leader`` in Redis, renewed
every ``tick``, lost after ``lease_ttl`` without renewal) runs its scheduler; the others
keep theirs paused and take over when the lease expires. The leader also runs the event
collectors (:mod:`bot.reports.collector`), whose writes are fenced by the same lease.

Each tick the leader *reconciles*: every run in ``monitoring`` gets one job per report
offset (``reports.after``), due that long after the promotion, id ``report:<run>:<after>``,
unless the report is posted; jobs of runs that left monitoring are removed. The jobs live
in Redis (``{upgradebot}:scheduler:*``), with ``misfire_grace_time=None``: a report that fell
due while no bot ran fires as soon as a leader starts. A job only names the report
(:func:`report_due`); the process that fires it posts it through the
:class:`~bot.reports.posting.ReportPoster`, whose idempotency record makes it exactly once
whatever fires twice. A failed post is scheduled again ``retry_after`` seconds later.

The clock is injected. ``serve`` runs :meth:`ReportScheduler.start` (a background leader
loop; APScheduler fires jobs on the wall clock). The demo and the tests fake the clock
instead (:class:`runbooks.engine.clocks.ClusterClock` over kubesim) and drive it: :meth:`tick`
then :meth:`run_due` fire, synchronously, every job due on that clock.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import socket
import threading
from typing import Any

from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_EXECUTED, JobExecutionEvent
from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.jobstores.base import JobLookupError
from apscheduler.schedulers.background import BackgroundScheduler

from bot.reports.collector import Collectors
from bot.reports.posting import ReportPoster
from bot.storage.redis_store import RedisRunStore
from runbooks.engine.leasing import owner_id
from runbooks.engine.runs import RunState
from runbooks.engine.steps import Clock
from runbooks.engine.store import StoreUnavailable
from runbooks.policy import Policy
from runbooks.stability.reporting import due_times

log = logging.getLogger("upgradebot.scheduler")
PREFIX = "report:"


def report_due(run_id: str, after: str) -> tuple[str, str]:
    """The job APScheduler keeps and fires: it names the report; the firing process posts it."""
    return run_id, after


def job_id(run_id: str, after: str) -> str:
    return f"{PREFIX}{run_id}:{after}"


class SharedStoreScheduler(BackgroundScheduler):
    """APScheduler whose loop survives a job that another process already ran and removed.

    Several bot processes share the Redis job store; while leadership changes hands, two
    of them may look at the same due job for a moment. The loser's removal then raises
    ``JobLookupError`` inside APScheduler's own thread, which would end that thread and
    silently stop this process from ever firing reports. Posting is idempotent (the report
    record is claimed first), so the job simply counts as handled and the loop goes on.
    """

    def _process_jobs(self) -> float | None:
        try:
            return super()._process_jobs()
        except JobLookupError as exc:
            log.info("a report job was already handled by another process (%s); looking again", exc)
            return 1.0


class ReportScheduler:
    def __init__(
        self, *, store: RedisRunStore, poster: ReportPoster, policy: Policy, clock: Clock,
        collectors: Collectors | None = None, owner: str | None = None, lease_ttl: float = 15.0,
        tick: float = 5.0, retry_after: float = 60.0,
    ) -> None:
        self.store, self.poster, self.policy, self.clock, self.collectors = store, poster, policy, clock, collectors
        self.owner = owner or owner_id(socket.gethostname(), os.getpid())
        self.lease_ttl, self.tick_every, self.retry_after = lease_ttl, tick, retry_after
        self.leading = False
        self.automatic = False
        self.scheduler = SharedStoreScheduler(
            jobstores={"default": store.job_store()}, executors={"default": ThreadPoolExecutor(2)},
            job_defaults={"coalesce": True, "misfire_grace_time": None, "max_instances": 1}, timezone=dt.UTC,
        )
        self.scheduler.add_listener(self._on_job, EVENT_JOB_EXECUTED | EVENT_JOB_ERROR)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._tick_lock = threading.Lock()

    # ------------------------------------------------------------- lifecycle
    def _open(self) -> None:
        if not self.scheduler.running:
            self.scheduler.start(paused=True)  # jobs can be added and read; none fires until resumed

    def start(self) -> ReportScheduler:
        """``serve``: the leader loop in the background; APScheduler fires jobs on the wall clock."""
        self.automatic = True
        self._open()
        self._thread = threading.Thread(target=self._loop, name="report-scheduler", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception:  # Redis or the cluster failing for a moment: the next tick tries again
                log.exception("the report scheduler's tick failed")
            self._stop.wait(self.tick_every)

    def stop(self) -> None:
        """Stop the loop, the collectors and APScheduler; give the lease up for the next leader."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        if self.collectors is not None:
            self.collectors.stop_all()
        if self.scheduler.running:
            self.scheduler.shutdown(wait=True)
        if self.leading:
            self.store.release_leader(self.owner)
        self.leading = False

    # ---------------------------------------------------------------- a round
    def tick(self) -> bool:
        """Take or renew the lease; as leader reconcile the jobs and the collectors. Whether we lead."""
        with self._tick_lock:
            self._open()
            try:
                leading = self.store.acquire_leader(self.owner, dt.timedelta(seconds=self.lease_ttl))
            except StoreUnavailable:
                log.warning("%s cannot reach Redis: not leading until it can", self.owner)
                leading = False
            if leading and not self.leading:
                log.info("%s leads the report scheduler and the event collectors", self.owner)
            if not leading and self.leading:
                log.warning("%s lost the report scheduler's lease", self.owner)
                self.scheduler.pause()
                if self.collectors is not None:
                    self.collectors.stop_all()
            self.leading = leading
            if not leading:
                return False
            self.reconcile()
            if self.collectors is not None:
                self.collectors.sync()
            if self.automatic:
                self.scheduler.resume()
                self.scheduler.wakeup()
            return True

    def reconcile(self) -> None:
        """One job per report not yet posted of every run in monitoring; no job for other runs."""
        monitoring = {r.id: r for r in self.store.list_runs(active_only=True, limit=10_000)
                      if r.state is RunState.MONITORING}
        for job in self.scheduler.get_jobs():
            if job.id.startswith(PREFIX) and job.args[0] not in monitoring:
                self.scheduler.remove_job(job.id)
        for run in monitoring.values():
            pending = [(after, due) for after, due in due_times(run, self.policy) if not self.poster.posted(run.id, after)]
            if not pending:
                self.poster.finish_if_last(run.id)
            for after, due in pending:
                if self.scheduler.get_job(job_id(run.id, after)) is None:
                    self._add(run.id, after, due)

    def _add(self, run_id: str, after: str, when: dt.datetime) -> None:
        self.scheduler.add_job(report_due, trigger="date", run_date=when, args=[run_id, after],
                               id=job_id(run_id, after), name=f"{after} report of {run_id}", replace_existing=True)

    # ----------------------------------------------------------------- firing
    def run_due(self) -> list[tuple[str, str, str]]:
        """Fire, here and now, every job due on the injected clock (the demo, the tests): as
        leader only. ``(run, after, outcome)`` for each."""
        if not self.tick():
            return []
        now = self.clock.now()
        if self.collectors is not None:
            self.collectors.catch_up()
        due = sorted((j for j in self.scheduler.get_jobs() if j.next_run_time is not None and j.next_run_time <= now),
                     key=lambda j: j.next_run_time)
        fired = []
        for job in due:
            self.scheduler.remove_job(job.id)
            run_id, after = job.args
            fired.append((run_id, after, self.fire(run_id, after)))
        return fired

    def _on_job(self, event: JobExecutionEvent) -> None:
        if not event.job_id.startswith(PREFIX):
            return
        if event.exception is not None:
            log.error("job %s failed: %s", event.job_id, event.exception)
            return
        run_id, after = event.retval
        self.fire(run_id, after)

    def fire(self, run_id: str, after: str) -> str:
        """Post the report (once); on failure, schedule it again ``retry_after`` seconds later."""
        try:
            outcome: str = self.poster.post_due(run_id, after)
        except Exception as exc:
            log.exception("run %s: the %s report failed; retrying in %.0fs", run_id, after, self.retry_after)
            self._add(run_id, after, self.clock.now() + dt.timedelta(seconds=self.retry_after))
            return f"failed: {type(exc).__name__}"
        return outcome

    def jobs(self) -> list[dict[str, Any]]:
        """The scheduled report jobs: id and when each is due (for status and tests)."""
        return [{"id": j.id, "due": j.next_run_time} for j in self.scheduler.get_jobs()]
