"""The HTTP front of ``serve`` never answers with a traceback (finding 12 of the security review).

A click's ``payload`` is JSON: its nesting is bounded before it is parsed (a body nested
50,000 deep made ``json.loads`` raise ``RecursionError``, which is no ``ValueError``, and the
request ended in a 500). Whatever else goes wrong behind the front is a 500 with a one-line
body, and the log says what failed in one bounded line, without the traceback.
"""

from __future__ import annotations

import json
import logging
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest

from bot.slack.http import HttpServer, Readiness, WebApp
from bot.slack.metrics import Metrics
from tests.e2e.harness import Bot
from tests.fakeslack import SIGNING_SECRET, block_action, post, slash_command

DEEP = 50_000


def one_line_without_traceback(body: bytes) -> str:
    text = body.decode()
    assert text.count("\n") <= 1 and "Traceback" not in text and "File \"" not in text, text[:500]
    return text


def logged(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(r.getMessage() + (r.exc_text or "") for r in caplog.records)


@pytest.mark.parametrize("nested", [
    "[" * DEEP + "]" * DEEP,
    '{"a":' * DEEP + "1" + "}" * DEEP,
    "[" * DEEP,  # never closed
    '{"type": "block_actions", "actions": [' + "[" * DEEP + "]" * DEEP + "]}",
])
def test_a_click_payload_nested_50000_deep_is_400_on_one_line(bot: Bot, nested: str,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    """Finding 12: a signed click whose payload nests 50,000 deep is refused 400 with a one-line body,
    no traceback in the answer or the log, and nothing reaches Slack."""
    body = urllib.parse.urlencode({"payload": nested}).encode()
    with caplog.at_level(logging.DEBUG):
        answer = post(bot.events, body)
    assert answer.status == 400, answer
    one_line_without_traceback(answer.body)
    assert "Traceback" not in logged(caplog) and all(r.exc_info is None for r in caplog.records)
    bot.settle()
    assert bot.fake.calls == []


def test_a_click_as_deep_as_slack_sends_still_counts(bot: Bot) -> None:
    """Finding 12: the bound leaves room for what Slack sends: a click whose message holds rich text
    (Slack's deepest blocks) and whose state holds selected options is still decided."""
    body = block_action(action_id="approve", value="gate-x", user="U0LEAD",
                        response_url=bot.fake.response_url("deep"))
    payload: dict[str, Any] = json.loads(urllib.parse.parse_qs(body.decode())["payload"][0])
    rich = {"type": "rich_text", "elements": [{"type": "rich_text_list", "elements": [
        {"type": "rich_text_section", "elements": [{"type": "text", "text": "x", "style": {"bold": True}}]}]}]}
    payload["message"]["blocks"] = [rich]
    payload["state"] = {"values": {"b": {"a": {"type": "multi_static_select", "selected_options": [
        {"text": {"type": "plain_text", "text": "x"}, "value": "x"}]}}}}
    answer = post(bot.events, urllib.parse.urlencode({"payload": json.dumps(payload)}).encode())
    assert answer.status == 200
    (said,) = bot.fake.wait_for("response_url")
    assert "no request gate-x" in said.body["text"]


class Broken(Exception):
    """Raised by the app behind the front, with a message a user must not see."""


@pytest.fixture
def front(caplog: pytest.LogCaptureFixture) -> Iterator[str]:
    """A front whose Slack app (Bolt's place) raises; the URL of its Slack endpoint."""
    def slack(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        raise Broken("secret internals at /srv/upgradebot/bot/x.py line 12")

    app = WebApp(slack=slack, readiness=Readiness({}), metrics=Metrics(), signing_secret=SIGNING_SECRET)
    server = HttpServer(app, port=0, threads=2).start()
    try:
        yield server.url + "/slack/events"
    finally:
        server.stop(timeout=5)


def test_an_unexpected_exception_behind_the_front_is_a_500_without_traceback(
        front: str, caplog: pytest.LogCaptureFixture) -> None:
    """Finding 12: whatever raises behind the front, the answer is a 500 whose body is one line
    without a traceback or the exception's text; the log has one bounded line naming the
    exception's type, without the traceback."""
    with caplog.at_level(logging.DEBUG):
        answer = post(front, slash_command("help"))
    assert answer.status == 500
    text = one_line_without_traceback(answer.body)
    assert "secret internals" not in text and "Broken" not in text
    records = [r for r in caplog.records if "Broken" in r.getMessage()]
    assert len(records) == 1 and records[0].exc_info is None and len(records[0].getMessage()) <= 300
    assert "Traceback" not in logged(caplog)
