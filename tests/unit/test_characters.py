"""Values read from the cluster made inert once (:func:`runbooks.characters.shown`), and each
surface's renderer guarding what it prints whatever its source (attack run, finding 3)."""

from __future__ import annotations

import json
import unicodedata

from hypothesis import given, settings
from hypothesis import strategies as st

from bot.slack.blocks import render_message as slack_message
from bot.text import render_message as text_message
from bot.text import table
from handlers.replies import Item, Message, Table, literal, user_ref
from runbooks.characters import NOT_A_REFERENCE, escaped, shown
from runbooks.inventory import Node

HOSTILE = "Ubuntu\n| fake | row |\n<@U0ADMIN> <!channel> <!subteam^S1> <#C1> \x1b[31mred\u202eevil\x9b\u200b\ud800"
RAW = ("\n", "\r", "\x1b", "\x9b", "\u202e", "\u200b", "\ud800")


def _hidden(text: str) -> list[str]:
    """The hidden characters of ``text`` but the word joiners after a ``<``."""
    return [c for i, c in enumerate(text) if unicodedata.category(c) in ("Cc", "Cf", "Cs", "Zl", "Zp")
            and not (c == NOT_A_REFERENCE and text[i - 1 : i] == "<")]


def test_shown_escapes_hidden_characters_and_breaks_mentions() -> None:
    value = shown(HOSTILE)
    assert value == ("Ubuntu\\n| fake | row |\\n<\u2060@U0ADMIN> <\u2060!channel> <\u2060!subteam^S1> <\u2060#C1> "
                     "\\x1b[31mred\\u202eevil\\x9b\\u200b\\ud800")
    assert value.encode("utf-8")  # no lone surrogate left to fail a write


def test_an_ordinary_value_is_the_same_object() -> None:
    """Interned strings stay shared (issue 39): nothing to escape, nothing copied."""
    value = "".join(["Ubuntu 22.04.4 LTS ", "\u00e9"])
    assert shown(value) is value and escaped(value) is value


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_shown_is_idempotent_and_inert(text: str) -> None:
    """Whatever a value holds: shown twice is shown once (an inventory read back from the store),
    it has no hidden character, and no ``<`` opens a mention."""
    value = shown(text)
    assert shown(value) == value
    assert _hidden(value) == []
    assert not any(value[i + 1 : i + 2] in ("@", "#", "!") for i, c in enumerate(value) if c == "<")


def test_the_inventory_keeps_cluster_values_shown() -> None:
    """A node built from what was read keeps its strings shown, whatever reader built it."""
    node = Node(name="n1", ready=True, unschedulable=False, gpu_hardware=True, os_image=HOSTILE,
                labels={"nvidia.com/gpu.product": "A100\x1b"})
    assert node.os_image == shown(HOSTILE) and node.labels == {"nvidia.com/gpu.product": "A100\\x1b"}
    assert Node.model_validate_json(node.model_dump_json()) == node


def test_text_table_cell_is_one_line_of_its_row() -> None:
    """The terminal's guard: a cell with a line end or an escape sequence stays in its row."""
    lines = table(["NAME", "OS IMAGE"], [["n1", "a\nb\x1b[2J\u202e"], ["n2", "ok"]])
    assert len(lines) == 3 and "a\\nb\\x1b[2J\\u202e" in lines[1]
    assert not any(c in "".join(lines) for c in RAW[1:])


def test_text_renderer_prints_no_hidden_character_whatever_the_source() -> None:
    """A message's title, text, fields and table, built from any string: nothing a terminal acts on;
    the text's own lines are kept."""
    message = Message(title="t\x1b]0;owned\x07", text="line one\nline \u202etwo\r", fields=[Item(label="f", value="\x9b2J")],
                      table=Table(header=["A"], rows=[["x\ny"]]))
    out = text_message(message)
    assert not any(c in out.replace("\n", "") for c in RAW)
    assert "line one\nline \\u202etwo\\r\n" in out and "x\\ny" in out


def test_slack_renderer_escapes_hidden_characters_and_keeps_line_ends() -> None:
    """Slack's guard: the same, ``&`` ``<`` ``>`` escaped; a text's line ends kept, a cell's not."""
    message = Message(title="t\u202e", text="one\ntwo \x1b[31m", fields=[Item(label="f", value="\u2066v")],
                      table=Table(header=["A"], rows=[["x\ny <z>"]]))
    blocks = slack_message(message)[0]["blocks"]
    texts = [b["text"]["text"] for b in blocks if "text" in b] + [f["text"] for b in blocks for f in b.get("fields", [])]
    joined = "\n".join(texts)
    assert not any(c in joined for c in RAW[1:])
    assert "one\ntwo \\x1b[31m" in joined and "x\\ny &lt;z&gt;" in joined and "\\u2066v" in joined


def test_typed_values_and_mentions_read_as_before() -> None:
    """A typed value's broken mention (its word joiner) is not shown as an escape, and the bot's own
    mentions stay mentions in Slack and ``@U1`` in text."""
    message = Message(text=f"{user_ref('U1')} typed {literal('<@U2>')}")
    slack = slack_message(message)[0]["blocks"][0]["text"]["text"]
    assert slack == "<@U1> typed `&lt;\u2060@U2&gt;`"
    assert text_message(message) == "@U1 typed `<\u2060@U2>`\n"


def test_shell_progress_lines_write_no_hidden_character() -> None:
    """The shell's progress lines (a step's detail says what it found: an event's message) are
    guarded as replies are."""
    import datetime as dt
    import io

    from bot.shell.output import ShellObserver
    from runbooks.engine.runs import Run, Step, Target

    now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    run = Run(id="r-1", target=Target(cluster="kubesim", namespace="kube-system", name="p"), image="i:1", container="c",
              node="gpu-node1", requester="U0A", created_at=now, updated_at=now)
    out = io.StringIO()
    ShellObserver(out).on_step(run, Step(name="verify", status="failed", kind="check", at=now,
                                         detail="BackOff: \x1b[2J\x1b]0;owned\x07 \u202eevil\r"))
    assert not any(c in out.getvalue() for c in ("\x1b", "\x07", "\u202e", "\r")), repr(out.getvalue())
    assert out.getvalue().count("\n") == 1


def test_events_and_failure_evidence_are_read_shown() -> None:
    """An event's message, a container's waiting message and its log lines are read shown: no
    mention in Slack, nothing a terminal acts on, whatever renders them."""
    from runbooks.daemonset.events import event_from
    from runbooks.daemonset.evidence import pull_failure, tail

    event = event_from({"reason": "BackOff", "message": "<@U0ADMIN> \x1b[31m\u202e", "involvedObject": {
        "kind": "Pod", "namespace": "kube-system", "name": "p"}, "source": {"host": "gpu-node1\u202e"}})
    assert (event.message, event.host) == (shown("<@U0ADMIN> \x1b[31m\u202e"), shown("gpu-node1\u202e"))
    pod = {"status": {"containerStatuses": [{"name": "c", "state": {"waiting": {
        "reason": "ErrImagePull", "message": "pull <!here> \x1b[2J"}}}]}}
    assert pull_failure(pod) == ("c", "ErrImagePull", shown("pull <!here> \x1b[2J"))
    assert tail("one <@U1>\r\ntwo \x1b[31m\u202e\n") == [shown("one <@U1>"), shown("two \x1b[31m\u202e")]


def test_an_api_servers_refusal_is_shown_inert() -> None:
    """A second attack run (N3): an admission webhook's denial is the API server's message, and any
    words may be in it: ``<@U…>`` or ``<!subteam^…>`` there reached Slack as a mention."""
    from runbooks.cluster.wrapping import status_message

    body = json.dumps({"kind": "Status", "message": "denied: ask <@U0ADMIN> or <!subteam^S0OPS>\x1b[31m"})
    said = status_message(body)
    assert "<@U0ADMIN>" not in said and "<!subteam" not in said and "\x1b" not in said, said
    assert "U0ADMIN" in said

