"""Verify results as text for people at a terminal (``upgradebot verify``).

One line of verdict, then one row per check, failures first. The JSON surface prints
the model itself (``StepResult.model_dump_json``): ``ok``, ``reason`` and every check
with its evidence.
"""

from __future__ import annotations

from bot.shell.output import table
from runbooks.engine.steps import CheckStatus, StepResult

LABEL = {CheckStatus.FAIL: "FAIL", CheckStatus.WARN: "WARN", CheckStatus.SKIP: "SKIP", CheckStatus.PASS: "ok"}
ORDER = {CheckStatus.FAIL: 0, CheckStatus.WARN: 1, CheckStatus.SKIP: 2, CheckStatus.PASS: 3}


def render_verification(result: StepResult, *, target: str, scope: str) -> str:
    failed = len(result.failed)
    verdict = "all checks passed" if result.ok else f"{failed} of {len(result.checks)} checks failed"
    lines = [f"Verify of {target} on {scope}: {verdict}"]
    rows = [[LABEL[c.status], c.name, c.scope or "-", c.detail]
            for c in sorted(result.checks, key=lambda c: ORDER[c.status])]
    lines += table(["", "CHECK", "SCOPE", "DETAIL"], rows)
    return "\n".join(lines) + "\n"
