"""The engine's side of a promotion in waves, on a real Redis with scripted steps: a step that
ends unfinished (a soak, the next wave's request), pause and continue."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from runbooks.engine.refusals import Refused
from runbooks.engine.runs import GateKind, RunState
from runbooks.engine.steps import Again, StepContext, StepResult
from tests.engine_support import (
    ALICE,
    BOB,
    CAROL,
    IMAGE,
    TARGET,
    Actor,
    FakeClock,
    ScriptedSteps,
    make_engine,
    policy,
    request,
)

S = RunState
WAVES = [{"nodes": ["gpu-node2"], "size": "1", "soak": 600, "approve_next": True},
         {"nodes": ["gpu-node3", "gpu-node4"], "size": "100%", "soak": 0, "approve_next": True}]


def waved_promotion(clock: FakeClock, calls: list[str]) -> ScriptedSteps:
    """verify_canary plans two waves; promote soaks wave 1 for 10 minutes, then asks for wave 2."""

    def verify_canary(ctx: StepContext) -> StepResult:
        ctx.run = ctx.save_progress({"waves": WAVES})
        return StepResult(ok=True)

    def promote(ctx: StepContext) -> StepResult:
        progress = ctx.run.progress
        calls.append(f"promote approved_wave={progress.get('approved_wave')}")
        if ctx.paused():
            return StepResult(ok=True, again=Again(why="paused before wave 2 of 2"))
        if "soaked" not in progress:
            until = clock.now() + dt.timedelta(minutes=10)
            ctx.run = ctx.save_progress({"soaked": until.isoformat()})
            return StepResult(ok=True, again=Again(why="wave 1 of 2 soaks", at=until))
        if int(progress.get("approved_wave") or 1) < 2:
            return StepResult(ok=True, again=Again(why="wave 2 of 2 waits for its approval", approval=True, wave=2))
        return StepResult(ok=True)

    return ScriptedSteps(behaviours={"verify_canary": verify_canary, "promote": promote})


def test_a_soak_waits_for_time_without_work_and_the_next_wave_for_its_approval(redis_url: str) -> None:
    clock, calls = FakeClock(), list[str]()
    engine = make_engine(redis_url, steps=waved_promotion(clock, calls), clock=clock)
    run = request(engine)
    engine.approve(run.id, actor=BOB)
    run = engine.advance(run.id)
    assert run.state is S.AWAITING_PROMOTION and run.gate is not None
    assert (run.gate.wave, run.gate.reason) == (1, "wave 1 of 2: 1 node (gpu-node2)")
    engine.approve(run.id, actor=CAROL)
    run = engine.advance(run.id)
    assert run.state is S.PROMOTING and run.progress["approved_wave"] == 1
    assert run.progress["waiting_for"] == "wave 1 of 2 soaks" and not engine.needs_work(run)
    assert engine.advance(run.id).version == run.version  # nothing to do during the soak
    clock.advance(minutes=9)
    assert not engine.needs_work(engine.get(run.id))
    clock.advance(minutes=1)
    assert engine.needs_work(engine.get(run.id))
    run = engine.advance(run.id)
    assert run.state is S.AWAITING_PROMOTION and run.gate is not None and run.gate.kind is GateKind.PROMOTION
    assert (run.gate.wave, run.gate.reason) == (2, "wave 2 of 2: 2 nodes (gpu-node3, gpu-node4)")
    assert "wait_until" not in run.progress
    engine.approve(run.id, actor=BOB)
    run = engine.advance(run.id)
    assert run.state is S.DONE, run.reason
    assert calls == ["promote approved_wave=1", "promote approved_wave=1", "promote approved_wave=2"]
    audit = [(e["name"], e["detail"]) for e in engine.audit(run.id) if e["name"].startswith("promote")]
    assert audit == [("promote.wait", "wave 1 of 2 soaks"), ("promote.wait", "wave 2 of 2 waits for its approval"),
                     ("promote", "")]


def test_rejecting_a_later_wave_rolls_back_every_node_the_run_moved(redis_url: str) -> None:
    clock, calls = FakeClock(), list[str]()
    steps = waved_promotion(clock, calls)
    engine = make_engine(redis_url, steps=steps, clock=clock)
    run = request(engine)
    engine.approve(run.id, actor=BOB)
    engine.advance(run.id)
    engine.approve(run.id, actor=CAROL)
    engine.advance(run.id)
    clock.advance(minutes=10)
    assert engine.advance(run.id).state is S.AWAITING_PROMOTION
    engine.reject(run.id, actor=BOB)
    run = engine.advance(run.id)
    assert run.state is S.ROLLED_BACK
    assert "the request for wave 2 was rejected by U0BOB: rolling back every node the run moved" in run.reason
    assert steps.calls[-1] == "rollback"


def test_pause_stops_the_run_until_continue(redis_url: str) -> None:
    clock, calls = FakeClock(), list[str]()
    engine = make_engine(redis_url, steps=waved_promotion(clock, calls), clock=clock)
    run = request(engine)
    engine.approve(run.id, actor=BOB)
    engine.advance(run.id)
    engine.approve(run.id, actor=CAROL)
    engine.advance(run.id)  # wave 1 soaks
    run = engine.pause(run.id, actor=ALICE, reason="an incident in zone b").run
    assert run.pause is not None and run.pause.by == "U0ALICE"
    assert engine.pause(run.id, actor=BOB).note == f"run {run.id} is already paused (by U0ALICE): `continue {run.id}` goes on"
    clock.advance(minutes=30)  # the soak is long over, but the run is paused
    assert not engine.needs_work(engine.get(run.id))
    assert engine.advance(run.id).state is S.PROMOTING and len(calls) == 1
    with pytest.raises(Refused, match="may not continue"):
        engine.continue_run(run.id, actor=Actor("U0MALLORY"))
    run = engine.continue_run(run.id, actor=BOB).run
    assert run.pause is None and engine.needs_work(run)
    assert engine.advance(run.id).state is S.AWAITING_PROMOTION
    names = [(e["name"], e["actor"]) for e in engine.audit(run.id) if e["kind"] == "decision"]
    assert ("paused", "U0ALICE") in names and ("continued", "U0BOB") in names
    with pytest.raises(Refused, match="is not paused"):
        engine.continue_run(run.id, actor=BOB)


def test_pause_is_refused_where_nothing_runs_and_during_a_rollback(redis_url: str) -> None:
    clock, calls = FakeClock(), list[str]()
    engine = make_engine(redis_url, steps=waved_promotion(clock, calls), clock=clock)
    run = request(engine)
    with pytest.raises(Refused, match="awaiting_approval: nothing is running to pause"):
        engine.pause(run.id, actor=ALICE)
    with pytest.raises(Refused, match="may not pause"):
        engine.pause(run.id, actor=Actor("U0MALLORY"))
    engine.approve(run.id, actor=BOB)
    engine.advance(run.id)
    engine.reject(run.id, actor=BOB)  # the promotion request: rolls the canary back
    assert engine.get(run.id).state is S.ROLLING_BACK
    with pytest.raises(Refused, match="a rollback is never paused"):
        engine.pause(run.id, actor=ALICE)


def windowed(hours: str = "22:00-23:00") -> Any:
    return policy(targets=[{"namespace": "kube-system", "name": "nvidia-device-plugin-daemonset",
                            "windows": [{"days": "mon-fri", "hours": hours, "timezone": "UTC"}]}])


def test_a_request_outside_the_window_is_refused_with_the_next_one_or_queued_for_it(redis_url: str) -> None:
    """Monday 09:00 UTC, window 22:00-23:00: refused, naming the window; with when=next-window
    the run is stored and approved as usual, and its canary waits for 22:00."""
    clock = FakeClock()
    steps = ScriptedSteps()
    engine = make_engine(redis_url, steps=steps, clock=clock, pol=windowed())
    with pytest.raises(Refused, match=r"may change only in its maintenance windows \(mon,tue,wed,thu,fri 22:00-23:00 "
                       r"UTC\); the next opens at 2025-01-06 22:00:00 UTC: ask again then, or add when=next-window"):
        request(engine)
    assert engine.runs() == []
    run = engine.request_canary(actor=ALICE, target=TARGET, image=IMAGE, node="gpu-node1", container="plugin",
                                cluster="prod", when="next-window").run
    assert run.state is S.AWAITING_APPROVAL
    assert "queued for the maintenance window opening at 2025-01-06 22:00:00 UTC" in engine.audit(run.id)[0]["detail"]
    engine.approve(run.id, actor=BOB)
    run = engine.advance(run.id)
    assert run.state is S.CANARY_ROLLING and steps.calls == []
    assert run.progress["wait_until"] == "2025-01-06T22:00:00+00:00" and not engine.needs_work(run)
    assert "the canary waits for the maintenance window" in run.progress["waiting_for"]
    clock.advance(hours=13)
    run = engine.advance(run.id)
    assert run.state is S.AWAITING_PROMOTION and steps.calls == ["canary", "verify_canary"]


def test_a_promotion_approved_after_the_window_closed_waits_for_the_next_one(redis_url: str) -> None:
    clock = FakeClock(dt.datetime(2025, 1, 6, 22, 30, tzinfo=dt.UTC))
    steps = ScriptedSteps()
    engine = make_engine(redis_url, steps=steps, clock=clock, pol=windowed("22:00-22:45"))
    run = request(engine)
    engine.approve(run.id, actor=BOB)
    assert engine.advance(run.id).state is S.AWAITING_PROMOTION
    clock.advance(minutes=20)  # 22:50: closed
    engine.approve(run.id, actor=CAROL)
    run = engine.advance(run.id)
    assert run.state is S.PROMOTING and "promote" not in steps.calls
    assert run.progress["wait_until"] == "2025-01-07T22:00:00+00:00"
    engine.rollback(run.id, actor=BOB)  # a rollback never waits for a window
    engine.approve(run.id, actor=CAROL)
    assert engine.advance(run.id).state is S.ROLLED_BACK and steps.calls[-1] == "rollback"
