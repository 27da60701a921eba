"""Slack's encodings of a command's text, undone before the words are parsed.

Slack sends ``/upgrade canary <@U123|ana> image=<http://reg.io/x:1|reg.io/x:1>`` with
mentions, channels and links in angle brackets and ``&``, ``<``, ``>`` escaped as
``&amp;``, ``&lt;``, ``&gt;``. :func:`decode` gives back what the person meant (``U123``,
``reg.io/x:1``); it never raises, whatever the text. Pure functions, no I/O.
"""

from __future__ import annotations

import re

# One bracketed token: <@U1>, <@U1|name>, <#C1|name>, <!subteam^S1|@g>, <!here>, <http://x|x>.
_TOKEN = re.compile(r"<([^<>]*)>")
_ENTITY = re.compile(r"&(amp|lt|gt);")
_ENTITIES = {"amp": "&", "lt": "<", "gt": ">"}
_ID = re.compile(r"^[A-Z0-9]+$")


def _unescape(text: str) -> str:
    """``&lt;`` ``&gt;`` ``&amp;`` in one pass (so ``&amp;lt;`` is ``&lt;``, as Slack means)."""
    return _ENTITY.sub(lambda m: _ENTITIES[m.group(1)], text)


def _token(inner: str) -> str:
    target, _, label = inner.partition("|")
    if target[:1] in "@#" and _ID.fullmatch(target[1:]):
        return target[1:]
    if target.startswith("!subteam^") and _ID.fullmatch(target[9:]):
        return target[9:]
    if target.startswith("!"):
        return label or "@" + target[1:]  # <!here> -> @here
    # A link: what the person typed is the label; a bare link is the URL itself.
    return label or target


def decode(text: str) -> str:
    """The command text as typed: mentions and channels as ids, links as their text."""
    return _unescape(_TOKEN.sub(lambda m: _token(m.group(1)), text))


def escape(text: str) -> str:
    """Slack's escaping of ``&``, ``<`` and ``>`` (what a client sends for literal text)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def words(text: str) -> list[str]:
    """The decoded text split on any whitespace (Slack sends non-breaking spaces too)."""
    return decode(text).split()
