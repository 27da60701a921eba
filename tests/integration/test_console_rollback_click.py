"""A stability report's "Request rollback" clicked where there is no thread (issue 41): the
console's answer names the command that approves the rollback request, not "in the run's
thread"; Slack's answer still points at the thread. The engine on kubesim and a real Redis."""

from __future__ import annotations

import pytest

from handlers.access import StaticDirectory
from handlers.clicks import Click, EngineDecisions
from handlers.run_views import REQUEST_ROLLBACK
from kubesim import KubeSim
from runbooks.engine.approving import Actor
from runbooks.engine.runs import RunState
from runbooks.policy import Policy
from tests.engine_support import kubesim_engine

TARGET = "kube-system/nvidia-device-plugin-daemonset"
NEW = "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"
POLICY = Policy.model_validate({"approvers": {"users": ["U0BOB"]}, "reports": {"after": []},
                                "steps": {"observe_window": "1s", "poll_interval": "0.1s"}})


@pytest.mark.parametrize(("surface", "said", "not_said"), [
    ("console", "`approve {run} rollback`", "thread"),
    ("slack", "in the run's thread", "`approve {run} rollback`"),
])
def test_request_rollback_click_says_how_this_surface_approves(sim: KubeSim, redis_url: str, surface: str,
                                                                said: str, not_said: str) -> None:
    """issue 41: the answer to "Request rollback" says how the rollback request is decided on the
    surface that was clicked."""
    engine = kubesim_engine(sim, redis_url, POLICY)
    run = engine.request_canary(actor=Actor("U0ALICE"), target=TARGET, image=NEW, node="gpu-node1").run
    engine.approve(run.id, actor=Actor("U0BOB"))
    assert engine.advance(run.id).state is RunState.AWAITING_PROMOTION
    decisions = EngineDecisions(engine=engine, policy=POLICY, directory=StaticDirectory(), surface=surface)
    decided = decisions.decide(Click(action=REQUEST_ROLLBACK, value=run.id, user="U0ALICE"))
    assert decided.accepted and decided.reply is not None
    text = decided.reply.text
    assert said.format(run=run.id) in text and not_said.format(run=run.id) not in text, text
    engine.reject(run.id, actor=Actor("U0BOB"))
