"""Runs have owners: closing a run, asking for its rollback (which cancels a pending
promotion) and rejecting its requests are for its requester and the approvers only; a
decision names the request it decides; approvals from the shell need the policy's leave.

Engine-level, on a real Redis and scripted steps, so every front end gets the same rules.
"""

from __future__ import annotations

import pytest

from handlers.access import StaticDirectory
from handlers.clicks import Click, EngineDecisions
from runbooks.engine.approving import Actor
from runbooks.engine.refusals import Refused
from runbooks.engine.runs import GateKind, RunState
from tests.engine_support import ALICE, BOB, TARGET, make_engine, policy, request

DAVE = Actor("U0DAVE")  # a requester too (the policy lets anyone request), not an approver


def _awaiting_promotion(redis_url: str, **sections: object):  # type: ignore[no-untyped-def]
    engine = make_engine(redis_url, pol=policy(**sections))
    run = request(engine)
    engine.decide(run.id, actor=BOB, approve=True)
    assert engine.advance(run.id).state is RunState.AWAITING_PROMOTION
    return engine, run.id


def test_someone_elses_pending_promotion_cannot_be_cancelled_by_a_rollback_request(redis_url: str) -> None:
    engine, run_id = _awaiting_promotion(redis_url)
    before = engine.get(run_id)
    with pytest.raises(Refused, match=r"you \(U0DAVE\) may not roll back run .*only its requester \(U0ALICE\)"):
        engine.rollback(run_id, actor=DAVE, reason="mine now")
    after = engine.get(run_id)
    assert after.version == before.version and after.gate is not None and after.gate.kind is GateKind.PROMOTION
    assert after.gate.is_open

    owner = engine.rollback(run_id, actor=ALICE)  # the requester may
    assert owner.run.gate is not None and owner.run.gate.kind is GateKind.ROLLBACK


def test_someone_elses_monitoring_run_cannot_be_closed(redis_url: str) -> None:
    engine, run_id = _awaiting_promotion(redis_url, reports={"after": ["24h"]})
    engine.decide(run_id, actor=BOB, approve=True)
    assert engine.advance(run_id).state is RunState.MONITORING
    with pytest.raises(Refused, match="may not close run"):
        engine.close(run_id, actor=DAVE)
    assert engine.get(run_id).state is RunState.MONITORING
    assert engine.close(run_id, actor=BOB).run.state is RunState.DONE  # an approver may


def test_only_the_requester_and_approvers_reject(redis_url: str) -> None:
    engine = make_engine(redis_url)
    run = request(engine)
    with pytest.raises(Refused, match="not an approver"):
        engine.decide(run.id, actor=DAVE, approve=False)
    assert engine.get(run.id).gate.is_open  # type: ignore[union-attr]


def test_request_rollback_on_a_report_is_the_owners_too(redis_url: str) -> None:
    engine, run_id = _awaiting_promotion(redis_url)
    decisions = EngineDecisions(engine=engine, policy=engine.policy, directory=StaticDirectory())
    decided = decisions.decide(Click(action="request_rollback", value=run_id, user="U0DAVE"))
    assert not decided.accepted and "may not roll back" in decided.reply.text  # type: ignore[union-attr]
    assert engine.get(run_id).gate.kind is GateKind.PROMOTION  # type: ignore[union-attr]


def test_a_decision_names_its_request_and_is_refused_when_that_one_is_not_open(redis_url: str) -> None:
    engine = make_engine(redis_url)
    run = request(engine)
    with pytest.raises(Refused, match=r"the promotion request of run .* is not open .*awaiting_approval"):
        engine.decide(run.id, actor=BOB, approve=True, kind=GateKind.PROMOTION)
    assert engine.get(run.id).version == run.version
    assert engine.decide(run.id, actor=BOB, approve=True, kind=GateKind.CANARY).run.gate.outcome == "approved"  # type: ignore[union-attr]


@pytest.mark.parametrize("surface", ["shell", "console"])
def test_approvals_from_a_shell_need_the_policys_leave(redis_url: str, surface: str) -> None:
    engine = make_engine(redis_url)
    run = request(engine)
    from_shell = Actor("U0BOB", surface=surface, account="bob@bastion")
    with pytest.raises(Refused, match=f"approvals from the {surface} are off"):
        engine.decide(run.id, actor=from_shell, approve=True)
    assert engine.get(run.id).gate.is_open  # type: ignore[union-attr]
    engine.decide(run.id, actor=from_shell, approve=False)  # a rejection stops a change: allowed

    allowed = make_engine(redis_url, pol=policy(shell={"approvals": True}, identities={"accounts": {"bob": "U0BOB"}}))
    run = request(allowed, target="kube-system/other")
    assert allowed.decide(run.id, actor=from_shell, approve=True).run.gate.outcome == "approved"  # type: ignore[union-attr]


def test_every_audit_line_records_surface_identity_and_account(redis_url: str) -> None:
    engine = make_engine(redis_url, pol=policy(shell={"approvals": True}, identities={"accounts": {"bob": "U0BOB"}}))
    alice = Actor("U0ALICE", surface="shell", account="alice@bastion-1")
    run = request(engine, alice)
    engine.decide(run.id, actor=Actor("U0BOB", surface="slack"), approve=True)
    engine.advance(run.id)
    entries = engine.audit(run.id)
    assert all(e["surface"] for e in entries)
    people = {(e["actor"], e["surface"], e.get("account")) for e in entries if e["actor"] != "upgradebot"}
    assert ("U0ALICE", "shell", "alice@bastion-1") in people and ("U0BOB", "slack", None) in people
    assert {e["surface"] for e in entries if e["actor"] == "upgradebot"} == {"engine"}


def _own_redis(redis_url: str, **sections: object):  # type: ignore[no-untyped-def]
    """The engine of a shell on its user's own Redis: no bot serving Slack reads its runs."""
    return make_engine(redis_url, pol=policy(**sections), slack_sees_runs=False)


@pytest.mark.parametrize(("requester", "sections", "reason"), [
    ("U0ALICE", {"shell": {"approvals": True}, "identities": {"accounts": {"alice": "U0ALICE", "bob": "U0BOB"}},
                 "approvers": {"quorum": 2}}, r"only 1 approver\(s\), of a quorum of 2, have an identity the shell"),
    ("U0ALICE", {"shell": {"approvals": True}, "identities": {"accounts": {"alice": "U0ALICE"}}},
     "no approver but you has an identity the shell acts as"),
    ("U0BOB", {"shell": {"approvals": True}, "identities": {"accounts": {"bob": "U0BOB"}}},
     "no approver but you has an identity the shell acts as"),
], ids=["quorum-unreachable", "approvers-unmapped", "only-the-requester"])
def test_a_request_from_the_shell_nobody_could_approve_is_refused_locking_nothing(
        redis_url: str, requester: str, sections: dict[str, object], reason: str) -> None:
    """issue 64: on the shell's own Redis, the approvers who could approve are those the identities
    map (groups are not looked up there), the requester not counted, and they must make the quorum."""
    engine = _own_redis(redis_url, **sections)
    with pytest.raises(Refused, match=reason):
        request(engine, Actor(requester, surface="shell", account="someone"))
    assert engine.runs() == [] and engine.store.lock_holder(f"prod/{TARGET}") is None


def test_a_request_from_the_shell_some_approver_could_approve_opens(redis_url: str) -> None:
    """Approvers reachable from the shell (or self-approval allowed), or a store a Slack bot may read:
    the request opens; a request from Slack is for Slack's approvers, never refused so."""
    alice = Actor("U0ALICE", surface="shell", account="alice")
    reachable = _own_redis(redis_url, shell={"approvals": True}, identities={"accounts": {"alice": "U0ALICE", "bob": "U0BOB"}})
    assert request(reachable, alice, target="kube-system/a").state is RunState.AWAITING_APPROVAL
    own = _own_redis(redis_url, shell={"approvals": True}, identities={"accounts": {"bob": "U0BOB"}},
                     approvers={"allow_self_approval": True})
    assert request(own, Actor("U0BOB", surface="shell", account="bob"), target="kube-system/b").requester == "U0BOB"
    off = _own_redis(redis_url)  # shell.approvals off: only Slack's approvers, whom a Slack request reaches
    assert request(off, Actor("U0ALICE", surface="slack"), target="kube-system/c").requester == "U0ALICE"
    with pytest.raises(Refused, match=r"approvals from the console are off \(shell.approvals: false\)"):
        request(off, Actor("U0ALICE", surface="console"), target="kube-system/d")
    shared = make_engine(redis_url)  # REDIS_URL: a bot serving Slack may read the run
    assert request(shared, alice, target="kube-system/e").requester == "U0ALICE"
