"""Clicks on Approve and Reject: the contract between a front end and the run engine.

A gate message carries :func:`approval_buttons` (``action_id`` :data:`APPROVE` or
:data:`REJECT`, ``value`` the gate's reference, e.g. the run id). A front end turns a
click into a :class:`Click` and hands it to a :class:`Decisions`; the engine wiring
implements it: checks the clicker against the approval policy (approvers, their user
groups through a :class:`handlers.access.Directory`, no self-approval, expiry, already
decided), applies the decision once, and answers with a :class:`Decided`.

A refused click changes nothing: ``accepted`` False, an ephemeral ``reply`` with the
reason, no ``replace``. An accepted one may ``replace`` the gate message (its buttons
give way to who decided and when) and ``reply`` in the thread.
"""

from __future__ import annotations

from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict

from handlers.replies import Button, Message, Reply

APPROVE = "approve"
REJECT = "reject"
REQUEST_ROLLBACK = "request_rollback"
"""The button of a stability report that is not stable (``handlers/report.py``); value: the run id."""
ACTIONS: tuple[str, ...] = (APPROVE, REJECT, REQUEST_ROLLBACK)


def approval_buttons(value: str, *, approve: str = "Approve", reject: str = "Reject") -> list[Button]:
    """The two buttons of a gate; ``value`` comes back in the :class:`Click`."""
    return [
        Button(label=approve, action_id=APPROVE, value=value, style="primary"),
        Button(label=reject, action_id=REJECT, value=value, style="danger"),
    ]


class Click(BaseModel):
    """One click on a gate's button, as the front end received it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    action: Literal["approve", "reject", "request_rollback"]
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
    """What came of a click: whether it counted, what to tell, how the gate now reads."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    accepted: bool
    reply: Reply | None = None
    replace: Message | None = None


class Decisions(Protocol):
    def decide(self, click: Click) -> Decided:
        """Apply the click once, or refuse it with the reason; must not raise for a refusal."""
        ...
