"""Arguments the run verbs share: a run id, and the caller as the engine sees them."""

from __future__ import annotations

from collections.abc import Sequence

from handlers.arguments import UsageError, split_pairs
from runbooks.runs import is_run_id


def run_id(words: Sequence[str], *, usage: str, allowed: Sequence[str] = ()) -> tuple[str, dict[str, str]]:
    """``(run id, {key: value})`` from ``<run> [key=value ...]``; a missing or malformed id is a UsageError."""
    positional, pairs = split_pairs(words, allowed=allowed, usage=usage, max_positional=1)
    if not positional:
        raise UsageError("which run? give its id (r-… as `runs` lists them)", usage)
    if not is_run_id(positional[0]):
        raise UsageError(f"{positional[0]!r} is not a run id: run ids look like r-3k9x0b2a", usage)
    return positional[0], pairs
