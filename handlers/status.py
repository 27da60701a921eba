"""``status [<run>]``: one run as stored (its gate, reason, progress), or the active runs."""

from __future__ import annotations

from collections.abc import Sequence

from handlers.arguments import split_pairs
from handlers.run_arguments import run_id
from runbooks.engine.commands import Engine
from runbooks.engine.runs import Run

USAGE = "status [<run>]"


def parse(words: Sequence[str]) -> str | None:
    positional, _ = split_pairs(words, allowed=(), usage=USAGE, max_positional=1)
    return run_id(positional, usage=USAGE)[0] if positional else None


def handle(run: str | None, *, engine: Engine) -> list[Run]:
    """``[the run]``, or every active run when no id is given."""
    return [engine.get(run)] if run else engine.runs(active_only=True)
