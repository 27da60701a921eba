"""``resume``: continue every run not in a terminal state (what the bot does on start-up)."""

from __future__ import annotations

from collections.abc import Sequence

from handlers.arguments import split_pairs
from runbooks.engine.commands import Engine, Outcome

USAGE = "resume"


def parse(words: Sequence[str]) -> None:
    split_pairs(words, allowed=(), usage=USAGE)


def handle(_: None, *, engine: Engine) -> list[Outcome]:
    return engine.resume()
