"""``promote <run>``: post a run's promotion request again (it opens by itself when the canary passes)."""

from __future__ import annotations

from collections.abc import Sequence

from handlers.run_arguments import run_id
from runbooks.engine.approving import Actor
from runbooks.engine.commands import Engine, Outcome

USAGE = "promote <run>"


def parse(words: Sequence[str]) -> str:
    return run_id(words, usage=USAGE)[0]


def handle(run: str, *, engine: Engine, actor: Actor) -> Outcome:
    return engine.promote(run, actor=actor)
