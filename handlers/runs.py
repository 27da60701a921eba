"""``runs [limit=<n>]``: the newest runs, active or ended."""

from __future__ import annotations

from collections.abc import Sequence

from handlers.arguments import UsageError, split_pairs
from runbooks.engine.commands import Engine
from runbooks.engine.runs import Run

USAGE = "runs [limit=<n>]"
MAX_LIMIT = 1000


def parse(words: Sequence[str]) -> int:
    _, pairs = split_pairs(words, allowed=("limit",), usage=USAGE)
    text = pairs.get("limit", "20")
    if not text.isdigit() or not 1 <= int(text) <= MAX_LIMIT:
        raise UsageError(f"limit= must be a number from 1 to {MAX_LIMIT}", USAGE)
    return int(text)


def handle(limit: int, *, engine: Engine) -> list[Run]:
    return engine.runs(limit=limit)
