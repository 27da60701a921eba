"""The stability reports plugged into a runtime: the ``report`` verb, the scheduler, the collectors.

:func:`plug` is called by :func:`bot.runtime.build_runtime` (its ``EXTENSIONS``). It adds
the ``report`` chat verb and, when ``reports.after`` lists any report, a service started
and stopped with the runtime: the :class:`~bot.reports.scheduler.ReportScheduler` with its
:class:`~bot.reports.collector.Collectors`. With the wall clock (``serve``, ``console``) the
scheduler runs its leader loop in the background and each collector watches in a thread.
With any other clock (the demo's simulated one) the schedule belongs to whoever moves that
clock: start only takes the lease and schedules; :meth:`Reports.run_due` fires what is due.

Where reports go is attached through the runtime's front-end hooks once a front end exists:
:func:`slack_reports` (``serve``: the run's thread and the on-call channel, and the
"Request rollback" button's clicks) and :func:`console_reports` (the console chat).
"""

from __future__ import annotations

import logging
import os
import socket
from typing import TYPE_CHECKING

from bot.reports.collector import Collectors
from bot.reports.posting import ReportOutlet, ReportPoster, SlackOutlet
from bot.reports.scheduler import ReportScheduler
from handlers import messages
from handlers import report as report_handler
from handlers.access import Directory, DirectoryUnavailable, requester
from handlers.decisions import REQUEST_ROLLBACK, Click, Decided, Decisions
from handlers.replies import Message, Reply
from runbooks.engine.clocks import SystemClock
from runbooks.engine.leasing import owner_id
from runbooks.engine.runs import Run
from runbooks.engine.store import StoreUnavailable

if TYPE_CHECKING:
    from bot.console import Chat
    from bot.runtime import Runtime
    from bot.slack.web import SlackWeb

log = logging.getLogger("upgradebot.reports")
_PLUGGED: dict[int, Reports] = {}


class Outlets:
    """Every outlet attached, in order; a report goes to each (none attached: logged only)."""

    def __init__(self) -> None:
        self.outlets: list[ReportOutlet] = []

    def _each(self, method: str, run: Run, reply: Reply) -> str | None:
        if not self.outlets:
            log.warning("run %s: no chat surface to post its report to: %s", run.id, reply.title)
        posted = [getattr(outlet, method)(run, reply) for outlet in self.outlets]
        return next((ts for ts in posted if ts), None)

    def to_thread(self, run: Run, reply: Reply) -> str | None:
        return self._each("to_thread", run, reply)

    def to_oncall(self, run: Run, reply: Reply) -> str | None:
        return self._each("to_oncall", run, reply)


class Reports:
    """The report scheduler, the event collectors and the outlets of one runtime."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.automatic = isinstance(runtime.clock, SystemClock)
        owner = owner_id(socket.gethostname(), os.getpid())
        self.outlets = Outlets()
        self.collectors = Collectors(store=runtime.store, connect=runtime.connect, owner=owner, clock=runtime.clock,
                                     threaded=self.automatic)
        self.poster = ReportPoster(store=runtime.store, engine=runtime.engine, policy=runtime.policy,
                                   connect=runtime.connect, outlet=self.outlets, clock=runtime.clock, owner=owner,
                                   flush=self.collectors.flush)
        self.scheduler = ReportScheduler(store=runtime.store, poster=self.poster, policy=runtime.policy,
                                         clock=runtime.clock, collectors=self.collectors, owner=owner)

    def start(self) -> None:
        if self.automatic:
            self.scheduler.start()
        else:
            self.scheduler.tick()

    def stop(self, timeout: float = 30.0) -> None:
        self.scheduler.stop()
        _PLUGGED.pop(id(self.runtime), None)

    def run_due(self) -> list[tuple[str, str, str]]:
        """Fire every report due on the runtime's clock, now (the demo, the tests)."""
        return self.scheduler.run_due()


def plug(runtime: Runtime) -> None:
    """The ``report`` verb, the "Request rollback" button on every front end and, when reports
    are scheduled, the scheduler and collectors as a service and the front ends as outlets."""
    runtime.verbs.append(report_handler.verb(engine=runtime.engine, connect=runtime.connect, policy=runtime.policy,
                                             read_tally=runtime.store.read_tally))
    runtime.slack_hooks.append(lambda web, decisions, directory: slack_reports(runtime, web, decisions, directory))
    runtime.console_hooks.append(lambda chat: console_reports(runtime, chat))
    if not runtime.policy.reports.after:
        return
    reports = _PLUGGED[id(runtime)] = Reports(runtime)
    runtime.add_service("the stability reports (scheduler and event collectors)", reports.start, reports.stop)


def reports_of(runtime: Runtime) -> Reports | None:
    """The runtime's reports (None when its policy schedules none)."""
    return _PLUGGED.get(id(runtime))


# ------------------------------------------------------------------ front ends
class RollbackRequests:
    """The "Request rollback" button of a report, in front of the front end's other decisions."""

    def __init__(self, inner: Decisions, runtime: Runtime, directory: Directory) -> None:
        self.inner, self.runtime, self.directory = inner, runtime, directory

    def decide(self, click: Click) -> Decided:
        if click.action != REQUEST_ROLLBACK:
            return self.inner.decide(click)
        try:
            who = requester(click.user, self.runtime.policy, self.directory)
            reply = report_handler.request_rollback(click.value, engine=self.runtime.engine, actor=who)
        except DirectoryUnavailable as exc:
            reply = Reply.error(messages.cannot_check_approver(str(exc)))
        except StoreUnavailable as exc:
            reply = Reply.error(messages.store_unavailable_click(str(exc)))
        return Decided(accepted=reply.tone != "error", reply=reply)


def slack_reports(runtime: Runtime, web: SlackWeb, decisions: Decisions, directory: Directory) -> Decisions:
    """``serve``: reports to the run's Slack thread and the on-call channel; the decisions with
    the "Request rollback" button in front."""
    reports = reports_of(runtime)
    if reports is not None:
        reports.outlets.outlets.append(SlackOutlet(web, runtime.policy))
    return RollbackRequests(decisions, runtime, directory)


class ChatOutlet:
    """The console chat: a report as a reply under the run (buttons numbered as every other)."""

    def __init__(self, chat: Chat, runtime: Runtime) -> None:
        self.chat, self.runtime = chat, runtime

    def to_thread(self, run: Run, reply: Reply) -> str | None:
        self.chat.print(f"upgradebot posted in the thread of {run.id}:")
        self.chat.show(reply)
        return f"console:{run.id}"

    def to_oncall(self, run: Run, reply: Reply) -> str | None:
        channel = self.runtime.policy.oncall.channel
        if not channel:
            return None
        self.chat.print(f"upgradebot posted in the on-call channel {channel}:")
        self.chat.show(reply.model_copy(update={"thread": [Message(text=f"(details in the thread of {run.id})")]}))
        return f"console:{channel}"


def console_reports(runtime: Runtime, chat: Chat) -> None:
    """The console chat shows the reports, and its "Request rollback" choice opens a request."""
    from handlers.access import StaticDirectory

    reports = reports_of(runtime)
    if reports is not None:
        reports.outlets.outlets.append(ChatOutlet(chat, runtime))
    if chat.decisions is not None:
        directory = chat.router.directory if chat.router is not None else StaticDirectory()
        chat.decisions = RollbackRequests(chat.decisions, runtime, directory)
