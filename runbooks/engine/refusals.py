"""Every sentence the run engine says when it refuses something, in one place.

Front ends show :class:`Refused` as is (the shell on stderr, Slack in an ephemeral
reply): each says what was refused, why, and what to do instead. Nothing was changed.
"""

from __future__ import annotations

import datetime as dt

from runbooks.engine.runs import Gate, GateKind, Run, RunKind, RunState


class Refused(Exception):
    """A request the engine will not carry out; ``str()`` is the sentence for people."""


class RunNotFound(Refused):
    """No run has this id."""


def moment_text(moment: dt.datetime) -> str:
    """``2025-01-06 09:30:00 UTC``: how every sentence writes a moment."""
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _what(gate: Gate) -> str:
    return f"the {gate.kind.value} request"


def no_such_run(run_id: str) -> str:
    return f"no run {run_id}: `runs` lists the runs"


def not_halted(run: Run) -> str:
    return (f"run {run.id} is {run.state.value}, not halted (nor failed in a step): there is nothing to resume "
            f"(`status {run.id}`)")


def request_checks_failed(run: Run, failing: list[tuple[str, str]]) -> str:
    reasons = "; ".join(f"{name}: {detail}" for name, detail in failing)
    what = (f"migration of {run.target.kind} {run.target.ref}" if run.kind is RunKind.MIGRATION
            else f"repair of {run.target.ref}" if run.kind is RunKind.REPAIR
            else "cleanup of broken ResourceClaims" if run.kind is RunKind.CLEANUP
            else f"{run.kind.value} of {run.node} from {run.target.ref}" if run.kind in (RunKind.QUARANTINE,
                                                                                           RunKind.RELEASE)
            else f"canary of {run.image} on {run.node}")
    return f"{what} refused before any approver was asked, nothing was changed: {reasons}"


def not_a_requester(user: str) -> str:
    return f"{user} may not request upgrades: ask someone listed under requesters in the policy"


def not_an_approver(user: str, run: Run) -> str:
    return f"you ({user}) are not an approver for {run.target.ref} (run {run.id}): ask one of the approvers in the policy"


def not_an_owner(user: str, run: Run, doing: str) -> str:
    return (f"you ({user}) may not {doing} run {run.id}: only its requester ({run.requester}) and the approvers "
            "in the policy may")


def gate_not_open(run: Run, kind: GateKind) -> str:
    what = kind.value
    gate = run.gate
    now = (f"its open request is {_what(gate)}" if gate is not None and gate.is_open
           else "it has no open request")
    return f"the {what} request of run {run.id} is not open (the run is {run.state.value}; {now}): nothing was decided"


def local_approval(surface: str) -> str:
    return (f"approvals from the {surface} are off: approve in Slack (or set shell.approvals: true in the policy, "
            "with identities for each approver)")


NOTHING_REQUESTED = ": nothing was requested"


def no_approvers() -> str:
    return ("nobody could approve this request: there is no policy file (UPGRADEBOT_CONFIG is unset), so nobody "
            "is an approver; set UPGRADEBOT_CONFIG to a policy that names the approvers (`make try` writes one)"
            + NOTHING_REQUESTED)


def no_approver_reachable(surface: str, *, approvals: bool, reachable: int, quorum: int) -> str:
    where = (f"this {surface} keeps its runs in your own Redis (REDIS_URL is unset), which no bot serving Slack "
             "reads")
    if not approvals:
        why = f"approvals from the {surface} are off (shell.approvals: false) and {where}"
        fix = "set shell.approvals: true with identities for an approver, or REDIS_URL to the bot's Redis"
    else:
        but = "no approver but you has" if not reachable else f"only {reachable} approver(s), of a quorum of {quorum}, have"
        why = f"{but} an identity the {surface} acts as (approvers.users mapped in identities), and {where}"
        fix = "map an approver's OS account or CI token in identities, or set REDIS_URL to the bot's Redis"
    return f"nobody could approve this request: {why}; {fix}" + NOTHING_REQUESTED


def self_approval(run: Run, gate: Gate) -> str:
    return f"you requested this run; another approver must approve it ({_what(gate)} of {run.id})"


def expired(run: Run, gate: Gate) -> str:
    return f"this request expired at {moment_text(gate.expires_at)} ({_what(gate)} of {run.id}, now {run.state.value})"


def already_decided(run: Run, gate: Gate) -> str:
    if gate.outcome == "approved":
        who = ", ".join(gate.approvers) or "?"
        return f"already approved by {who} at {moment_text(gate.decided_at or gate.opened_at)} ({_what(gate)} of {run.id})"
    if gate.outcome == "rejected":
        who = ", ".join(d.user for d in gate.decisions if not d.approve) or "?"
        return f"already rejected by {who} at {moment_text(gate.decided_at or gate.opened_at)} ({_what(gate)} of {run.id})"
    return f"{_what(gate)} of {run.id} is closed ({gate.outcome})"


def nothing_to_decide(run: Run) -> str:
    return f"run {run.id} is {run.state.value}: nothing is waiting for approval"


def quorum_pending(gate: Gate, quorum: int) -> str:
    return f"{len(gate.approvers)} of {quorum} approvals; waiting for {quorum - len(gate.approvers)} more"


def repeat_decision(gate: Gate, user: str, approve: bool) -> str:
    decision = gate.decision_of(user)
    at = moment_text(decision.at) if decision else "?"
    verb = "approved" if approve else "rejected"
    return f"already {verb} by {user} at {at}; it counts once"


def rollback_too_early(run: Run) -> str:
    return f"run {run.id} is {run.state.value}: nothing was changed yet, reject the request instead"


def rollback_running(run: Run) -> str:
    return f"run {run.id} is already rolling back"


def run_ended(run: Run) -> str:
    return f"run {run.id} has ended ({run.state.value}{': ' + run.reason if run.reason else ''})"


def not_awaiting_promotion(run: Run) -> str:
    return f"run {run.id} is {run.state.value}: the promotion request opens when the canary passes"


def outside_window(ref: str, windows: str, opens: str) -> str:
    return (f"{ref} may change only in its maintenance windows ({windows}); the next opens at {opens}: "
            "ask again then, or add when=next-window to queue the run (its requests are approved as usual, "
            "its canary waits for the window)")


def not_a_stage(ref: str, context: str, stages: list[str]) -> str:
    return (f"{ref} goes through the stages {' -> '.join(stages)}: {context or 'the current context'} is not one "
            "of them (name one with cluster=)")


def stage_not_reached(run: Run, here: str, before: str, index: int, total: int) -> str:
    return (f"{here} is stage {index + 1} of {total} of {run.target.ref}: {run.image} must first go through "
            f"{before} (no run of it there yet)")


def stage_not_stable(run: Run, here: str, before: str, last: Run, report: dict[str, str]) -> str:
    if last.state is RunState.DONE and not report:
        why = "ended without a stability report (closed early, or no reports scheduled)"
    elif last.state is RunState.DONE:
        why = f"ended with its {report.get('after')} report {report.get('verdict')}"
    elif last.state is RunState.MONITORING:
        why = "is monitoring: its stability reports are not all posted yet, or its last is not stable"
    else:
        why = f"is {last.state.value}"
    return (f"{here} comes after {before} for {run.target.ref}: run {last.id} of {run.image} there {why}; "
            "the request opens once a run there ends with its last stability report stable")


def already_paused(run: Run) -> str:
    by = run.pause.by if run.pause else "someone"
    return f"run {run.id} is already paused (by {by}): `continue {run.id}` goes on"


def not_pausable(run: Run) -> str:
    if run.state is RunState.ROLLING_BACK:
        return f"run {run.id} is rolling back: a rollback is never paused"
    return f"run {run.id} is {run.state.value}: nothing is running to pause"


def not_paused(run: Run) -> str:
    return f"run {run.id} is not paused"


def not_monitoring(run: Run) -> str:
    return f"run {run.id} is {run.state.value}: only a run in monitoring can be closed"


def server_refuses(ref: str, reason: str) -> str:
    """The API server refused a request's change in its dry run (finding 9 of the security review)."""
    return f"the API server refuses this change of {ref} (a dry run; nothing was written): {' '.join(reason.split())}"


def request_not_opened(kind: str, detail: str) -> str:
    return (f"its {kind} request could not be opened ({detail}); nothing was changed, and the target is free "
            "for another request")


def owned_target(reverts: str, way: str) -> str:
    """A canary on a DaemonSet its owner would put back (:mod:`runbooks.engine.owned`)."""
    return f"{reverts}; refused before any approver was asked, nothing was changed: {way}"


def helm_reverts(release: str, values: str | None) -> str:
    """The warning a canary request on a Helm release's target carries (policy ``owner: helm``)."""
    after = (f"after promotion, make the release match: --reuse-values {values}" if values
             else "after promotion, put the new image in the release's values")
    return f"owner: {release}: the next `helm upgrade` puts this change back unless its values say so; {after}"


def not_rendered_by(ref: str, name: str, owner: str | None) -> str:
    """The policy says ``owner: clusterpolicy/<name>`` but the operator does not render the target from it."""
    found = f"its controller is {owner}" if owner else f"no ClusterPolicy {name} controls it"
    return (f"the policy says ClusterPolicy/{name} renders {ref}, but {found}; refused before any approver was asked, "
            "nothing was changed: fix targets[].owner in the policy")


def owned_change_refused(ref: str, owner: str, why: str) -> str:
    """An operator-native run asked for a change its ClusterPolicy cannot express."""
    return f"{ref} is changed through {owner}, and {why}; refused before any approver was asked, nothing was changed"


def clusterpolicy_unread(ref: str, name: str, why: str) -> str:
    """The ClusterPolicy an operator-native run would change cannot be read."""
    return (f"{ref} is changed through ClusterPolicy/{name}, which cannot be read ({why}); refused before any "
            "approver was asked, nothing was changed")
