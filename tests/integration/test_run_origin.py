"""Where a run is shown (its root message) is stored with the run, first writer wins."""

from __future__ import annotations

import datetime as dt
import time

from bot.storage.redis_store import RedisRunStore
from tests.engine_support import make_engine, request


def test_set_origin_first_value_wins_and_keeps_the_state(redis_url: str) -> None:
    """set_origin adds a key once; a second value for it is ignored; state and updated_at stay."""
    engine = make_engine(redis_url)
    run = request(engine)
    stored = engine.set_origin(run.id, ts="1700000001.000100")
    again = engine.set_origin(run.id, ts="1700000009.000100", gate="x")
    assert stored.origin["ts"] == "1700000001.000100" and again.origin == {"ts": "1700000001.000100", "gate": "x"}
    fresh = engine.get(run.id)
    assert fresh.origin == again.origin and (fresh.state, fresh.updated_at) == (run.state, run.updated_at)
    assert [e for e in engine.audit(run.id) if "origin" in str(e)] == []


def test_a_thread_effect_is_claimed_by_one_process_until_it_is_recorded(redis_url: str) -> None:
    """Issue 40: ``claim_effect`` grants the claim on a run thread's Slack effect once at a time
    (``held`` for any later claim, its holder's too: two threads of one process), gives it to
    the next owner once released (Slack refused the call), reports ``done`` with the recorded
    value once ``origin`` records it, whoever asks, ``gone`` for no such run; a claim never
    recorded lapses after its ttl."""
    engine = make_engine(redis_url)
    store = engine.store
    run = request(engine)
    assert isinstance(store, RedisRunStore)
    assert store.claim_effect(run.id, "gate|g1", owner="a") == ("claimed", "")
    assert store.claim_effect(run.id, "gate|g1", owner="a") == ("held", "a")
    assert store.claim_effect(run.id, "gate|g1", owner="b") == ("held", "a")
    store.release_effect(run.id, "gate|g1", owner="b")  # not b's: kept
    assert store.claim_effect(run.id, "gate|g1", owner="b") == ("held", "a")
    store.release_effect(run.id, "gate|g1", owner="a")
    assert store.claim_effect(run.id, "gate|g1", owner="b") == ("claimed", "")
    engine.set_origin(run.id, **{"gate|g1": "1700000002.000100"})
    assert store.claim_effect(run.id, "gate|g1", owner="a") == ("done", "1700000002.000100")
    assert store.claim_effect(run.id, "gate|g1", owner="b") == ("done", "1700000002.000100")
    assert store.claim_effect("r-nosuchrun", "gate|g1", owner="a") == ("gone", "")

    assert store.claim_effect(run.id, "step|canary", owner="a", ttl=dt.timedelta(milliseconds=200)) == ("claimed", "")
    assert store.claim_effect(run.id, "step|canary", owner="b") == ("held", "a")
    deadline = time.monotonic() + 30
    while store.claim_effect(run.id, "step|canary", owner="b") != ("claimed", ""):  # a's claim lapses
        assert time.monotonic() < deadline, "the claim never lapsed"
        time.sleep(0.05)


def test_a_dead_holder_s_claim_is_taken_over_once_and_only_while_it_holds_it(redis_url: str) -> None:
    """Finding 10: ``dead`` names a holder known dead; its claim is taken over at once, in the
    script that checks it is still that holder's and the effect not recorded: of two processes
    that both found it dead, one takes it; a claim of another holder, or a recorded effect, is
    not taken."""
    engine = make_engine(redis_url)
    store = engine.store
    run = request(engine)
    assert isinstance(store, RedisRunStore)
    assert store.claim_effect(run.id, "ts", owner="dead") == ("claimed", "")
    assert store.claim_effect(run.id, "ts", owner="b", dead="someone else") == ("held", "dead")
    assert store.claim_effect(run.id, "ts", owner="b", dead="dead") == ("claimed", "")
    assert store.claim_effect(run.id, "ts", owner="c", dead="dead") == ("held", "b")
    engine.set_origin(run.id, ts="1700000003.000100")
    assert store.claim_effect(run.id, "ts", owner="c", dead="b") == ("done", "1700000003.000100")
