"""The approval policy: who may request, who may approve, quorum, self-approval, expiry.

Purely data-manipulative, no I/O: the engine calls these with the run it read and
stores what they return with a compare-and-set. Every front end shares them, so Slack
and the shell refuse the same things with the same sentences (:mod:`runbooks.engine.refusals`).

- Requesters: the policy's ``requesters`` users and usergroups; both empty = anyone.
- Approvers: the policy's ``approvers`` users and usergroups; both empty = anyone (only the
  built-in policy, which no front end approves with: a file must name approvers, ``serve``
  without one is read-only, and the shell's requests are then refused by :func:`check_approvable`). Usergroup membership is resolved by the front end and
  passed in as :attr:`Actor.groups`.
- The requester of a gate may not approve it unless ``allow_self_approval``; they may
  reject (withdraw) it.
- A gate is approved when ``quorum`` distinct approvers approved; one rejection by an
  approver decides it. The same approver deciding twice counts once.
- A decision may name the gate it decides (``approve <run> promotion``): refused when
  that gate is not the run's open one.
- Approvals from the shell or the console (an OS account or a CI token, not a Slack
  session) are refused unless the policy says ``shell.approvals: true``.
- A request opened from the shell or the console that nobody could ever approve is refused
  before anything is stored (:func:`check_approvable`): no approvers at all (no policy file),
  or none the request can reach. Slack's approvers reach it when a bot serving Slack may read
  the run (the engine's store is shared, ``REDIS_URL``); the shell's and the console's are the
  ``approvers.users`` the policy's ``identities`` map an account or a CI token to, when
  ``shell.approvals`` is on, the requester not counted unless ``allow_self_approval``; they
  must make the ``quorum``.
- Ownership: ending a run's monitoring (``close``), asking for its rollback (which
  cancels a pending promotion) and rejecting its requests are for the run's requester
  and the approvers only (:func:`check_owner`).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from runbooks.engine import refusals
from runbooks.engine.actors import Actor
from runbooks.engine.refusals import Refused
from runbooks.engine.runs import Decision, Gate, GateKind, Run
from runbooks.policy import Policy, Principals, duration_seconds


def _member(principals: Principals, actor: Actor) -> bool:
    return actor.user in principals.users or bool(actor.groups & set(principals.usergroups))


def may_request(policy: Policy, actor: Actor) -> bool:
    rules = policy.requesters
    return (not rules.users and not rules.usergroups) or _member(rules, actor)


def may_approve(policy: Policy, actor: Actor) -> bool:
    rules = policy.approvers
    return (not rules.users and not rules.usergroups) or _member(rules, actor)


def check_requester(policy: Policy, actor: Actor) -> None:
    if not may_request(policy, actor):
        raise Refused(refusals.not_a_requester(actor.user))


def local_approvers(policy: Policy, requester: str) -> set[str]:
    """Who could approve ``requester``'s request from the shell or the console: the approvers listed by
    user id (those surfaces look up no groups) that ``identities`` map an account or a token to, but
    the requester unless self-approval is allowed; nobody when ``shell.approvals`` is off."""
    if not policy.shell.approvals:
        return set()
    mapped = set(policy.identities.accounts.values()) | {entry.user for entry in policy.identities.tokens}
    rules = policy.approvers
    return {user for user in rules.users if user in mapped and (user != requester or rules.allow_self_approval)}


def check_approvable(policy: Policy, actor: Actor, *, slack_sees_runs: bool) -> None:
    """:class:`Refused` when a request ``actor`` opens from the shell or the console could never be
    approved: the policy names no approvers (the built-in one, without a policy file: nobody is
    trusted to decide), or no bot serving Slack may read the run (``slack_sees_runs`` False) and
    fewer than ``quorum`` approvers can act from these surfaces (:func:`local_approvers`). A request
    from Slack is for Slack's approvers, who see it."""
    if not actor.local:
        return
    rules = policy.approvers
    if not rules.users and not rules.usergroups:
        raise Refused(refusals.no_approvers())
    if slack_sees_runs:
        return
    reachable = local_approvers(policy, actor.user)
    if len(reachable) < rules.quorum:
        raise Refused(refusals.no_approver_reachable(actor.surface, approvals=policy.shell.approvals,
                                                     reachable=len(reachable), quorum=rules.quorum))


def check_may_open(policy: Policy, actor: Actor, *, slack_sees_runs: bool) -> None:
    """Whether ``actor`` may open a new run's request: a requester, and someone could approve it."""
    check_requester(policy, actor)
    check_approvable(policy, actor, slack_sees_runs=slack_sees_runs)


def is_owner(policy: Policy, run: Run, actor: Actor) -> bool:
    """The run's requester, or an approver: who may close it, roll it back or reject its requests."""
    return actor.user == run.requester or may_approve(policy, actor)


def check_owner(policy: Policy, run: Run, actor: Actor, doing: str) -> None:
    if not is_owner(policy, run, actor):
        raise Refused(refusals.not_an_owner(actor.user, run, doing))


def open_gate(kind: GateKind, *, requested_by: str, now: dt.datetime, policy: Policy, reason: str = "") -> Gate:
    expires = now + dt.timedelta(seconds=duration_seconds(policy.approvers.expire_after))
    return Gate(kind=kind, opened_at=now, expires_at=expires, requested_by=requested_by, reason=reason)


def is_expired(gate: Gate, now: dt.datetime) -> bool:
    return gate.is_open and now >= gate.expires_at


@dataclass(frozen=True)
class Verdict:
    """What a decision did: the gate after it, whether it counted, and a note for people."""

    gate: Gate
    counted: bool
    note: str = ""


def decide(
    run: Run, actor: Actor, *, approve: bool, now: dt.datetime, policy: Policy, comment: str = "",
    kind: GateKind | None = None,
) -> Verdict:
    """The gate of ``run`` after ``actor``'s decision, or :class:`Refused` with the reason;
    ``kind``: the gate the decider meant, refused when it is not the run's open one."""
    gate = run.gate
    if gate is None:
        raise Refused(refusals.nothing_to_decide(run))
    if kind is not None and gate.kind is not kind:
        raise Refused(refusals.gate_not_open(run, kind))
    if approve and actor.local and not policy.shell.approvals:
        raise Refused(refusals.local_approval(actor.surface))
    mine = gate.decision_of(actor.user)
    if mine is not None and mine.approve == approve:
        return Verdict(gate, counted=False, note=refusals.repeat_decision(gate, actor.user, approve))
    if kind is not None and not gate.is_open and gate.outcome != "expired":
        raise Refused(refusals.gate_not_open(run, kind))
    if not gate.is_open:
        if gate.outcome == "expired":
            raise Refused(refusals.expired(run, gate))
        raise Refused(refusals.already_decided(run, gate))
    if is_expired(gate, now):
        raise Refused(refusals.expired(run, gate))
    if approve and actor.user == gate.requested_by and not policy.approvers.allow_self_approval:
        raise Refused(refusals.self_approval(run, gate))
    withdrawing = not approve and actor.user in (gate.requested_by, run.requester)
    if not withdrawing and not may_approve(policy, actor):
        raise Refused(refusals.not_an_approver(actor.user, run))
    decisions = [d for d in gate.decisions if d.user != actor.user]
    decisions.append(Decision(user=actor.user, approve=approve, at=now, comment=comment))
    updated = gate.model_copy(update={"decisions": decisions})
    if not approve:
        return Verdict(updated.model_copy(update={"outcome": "rejected", "decided_at": now}), counted=True)
    if len(updated.approvers) >= policy.approvers.quorum:
        return Verdict(updated.model_copy(update={"outcome": "approved", "decided_at": now}), counted=True)
    return Verdict(updated, counted=True, note=refusals.quorum_pending(updated, policy.approvers.quorum))
