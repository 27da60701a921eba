"""Approve / Reject clicks on a run's gate, decided by the run engine.

:class:`EngineDecisions` implements :class:`handlers.decisions.Decisions` for every chat
surface. A button's value names the gate it was posted for (:func:`run_replies.gate_ref`),
so a click on an old request never decides a newer one. The clicker becomes an
:class:`~runbooks.engine.approving.Actor` with their user groups, and ``engine.decide`` applies
the policy (approvers, no self-approval, expiry, already decided) with a compare-and-set:
a double click or a retried delivery decides once. A refused click changes nothing and
gets an ephemeral reason; a counted one replaces the buttons with who decided and when,
and the run continues through ``advance`` (a background worker in Slack).
"""

from __future__ import annotations

from collections.abc import Callable

from handlers import messages as msg
from handlers.access import Directory, DirectoryUnavailable, actor
from handlers.decisions import Click, Decided
from handlers.replies import Reply
from handlers.run_views import decided_message, gate_ref, run_of_ref
from runbooks.engine.commands import Engine
from runbooks.engine.refusals import Refused
from runbooks.engine.store import StoreUnavailable
from runbooks.policy import Policy


class EngineDecisions:
    def __init__(self, *, engine: Engine, policy: Policy, directory: Directory,
                 advance: Callable[[str], None]) -> None:
        self.engine, self.policy, self.directory, self.advance = engine, policy, directory, advance

    def decide(self, click: Click) -> Decided:
        try:
            return self._decide(click)
        except Refused as exc:
            return _refused(str(exc))
        except DirectoryUnavailable as exc:
            return _refused(msg.cannot_check_approver(str(exc)))
        except StoreUnavailable as exc:
            return _refused(msg.store_unavailable_click(str(exc)))

    def _decide(self, click: Click) -> Decided:
        run_id = run_of_ref(click.value)
        if run_id is None:
            return _refused(msg.not_a_request(click.value))
        before = self.engine.get(run_id)
        gate = before.gate
        if gate is None or gate_ref(before, gate) != click.value:
            return _refused(msg.request_closed(run_id, before.state.value))
        who = actor(click.user, self.policy, self.directory)
        outcome = self.engine.decide(run_id, actor=who, approve=click.approve)
        if not outcome.counted:  # this approver had decided so already (a double click): counted once
            return _refused(outcome.note)
        after = outcome.run
        decided = after.gate if after.gate is not None and after.gate.opened_at == gate.opened_at else None
        mine = decided.decision_of(click.user) if decided is not None else None
        if self.engine.needs_work(after):
            self.advance(run_id)
        if decided is not None and decided.is_open:  # a quorum of several: the buttons stay for the others
            return Decided(accepted=True, reply=Reply(text=outcome.note, ephemeral=True))
        at = mine.at if mine is not None else after.updated_at
        return Decided(accepted=True, replace=decided_message(after, gate, user=click.user, approve=click.approve, at=at))


def _refused(reason: str) -> Decided:
    return Decided(accepted=False, reply=Reply.error(reason))
