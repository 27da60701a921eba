"""A :class:`~handlers.replies.Reply` as plain text: the console chat and the shell print this.

One renderer for both: a message's title, text, fields, table and numbered buttons; a
reply's usage lines with the surface's prefix (``/upgrade`` in the console, ``upgradebot``
in the shell); its thread items indented; its files (Slack uploads them) printed whole
between ``--- <filename>`` and ``--- end of <filename>`` (an image named only). User, channel and group references show as
``@U1``, ``#C1``, ``@S1``. :func:`table` pads columns as kubectl prints them (Slack's code
blocks use it too).

Nothing printed can act on the terminal or change how a line reads, whatever its source: each
table cell and each line is written through :func:`runbooks.characters.escaped` (ESC, CR, C1,
bidi overrides and isolates, zero-width characters as ``\\x1b``, ``\\u202e``…), so a cell is one
line of its row (values read from the cluster were made inert as they were read; this is the
surface's own guard).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from handlers.replies import Message, Reply
from runbooks.characters import escaped


def table(header: Sequence[str], rows: Iterable[Sequence[str]], indent: str = "  ") -> list[str]:
    """Columns padded to their widest cell, as kubectl prints them; a cell is one line
    (:func:`~runbooks.characters.escaped`)."""
    all_rows = [[escaped(c) for c in header]] + [[escaped(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in all_rows) for i in range(len(header))]
    return [indent + "   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in all_rows]


_REFERENCE = re.compile(r"<(@[UWB][A-Z0-9]+|#C[A-Z0-9]+)>|<!subteam\^(S[A-Z0-9]+)>")
TONE_LABEL = {"info": "", "ok": "OK  ", "warn": "WARN  ", "error": "ERROR  "}


def plain(text: str) -> str:
    """User, channel and group references as ``@U1``, ``#C1``, ``@S1``."""
    return _REFERENCE.sub(lambda m: m.group(1) or "@" + m.group(2), text)


def render_message(message: Message, *, indent: str = "", first_choice: int = 1) -> str:
    """One message as text; buttons become numbered choices starting at ``first_choice``."""
    lines: list[str] = []
    if message.title:
        lines.append(TONE_LABEL.get(message.tone, "") + plain(message.title))
    if message.text:
        lines += plain(message.text).split("\n")
    width = max((len(f.label) for f in message.fields), default=0)
    lines += [f"{f.label + ':':<{width + 1}} {plain(f.value)}" for f in message.fields]
    if message.table is not None:
        lines += table(message.table.header, message.table.rows)
        if message.table.note:
            lines.append("  " + message.table.note)
    if message.buttons:
        lines.append("  ".join(f"[{first_choice + i}] {b.label}" for i, b in enumerate(message.buttons)))
    return "\n".join(indent + escaped(line) for line in lines) + "\n"


def render_reply(reply: Reply, *, prefix: str = "/upgrade") -> str:
    """A reply for the console: the message, its usage lines, then its thread indented."""
    out = [render_message(reply)]
    if reply.usage:
        out.append("".join(f"  {prefix} {escaped(line)}\n" for line in reply.usage))
    choice = len(reply.buttons) + 1
    for item in reply.thread:
        out.append(render_message(item, indent="  | ", first_choice=choice))
        choice += len(item.buttons)
    out.append(render_files(reply))
    return "".join(out)


def render_files(reply: Reply) -> str:
    """A reply's files: a text whole, between ``--- <filename>`` and ``--- end of <filename>``;
    an image (a report's chart) named with its size only."""
    out = []
    for attached in reply.files:
        if attached.binary:
            out.append(escaped(f"--- {attached.filename}: {plain(attached.title)} ({len(attached.data) // 1024 + 1} KiB "
                               "image; Slack shows it in the thread)") + "\n")
            continue
        body = escaped(attached.content.removesuffix("\n"), keep="\n\t") + "\n"
        out.append(escaped(f"--- {attached.filename}: {plain(attached.title)}") + f"\n{body}"
                   + escaped(f"--- end of {attached.filename}") + "\n")
    return "".join(out)
