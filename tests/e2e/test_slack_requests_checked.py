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
    try:
        refused(bot, body, 413, caplog)
    except (BrokenPipeError, ConnectionResetError):  # the server answered 413 and closed before the rest was sent
        assert bot.fake.of("response_url") == []


def test_a_signed_request_still_gets_its_answer(bot: Bot) -> None:
    body = slash_command("help", response_url=bot.fake.response_url())
    answer = post(bot.events, body)
    assert answer.status == 200
    assert "/upgrade inventory" in answer.message["blocks"][-1]["text"]["text"]  # help: in the ack itself


def test_log_lines_are_one_line_of_at_most_2_kb() -> None:
    from bot.logs import OneLineFormatter

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(OneLineFormatter("%(levelname)s %(name)s: %(message)s"))
    logger = logging.getLogger("upgradebot.test.oneline")
    logger.addHandler(handler)
    try:
        logger.warning("forged\nINFO upgradebot: an approval that never happened %s", "x" * 10_000)
        logger.warning("command from %s", "中" * 2000)  # 3 bytes a character: cut by bytes, not characters
        try:
            raise ValueError("with a traceback\nacross lines")
        except ValueError:
            logger.exception("step failed")
    finally:
        logger.removeHandler(handler)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 3 and all(len(line.encode()) <= 2048 for line in lines)
    assert lines[0].startswith("WARNING upgradebot.test.oneline: forged\\nINFO") and lines[0].endswith("…")
    assert lines[1].startswith("WARNING upgradebot.test.oneline: command from 中") and lines[1].endswith("…")
    assert "Traceback" in lines[2] and "\\n" in lines[2]


def test_people_of_another_workspace_are_refused(bot: Bot) -> None:
    """A command or a click from another organisation (a shared channel) is answered and does
    nothing: only the bot's own workspace counts, unless the policy lists more under slack.teams."""
    body = slash_command("help", response_url=bot.fake.response_url("foreign")).replace(b"T0TEST", b"T0OTHER")
    answer = post(bot.events, body)  # help is answered in the ack: so is its refusal
    assert "own workspace only (yours is T0OTHER)" in answer.message["text"]
    assert "/upgrade inventory" not in answer.body.decode()
    body = slash_command("runs", response_url=bot.fake.response_url("foreign")).replace(b"T0TEST", b"T0OTHER")
    assert post(bot.events, body).status == 200
    (refusal,) = bot.fake.wait_for("response_url")
    assert "own workspace only (yours is T0OTHER)" in refusal.body["text"]
    click = block_action(action_id="approve", value="r-00000000|canary|x", user="U0LEAD",
                         response_url=bot.fake.response_url("click")).replace(b"T0TEST", b"T0OTHER")
    assert post(bot.events, click).status == 200
    answers = bot.fake.wait_for("response_url", 2)
    assert "own workspace only" in answers[1].body["text"]
    assert bot.fake.of("chat.postMessage") == [] and bot.fake.of("chat.update") == []  # nothing was done


@pytest.mark.parametrize(("body", "headers", "status"), [
    (b"\xff\xfe", {"X-Slack-Signature": "v0=00"}, 401),  # not UTF-8, any signature
    (b"command=%2Fupgrade&text=help", {"X-Slack-Signature": "v0=\u00e9"}, 401),  # a non-ASCII signature
    (b"payload=notjson", None, 400),
    (b'payload="x"', None, 400),
    (b"payload=1", None, 400),
    (b'payload={"type":"block_actions","actions":[[1]]}', None, 400),
    (b'payload={"type":"block_actions","actions":[{"action_id":"approve"}]}&payload=2', None, 400),
    (b"\xff\xfe", None, 400),  # signed, not UTF-8
])
def test_malformed_requests_are_4xx_never_500(bot: Bot, caplog: pytest.LogCaptureFixture, body: bytes,
                                              headers: dict[str, str] | None, status: int) -> None:
    """Found by the fuzz test: bodies Bolt cannot parse, and headers the signature check choked on."""
    if headers is not None:
        import time

        headers = {"X-Slack-Request-Timestamp": str(int(time.time())), **headers}
    refused(bot, body, status, caplog, signed=headers is None, headers=headers)


def test_a_json_body_is_400(bot: Bot, caplog: pytest.LogCaptureFixture) -> None:
    refused(bot, b'{"command": "/upgrade", "text": "help"}', 400, caplog, content_type="application/json")


def test_a_command_whose_text_says_payload_is_answered(bot: Bot) -> None:
    """Bolt takes any form containing the word "payload" for a click: the command is re-encoded for it."""
    body = slash_command("help payload", response_url=bot.fake.response_url())
    answer = post(bot.events, body)
    assert answer.status == 200
    assert "unknown verb 'payload'" in answer.message["text"]  # help's own answer: the command got through


def test_head_answers_carry_no_body(bot: Bot) -> None:
    import http.client
    import urllib.parse

    parts = urllib.parse.urlsplit(bot.events)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=10)
    try:
        conn.request("HEAD", "/healthz")
        first = conn.getresponse()
        assert first.status == 200 and first.read() == b""
        conn.request("GET", "/healthz")  # the same connection: nothing left over from the HEAD
        second = conn.getresponse()
        assert second.status == 200 and second.read() == b"ok\n"
    finally:
        conn.close()


def test_an_enterprise_grid_organisation_the_policy_lists_is_let_in() -> None:
    """``slack.teams`` may name an Enterprise Grid organisation (E…): its workspaces count; others do not."""
    from bot.slack.app import Listeners
    from bot.slack.identity import BotIdentity

    said: list[str] = []
    listeners = Listeners(None, "/upgrade", teams=["E0GRID"], identity=BotIdentity("xoxb-test"))  # type: ignore[arg-type]
    listeners._say = lambda respond, body, text: said.append(text)  # type: ignore[method-assign]
    grid_command = {"team_id": "T0GRIDA", "enterprise_id": "E0GRID", "user_id": "U0ANA"}
    grid_click = {"team": {"id": "T0GRIDB"}, "enterprise": {"id": "E0GRID"}, "user": {"id": "U0ANA", "team_id": "T0GRIDB"}}
    outside = {"team_id": "T0GRIDA", "enterprise_id": "E0OTHER", "user_id": "U0ANA"}
    assert not listeners._foreign(grid_command, None)  # type: ignore[arg-type]
    assert not listeners._foreign(grid_click, None)  # type: ignore[arg-type]
    assert listeners._foreign(outside, None) and "own workspace only" in said[0]  # type: ignore[arg-type]
