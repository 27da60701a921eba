"""Clicks on the bot's buttons: Approve and Reject on a gate, Request rollback on a report.

A front end turns a click into a :class:`Click` and hands it to :class:`EngineDecisions`
(the :class:`Decisions` every chat surface uses), which answers with a :class:`Decided`:

- Approve / Reject: the button's value names the gate it was posted for
  (:func:`handlers.run_views.gate_ref`), so a click on an old request never decides a
  newer one; and a click made on a message must be made on that gate's own message (its
  ts is kept with the run), so another run's value on this message decides nothing and
  rewrites nothing. The clicker becomes an :class:`~runbooks.engine.approving.Actor` with their
  user groups, and ``engine.decide`` applies the policy (approvers, no self-approval,
  expiry, already decided) with a compare-and-set: a double click or a retried delivery
  decides once. A counted click replaces the buttons with who decided and when; the
  engine moves the run on by itself.
- Request rollback (a stability report that is not stable): opens a rollback request
  as the clicker, who must be the run's requester or an approver (the engine checks),
  which an approver still has to approve.
- Details (on each step's message in the thread): that step's whole trail from the audit,
  for the clicker only; it decides nothing, so anyone in the channel may ask.

A refused click changes nothing: ``accepted`` False and an ephemeral reply with the reason.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict

from handlers import messages as msg
from handlers import run_messages as rmsg
from handlers.access import Directory, DirectoryUnavailable, actor
from handlers.replies import Message, Reply, user_ref
from handlers.run_replies import details_reply
from handlers.run_views import (
    APPROVE,
    DETAILS,
    REQUEST_ROLLBACK,
    decided_message,
    details_of,
    gate_ref,
    on_gate_message,
    run_of_ref,
)
from runbooks.engine.commands import Engine
from runbooks.engine.refusals import Refused
from runbooks.engine.store import StoreUnavailable
from runbooks.policy import Policy


class Click(BaseModel):
    """One click on a button, as the front end received it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    action: Literal["approve", "reject", "request_rollback", "details"]
    value: str
    user: str
    channel: str | None = None
    message_ts: str | None = None
    """The clicked message (Slack: its ``ts``), which ``Decided.replace`` rewrites."""
    thread_ts: str | None = None
    """The thread the message is in, where a public ``Decided.reply`` goes."""

    @property
    def approve(self) -> bool:
        return self.action == APPROVE


class Decided(BaseModel):
    """What came of a click: whether it counted, what to tell, how the message now reads."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    accepted: bool
    reply: Reply | None = None
    replace: Message | None = None


class Decisions(Protocol):
    def decide(self, click: Click) -> Decided:
        """Apply the click once, or refuse it with the reason; must not raise for a refusal."""
        ...


class EngineDecisions:
    """Every click decided by the run engine, for every chat surface."""

    def __init__(self, *, engine: Engine, policy: Policy, directory: Directory, surface: str = "slack") -> None:
        self.engine, self.policy, self.directory, self.surface = engine, policy, directory, surface

    def decide(self, click: Click) -> Decided:
        try:
            if click.action == REQUEST_ROLLBACK:
                return self._request_rollback(click)
            if click.action == DETAILS:
                return self._details(click)
            return self._decide(click)
        except Refused as exc:
            return _refused(str(exc))
        except DirectoryUnavailable as exc:
            return _refused(msg.cannot_check_approver(str(exc)))
        except StoreUnavailable as exc:
            return _refused(msg.store_unavailable(str(exc), nothing="decided"))

    def _decide(self, click: Click) -> Decided:
        run_id = run_of_ref(click.value)
        if run_id is None:
            return _refused(msg.not_a_request(click.value))
        before = self.engine.get(run_id)
        gate = before.gate
        if gate is None or gate_ref(before, gate) != click.value:
            return _refused(msg.request_closed(run_id, before.state.value))
        if not on_gate_message(before, click.value, channel=click.channel, message_ts=click.message_ts):
            return _refused(msg.not_this_message(run_id))  # another run's button on this message: left as it is
        who = replace(actor(click.user, self.policy, self.directory), surface=self.surface)
        outcome = self.engine.decide(run_id, actor=who, approve=click.approve, kind=gate.kind)
        if not outcome.counted:  # this approver had decided so already (a double click): counted once
            return _refused(outcome.note)
        after = outcome.run
        decided = after.gate if after.gate is not None and after.gate.opened_at == gate.opened_at else None
        mine = decided.decision_of(click.user) if decided is not None else None
        if decided is not None and decided.is_open:  # a quorum of several: the buttons stay for the others
            return Decided(accepted=True, reply=Reply(text=outcome.note, ephemeral=True))
        at = mine.at if mine is not None else after.updated_at
        return Decided(accepted=True, replace=decided_message(after, gate, user=click.user, approve=click.approve, at=at))

    def _details(self, click: Click) -> Decided:
        found = details_of(click.value)
        if found is None:
            return _refused(msg.not_a_request(click.value))
        run = self.engine.get(found[0])
        return Decided(accepted=True, reply=details_reply(run, found[1], self.engine.audit(run.id)))

    def _request_rollback(self, click: Click) -> Decided:
        who = replace(actor(click.user, self.policy, self.directory), surface=self.surface)
        outcome = self.engine.rollback(click.value, actor=who, reason=msg.rollback_from_report(who.user))
        note = outcome.note or rmsg.rollback_requested(click.value, threaded=rmsg.threaded(self.surface))
        reply = Reply(text=msg.rollback_requested_by(user_ref(who.user), note, click.value, outcome.run.state.value),
                      tone="warn")
        return Decided(accepted=True, reply=reply)


def _refused(reason: str) -> Decided:
    return Decided(accepted=False, reply=Reply.error(reason))
