"""A repair run on the engine, with scripted change steps: its own request, approved by an
approver; a failed verification ends it failed (a repair has nothing to roll back), its
target free again."""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

from runbooks.engine.runs import Run, RunKind, RunState
from runbooks.engine.steps import Check, StepContext, StepResult, StepSettings
from tests.engine_support import ALICE, BOB, TARGET, FakeClock, ScriptedSteps, make_engine

S = RunState


class Repairs:
    """Change steps whose verification passes or fails as the test says; every call logged."""

    def __init__(self, verified: bool) -> None:
        self.verified, self.calls = verified, []  # type: ignore[var-annotated]

    def plan(self, cluster: Any, run: Run, settings: StepSettings) -> tuple[Run, str]:
        self.calls.append("plan")
        return run.model_copy(update={"change": {"delete": [{"namespace": "ml", "name": "p", "uid": "u"}]}}), "1 pod"

    def check_request(self, cluster: Any, run: Run, settings: StepSettings) -> list[Check]:
        return []

    def apply(self, ctx: StepContext) -> StepResult:
        self.calls.append("apply")
        return StepResult(ok=True)

    def verify_all(self, ctx: StepContext) -> StepResult:
        self.calls.append("verify_all")
        return StepResult(ok=self.verified, reason="" if self.verified else "workloads-running: not Running")

    def rollback(self, ctx: StepContext) -> StepResult:
        self.calls.append("rollback")
        return StepResult(ok=True)


def engine_with(redis_url: str, repairs: Repairs) -> Any:
    return make_engine(redis_url, steps=ScriptedSteps(), clock=FakeClock(), kinds={RunKind.REPAIR: repairs},
                       connect=lambda context: nullcontext(object()))


def test_an_approved_repair_applies_and_verifies(redis_url: str) -> None:
    repairs = Repairs(verified=True)
    engine = engine_with(redis_url, repairs)
    run = engine.request_repair(actor=ALICE, target=TARGET).run
    assert run.kind is RunKind.REPAIR and run.state is S.AWAITING_APPROVAL and run.gate is not None
    assert run.gate.kind.value == "repair"
    engine.approve(run.id, actor=BOB)
    assert engine.advance(run.id).state is S.DONE
    assert repairs.calls == ["plan", "apply", "verify_all"]


def test_a_failed_repair_ends_failed_without_a_rollback_and_frees_its_target(redis_url: str) -> None:
    repairs = Repairs(verified=False)
    engine = engine_with(redis_url, repairs)
    run = engine.request_repair(actor=ALICE, target=TARGET).run
    engine.approve(run.id, actor=BOB)
    run = engine.advance(run.id)
    assert run.state is S.FAILED and "a repair has nothing to roll back" in run.reason, run.reason
    assert "rollback" not in repairs.calls
    again = engine.request_repair(actor=ALICE, target=TARGET).run  # the target's lock was released
    assert again.state is S.AWAITING_APPROVAL
