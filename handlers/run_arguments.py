"""What the run verbs share: parsing a run id, and driving a run on after a command."""

from __future__ import annotations

from collections.abc import Sequence

from handlers.arguments import UsageError, split_pairs
from runbooks.engine.commands import Engine, Outcome
from runbooks.engine.runs import is_run_id


def run_id(words: Sequence[str], *, usage: str, allowed: Sequence[str] = ()) -> tuple[str, dict[str, str]]:
    """``(run id, {key: value})`` from ``<run> [key=value ...]``; a missing or malformed id is a UsageError."""
    positional, pairs = split_pairs(words, allowed=allowed, usage=usage, max_positional=1)
    if not positional:
        raise UsageError("which run? give its id (r-… as `runs` lists them)", usage)
    if not is_run_id(positional[0]):
        raise UsageError(f"{positional[0]!r} is not a run id: run ids look like r-3k9x0b2a", usage)
    return positional[0], pairs


def then_advance(engine: Engine, outcome: Outcome, *, advance: bool = True) -> Outcome:
    """After a command: drive the run to its next gate or end when it has work (the shell),
    or leave that to a background worker (``advance=False``, Slack); the note is kept."""
    if advance and engine.needs_work(outcome.run):
        return Outcome(engine.advance(outcome.run.id), outcome.note)
    return outcome
