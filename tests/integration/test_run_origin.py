"""Where a run is shown (its root message) is stored with the run, first writer wins."""

from __future__ import annotations

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
