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

STEP_STATUS = {CheckStatus.PASS: "ok", CheckStatus.FAIL: "failed", CheckStatus.UNKNOWN: "unknown",
               CheckStatus.WARN: "info", CheckStatus.SKIP: "skipped"}


def note(ctx: StepContext, name: str, status: str, detail: str = "", *, kind: str = "step", **evidence: Any) -> None:
    """Append one entry (``ok | failed | info | skipped``) to the run's audit trail; ``kind``
    ``mutation`` for a change the step made to the cluster (what a halted run lists)."""
    ctx.record(Step(name=name, status=status, detail=detail, kind=kind, evidence=evidence, at=ctx.clock.now()))


def note_checks(ctx: StepContext, step: str, checks: Iterable[Check]) -> None:
    """Append each check as a ``check`` entry (what ``audit`` leaves out first, ``--all`` shows)."""
    for check in checks:
        evidence = {"scope": check.scope, **check.evidence} if check.scope else dict(check.evidence)
        ctx.record(Step(name=f"{step}.{check.name}", status=STEP_STATUS[check.status], detail=check.detail,
                        kind="check", evidence=evidence, at=ctx.clock.now()))


def failing(checks: Iterable[Check], *, unknown_blocks: bool = False) -> list[Check]:
    """The checks that fail a step: failures, and with ``unknown_blocks`` the unknown ones."""
    blocking = {CheckStatus.FAIL, CheckStatus.UNKNOWN} if unknown_blocks else {CheckStatus.FAIL}
    return [c for c in checks if c.status in blocking]


def _line(check: Check) -> str:
    where = f"{check.name} ({check.scope})" if check.scope else check.name
    could_not = "could not be checked: " if check.status is CheckStatus.UNKNOWN else ""
    return f"{where}: {could_not}{check.detail}"


def summary(checks: list[Check], *, unknown_blocks: bool = False) -> str:
    """``plugin-registered (gpu-node1): …; events: could not be checked: …`` for the blocking checks."""
    return "; ".join(_line(c) for c in failing(checks, unknown_blocks=unknown_blocks))


def result(checks: list[Check], *, what: str, unknown_blocks: bool = True) -> StepResult:
    """ok when no check failed (nor, with ``unknown_blocks``, could not be made); else a reason
    naming each such check, where, and why."""
    if not failing(checks, unknown_blocks=unknown_blocks):
        return StepResult(ok=True, checks=checks)
    return StepResult(ok=False, reason=f"{what} failed: {summary(checks, unknown_blocks=unknown_blocks)}",
                      checks=checks)


def passed(name: str, detail: str, scope: str = "", **evidence: Any) -> Check:
    return Check(name=name, status=CheckStatus.PASS, detail=detail, scope=scope, evidence=evidence)


def failed(name: str, detail: str, scope: str = "", **evidence: Any) -> Check:
    return Check(name=name, status=CheckStatus.FAIL, detail=detail, scope=scope, evidence=evidence)


def unknown(name: str, detail: str, scope: str = "", **evidence: Any) -> Check:
    """A check that could not be made; ``detail`` says why (and what would make it possible)."""
    return Check(name=name, status=CheckStatus.UNKNOWN, detail=detail, scope=scope, evidence=evidence)


def warned(name: str, detail: str, scope: str = "", **evidence: Any) -> Check:
    return Check(name=name, status=CheckStatus.WARN, detail=detail, scope=scope, evidence=evidence)


def skipped(name: str, detail: str, scope: str = "", **evidence: Any) -> Check:
    return Check(name=name, status=CheckStatus.SKIP, detail=detail, scope=scope, evidence=evidence)
