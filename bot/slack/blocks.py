"""Replies as Block Kit payloads for ``chat.postMessage``, ``chat.update`` and ``respond``.

Slack's limits are kept here and only here: at most :data:`MAX_BLOCKS` blocks a message,
:data:`MAX_SECTION` characters a section text, 10 fields a section of at most 2,000
characters each, 25 buttons an ``actions`` block. A long text or table is split into
several sections; what does not fit in the reply's message moves to the thread, and a
thread item too large for one message becomes several messages. ``&``, ``<`` and ``>``
are escaped everywhere except in the user, channel and group references of
:mod:`handlers.replies`; control, bidi and zero-width characters are written as their escapes
(:func:`runbooks.characters.escaped`; a text's line ends kept, a table cell's not), whatever the
text's source. A value read from the cluster cannot mention anyone: its ``<@`` was broken as it
was read (:func:`runbooks.characters.shown`). Payloads are plain dicts: ``{"text": …, "blocks": […]}``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from bot.text import table as pad_table
from handlers import messages as msg
from handlers.replies import BACKTICK_STAND_IN, SUMMARY_SEPARATOR, Button, Message, Reply, Table
from runbooks.characters import escaped

Block = dict[str, Any]
Payload = dict[str, Any]

MAX_BLOCKS = 50
MAX_SECTION = 3000
MAX_FIELDS = 10
MAX_FIELD = 2000
MAX_BUTTONS = 25
MAX_BUTTON_TEXT = 75
MAX_FALLBACK = 3000
MAX_CONTEXT = 2000

_REFERENCE = re.compile(r"(<(?:@[UWB][A-Z0-9]+|#C[A-Z0-9]+|!subteam\^S[A-Z0-9]+)>)")


def escape(text: str) -> str:
    """``&`` ``<`` ``>`` escaped as Slack requires, user/channel/group references kept; control,
    bidi and zero-width characters as their escapes, line ends kept."""
    parts = _REFERENCE.split(escaped(text, keep="\n"))
    return "".join(
        p if i % 2 else p.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        for i, p in enumerate(parts)
    )


def cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def chunks(text: str, limit: int) -> list[str]:
    """``text`` in pieces of at most ``limit`` characters, split at line ends when possible."""
    pieces: list[str] = []
    current = ""
    for line in text.split("\n"):
        while len(line) > limit:
            if current:
                pieces.append(current)
                current = ""
            pieces.append(line[:limit])
            line = line[limit:]
        candidate = f"{current}\n{line}" if current else line
        if len(candidate) > limit:
            pieces.append(current)
            current = line
        else:
            current = candidate
    if current or not pieces:
        pieces.append(current)
    return pieces


def _section(text: str) -> Block:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text}}


def _sections(text: str, limit: int = MAX_SECTION) -> list[Block]:
    return [_section(piece) for piece in chunks(text, limit) if piece.strip()]


def _table(table: Table) -> list[Block]:
    # a table is plain text in a code block: a typed backtick must not close the block (finding 6)
    lines = [escape(line).replace("`", BACKTICK_STAND_IN) for line in pad_table(table.header, table.rows, indent="")]
    fence = "```"
    blocks = [_section(f"{fence}\n{piece}\n{fence}") for piece in chunks("\n".join(lines), MAX_SECTION - 8)]
    if table.note:
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": cut(escape(table.note), MAX_CONTEXT)}]})
    return blocks


def _button(button: Button) -> dict[str, Any]:
    element: dict[str, Any] = {
        "type": "button",
        "text": {"type": "plain_text", "text": cut(button.label, MAX_BUTTON_TEXT), "emoji": True},
        "action_id": button.action_id,
        "value": cut(button.value, 2000),
    }
    if button.style:
        element["style"] = button.style
    return element


def message_blocks(message: Message) -> list[Block]:
    """Every block of one message, before any splitting."""
    blocks: list[Block] = []
    if message.title:
        blocks.append(_section(cut(f"{msg.tone_mark(message.tone)}*{escape(message.title)}*", MAX_SECTION)))
    if message.text:
        blocks += _sections(escape(message.text))
    for start in range(0, len(message.fields), MAX_FIELDS):
        group = message.fields[start : start + MAX_FIELDS]
        texts = [cut(f"*{escape(f.label)}*\n{escape(f.value)}", MAX_FIELD) for f in group]
        blocks.append({"type": "section", "fields": [{"type": "mrkdwn", "text": t} for t in texts]})
    if message.table is not None:
        blocks += _table(message.table)
    for start in range(0, len(message.buttons), MAX_BUTTONS):
        row = message.buttons[start : start + MAX_BUTTONS]
        blocks.append({"type": "actions", "elements": [_button(b) for b in row]})
    return blocks


def usage_blocks(usage: Sequence[str], *, prefix: str) -> list[Block]:
    if not usage:
        return []
    lines = []
    for line in usage:
        command, _, summary = line.partition(SUMMARY_SEPARATOR)
        code = f"`{escape(f'{prefix} {command}'.strip())}`"
        lines.append(f"{code} — {escape(summary)}" if summary else code)
    return _sections(f"{msg.usage_heading(len(usage))}\n" + "\n".join(lines))


def fallback_text(message: Message) -> str:
    """The notification text (``text``) that goes with the blocks, escaped as they are."""
    head = message.title or ""
    first = message.text.split("\n", 1)[0] if message.text else ""
    return cut(escape(": ".join(p for p in (head, first) if p)) or " ", MAX_FALLBACK)


def _payloads(blocks: list[Block], text: str) -> list[Payload]:
    return [{"text": text, "blocks": blocks[i : i + MAX_BLOCKS]} for i in range(0, len(blocks), MAX_BLOCKS)] or [
        {"text": text, "blocks": []}
    ]


def render_message(message: Message) -> list[Payload]:
    """One message as one payload, or several when it has more than 50 blocks."""
    return _payloads(message_blocks(message), fallback_text(message))


@dataclass
class Rendered:
    """The reply's own message, and the thread messages to post under it, in order."""

    main: Payload
    thread: list[Payload] = field(default_factory=list)


def render_reply(reply: Reply, *, prefix: str, context: str | None = None) -> Rendered:
    """A reply as one message and its thread; ephemeral replies have no thread, so their
    thread items are appended and the whole cut short at 50 blocks. Thread items go together
    into one message, a divider between them, while it stays within 50 blocks and
    :data:`PACK_CHARS`: an inventory's findings, nodes, node stack and DaemonSets were seven
    ``chat.postMessage`` calls under its summary, where Slack allows about one message a second
    in a channel."""
    text = fallback_text(reply)
    head = message_blocks(reply) + usage_blocks(reply.usage, prefix=prefix)
    if context:
        head.append({"type": "context", "elements": [{"type": "mrkdwn", "text": cut(context, MAX_CONTEXT)}]})
    thread_blocks = [message_blocks(item) for item in reply.thread]
    if reply.ephemeral:
        blocks = head + [b for item in thread_blocks for b in item]
        if len(blocks) > MAX_BLOCKS:
            blocks = [*blocks[: MAX_BLOCKS - 1], _section(msg.CUT_SHORT)]
        return Rendered(main={"text": text, "blocks": blocks})
    overflow: list[Block] = []
    if len(head) > MAX_BLOCKS:
        head, overflow = head[: MAX_BLOCKS - 1], head[MAX_BLOCKS - 1 :]
        head.append(_section(msg.continued_in_thread(len(overflow))))
    thread = _payloads(overflow, text) if overflow else []
    packed: Payload | None = None  # the thread message whole items go into while they fit
    packed_chars = 0
    for item, blocks in zip(reply.thread, thread_blocks, strict=True):
        chars = _chars(blocks)
        if packed is not None and blocks and len(packed["blocks"]) + 1 + len(blocks) <= MAX_BLOCKS \
                and packed_chars + chars <= PACK_CHARS:
            packed["blocks"] += [{"type": "divider"}, *blocks]
            packed["text"] = cut(f"{packed['text']} · {fallback_text(item)}", MAX_FALLBACK)
            packed_chars += chars
            continue
        payloads = _payloads(blocks, fallback_text(item))
        thread += payloads
        packed = payloads[0] if len(payloads) == 1 and chars <= PACK_CHARS else None
        packed_chars = chars
    return Rendered(main={"text": text, "blocks": head}, thread=thread)


PACK_CHARS = 12_000
"""The most characters of block text in a thread message that carries several items: Slack
refuses a message whose blocks total about 13,200 (``msg_blocks_too_long``), fewer than 50."""


def _chars(blocks: list[Block]) -> int:
    """The characters of text in ``blocks``: sections' text and fields, context elements."""
    total = 0
    for block in blocks:
        total += len((block.get("text") or {}).get("text", ""))
        total += sum(len(f.get("text", "")) for f in block.get("fields") or ())
        total += sum(len(e.get("text", "")) for e in block.get("elements") or () if isinstance(e.get("text"), str))
    return total


def all_blocks(payloads: Iterable[Payload]) -> list[Block]:
    return [b for p in payloads for b in p["blocks"]]
