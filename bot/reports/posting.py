"""Posting a scheduled stability report exactly once: in the run's thread and to on-call.

:meth:`ReportPoster.post_due` is what the report scheduler's leader calls when a report is
due, with its lease's fencing token. Its idempotency record in Redis
(``{upgradebot}:report:<run>:<after>``, see :mod:`bot.storage.layout`) has, for each
destination (``thread``, ``oncall``), a claim and, once posted, the message's ``ts``.
Before each Slack call the poster claims that destination in one Lua script that also
checks the token is still the lease's (:meth:`~bot.storage.redis_store.RedisRunStore.claim_report_post`):
a process whose lease ran out (stopped, starved) finds its token stale and posts nothing
more; a destination claimed or posted by another is left to it. After the call the ``ts``
is recorded; when both are, the report is posted (``posted_at``). A post Slack refused
gives its claim back (retried later). A claim never recorded (its holder died, or stopped,
between the claim and the record) is taken over by a newer leader ``claim_grace`` after it
was taken, and posted again: the one case where a message can repeat (docs/architecture.md,
"Each report once").

After the last report (``reports.after``) the run leaves ``monitoring`` for ``done`` and
its target is free, unless someone asked for a rollback meanwhile (the request waits for
its approvers) or that last report is not stable: then the run keeps monitoring, so its
"Request rollback" button still works, until someone requests the rollback or closes the
run (``close <run>``). A run closed early, or rolled back, gets no more reports.

Where messages go is a :class:`ReportOutlet`: ``serve``'s is
:class:`bot.slack.threads.SlackOutlet`, the console's :class:`bot.console.ChatOutlet`.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from typing import Literal, Protocol

from bot.storage.redis_store import RedisRunStore
from handlers import report as report_handler
from handlers.replies import Reply, mention
from runbooks.cluster import Cluster
from runbooks.engine.actors import ENGINE_ACTOR
from runbooks.engine.commands import Engine
from runbooks.engine.runs import Run, RunState
from runbooks.engine.steps import Clock
from runbooks.policy import Policy
from runbooks.stability.reporting import due_times
from runbooks.stability.reports import StabilityReport

log = logging.getLogger("upgradebot.reports")
Posted = Literal["posted", "already", "pending", "lost", "skipped"]
WHERE = ("thread", "oncall")
CLAIM_GRACE = dt.timedelta(minutes=10)


class ReportOutlet(Protocol):
    def to_thread(self, run: Run, reply: Reply) -> str | None:
        """Post under the run's root message; its ``ts``, or None when the run has no thread here."""
        ...

    def to_oncall(self, run: Run, reply: Reply) -> str | None:
        """Post to the on-call channel; its ``ts``, or None when there is none."""
        ...


class ReportPoster:
    def __init__(
        self, *, store: RedisRunStore, engine: Engine, policy: Policy, connect: Callable[[str | None], Cluster],
        outlet: ReportOutlet, clock: Clock, owner: str, flush: Callable[[str], None] = lambda run_id: None,
        claim_grace: dt.timedelta = CLAIM_GRACE,
    ) -> None:
        """``flush(run_id)`` stores what the local collector holds before a report reads it;
        ``claim_grace``: how long (on ``clock``) a post claimed by an older leader and never
        recorded is left to it before a newer leader posts it again."""
        self.store, self.engine, self.policy, self.connect = store, engine, policy, connect
        self.outlet, self.clock, self.owner, self.flush = outlet, clock, owner, flush
        self.claim_grace = claim_grace

    def build(self, run: Run, due: str | None) -> StabilityReport:
        self.flush(run.id)
        return report_handler.handle(run.id, engine=self.engine, connect=self.connect, policy=self.policy,
                                     read_tally=self.store.read_tally, due=due)

    def posted(self, run_id: str, after: str) -> bool:
        return "posted_at" in self.store.report_record(run_id, after)

    def post_due(self, run_id: str, after: str, *, token: int, lease: dt.timedelta) -> Posted:
        """Post the ``after`` report of ``run_id`` where it is not posted yet, as the leader
        holding fencing ``token`` (each claim renews the lease for ``lease``): ``posted`` (every
        destination is now recorded), ``already``, ``pending`` (a destination another claim
        holds), ``lost`` (the token is stale: nothing more posted) or ``skipped``."""
        run = self.engine.get(run_id)
        if run.state is not RunState.MONITORING:
            return "skipped"
        if self.posted(run_id, after):
            return "already"
        last = after == due_times(run, self.policy)[-1][0]
        report: StabilityReport | None = None
        if not all(where in self.store.report_record(run_id, after) for where in WHERE):
            report = self.build(run, after)  # before the claims: between a claim and its post, no more than needed
        for where in WHERE:
            claim = self.store.claim_report_post(run_id, after, where=where, owner=self.owner, token=token,
                                                 now=self.clock.now(), grace=self.claim_grace, lease=lease)
            if claim == "stale":
                log.warning("run %s: %s no longer leads (token %d is stale): it posts nothing more of the %s "
                            "report", run_id, self.owner, token, after)
                return "lost"
            if claim == "foreign":  # the record's key holds something else (logged once when read)
                return "pending"
            if claim not in ("claimed", "reclaimed"):
                continue
            if claim == "reclaimed":
                log.warning("run %s: the %s report's post to %s was claimed by an older leader and never "
                            "recorded; posting it again", run_id, after, where)
            if report is None:  # recorded when we looked, its record since gone: build it now
                report = self.build(run, after)
            try:
                ts = self._post(where, run, report, last=last)
            except BaseException:
                self.store.release_report_post(run_id, after, where=where, owner=self.owner, token=token)
                raise
            self.store.record_report_post(run_id, after, where=where, ts=ts or "-", verdict=report.verdict)
        record = self.store.report_record(run_id, after)
        if not all(where in record for where in WHERE):
            return "pending"
        self.store.finish_report(run_id, after, posted_at=self.clock.now().isoformat())
        log.info("run %s: the %s report is posted (%s)", run_id, after, record.get("verdict", "?"))
        self.finish_if_last(run_id)
        return "posted"

    def _post(self, where: str, run: Run, report: StabilityReport, *, last: bool) -> str | None:
        if where == "thread":
            return self.outlet.to_thread(run, report_handler.present(report, last=last))
        lead = mention(self.policy.oncall.mention) if self.policy.oncall.mention else ""
        return self.outlet.to_oncall(run, report_handler.present(report, lead=lead, last=last))

    def finish_if_last(self, run_id: str) -> bool:
        """monitoring -> done once every scheduled report is posted and the last is stable; a last
        report that is not stable keeps the run monitoring (its Request rollback button live)
        until someone requests the rollback or closes the run."""
        run = self.engine.get(run_id)
        if run.state is not RunState.MONITORING or (run.gate is not None and run.gate.is_open):
            return False
        records = [self.store.report_record(run_id, after) for after, _ in due_times(run, self.policy)]
        if not records or not all("posted_at" in r for r in records) or records[-1].get("verdict") != "stable":
            return False
        last = due_times(run, self.policy)[-1][0]
        self.engine.finish_monitoring(run_id, reason=f"the {', '.join(self.policy.reports.after)} stability "
                                      "reports are posted; monitoring ends", actor=ENGINE_ACTOR,
                                      report={"after": last, "verdict": "stable", "posted_at": records[-1]["posted_at"],
                                              "thread": records[-1].get("thread", "")})
        return True
