"""How steps tell the engine what they did: audit entries, checks, and results.

Purely data-shaping: every mutation and check of a step becomes a
:class:`~runbooks.engine.runs.Step` through :func:`note`; a list of checks becomes a
:class:`~runbooks.engine.steps.StepResult` whose reason names the failing checks and nodes.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from runbooks.engine.runs import Step
from runbooks.engine.steps import Check, CheckStatus, StepContext, StepResult

STEP_STATUS = {CheckStatus.PASS: "ok", CheckStatus.FAIL: "failed", CheckStatus.WARN: "info", CheckStatus.SKIP: "skipped"}


def note(ctx: StepContext, name: str, status: str, detail: str = "", **evidence: Any) -> None:
    """Append one entry (``ok | failed | info | skipped``) to the run's audit trail."""
    ctx.record(Step(name=name, status=status, detail=detail, evidence=evidence, at=ctx.clock.now()))


def note_checks(ctx: StepContext, step: str, checks: Iterable[Check]) -> None:
    for check in checks:
        evidence = {"scope": check.scope, **check.evidence} if check.scope else dict(check.evidence)
        ctx.record(Step(name=f"{step}.{check.name}", status=STEP_STATUS[check.status], detail=check.detail,
                        evidence=evidence, at=ctx.clock.now()))


def failing(checks: Iterable[Check]) -> list[Check]:
    return [c for c in checks if c.status is CheckStatus.FAIL]


def summary(checks: list[Check]) -> str:
    """``plugin-registered (gpu-node1): …; gpu-capacity (gpu-node1): …`` for the failing checks."""
    return "; ".join(f"{c.name} ({c.scope}): {c.detail}" if c.scope else f"{c.name}: {c.detail}" for c in failing(checks))


def result(checks: list[Check], *, what: str) -> StepResult:
    """ok when no check failed; else a reason naming each failing check, where, and why."""
    bad = failing(checks)
    if not bad:
        return StepResult(ok=True, checks=checks)
    return StepResult(ok=False, reason=f"{what} failed: {summary(checks)}", checks=checks)


def passed(name: str, detail: str, scope: str = "", **evidence: Any) -> Check:
    return Check(name=name, status=CheckStatus.PASS, detail=detail, scope=scope, evidence=evidence)


def failed(name: str, detail: str, scope: str = "", **evidence: Any) -> Check:
    return Check(name=name, status=CheckStatus.FAIL, detail=detail, scope=scope, evidence=evidence)


def warned(name: str, detail: str, scope: str = "", **evidence: Any) -> Check:
    return Check(name=name, status=CheckStatus.WARN, detail=detail, scope=scope, evidence=evidence)


def skipped(name: str, detail: str, scope: str = "", **evidence: Any) -> Check:
    return Check(name=name, status=CheckStatus.SKIP, detail=detail, scope=scope, evidence=evidence)
