"""Surface-neutral replies: what a handler says, before any surface formats it.

A handler returns a :class:`Reply`; ``bot/`` renders it as Block Kit for Slack
(``bot/slack/blocks.py``), as text for the console (``bot/shell/output.py``) and as JSON
for the shell (``Reply.model_dump_json``). Nothing here knows Slack's limits: a renderer
splits long texts and tables, and moves what does not fit to the thread.

Text is plain (no markup) except user and channel references written as
:func:`user_ref` / :func:`channel_ref` (``<@U123>``, ``<#C123>``): Slack shows them as
mentions, the console as ``@U123`` / ``#C123``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from runbooks.characters import unsafe_character

Tone = Literal["info", "ok", "warn", "error"]
ButtonStyle = Literal["primary", "danger"]
SUMMARY_SEPARATOR = " — "
"""Between a usage line and its one-line summary (``help``)."""


class _Model(BaseModel):
    # built when a reply is first made, not at import: a verb answering with JSON builds none (issue 39)
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class Item(_Model):
    """A label and its value, shown side by side (Slack: a section field)."""

    label: str
    value: str


class Button(_Model):
    """A choice for the reader; ``action_id`` routes the click, ``value`` identifies the object."""

    label: str
    action_id: str
    value: str
    style: ButtonStyle | None = None


class Table(_Model):
    """Rows under a header; ``note`` says what was left out (``… 12 more nodes``)."""

    header: list[str]
    rows: list[list[str]] = Field(default_factory=list)
    note: str = ""


class Message(_Model):
    """One message: a title, text, fields, a table and buttons, each optional.

    The thread items of a :class:`Reply` are messages too; so are the run's root message
    and step messages the engine wiring posts.
    """

    title: str | None = None
    text: str = ""
    fields: list[Item] = Field(default_factory=list)
    table: Table | None = None
    buttons: list[Button] = Field(default_factory=list)
    tone: Tone = "info"


ThreadItem = Message
"""A message posted under the reply (Slack: in its thread; console: indented)."""


class Attachment(_Model):
    """A file of the reply: a text too long to read in a message (a manifest), which the
    console and the shell print after the reply, or an image (``data``: a report's chart),
    which they name only. Slack uploads either to the reply's thread."""

    model_config = ConfigDict(extra="forbid", frozen=True, ser_json_bytes="base64")

    filename: str
    title: str
    content: str = ""
    data: bytes = b""
    """The bytes of a binary file (a PNG); ``content`` is then empty."""

    @property
    def binary(self) -> bool:
        return bool(self.data)


class Reply(Message):
    """What a handler answers: a message, its thread items, who may see it, usage lines.

    ``ephemeral``: only the caller sees it (errors, refusals, help); nothing was started.
    ``usage``: usage lines without the command prefix (``inventory [cluster=<context>]``);
    each surface adds its own (``/upgrade``, ``upgradebot``). A line may end with
    :data:`SUMMARY_SEPARATOR` and a summary, shown as prose after the command.
    """

    thread: list[Message] = Field(default_factory=list)
    ephemeral: bool = False
    usage: list[str] = Field(default_factory=list)
    files: list[Attachment] = Field(default_factory=list)

    def files_inline(self) -> Reply:
        """The reply with its files as thread messages (where nothing can be uploaded: an
        ephemeral answer)."""
        if not self.files:
            return self
        inlined = [Message(title=f.title, text=_binary_note(f) if f.binary else f"```\n{f.content}```")
                   for f in self.files]
        return self.model_copy(update={"thread": [*self.thread, *inlined], "files": []})

    @classmethod
    def error(cls, reason: str, *, usage: Sequence[str] = (), title: str | None = None) -> Reply:
        """An ephemeral refusal: the reason and the usage lines that apply."""
        return cls(title=title, text=reason, usage=list(usage), ephemeral=True, tone="error")


def _binary_note(attached: Attachment) -> str:
    """Where an image cannot be shown (an ephemeral answer): what it is and where it is seen."""
    return (f"{attached.filename}: an image of {len(attached.data) // 1024 + 1} KiB, not shown in a private answer; "
            "the scheduled reports post it in the run's thread")


def user_ref(user_id: str) -> str:
    """A reference to a user that every surface shows as a mention of them."""
    return f"<@{user_id}>"


def mention(principal: str) -> str:
    """A user group (``S…``) or a user (``U…``) as a mention every surface shows."""
    return f"<!subteam^{principal}>" if principal.startswith("S") else user_ref(principal)


def channel_ref(channel_id: str) -> str:
    """A reference to a channel that every surface shows as a link to it."""
    return f"<#{channel_id}>"


BACKTICK_STAND_IN = "\u02cb"
"""U+02CB (MODIFIER LETTER GRAVE ACCENT): what a typed backtick is shown as inside :func:`literal`."""
_NOT_A_REFERENCE = "\u2060"
"""WORD JOINER, put after a typed ``<`` that would open a mention (``<@``, ``<#``, ``<!``)."""


def _inert(text: str, *, keep_lines: bool) -> str:
    out: list[str] = []
    for char in text:
        if char == "\n" and keep_lines:
            out.append(char)
        elif char == "`":
            out.append(BACKTICK_STAND_IN)
        elif unsafe_character(char):
            out.append(char.encode("unicode_escape").decode("ascii"))
        else:
            out.append(char)
    return "".join(out).replace("<@", f"<{_NOT_A_REFERENCE}@").replace("<#", f"<{_NOT_A_REFERENCE}#") \
        .replace("<!", f"<{_NOT_A_REFERENCE}!")


def literal(value: str) -> str:
    """A value someone typed, as an approver reads it: one line of inline code (Slack applies no
    mrkdwn inside: ``*``, ``_``, ``~`` show as typed). Its own backticks show as
    :data:`BACKTICK_STAND_IN`, so they cannot close the span; a control, line-separator or bidi
    character shows as its escape (``\\n``, ``\\u202e``); a ``<`` that would open a mention, a
    channel or ``<!here>`` is followed by a word joiner, so it stays text. ``&``, ``<`` and ``>``
    are escaped by the Slack renderer, as in all text (finding 6 of the security review)."""
    return f"`{_inert(value, keep_lines=False)}`"


def literal_block(text: str) -> str:
    """:func:`literal` for several lines shown in a code block (a template diff): the same, but
    its line ends are kept."""
    return _inert(text, keep_lines=True)
