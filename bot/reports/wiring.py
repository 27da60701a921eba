"""The stability reports of one process: the scheduler, the event collectors and the outlets.

:func:`bot.runtime.build_runtime` builds :class:`Reports` when ``reports.after`` lists any
report, and starts and stops it with the runtime. With the wall clock (``serve``,
``console``) the scheduler runs its leader loop in the background and each collector
watches in a thread. With any other clock (the demo's simulated one) the schedule belongs
to whoever moves that clock: :meth:`Reports.start` only takes the lease and schedules;
:meth:`Reports.run_due` fires what is due.

Where a report goes is each front end's :class:`~bot.reports.posting.ReportOutlet`, added
to :attr:`Reports.outlets` once the front end exists: ``serve`` adds the run's Slack
thread and the on-call channel, the console chat itself. The "Request rollback" button on
a report is a click like the others (:mod:`handlers.clicks`).

A report's due time is the API server's: the promotion's start is stamped with its
``Date`` (``promote_started_at``). So with the wall clock the reports read the time from
the default cluster's API server (:class:`ServerTime`), our own clock while it cannot be
reached: a cluster whose clock runs ahead of or behind the bot's (or kubesim's faster one)
gets its reports when its own clock says they are due.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import socket
import threading
from collections.abc import Callable

from bot.reports.collector import Collectors
from bot.reports.posting import ReportOutlet, ReportPoster
from bot.reports.scheduler import ReportScheduler
from bot.storage.redis_store import RedisRunStore
from handlers.replies import Reply
from runbooks.cluster import Cluster
from runbooks.engine.clocks import ClusterClock, SystemClock
from runbooks.engine.commands import Engine
from runbooks.engine.leasing import owner_id
from runbooks.engine.runs import Run
from runbooks.engine.steps import Clock
from runbooks.policy import Policy
from runbooks.stability.reporting import metric_sampler

log = logging.getLogger("upgradebot.reports")


class Outlets:
    """Every outlet added, in order; a report goes to each (none added: logged only)."""

    def __init__(self) -> None:
        self._outlets: list[ReportOutlet] = []

    def add(self, outlet: ReportOutlet) -> None:
        self._outlets.append(outlet)

    def _each(self, method: str, run: Run, reply: Reply) -> str | None:
        if not self._outlets:
            log.warning("run %s: no chat surface to post its report to: %s", run.id, reply.title)
        posted = [getattr(outlet, method)(run, reply) for outlet in self._outlets]
        return next((ts for ts in posted if ts), None)

    def to_thread(self, run: Run, reply: Reply) -> str | None:
        return self._each("to_thread", run, reply)

    def to_oncall(self, run: Run, reply: Reply) -> str | None:
        return self._each("to_oncall", run, reply)


class ServerTime:
    """The default cluster's clock (its API server's ``Date``) over one connection, opened on
    first use; our own clock while the cluster cannot be reached (logged once per outage)."""

    def __init__(self, connect: Callable[[str | None], Cluster]) -> None:
        self.connect = connect
        self._cluster: Cluster | None = None
        self._failing = False
        self._lock = threading.Lock()

    def __call__(self) -> dt.datetime:
        with self._lock:
            try:
                if self._cluster is None:
                    self._cluster = self.connect(None)
                now = self._cluster.server_time()
            except Exception as exc:  # unreachable, or no cluster configured: our own clock
                if not self._failing:
                    log.warning("the reports read our own clock: the cluster's is out of reach (%s)",
                                type(exc).__name__)
                self._failing, self._cluster = True, None
                return dt.datetime.now(dt.UTC)
            self._failing = False
            return now

    def close(self) -> None:
        with self._lock:
            if self._cluster is not None:
                self._cluster.close()
            self._cluster = None


class Reports:
    """The report scheduler, the event collectors and the outlets of one process."""

    def __init__(self, *, store: RedisRunStore, engine: Engine, policy: Policy,
                 connect: Callable[[str | None], Cluster], clock: Clock) -> None:
        self.automatic = isinstance(clock, SystemClock)
        self.server_time: ServerTime | None = None
        if type(clock) is SystemClock:  # the wall clock: the reports' times are the cluster's
            self.server_time = ServerTime(connect)
            clock = ClusterClock(self.server_time)
        owner = owner_id(socket.gethostname(), os.getpid())
        self.outlets = Outlets()
        self.collectors = Collectors(store=store, connect=connect, owner=owner, clock=clock, threaded=self.automatic,
                                     metrics=metric_sampler(policy))
        self.poster = ReportPoster(store=store, engine=engine, policy=policy, connect=connect, outlet=self.outlets,
                                   clock=clock, owner=owner, flush=self.collectors.flush)
        self.scheduler = ReportScheduler(store=store, poster=self.poster, policy=policy, clock=clock,
                                         collectors=self.collectors, owner=owner)

    def start(self) -> None:
        if self.automatic:
            self.scheduler.start()
        else:
            self.scheduler.tick()

    def stop(self) -> None:
        self.scheduler.stop()
        if self.server_time is not None:
            self.server_time.close()

    def run_due(self) -> list[tuple[str, str, str]]:
        """Fire every report due on the clock, now (the demo, the tests)."""
        return self.scheduler.run_due()
