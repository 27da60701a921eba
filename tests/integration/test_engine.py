"""The run engine on a real Redis with scripted steps: gates, approvals, locks, expiry, failures."""

from __future__ import annotations

import threading

import pytest

from runbooks.engine.approving import Actor
from runbooks.engine.refusals import Refused, RunNotFound
from runbooks.engine.requesting import InvalidRequest
from runbooks.engine.runs import GateKind, RunState
from runbooks.engine.steps import Check, CheckStatus, StepContext, StepResult
from runbooks.engine.store import LockHeld
from runbooks.errors import ClusterUnreachable
from tests.engine_support import (
    ALICE,
    BOB,
    CAROL,
    IMAGE,
    TARGET,
    FakeClock,
    RecordingObserver,
    ScriptedSteps,
    make_engine,
    ok,
    policy,
    request,
)

S = RunState


def failing(reason: str = "pod on gpu-node1 is in CrashLoopBackOff") -> StepResult:
    return StepResult(ok=False, reason=reason, checks=[Check(name="no crash loop", status=CheckStatus.FAIL, detail=reason)])


def test_full_run_passes_every_gate_in_order(redis_url: str) -> None:
    """canary request -> approve -> canary, verify -> promotion request -> approve -> promote, verify -> done."""
    steps = ScriptedSteps()
    engine = make_engine(redis_url, steps=steps)
    run = request(engine)
    assert run.state is S.AWAITING_APPROVAL and run.gate and run.gate.kind is GateKind.CANARY
    assert engine.approve(run.id, actor=BOB).run.state is S.CANARY_ROLLING
    run = engine.advance(run.id)
    assert run.state is S.AWAITING_PROMOTION and run.gate and run.gate.kind is GateKind.PROMOTION
    assert steps.calls == ["canary", "verify_canary"]
    engine.approve(run.id, actor=CAROL)
    run = engine.advance(run.id)
    assert run.state is S.DONE
    assert steps.calls == ["canary", "verify_canary", "promote", "verify_all"]
    assert engine.store.lock_holder(run.target.key) is None


def test_second_canary_on_a_locked_target_names_the_holder(redis_url: str) -> None:
    """One active run per target: a second request is refused with the holder's id; other targets are free."""
    engine = make_engine(redis_url)
    first = request(engine)
    with pytest.raises(LockHeld) as refused:
        request(engine, CAROL)
    assert refused.value.holder == first.id and first.id in str(refused.value)
    other = request(engine, target="dra-example-driver/dra-example-driver-kubeletplugin")
    assert other.id != first.id
    engine.reject(first.id, actor=BOB)
    assert request(engine, CAROL).id not in (first.id, other.id)


def test_requester_may_not_approve_their_own_run(redis_url: str) -> None:
    """Self-approval is refused with the reason, unless the policy allows it."""
    engine = make_engine(redis_url, pol=policy(approvers={"users": ["U0ALICE", "U0BOB"]}))
    run = request(engine)
    with pytest.raises(Refused, match="you requested this run; another approver must approve it"):
        engine.approve(run.id, actor=ALICE)
    assert engine.get(run.id).state is S.AWAITING_APPROVAL
    lenient = make_engine(redis_url, pol=policy(approvers={"users": ["U0ALICE"], "allow_self_approval": True}))
    assert lenient.approve(run.id, actor=ALICE).run.state is S.CANARY_ROLLING


def test_only_approvers_decide_and_groups_count(redis_url: str) -> None:
    """A user who is not an approver is refused; a member of an approver usergroup may approve."""
    engine = make_engine(redis_url)
    run = request(engine)
    with pytest.raises(Refused, match=r"you \(U0DAVE\) are not an approver for kube-system/nvidia-device-plugin-daemonset"):
        engine.approve(run.id, actor=Actor("U0DAVE"))
    assert engine.approve(run.id, actor=Actor("U0DAVE", frozenset({"S0LEADS"}))).run.state is S.CANARY_ROLLING


def test_requesters_policy_limits_who_may_start_a_run(redis_url: str) -> None:
    """With requesters listed, anyone else's canary request is refused and nothing is stored."""
    engine = make_engine(redis_url, pol=policy(requesters={"users": ["U0ALICE"]}))
    with pytest.raises(Refused, match="U0BOB may not request upgrades"):
        request(engine, BOB)
    assert engine.runs() == []
    assert request(engine).requester == "U0ALICE"


def test_quorum_needs_distinct_approvers_and_a_double_click_counts_once(redis_url: str) -> None:
    """Quorum 2: the same approver twice counts once; a second approver decides."""
    engine = make_engine(redis_url, pol=policy(approvers={"quorum": 2}))
    run = request(engine)
    first = engine.approve(run.id, actor=BOB)
    assert first.run.state is S.AWAITING_APPROVAL and "1 of 2 approvals" in first.note
    again = engine.approve(run.id, actor=BOB)
    assert again.run.version == first.run.version and "counts once" in again.note
    assert again.run.gate is not None and again.run.gate.approvers == ["U0BOB"]
    assert engine.approve(run.id, actor=CAROL).run.state is S.CANARY_ROLLING


def test_decided_gate_refuses_another_approver_with_who_and_when(redis_url: str) -> None:
    """After a decision, another click is refused with who decided and when; the decider's repeat is a no-op."""
    engine = make_engine(redis_url)
    run = request(engine)
    engine.approve(run.id, actor=BOB)
    with pytest.raises(Refused, match=r"already approved by U0BOB at 2025-01-06 09:00:00 UTC"):
        engine.approve(run.id, actor=CAROL)
    assert "counts once" in engine.approve(run.id, actor=BOB).note


def test_two_approvers_clicking_at_once_decide_once(redis_url: str) -> None:
    """Compare-and-set: two threads approving the same gate at the same moment make exactly one decision."""
    engine = make_engine(redis_url)
    for i in range(10):
        run = request(engine, target=f"team{i}/plugin")
        barrier, results = threading.Barrier(2), list[object]()

        def click(actor: Actor, run_id: str = run.id, barrier: threading.Barrier = barrier, results: list[object] = results) -> None:
            barrier.wait()
            try:
                results.append(engine.approve(run_id, actor=actor).run.state)
            except Refused as exc:
                results.append(str(exc))

        threads = [threading.Thread(target=click, args=(a,)) for a in (BOB, CAROL)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        decisions = [e for e in engine.audit(run.id) if e["kind"] == "decision"]
        transitions = [e["name"] for e in engine.audit(run.id) if e["kind"] == "transition"]
        assert len(decisions) == 1, decisions
        assert transitions.count("awaiting_approval -> canary_rolling") == 1
        assert S.CANARY_ROLLING in results and any(isinstance(r, str) and "already approved by" in r for r in results)


def test_expired_canary_request_ends_the_run_and_frees_the_target(redis_url: str) -> None:
    """Past expire_after, an approval is refused with the expiry time; the run is expired, the lock free."""
    clock = FakeClock()
    engine = make_engine(redis_url, clock=clock)
    run = request(engine)
    clock.advance(minutes=31)
    with pytest.raises(Refused, match=r"this request expired at 2025-01-06 09:30:00 UTC"):
        engine.approve(run.id, actor=BOB)
    assert engine.get(run.id).state is S.EXPIRED
    assert engine.store.lock_holder(run.target.key) is None
    assert request(engine, CAROL).state is S.AWAITING_APPROVAL


def test_new_request_on_a_target_held_by_an_overdue_run_expires_it(redis_url: str) -> None:
    """A lock held by a run whose request is overdue is freed by the next request, without a resume."""
    clock = FakeClock()
    engine = make_engine(redis_url, clock=clock)
    stale = request(engine)
    clock.advance(hours=1)
    fresh = request(engine, CAROL)
    assert engine.get(stale.id).state is S.EXPIRED and fresh.state is S.AWAITING_APPROVAL


def test_expired_or_rejected_promotion_rolls_the_canary_back(redis_url: str) -> None:
    """No cluster is left half-upgraded: an expired promotion request and a rejected one both roll back."""
    clock = FakeClock()
    steps = ScriptedSteps()
    engine = make_engine(redis_url, steps=steps, clock=clock)
    run = request(engine)
    engine.approve(run.id, actor=BOB)
    assert engine.advance(run.id).state is S.AWAITING_PROMOTION
    clock.advance(minutes=45)
    assert [o.run.state for o in engine.resume()] == [S.ROLLED_BACK]
    assert "the promotion request expired at " in engine.get(run.id).reason
    run = request(engine)
    engine.approve(run.id, actor=BOB)
    engine.advance(run.id)
    assert engine.reject(run.id, actor=CAROL).run.state is S.ROLLING_BACK
    assert engine.advance(run.id).state is S.ROLLED_BACK
    assert steps.calls.count("rollback") == 2


def test_failed_verify_rolls_back_automatically_with_the_reason(redis_url: str) -> None:
    """rollback.automatic (default): a failed canary verify goes to rolling_back, then rolled_back, saying why."""
    steps = ScriptedSteps({"verify_canary": lambda ctx: failing()})
    engine = make_engine(redis_url, steps=steps)
    run = request(engine)
    engine.approve(run.id, actor=BOB)
    run = engine.advance(run.id)
    assert run.state is S.ROLLED_BACK
    assert "the canary's verification failed: pod on gpu-node1 is in CrashLoopBackOff" in run.reason
    checks = [(e["name"], e["status"]) for e in engine.audit(run.id) if e["kind"] == "check"]
    assert ("no crash loop", "fail") in checks
    assert engine.store.lock_holder(run.target.key) is None


def test_without_automatic_rollback_a_failed_run_halts_at_a_rollback_request(redis_url: str) -> None:
    """rollback.automatic off: the run halts with a rollback request; approved it rolls back,
    declined it stays halted (never 'failed'), for resume or a later rollback."""
    steps = ScriptedSteps({"verify_all": lambda ctx: failing("gpu-node2 lost 8 GPUs")})
    engine = make_engine(redis_url, steps=steps, pol=policy(rollback={"automatic": False}))
    for decide, end in ((engine.approve, S.ROLLED_BACK), (engine.reject, S.HALTED)):
        run = request(engine)
        engine.approve(run.id, actor=BOB)
        engine.advance(run.id)
        engine.approve(run.id, actor=BOB)
        run = engine.advance(run.id)
        assert run.state is S.HALTED and run.previous_state is S.VERIFYING, run.reason
        assert run.gate and run.gate.kind is GateKind.ROLLBACK and run.gate.is_open
        assert engine.advance(run.id).version == run.version  # waits: runs no step again
        decide(run.id, actor=CAROL)
        assert engine.advance(run.id).state is end


def test_a_step_that_raises_halts_and_so_does_a_rollback_that_raises(redis_url: str) -> None:
    """An exception may follow a mutation: the run halts where it is (lock kept, reason says why),
    never rolls back on a guess; a requested rollback that raises halts too, and can be retried."""

    def boom(ctx: StepContext) -> StepResult:
        raise RuntimeError("template lost")

    steps = ScriptedSteps({"promote": boom, "rollback": boom})
    engine = make_engine(redis_url, steps=steps)
    run = request(engine)
    engine.approve(run.id, actor=BOB)
    engine.advance(run.id)
    engine.approve(run.id, actor=CAROL)
    run = engine.advance(run.id)
    assert run.state is S.HALTED and run.previous_state is S.PROMOTING
    assert "the promotion stopped on an unexpected error (RuntimeError: template lost)" in run.reason
    assert engine.store.lock_holder(run.target.key) == run.id
    engine.rollback(run.id, actor=ALICE)
    engine.approve(run.id, actor=CAROL)
    run = engine.advance(run.id)
    assert run.state is S.HALTED and run.previous_state is S.ROLLING_BACK, run.reason
    assert [e["name"] for e in engine.audit(run.id) if e["kind"] == "transition"][-3:] == [
        "promoting -> halted", "halted -> rolling_back", "rolling_back -> halted"]
    steps.behaviours["rollback"] = ok
    assert engine.rollback(run.id, actor=ALICE).run.state is S.ROLLING_BACK  # retried, no new approval
    assert engine.advance(run.id).state is S.ROLLED_BACK
    assert engine.store.lock_holder(run.target.key) is None


def test_unreachable_cluster_pauses_the_run_for_resume(redis_url: str) -> None:
    """A temporary cluster error is retried; if it persists the run keeps its state and resume continues it."""
    attempts: list[int] = []

    def flaky(ctx: StepContext) -> StepResult:
        attempts.append(1)
        if len(attempts) <= 3:
            raise ClusterUnreachable("cannot reach https://10.0.0.1:6443")
        return StepResult(ok=True)

    engine = make_engine(redis_url, steps=ScriptedSteps({"canary": flaky}))
    run = request(engine)
    engine.approve(run.id, actor=BOB)
    from runbooks.engine.driving import StepPaused

    with pytest.raises(StepPaused, match="paused in canary_rolling"):
        engine.advance(run.id)
    assert engine.get(run.id).state is S.CANARY_ROLLING
    assert [o.run.state for o in engine.resume()] == [S.AWAITING_PROMOTION]


def test_a_cluster_unreachable_past_the_limit_rolls_the_run_back_when_it_answers(redis_url: str) -> None:
    """A run paused by an API outage does not wait forever with the fleet on two versions: once
    the outage has lasted longer than halt.rollback_after, the next drive rolls it back (which
    needs the API too, so it happens as soon as the cluster answers)."""
    down = [True]

    def canary(ctx: StepContext) -> StepResult:
        if down[0]:
            raise ClusterUnreachable("cannot reach https://10.0.0.1:6443")
        return StepResult(ok=True)

    clock = FakeClock()
    steps = ScriptedSteps({"canary": canary})
    engine = make_engine(redis_url, steps=steps, clock=clock, pol=policy(halt={"rollback_after": "15m"}))
    run = request(engine)
    engine.approve(run.id, actor=BOB)
    from runbooks.engine.driving import StepPaused

    with pytest.raises(StepPaused):
        engine.advance(run.id)
    clock.advance(minutes=10)
    with pytest.raises(StepPaused):  # still within the limit: the step is tried again, not given up
        engine.advance(run.id)
    assert engine.get(run.id).state is S.CANARY_ROLLING
    clock.advance(minutes=10)
    down[0] = False
    run = engine.advance(run.id)
    assert run.state is S.ROLLED_BACK and "did not answer for more than 15m" in run.reason, run.reason
    assert steps.calls.count("rollback") == 1


def test_rollback_request_needs_approval_and_superseded_promotion_reopens(redis_url: str) -> None:
    """rollback <run> opens a rollback request; rejected in awaiting_promotion, the promotion request re-opens."""
    engine = make_engine(redis_url)
    run = request(engine)
    with pytest.raises(Refused, match="nothing was changed yet, reject the request instead"):
        engine.rollback(run.id, actor=CAROL)
    engine.approve(run.id, actor=BOB)
    engine.advance(run.id)
    run = engine.rollback(run.id, actor=ALICE, reason="node drained by mistake").run
    assert run.gate and run.gate.kind is GateKind.ROLLBACK and run.state is S.AWAITING_PROMOTION
    assert "already open" in engine.rollback(run.id, actor=ALICE).note
    run = engine.reject(run.id, actor=BOB).run
    assert run.gate and run.gate.kind is GateKind.PROMOTION and run.gate.is_open
    engine.rollback(run.id, actor=ALICE)
    assert engine.approve(run.id, actor=BOB).run.state is S.ROLLING_BACK
    assert engine.advance(run.id).state is S.ROLLED_BACK


def test_rollback_without_approval_and_close_of_a_monitored_run(redis_url: str) -> None:
    """rollback.requires_approval off rolls back at once; close ends a monitoring run; reports keep it monitoring."""
    engine = make_engine(redis_url, pol=policy(reports={"after": ["24h"]}, rollback={"requires_approval": False}))
    run = request(engine)
    engine.approve(run.id, actor=BOB)
    engine.advance(run.id)
    engine.approve(run.id, actor=BOB)
    assert engine.advance(run.id).state is S.MONITORING
    assert engine.close(run.id, actor=ALICE).run.state is S.DONE
    with pytest.raises(Refused, match="has ended"):
        engine.rollback(run.id, actor=ALICE)
    run = request(engine)
    engine.approve(run.id, actor=BOB)
    engine.advance(run.id)
    assert engine.rollback(run.id, actor=ALICE).run.state is S.ROLLING_BACK


def test_bad_input_is_refused_before_anything_is_stored(redis_url: str) -> None:
    """Names, image references and unknown targets are checked first; nothing is stored."""
    engine = make_engine(redis_url, pol=policy(targets=[TARGET]))
    for kwargs, reason in (
        ({"image": "nvcr.io/nvidia/k8s-device-plugin"}, "has no tag or digest"),
        ({"node": "GPU_node1"}, "node 'GPU_node1' is not a valid Kubernetes name"),
        ({"target": "kube-system/other"}, "is not a target of the policy"),
        ({"container": "Plugin"}, "container 'Plugin' is not a valid Kubernetes name"),
    ):
        args = {"target": TARGET, "image": IMAGE, "node": "gpu-node1", "container": "plugin", **kwargs}
        with pytest.raises(InvalidRequest, match=reason):
            engine.request_canary(actor=ALICE, target=args["target"], image=args["image"], node=args["node"],
                                  container=args["container"])
    assert engine.runs() == []
    with pytest.raises(RunNotFound):
        engine.approve("r-00000000", actor=BOB)


def test_observer_hears_states_steps_and_gates(redis_url: str) -> None:
    """The observer hook gets each state, each recorded step and each gate, in order."""
    observer = RecordingObserver()
    engine = make_engine(redis_url, observer=observer)
    run = request(engine)
    engine.approve(run.id, actor=BOB)
    engine.advance(run.id)
    assert ("gate", "canary") in observer.events and ("gate", "promotion") in observer.events
    states = [v for k, v in observer.events if k == "state"]
    assert states == ["requested", "awaiting_approval", "canary_rolling", "canary_verifying", "awaiting_promotion"]
    assert ("step", "pods ready") in observer.events


def test_audit_lists_every_transition_decision_and_check_with_time_and_actor(redis_url: str) -> None:
    """The audit stream of a run has each transition, decision and check, with time, actor and result."""
    engine = make_engine(redis_url)
    run = request(engine)
    engine.approve(run.id, actor=BOB)
    engine.advance(run.id)
    entries = engine.audit(run.id)
    assert all(e["at"].startswith("2025-01-06T09:00:00") and e["actor"] and e["status"] for e in entries)
    kinds = [(e["kind"], e["name"], e["actor"]) for e in entries]
    assert kinds[0] == ("transition", "requested", "U0ALICE")
    assert ("decision", "canary approved", "U0BOB") in kinds
    assert ("transition", "awaiting_approval -> canary_rolling", "U0BOB") in kinds
    assert ("check", "pods ready", "upgradebot") in kinds
    assert ("transition", "canary_verifying -> awaiting_promotion", "upgradebot") in kinds
    everyone = engine.store.global_audit()  # type: ignore[attr-defined]
    assert {e["run"] for e in everyone} == {run.id}


def test_a_failed_run_of_an_older_version_can_be_rolled_back_or_resumed(redis_url: str) -> None:
    """Runs stored as failed (older versions ended a failed rollback there) are not stuck: rollback
    reopens them (taking the target's lock again, refused while another run holds it), resume runs
    the step they failed in again."""
    engine = make_engine(redis_url)
    run = request(engine)
    engine.approve(run.id, actor=BOB)
    failed = engine.writer.transition(engine.get(run.id), S.FAILED, reason="the rollback failed (an older version)")
    assert engine.store.lock_holder(failed.target.key) is None
    other = request(engine)
    with pytest.raises(LockHeld, match=other.id):
        engine.rollback(run.id, actor=ALICE)
        engine.approve(run.id, actor=CAROL)
    engine.reject(other.id, actor=ALICE)  # the requester withdraws the other run: the target is free
    reopened = engine.resume_run(run.id, actor=ALICE).run
    assert reopened.state is S.CANARY_ROLLING and engine.store.lock_holder(run.target.key) == run.id
    assert engine.advance(run.id).state is S.AWAITING_PROMOTION


def test_a_failed_steps_evidence_is_kept_on_the_run_until_the_step_passes_again(redis_url: str) -> None:
    """Issue 61 item 4: the evidence a failed step reports (one entry per check) is kept on the run,
    for ``status`` and ``--json`` as much as for the thread, through the halt; the step run again by
    ``resume`` and passing drops its own entries, and another step's stay."""
    found = {"verify_all.no crash loop": {"step": "verify_all", "check": "no crash loop", "status": "failed",
                                          "scope": "gpu-node2", "detail": "crash", "items": [{"kind": "log"}]},
             "canary.other": {"step": "canary", "check": "other", "status": "failed", "scope": "", "detail": "",
                              "items": []}}
    steps = ScriptedSteps({"verify_all": lambda ctx: failing().model_copy(update={"evidence": found})})
    engine = make_engine(redis_url, steps=steps, pol=policy(rollback={"automatic": False}))
    run = request(engine)
    engine.approve(run.id, actor=BOB)
    assert engine.advance(run.id).evidence == {}
    engine.approve(run.id, actor=BOB)
    run = engine.advance(run.id)
    assert run.state is S.HALTED and run.evidence == found
    assert engine.store.get(run.id, whole=False).evidence == found  # what `status` reads
    steps.behaviours["verify_all"] = ok
    engine.resume_run(run.id, actor=ALICE)
    run = engine.advance(run.id)
    assert run.state is S.MONITORING, run.reason
    assert run.evidence == {"canary.other": found["canary.other"]}
