"""Requests are checked before they are read: an unsigned or malformed request never reaches Bolt.

The signature and its timestamp are verified on the raw body first; a bad request gets
401 (or 413 for a body over 1 MiB) with no traceback and no body in the logs, and every
log line of the bot is one line of at most 2 KB, newlines escaped.
"""

from __future__ import annotations

import io
import logging

import pytest

from tests.e2e.harness import Bot
from tests.fakeslack import block_action, post, sign, slash_command

MARKER = "FORGED-BODY-MARKER"


def refused(bot: Bot, body: bytes, status: int, caplog: pytest.LogCaptureFixture, **kwargs: object) -> None:
    caplog.clear()
    with caplog.at_level(logging.DEBUG):
        answer = post(bot.events, body, **kwargs)  # type: ignore[arg-type]
    assert answer.status == status, answer
    logged = "\n".join(r.getMessage() + (r.exc_text or "") for r in caplog.records)
    assert "Traceback" not in logged and MARKER not in logged and "payload=" not in logged
    assert bot.fake.of("response_url") == []


def test_a_non_numeric_timestamp_is_401_not_500(bot: Bot, caplog: pytest.LogCaptureFixture) -> None:
    body = slash_command("help")
    refused(bot, body, 401, caplog, signed=False,
            headers={"X-Slack-Request-Timestamp": "soon", "X-Slack-Signature": "v0=00"})


def test_an_unsigned_malformed_payload_is_401(bot: Bot, caplog: pytest.LogCaptureFixture) -> None:
    refused(bot, b"payload=notjson", 401, caplog, signed=False)


def test_a_bad_signature_is_401_and_its_body_is_never_logged(bot: Bot, caplog: pytest.LogCaptureFixture) -> None:
    body = slash_command("help\n" + MARKER * 500)
    refused(bot, body, 401, caplog, signed=False, headers=sign(b"another body"))


def test_a_body_over_1_mib_is_refused_unread(bot: Bot, caplog: pytest.LogCaptureFixture) -> None:
    body = slash_command("help " + MARKER * 80_000)
    assert len(body) > 1024 * 1024
    refused(bot, body, 413, caplog)


def test_a_signed_request_still_gets_its_answer(bot: Bot) -> None:
    body = slash_command("help", response_url=bot.fake.response_url())
    assert post(bot.events, body).status == 200
    (answer,) = bot.fake.wait_for("response_url")
    assert "/upgrade inventory" in answer.body["blocks"][-1]["text"]["text"]


def test_log_lines_are_one_line_of_at_most_2_kb() -> None:
    from bot.slack.serve import OneLineFormatter

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(OneLineFormatter("%(levelname)s %(name)s: %(message)s"))
    logger = logging.getLogger("upgradebot.test.oneline")
    logger.addHandler(handler)
    try:
        logger.warning("forged\nINFO upgradebot: an approval that never happened %s", "x" * 10_000)
        try:
            raise ValueError("with a traceback\nacross lines")
        except ValueError:
            logger.exception("step failed")
    finally:
        logger.removeHandler(handler)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2 and all(len(line) <= 2048 for line in lines)
    assert lines[0].startswith("WARNING upgradebot.test.oneline: forged\\nINFO") and lines[0].endswith("…")
    assert "Traceback" in lines[1] and "\\n" in lines[1]


def test_people_of_another_workspace_are_refused(bot: Bot) -> None:
    """A command or a click from another organisation (a shared channel) is answered and does
    nothing: only the bot's own workspace counts, unless the policy lists more under slack.teams."""
    body = slash_command("help", response_url=bot.fake.response_url("foreign")).replace(b"T0TEST", b"T0OTHER")
    assert post(bot.events, body).status == 200
    (answer,) = bot.fake.wait_for("response_url")
    assert "own workspace only (yours is T0OTHER)" in answer.body["text"]
    click = block_action(action_id="approve", value="r-00000000|canary|x", user="U0LEAD",
                         response_url=bot.fake.response_url("click")).replace(b"T0TEST", b"T0OTHER")
    assert post(bot.events, click).status == 200
    answers = bot.fake.wait_for("response_url", 2)
    assert "own workspace only" in answers[1].body["text"]
    assert bot.fake.of("chat.postMessage") == [] and bot.fake.of("chat.update") == []  # nothing was done
