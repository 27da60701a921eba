"""Approve / Reject clicks decided by the engine: the button names its gate, a refusal changes nothing."""

from __future__ import annotations

from handlers.access import StaticDirectory
from handlers.clicks import Click, EngineDecisions
from handlers.run_views import gate_ref
from runbooks.engine.runs import RunState
from tests.engine_support import make_engine, request


def test_a_click_on_an_old_request_never_decides_the_new_one(redis_url: str) -> None:
    """The canary's Approve, clicked again once the promotion request is open, is refused; nothing changes."""
    engine = make_engine(redis_url)
    advanced: list[str] = []
    engine.wake = advanced.append  # the engine hands the approved run on by itself
    decisions = EngineDecisions(engine=engine, policy=engine.policy, directory=StaticDirectory())
    run = request(engine)
    canary = gate_ref(run, run.gate)  # type: ignore[arg-type]
    decided = decisions.decide(Click(action="approve", value=canary, user="U0BOB"))
    assert decided.accepted and decided.replace is not None and "Approved by <@U0BOB>" in decided.replace.text
    assert advanced == [run.id] and not decided.replace.buttons
    run = engine.advance(run.id)
    assert run.state is RunState.AWAITING_PROMOTION

    stale = decisions.decide(Click(action="approve", value=canary, user="U0CAROL"))
    assert not stale.accepted and stale.reply is not None and stale.reply.ephemeral
    assert "this request is closed" in stale.reply.text and engine.get(run.id).version == run.version
    unknown = decisions.decide(Click(action="reject", value="not-a-gate", user="U0CAROL"))
    assert not unknown.accepted and "does not belong to a request" in unknown.reply.text  # type: ignore[union-attr]
    outsider = decisions.decide(Click(action="approve", value=gate_ref(run, run.gate), user="U0EVE"))  # type: ignore[arg-type]
    assert not outsider.accepted and "not an approver" in outsider.reply.text  # type: ignore[union-attr]
    assert engine.get(run.id).version == run.version
