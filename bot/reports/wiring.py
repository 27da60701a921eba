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
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable

from bot.reports.collector import Collectors
from bot.reports.posting import ReportOutlet, ReportPoster
from bot.reports.scheduler import ReportScheduler
from bot.storage.redis_store import RedisRunStore
from handlers.replies import Reply
from runbooks.cluster import Cluster
from runbooks.engine.clocks import SystemClock
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


class Reports:
    """The report scheduler, the event collectors and the outlets of one process."""

    def __init__(self, *, store: RedisRunStore, engine: Engine, policy: Policy,
                 connect: Callable[[str | None], Cluster], clock: Clock) -> None:
        self.automatic = isinstance(clock, SystemClock)
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

    def run_due(self) -> list[tuple[str, str, str]]:
        """Fire every report due on the clock, now (the demo, the tests)."""
        return self.scheduler.run_due()
