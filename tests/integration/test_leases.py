"""Leases between two engines on one Redis: one works on a run, the other takes over a dead one."""

from __future__ import annotations

import datetime as dt
import time

from runbooks.engine.runs import RunState
from runbooks.engine.steps import StepContext, StepResult
from tests.engine_support import BOB, ScriptedSteps, make_engine, request

S = RunState


def test_a_run_leased_by_a_live_worker_is_left_alone_until_its_lease_expires(redis_url: str) -> None:
    """Engine B does nothing while A's lease lives; once A stops renewing and the TTL passes, B continues."""
    a_steps, b_steps = ScriptedSteps(), ScriptedSteps()
    a = make_engine(redis_url, steps=a_steps, owner="host-a/1/aa", lease_ttl=dt.timedelta(milliseconds=400))
    b = make_engine(redis_url, steps=b_steps, owner="host-b/2/bb")
    run = request(a)
    a.approve(run.id, actor=BOB)
    assert a.store.acquire_lease(run.id, "host-a/1/aa", dt.timedelta(milliseconds=400))  # A "dies" holding it
    assert b.advance(run.id).state is S.CANARY_ROLLING and b_steps.calls == []
    time.sleep(0.5)
    assert b.advance(run.id).state is S.AWAITING_PROMOTION
    assert b_steps.calls == ["canary", "verify_canary"] and a_steps.calls == []
    assert b.store.lease_owner(run.id) is None  # released when B stopped at the gate


def test_a_lease_of_a_known_dead_owner_is_taken_over_at_once(redis_url: str) -> None:
    """With owner_dead saying the holder is gone (a dead pid on this host), resume does not wait for the TTL."""
    b = make_engine(redis_url, owner="host/2/bb", owner_dead=lambda owner: owner == "host/1/aa")
    run = request(b)
    b.approve(run.id, actor=BOB)
    b.store.acquire_lease(run.id, "host/1/aa", dt.timedelta(minutes=5))
    assert [o.run.state for o in b.resume()] == [S.AWAITING_PROMOTION]
    taken = [e["detail"] for e in b.audit(run.id) if e["name"] == "lease taken over"]
    assert taken == ["from host/1/aa, which is gone"]


def test_a_worker_that_lost_its_lease_stops_writing(redis_url: str) -> None:
    """A step whose worker's lease was taken over cannot save progress: the engine stops and leaves the run."""
    engine = make_engine(redis_url, owner="host/1/aa")

    def canary(ctx: StepContext) -> StepResult:
        engine.store.take_over_lease(ctx.run.id, "host/1/aa", "host/9/zz", dt.timedelta(minutes=5))
        ctx.save_progress({"template": {"image": "old"}})
        raise AssertionError("the write above must be refused")

    engine.driver.steps = ScriptedSteps({"canary": canary})
    run = request(engine)
    engine.approve(run.id, actor=BOB)
    after = engine.advance(run.id)
    assert after.state is S.CANARY_ROLLING and "template" not in after.progress
    assert engine.store.lease_owner(run.id) == "host/9/zz"
