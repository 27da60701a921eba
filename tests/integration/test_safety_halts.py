"""An unexpected error halts a run where it is; nothing is left that the bot cannot undo.

A step that raises something unexpected (a bug, a client that fails in an odd way) puts
the run in ``halted``: it keeps the lock, its reason lists what the run changed so far,
and ``resume`` retries the step or ``rollback`` undoes exactly the run's changes. A
rollback that fails halts too, and can be retried; a run halted longer than
``halt.rollback_after`` is rolled back by itself. kubesim's request log and the
DaemonSet itself are the referees.
"""

from __future__ import annotations

import time

import pytest

from kubesim import KubeSim
from runbooks.daemonset import canarying
from runbooks.engine.approving import Actor
from runbooks.engine.commands import Engine
from runbooks.engine.runs import RunState
from runbooks.policy import Policy
from tests.engine_support import kubesim_engine
from tests.support import Kubectl

S = RunState
TARGET = "kube-system/nvidia-device-plugin-daemonset"
DS = "ds/nvidia-device-plugin-daemonset"
NEW = "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"
ALICE, BOB = Actor("U0ALICE"), Actor("U0BOB")


def policy(**sections: object) -> Policy:
    return Policy.model_validate({
        "approvers": {"users": ["U0BOB"]},
        "reports": {"after": []},
        "steps": {"observe_window": "1s", "poll_interval": "0.1s", "ready_timeout": "60s"},
        **sections,
    })



def engine_on(sim: KubeSim, redis_url: str, pol: Policy | None = None) -> Engine:
    return kubesim_engine(sim, redis_url, pol or policy())


def daemonset(sim: KubeSim) -> tuple[object, object]:
    spec = Kubectl(sim.kubeconfig).json("-n", "kube-system", "get", DS)["spec"]
    return spec["template"], spec["updateStrategy"]


def halted_mid_canary(sim: KubeSim, engine: Engine, monkeypatch: pytest.MonkeyPatch) -> str:
    """A canary whose step raises after it set OnDelete and the new image (before the pod is replaced)."""
    run = engine.request_canary(actor=ALICE, target=TARGET, image=NEW, node="gpu-node1").run

    def broken(*args: object, **kwargs: object) -> None:
        raise AttributeError("'NoneType' object has no attribute 'decode'")

    monkeypatch.setattr(canarying, "delete_pod", broken)
    engine.approve(run.id, actor=BOB)
    halted = engine.advance(run.id)
    assert halted.state is S.HALTED, halted.reason
    return halted.id


def test_an_unexpected_error_halts_the_run_and_says_what_changed(
    sim: KubeSim, redis_url: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No automatic rollback on a bug: the run halts, keeps its target, and lists its changes."""
    engine = engine_on(sim, redis_url)
    before = daemonset(sim)
    run = engine.get(halted_mid_canary(sim, engine, monkeypatch))
    assert run.previous_state is S.CANARY_ROLLING and engine.store.lock_holder(run.target.key) == run.id
    assert "AttributeError" in run.reason and "canary.strategy" in run.reason and "canary.image" in run.reason
    assert f"resume {run.id}" in run.reason and f"rollback {run.id}" in run.reason
    assert daemonset(sim) != before  # what it changed is still there, for a person to decide
    assert engine.advance(run.id).state is S.HALTED  # nothing moves it but a person (or the time limit)


def test_a_halted_run_resumes_where_it_stopped(sim: KubeSim, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    engine = engine_on(sim, redis_url)
    run_id = halted_mid_canary(sim, engine, monkeypatch)
    monkeypatch.undo()
    outcome = engine.resume_run(run_id, actor=ALICE)
    assert outcome.run.state is S.CANARY_ROLLING
    assert engine.advance(run_id).state is S.AWAITING_PROMOTION


def test_a_halted_run_rolls_back_to_exactly_what_it_saved(
    sim: KubeSim, redis_url: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    engine = engine_on(sim, redis_url)
    before = daemonset(sim)
    run_id = halted_mid_canary(sim, engine, monkeypatch)
    opened = engine.rollback(run_id, actor=ALICE).run
    assert opened.state is S.HALTED and opened.gate is not None and opened.gate.is_open  # an approver decides
    engine.approve(run_id, actor=BOB)
    done = engine.advance(run_id)
    assert done.state is S.ROLLED_BACK, done.reason
    assert daemonset(sim) == before


def test_a_failed_rollback_halts_and_can_be_retried(
    sim: KubeSim, redis_url: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The rollback cannot patch the DaemonSet (403): the run halts in its rollback, never ends
    'failed'; once allowed, `rollback` retries it (no new approval: it was approved) and it completes."""
    forbidden: list[str] = []

    def forbid_once_rolling_back(point: str) -> None:  # the canary changed the DaemonSet; its undo may not
        if point == "transition:rolling_back" and not forbidden:
            forbidden.append(point)
            sim.fault(kind="forbid", path="/apis/apps/v1/namespaces/kube-system/daemonsets", verb="patch")

    engine = kubesim_engine(sim, redis_url, policy(), checkpoint=forbid_once_rolling_back)
    before = daemonset(sim)
    run = engine.request_canary(actor=ALICE, target=TARGET, image=NEW + "-crash", node="gpu-node1").run
    engine.approve(run.id, actor=BOB)
    halted = engine.advance(run.id)
    assert halted.state is S.HALTED and halted.previous_state is S.ROLLING_BACK, halted.reason
    sim.fault(kind="allow")
    retried = engine.rollback(run.id, actor=ALICE).run
    assert retried.state is S.ROLLING_BACK
    assert engine.advance(run.id).state is S.ROLLED_BACK
    assert daemonset(sim) == before


def test_a_run_halted_past_the_limit_rolls_back_by_itself(
    sim: KubeSim, redis_url: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    engine = engine_on(sim, redis_url, policy(halt={"rollback_after": "1s"}))
    before = daemonset(sim)
    run_id = halted_mid_canary(sim, engine, monkeypatch)
    time.sleep(1.2)
    assert engine.needs_work(engine.get(run_id))
    done = engine.advance(run_id)
    assert done.state is S.ROLLED_BACK and "halted for more than" in done.reason, done.reason
    assert daemonset(sim) == before


def test_a_redis_restart_with_persistence_loses_nothing(sim: KubeSim) -> None:
    """The run store's Redis (append-only file on) restarts between the approval and the work:
    the run, its gate decision and its lock are all there, and the canary goes on."""
    from bot.storage.embedded import EmbeddedRedis

    with EmbeddedRedis(persistent=True) as server:
        engine = engine_on(sim, server.url)
        run = engine.request_canary(actor=ALICE, target=TARGET, image=NEW, node="gpu-node1").run
        engine.approve(run.id, actor=BOB)
        engine.store.close()
        server.restart()
        again = engine_on(sim, server.url)
        assert again.get(run.id).state is S.CANARY_ROLLING
        assert again.store.lock_holder(run.target.key) == run.id
        assert again.advance(run.id).state is S.AWAITING_PROMOTION
        again.store.close()
