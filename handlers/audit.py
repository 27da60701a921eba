"""``audit <run>``: the run's audit trail: every transition, decision, check and mutation."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from handlers.run_arguments import run_id
from runbooks.engine.commands import Engine
from runbooks.engine.runs import Run

USAGE = "audit <run>"


def parse(words: Sequence[str]) -> str:
    return run_id(words, usage=USAGE)[0]


def handle(run: str, *, engine: Engine) -> tuple[Run, list[dict[str, Any]]]:
    return engine.get(run), engine.audit(run)
