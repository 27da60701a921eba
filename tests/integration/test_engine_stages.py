"""Stages on the engine, with scripted steps: which run on the stage before opens the next
stage's request, and what a refusal says when none does."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from runbooks.engine.refusals import Refused
from runbooks.engine.runs import Run, RunState
from tests.engine_support import (
    ALICE,
    BOB,
    CAROL,
    IMAGE,
    TARGET,
    FakeClock,
    ScriptedSteps,
    make_engine,
    policy,
)

S = RunState
STAGED = {"targets": [{"namespace": "kube-system", "name": "nvidia-device-plugin-daemonset",
                       "stages": ["staging", "prod-eu", "prod-us"]}], "reports": {"after": ["24h"]}}


def ask(engine: object, cluster: str) -> Run:
    return engine.request_canary(actor=ALICE, target=TARGET, image=IMAGE, node="gpu-node1",  # type: ignore[attr-defined]
                                 container="plugin", cluster=cluster).run


def monitored(engine: object, cluster: str) -> Run:
    run = ask(engine, cluster)
    engine.approve(run.id, actor=BOB)  # type: ignore[attr-defined]
    engine.advance(run.id)  # type: ignore[attr-defined]
    engine.approve(run.id, actor=CAROL)  # type: ignore[attr-defined]
    return engine.advance(run.id)  # type: ignore[attr-defined]


def test_each_stage_waits_for_the_one_before(redis_url: str) -> None:
    clock = FakeClock()
    engine = make_engine(redis_url, steps=ScriptedSteps(), clock=clock, pol=policy(**STAGED))
    with pytest.raises(Refused, match=r"prod-us is stage 3 of 3 .*must first go through prod-eu"):
        ask(engine, "prod-us")
    first = monitored(engine, "staging")
    assert first.state is S.MONITORING
    with pytest.raises(Refused, match=f"run {first.id} of {IMAGE} there is monitoring"):
        ask(engine, "prod-eu")
    engine.close(first.id, actor=ALICE)  # closed early: no report says it is stable
    with pytest.raises(Refused, match="ended without a stability report"):
        ask(engine, "prod-eu")
    clock.advance(minutes=5)
    second = monitored(engine, "staging")
    engine.finish_monitoring(second.id, reason="reports posted",
                             report={"after": "24h", "verdict": "stable", "posted_at": "2025-01-07T09:00:00+00:00"})
    eu = ask(engine, "prod-eu")
    assert eu.gate is not None and eu.gate.reason == (
        f"stage 2 of 3 (prod-eu), after staging: run {second.id} there ended with its 24h stability report "
        "stable (posted 2025-01-07T09:00 UTC)")
    engine.reject(eu.id, actor=BOB)
    with pytest.raises(Refused, match=f"run {eu.id} of {IMAGE} there is rejected"):
        ask(engine, "prod-us")


def test_stages_need_reports_and_two_distinct_contexts() -> None:
    with pytest.raises(ValidationError, match=r"reports\.after must schedule at least one"):
        policy(**{**STAGED, "reports": {"after": []}})
    with pytest.raises(ValidationError, match="one stage orders nothing"):
        policy(targets=[{"namespace": "kube-system", "name": "x", "stages": ["prod"]}], reports={"after": ["24h"]})
    with pytest.raises(ValidationError, match="a stage is listed twice"):
        policy(targets=[{"namespace": "kube-system", "name": "x", "stages": ["a", "a"]}], reports={"after": ["24h"]})


def test_the_stage_before_counts_any_spelling_of_the_same_image(redis_url: str) -> None:
    """Attack finding 5: the image that went through staging, spelled with the registry's case and
    :443, opens prod-eu; another tag of the release (a distribution suffix: another build) does not."""
    engine = make_engine(redis_url, steps=ScriptedSteps(), pol=policy(**STAGED))
    first = monitored(engine, "staging")
    engine.finish_monitoring(first.id, reason="reports posted",
                             report={"after": "24h", "verdict": "stable", "posted_at": "2025-01-07T09:00:00+00:00"})
    respelt = IMAGE.replace("nvcr.io/", "NVCR.io:443/")
    eu = engine.request_canary(actor=ALICE, target=TARGET, image=respelt, node="gpu-node1", container="plugin",
                               cluster="prod-eu").run
    assert eu.gate is not None and eu.gate.reason is not None and f"run {first.id} there ended" in eu.gate.reason
    engine.reject(eu.id, actor=BOB)
    with pytest.raises(Refused, match="must first go through staging"):
        engine.request_canary(actor=ALICE, target=TARGET, image=f"{IMAGE}-ubi9", node="gpu-node1", container="plugin",
                              cluster="prod-eu")
