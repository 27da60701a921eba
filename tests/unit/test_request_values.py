"""Finding 6 of the security review: what people type cannot deceive the approver.

Every validation matches the whole value (a trailing newline passed ``re.match(…$)``), a
command's words holding a control, line-separator or bidi character are refused where they are
parsed with one line naming the argument, and every typed value an approver reads is shown on
one line, inert (inline code: no mrkdwn formatting, no mention, no closing backtick)."""

from __future__ import annotations

import datetime as dt

import pytest
from pydantic import ValidationError

from bot.slack.blocks import message_blocks
from handlers.access import StaticDirectory
from handlers.arguments import UsageError, split_words
from handlers.replies import literal
from handlers.routing import Caller, Router, default_registry
from handlers.run_views import gate_message, root_message
from handlers.runs import parse_canary
from handlers.verbs import chat_verbs
from runbooks import validation
from runbooks.engine.runs import Gate, GateKind, Run, RunState, Target
from runbooks.policy import Policy
from runbooks.templates import Edits, parse_edits, parse_toleration

TARGET = "kube-system/nvidia-device-plugin-daemonset"
BASE = [TARGET, "node=gpu-node1"]


@pytest.mark.parametrize("word", [
    "env=FOO\n=x",                      # an environment variable's name
    "priority=high-priority\n",         # a PriorityClass name
    "toleration=nvidia.com/gpu\n:NoSchedule",  # a toleration's key
    "toleration=nvidia.com/gpu=yes\n",  # a toleration's value
    "limits=cpu=200m\n",                # a quantity
    "requests=memory\n=1Gi",            # a resource name
    "image=nvcr.io/nvidia/k8s-device-plugin:v0.17.0\n",  # an image
])
def test_a_trailing_newline_is_refused_in_every_kind_of_value(word: str) -> None:
    """finding 6: a value ending in a newline (or with one before its last '=') is refused at parse time."""
    with pytest.raises(UsageError):
        parse_canary([*BASE, word])


@pytest.mark.parametrize(("check", "value"), [
    (lambda v: Edits(env={v: "x"}), "FOO\n"),
    (lambda v: Edits(priority=v), "high\n"),
    (lambda v: Edits(limits={"cpu": v}), "200m\n"),
    (lambda v: Edits(limits={v: "1"}), "cpu\n"),
    (lambda v: parse_toleration(v), "nvidia.com/gpu\n"),
    (lambda v: parse_toleration(v), "nvidia.com/gpu=yes\n"),
    (lambda v: parse_edits({}, {"env": [v]}), "FOO\n=x"),
    (validation.image_reference, "nvcr.io/nvidia/k8s-device-plugin:v0.17.0\n\u200b"),
])
def test_every_validator_matches_the_whole_value(check: object, value: str) -> None:
    """finding 6: the validators below the parser refuse a trailing newline themselves (fullmatch);
    the name validators strip what they are given and return the clean name."""
    with pytest.raises((ValueError, ValidationError)):
        check(value)  # type: ignore[operator]
    assert validation.node_name("gpu-node1\n") == "gpu-node1" and validation.container_name("ctr\n") == "ctr"


@pytest.mark.parametrize("section", [
    {"approvers": {"users": ["U0LEAD\n"]}},
    {"approvers": {"users": ["U0LEAD"], "usergroups": ["S0LEADS\n"]}},
    {"approvers": {"users": ["U0LEAD"]}, "channels": {"C0OPS\n": {}}},
    {"approvers": {"users": ["U0LEAD"]}, "oncall": {"channel": "C0ONCALL", "mention": "S0ONCALL\n"}},
])
def test_policy_slack_ids_with_a_trailing_newline_are_refused(section: dict[str, object]) -> None:
    """finding 6: a policy's Slack IDs are matched whole."""
    with pytest.raises(ValidationError, match="Slack"):
        Policy.model_validate(section)


@pytest.mark.parametrize(("char", "name"), [
    ("\n", "U+000A"), ("\r", "U+000D"), ("\t", "U+0009"), ("\x00", "U+0000"), ("\x1b", "U+001B"),
    ("\x7f", "U+007F"), ("\x85", "U+0085"), ("\u2028", "U+2028"), ("\u2029", "U+2029"),
    ("\u202e", "U+202E"), ("\u202a", "U+202A"), ("\u2066", "U+2066"), ("\u2069", "U+2069"),
])
def test_control_characters_are_refused_naming_the_argument(char: str, name: str) -> None:
    """finding 6: a control, line-separator or bidi character in any word is refused in one line
    naming the argument and the character, before any value is looked at."""
    for word, argument in ((f"env=FOO=a{char}b", "env="), (f"priority=high{char}", "priority="),
                           (f"kube-system/x{char}", "kube-system/x")):
        with pytest.raises(UsageError) as caught:
            parse_canary([word, *BASE[1:]] if argument == "kube-system/x" else [*BASE, word])
        assert argument in caught.value.reason and name in caught.value.reason
        assert "\n" not in caught.value.reason and char not in caught.value.reason


def test_the_word_parser_itself_refuses_control_characters() -> None:
    """finding 6: split_words, which every verb's words go through, refuses them (positional too)."""
    with pytest.raises(UsageError, match="reason= holds U\\+202E"):
        split_words(["r-00000000", "reason=ok\u202edesrever"], allowed=("reason",), usage="u", max_positional=1)
    with pytest.raises(UsageError, match="U\\+0007"):
        split_words(["bell\x07"], allowed=(), usage="u", max_positional=1)
    assert split_words(["x", "reason=ça va — très bien"], allowed=("reason",), usage="u",
                       max_positional=1)[1] == {"reason": "ça va — très bien"}  # other Unicode is fine


def test_a_slack_command_with_a_bidi_override_is_refused_in_one_line() -> None:
    """finding 6: from Slack, a word with U+202E (not whitespace, so not split away) is refused."""
    policy = Policy.model_validate({"approvers": {"users": ["U0LEAD"]}})
    router = Router(default_registry(*chat_verbs_for(policy)), policy, StaticDirectory())
    routed = router.route(f"canary {TARGET} node=gpu-node1 env=MODE=\u202eevil", Caller(user="U0ANA", channel="C0OPS"))
    assert routed.outcome == "usage" and "env= holds U+202E" in routed.reply.text
    assert len(routed.reply.text.splitlines()) == 1


def chat_verbs_for(policy: Policy) -> list[object]:
    from handlers.routing import Deps

    def connect(_: str | None) -> object:
        raise AssertionError("a refused command reads no cluster")

    return chat_verbs(Deps(policy=policy, connect=connect))  # type: ignore[arg-type]


# ------------------------------------------------------------------ what the approver reads
NOW = dt.datetime(2026, 12, 3, 13, 0, tzinfo=dt.UTC)
DECEIVING = "x *Change:* none _really_ ~no~ `code` <@U0LEAD> <!subteam^S0ALL> & <https://evil|ok>"


def _run(edits: Edits, image: str = "nvcr.io/nvidia/k8s-device-plugin:v0.17.0") -> Run:
    gate = Gate(kind=GateKind.CANARY, requested_by="U0ANA", opened_at=NOW, expires_at=NOW + dt.timedelta(minutes=30))
    return Run(id="r-abcdefgh", target=Target(cluster="", namespace="kube-system", name="nvidia-device-plugin-daemonset"),
               image=image, node="gpu-node1", container="ctr", requester="U0ANA", state=RunState.AWAITING_APPROVAL,
               created_at=NOW, updated_at=NOW, gate=gate, edits=edits)


def test_literal_is_one_inert_line() -> None:
    """finding 6: a typed value in inline code, backticks replaced, no control character, no mention."""
    shown = literal("a`b\nc\u202e<@U1>")
    assert shown.startswith("`") and shown.endswith("`") and shown.count("`") == 2
    assert "\n" not in shown and "\u202e" not in shown and "<@U1>" not in shown
    assert "\\n" in shown and "\\u202e" in shown


def test_the_request_shows_a_typed_value_as_one_escaped_line() -> None:
    """finding 6: the gate and the root message show an env value full of mrkdwn as one inline-code
    span: no bold, italics, strike, code break-out, mention or link of its own."""
    run = _run(Edits(env={"MODE": DECEIVING}))
    for message in (gate_message(run, run.gate), root_message(run)):  # type: ignore[arg-type]
        blocks = message_blocks(message)
        texts = [b["text"]["text"] for b in blocks if "text" in b] + [
            f["text"] for b in blocks for f in b.get("fields", [])]
        shown = "\n".join(texts)
        lines = [line for line in shown.splitlines() if "MODE" in line]
        assert len(lines) == 1, shown
        (line,) = lines
        start = line.index("`env MODE=")
        end = line.index("`", start + 1)
        span = line[start:end + 1]
        assert "<@U0LEAD>" not in shown and "<!subteam^S0ALL>" not in shown and "<https://evil|ok>" not in shown
        assert "*Change:* none _really_ ~no~" in span and "&amp;" in span and "&lt;" in span
        assert span.count("`") == 2  # the value's own backticks do not close the span


def test_a_typed_pause_reason_and_rollback_reason_read_as_inline_code() -> None:
    """finding 6: the reason someone typed with ``pause`` (root message) or ``rollback`` (its
    request) is shown as one inert inline-code span, not as mrkdwn or a mention."""
    from runbooks.engine.runs import Pause

    typed = "*Approved:* by <@U0LEAD>"
    run = _run(Edits()).model_copy(update={"pause": Pause(by="U0ANA", at=NOW, reason=typed)})
    root = "\n".join(b["text"]["text"] for b in message_blocks(root_message(run)) if "text" in b)
    gate = Gate(kind=GateKind.ROLLBACK, requested_by="U0ANA", opened_at=NOW,
                expires_at=NOW + dt.timedelta(minutes=30), reason=typed)
    request = "\n".join(b["text"]["text"] for b in message_blocks(gate_message(run, gate)) if "text" in b)
    for shown in (root, request):
        assert "`*Approved:* by &lt;\u2060@U0LEAD&gt;`" in shown and "<@U0LEAD>" not in shown, shown


def test_a_backtick_in_a_table_cell_cannot_close_its_code_block() -> None:
    """finding 6: tables (audit, runs) are code blocks; a typed ``` in a cell stays inside."""
    from bot.slack.blocks import render_reply
    from handlers.replies import Reply, Table

    reply = Reply(table=Table(header=["WHAT"], rows=[["env X=```*Change:* none```"]]))
    (block,) = [b for b in render_reply(reply, prefix="/upgrade").main["blocks"] if "```" in b["text"]["text"]]
    assert block["text"]["text"].count("```") == 2, block
