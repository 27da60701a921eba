"""Arguments of a verb, as both front ends pass them: words and ``key=value`` pairs.

The grammar: ``<verb> [target] [key=value ...]``. A bad word raises
:class:`UsageError` carrying the verb's usage line, which every surface shows as is.
"""

from __future__ import annotations

from collections.abc import Sequence

from handlers import messages as msg
from runbooks.characters import unsafe_character


class UsageError(ValueError):
    """The arguments do not fit the verb; ``usage`` is the line to show."""

    def __init__(self, reason: str, usage: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.usage = usage


def split_pairs(
    words: Sequence[str], *, allowed: Sequence[str], usage: str, max_positional: int = 0
) -> tuple[list[str], dict[str, str]]:
    """``(positional words, {key: value})``, refusing unknown keys, repeats and extra words."""
    positional, pairs, _ = split_words(words, allowed=allowed, usage=usage, max_positional=max_positional)
    return positional, pairs


def split_words(
    words: Sequence[str], *, allowed: Sequence[str], usage: str, max_positional: int = 0,
    repeatable: Sequence[str] = (),
) -> tuple[list[str], dict[str, str], dict[str, list[str]]]:
    """``(positional words, {key: value}, {key: [values]})``: the keys in ``repeatable`` may be
    given more than once (``env=A=1 env=B=2``) and land in the third part, in order."""
    positional: list[str] = []
    pairs: dict[str, str] = {}
    repeated: dict[str, list[str]] = {}
    for word in words:
        key, sep, value = word.partition("=")
        _refuse_unsafe(word, key, sep, usage)
        if not sep:
            if len(positional) >= max_positional:
                raise UsageError(f"unexpected argument {word!r}", usage)
            positional.append(word)
            continue
        if key not in allowed:
            known = ", ".join(f"{k}=" for k in allowed) or "none"
            raise UsageError(f"unknown argument {key}= (known: {known})", usage)
        if key in pairs:
            raise UsageError(f"{key}= given twice", usage)
        if not value:
            raise UsageError(f"{key}= needs a value", usage)
        if key in repeatable:
            repeated.setdefault(key, []).append(value)
        else:
            pairs[key] = value
    return positional, pairs, repeated


def _refuse_unsafe(word: str, key: str, sep: str, usage: str) -> None:
    """A word holding a control, line-separator or bidi character is refused, naming the
    argument (``env=``, or the word up to that character) and the character: finding 6 of the
    security review (a value that prints as several lines deceives whoever reads it)."""
    found = unsafe_character(word)
    if found is None:
        return
    if sep and unsafe_character(key) is None:
        argument = f"{key}="
    else:
        prefix = word[: next(i for i, c in enumerate(word) if unsafe_character(c))]
        argument = repr(prefix[:40] + "…") if prefix else "an argument"
    raise UsageError(msg.unsafe_character(argument, found), usage)


def run_id(words: Sequence[str], *, usage: str, allowed: Sequence[str] = ()) -> tuple[str, dict[str, str]]:
    """``(run id, {key: value})`` from ``<run> [key=value ...]``; a missing or malformed id is a UsageError."""
    from runbooks.engine.runs import (
        is_run_id,  # the run model: loaded by the verbs that read a run id (issue 39)
    )

    positional, pairs = split_pairs(words, allowed=allowed, usage=usage, max_positional=1)
    if not positional:
        raise UsageError("which run? give its id (r-… as `runs` lists them)", usage)
    if not is_run_id(positional[0]):
        raise UsageError(f"{positional[0]!r} is not a run id: run ids look like r-3k9x0b2a", usage)
    return positional[0], pairs
