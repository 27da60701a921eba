"""``close <run>``: end a run that is monitoring (before or instead of its stability reports)."""

from __future__ import annotations

from collections.abc import Sequence

from handlers.run_arguments import run_id
from runbooks.engine.approving import Actor
from runbooks.engine.commands import Engine, Outcome

USAGE = "close <run>"


def parse(words: Sequence[str]) -> str:
    return run_id(words, usage=USAGE)[0]


def handle(run: str, *, engine: Engine, actor: Actor) -> Outcome:
    return engine.close(run, actor=actor)
