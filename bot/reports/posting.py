"""Posting a scheduled stability report exactly once: in the run's thread and to on-call.

:meth:`ReportPoster.post_due` is what a fired report job calls. It claims the report's
idempotency record in Redis (``{upgradebot}:report:<run>:<after>``, see
:mod:`bot.storage.redis_store`): ``posted`` means another process (or an earlier life of this
one) already did it, ``busy`` that another process is posting it right now. Holding the
claim, it builds the report, posts it to each destination the record does not list yet
(the run's thread, then the on-call channel mentioning ``oncall.mention``), records each
message's ``ts`` as it goes, and marks the report posted. A crash between two posts
resumes with the destination still missing; only a crash between Slack's answer and the
record of it can repeat one message.

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
Posted = Literal["posted", "already", "busy", "skipped"]
CLAIM_TTL = dt.timedelta(minutes=5)


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
    ) -> None:
        """``flush(run_id)`` stores what the local collector holds before a report reads it."""
        self.store, self.engine, self.policy, self.connect = store, engine, policy, connect
        self.outlet, self.clock, self.owner, self.flush = outlet, clock, owner, flush

    def build(self, run: Run, due: str | None) -> StabilityReport:
        self.flush(run.id)
        return report_handler.handle(run.id, engine=self.engine, connect=self.connect, policy=self.policy,
                                     read_tally=self.store.read_tally, due=due)

    def posted(self, run_id: str, after: str) -> bool:
        return "posted_at" in self.store.report_record(run_id, after)

    def post_due(self, run_id: str, after: str) -> Posted:
        """Post the ``after`` report of ``run_id`` unless it was posted (or is being posted)."""
        run = self.engine.get(run_id)
        if run.state is not RunState.MONITORING:
            return "skipped"
        claim = self.store.claim_report(run_id, after, self.owner, CLAIM_TTL)
        if claim != "claimed":
            return "already" if claim == "posted" else "busy"
        try:
            report = self.build(run, after)
            record = self.store.report_record(run_id, after)
            last = after == due_times(run, self.policy)[-1][0]
            if "thread" not in record:
                ts = self.outlet.to_thread(run, report_handler.present(report, last=last))
                self.store.mark_report(run_id, after, self.owner, thread=ts or "-")
            if "oncall" not in record:
                lead = mention(self.policy.oncall.mention) if self.policy.oncall.mention else ""
                ts = self.outlet.to_oncall(run, report_handler.present(report, lead=lead, last=last))
                self.store.mark_report(run_id, after, self.owner, oncall=ts or "-")
            self.store.mark_report(run_id, after, self.owner, done=True, verdict=report.verdict,
                                   posted_at=self.clock.now().isoformat())
        except BaseException:
            self.store.release_report(run_id, after, self.owner)
            raise
        log.info("run %s: the %s report is posted (%s)", run_id, after, report.verdict)
        self.finish_if_last(run_id)
        return "posted"

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
