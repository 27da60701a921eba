"""The characters a typed value may not hold: one line that reads as it is stored.

A module of its own (it was :mod:`runbooks.validation`'s), importing nothing of the policy,
so that the argument splitting and the replies, which every surface loads, do not load the
policy's models with them (issue 39).
"""

from __future__ import annotations

import unicodedata

INVISIBLE_LAYOUT = frozenset("\u2028\u2029\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c")
"""Characters that change how a line reads without being seen: the line and paragraph
separators, the bidi embeddings, overrides and isolates, and the bidi marks."""


def unsafe_character(text: str) -> str | None:
    """The first character of ``text`` that a typed value may not hold, as ``U+XXXX``: a control
    character (Unicode category Cc: ``\\n``, ``\\r``, ``\\t``, ESC, DEL, C1…) or one of
    :data:`INVISIBLE_LAYOUT`; None when there is none. A value shown to an approver is one line
    that reads as it is stored."""
    for char in text:
        if char in INVISIBLE_LAYOUT or unicodedata.category(char) == "Cc":
            return f"U+{ord(char):04X}"
    return None
