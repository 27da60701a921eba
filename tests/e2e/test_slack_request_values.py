"""Finding 6 of the security review, end to end: a signed slash command whose ``env=`` value is
full of mrkdwn (bold, italics, strike, backticks, a mention, ``&``) is shown to the approvers as
one escaped line of inline code, in the request and in the run's root message; a value with a
bidi override never becomes a run."""

from __future__ import annotations

from slack_sdk.models.blocks import Block

from handlers.decoding import escape
from tests.e2e.conftest import RunBot
from tests.e2e.runs_support import TARGET, buttons, eventually, posted_ts, roots, texts, thread

VALUE = "*Change:*_none_~really~`approved`<@U0LEAD>&<!subteam^S0ALL>"
"""Typed in Slack as is: Slack sends ``<``, ``>`` and ``&`` escaped, so the bot reads this text."""


def _inline_code_spans(line: str) -> list[str]:
    parts = line.split("`")
    assert len(parts) % 2 == 1, f"an unbalanced backtick: {line}"
    return parts[1::2]


def test_a_mrkdwn_laden_env_value_reads_as_one_escaped_line(run_bot: RunBot) -> None:
    """finding 6: the request message (and the root message) show the typed env value once, on one
    line, inside inline code with its own backticks replaced, ``&`` and ``<`` escaped and no
    mention; no line of the request starts with a fake ``*Change:*``."""
    bot = run_bot
    answer = bot.slack.command(escape(f"canary {TARGET} node=gpu-node1 env=MODE={VALUE}"))
    assert answer.status == 200
    found = eventually(lambda: roots(bot.fake) or None, "the root message")
    assert isinstance(found, list)
    root = found[0]
    gate = eventually(lambda: next((c for c in thread(bot.fake, posted_ts(root)) if buttons(c)), None), "the request")
    for call in (gate, root):
        for block in call.body["blocks"]:  # type: ignore[union-attr]
            Block.parse(block).validate_json()  # type: ignore[union-attr]
        shown = texts(call)  # type: ignore[arg-type]
        assert "<@U0LEAD>" not in shown and "<!subteam^S0ALL>" not in shown, shown
        assert not any(line.lstrip().startswith("*Change:*") for line in shown.splitlines()), shown
        lines = [line for line in shown.splitlines() if "MODE=" in line and "- name" not in line]
        assert lines, shown
        for line in lines:
            spans = [s for s in _inline_code_spans(line) if "MODE=" in s]
            assert len(spans) == 1, line
            assert "*Change:*_none_~really~" in spans[0] and "&amp;" in spans[0] and "&lt;" in spans[0], spans[0]


def test_a_bidi_override_from_slack_is_refused_in_one_line(run_bot: RunBot) -> None:
    """finding 6: U+202E in a word (Slack's text is split on whitespace only) is refused naming
    the argument; no run is requested."""
    bot = run_bot
    answer = bot.slack.command(f"canary {TARGET} node=gpu-node1 env=MODE=\u202eenon")
    assert answer.status == 200
    reply = eventually(lambda: next((c for c in bot.fake.of("response_url") if "env=" in texts(c)), None),
                       "the refusal")
    shown = texts(reply)  # type: ignore[arg-type]
    assert "env= holds U+202E" in shown and "\u202e" not in shown
    assert len({line for line in shown.splitlines() if "U+202E" in line}) == 1
    assert bot.runtime.engine.runs(limit=5) == [] and roots(bot.fake) == []


def test_a_priority_class_the_server_refuses_is_refused_before_any_approver_is_asked(run_bot: RunBot) -> None:
    """finding 9: ``priority=does-not-exist`` from Slack: the requester gets the API server's own
    refusal (from the request's dry run) in one line; no run, no root message, no request posted."""
    bot = run_bot
    assert bot.slack.command(f"canary {TARGET} node=gpu-node1 priority=does-not-exist").status == 200
    reply = eventually(lambda: next((c for c in bot.fake.of("response_url") if "PriorityClass" in texts(c)), None),
                       "the refusal")
    shown = texts(reply)  # type: ignore[arg-type]
    lines = {line for line in shown.splitlines() if "PriorityClass" in line}
    assert len(lines) == 1, shown
    (line,) = lines
    assert "the API server refuses this change of" in line and \
        "is forbidden: no PriorityClass with name does-not-exist was found" in line, line
    assert bot.runtime.engine.runs(limit=5) == [] and roots(bot.fake) == []
