"""Characters that change how text reads without being seen, and the inert forms values take.

A module of its own (it was :mod:`runbooks.validation`'s), importing nothing of the policy,
so that the argument splitting and the replies, which every surface loads, do not load the
policy's models with them (issue 39).

Two uses. A value someone *types* may hold none of them: :func:`unsafe_character` names the
first, and the argument is refused. A value *read from the cluster* (a node's
``status.nodeInfo``, an image, a container's message, a log line) cannot be refused, so it is
kept as :func:`shown` makes it, once, where the bot reads it: each hidden character written
as its escape (``\\n``, ``\\x1b``, ``\\u202e``), and each ``<`` that would open a Slack
mention, channel or special (``<@U…>``, ``<#C…>``, ``<!here>``, ``<!subteam^S…>``) followed
by a word joiner, so it stays text (attack run, finding 3). The surfaces' renderers escape the
hidden characters of everything they print again (:func:`escaped`): a terminal acts on none,
a table row stays one line, whatever the text's source.
"""

from __future__ import annotations

import re
import unicodedata

INVISIBLE_LAYOUT = frozenset("\u2028\u2029\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c")
"""Characters that change how a line reads without being seen: the line and paragraph
separators, the bidi embeddings, overrides and isolates, and the bidi marks."""

HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
"""What :func:`escaped` writes as escapes: control characters (C0 with ``\\n``, ``\\r``, ``\\t``
and ESC, DEL, C1 with CSI), format characters (bidi embeddings, overrides, isolates and marks,
zero-width spaces and joiners, the BOM, soft hyphen, tag characters), lone surrogates (which
no terminal can be written) and the line and paragraph separators."""

NOT_A_REFERENCE = "\u2060"
"""WORD JOINER, put after a ``<`` that would open a mention (``<@``, ``<#``, ``<!``): Slack then
shows the text as it is, and every other surface shows nothing of it."""
_OPENER = re.compile(r"<(?=[@#!])")


def unsafe_character(text: str) -> str | None:
    """The first character of ``text`` that a typed value may not hold, as ``U+XXXX``: a control
    character (Unicode category Cc: ``\\n``, ``\\r``, ``\\t``, ESC, DEL, C1…) or one of
    :data:`INVISIBLE_LAYOUT`; None when there is none. A value shown to an approver is one line
    that reads as it is stored."""
    for char in text:
        if char in INVISIBLE_LAYOUT or unicodedata.category(char) == "Cc":
            return f"U+{ord(char):04X}"
    return None


def _broken_opener(text: str, at: int) -> bool:
    """The word joiner at ``at`` is the one :func:`shown` put after a ``<`` (kept, so that
    showing a shown value again changes nothing)."""
    return text[at - 1 : at] == "<" and text[at + 1 : at + 2] in ("@", "#", "!")


def escaped(text: str, *, keep: str = "") -> str:
    """``text`` with each character of :data:`HIDDEN_CATEGORIES` written as its Python escape
    (``\\n``, ``\\x1b``, ``\\x9b``, ``\\u202e``, ``\\u200b``) but those in ``keep`` (``"\\n"``:
    a text of several lines) and the word joiners of :func:`shown`. The same object when there
    is nothing to escape (most values: interned strings stay shared)."""
    if text.isprintable():
        return text
    out: list[str] = []
    for at, char in enumerate(text):
        if char in keep or unicodedata.category(char) not in HIDDEN_CATEGORIES or (
                char == NOT_A_REFERENCE and _broken_opener(text, at)):
            out.append(char)
        else:
            out.append(char.encode("unicode_escape", "backslashreplace").decode("ascii"))
    return "".join(out)


def shown(text: str) -> str:
    """A value read from the cluster as every surface may show it: one line, its hidden
    characters escaped (:func:`escaped`), no ``<`` that opens a mention (:data:`NOT_A_REFERENCE`
    after it). Idempotent: a value shown again (an inventory read back from the store) is
    unchanged. The same object when the value needs nothing (almost all)."""
    if "<" not in text and text.isprintable():
        return text
    return _OPENER.sub("<" + NOT_A_REFERENCE, escaped(text))
