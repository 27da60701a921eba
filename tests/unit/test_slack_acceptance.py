"""What Slack accepts, as the fake Slack judges it for every message the tests send: Block Kit
checked with ``slack_sdk.models.blocks`` and Slack's limits. A message it would refuse is
refused, and fails the test that sent it; a 400-node verify still fits."""

from __future__ import annotations

import pytest

from bot.slack.blocks import render_reply
from handlers.verify import Verified, verification_reply
from runbooks.engine.steps import Check, CheckStatus, StepResult
from tests.fakeslack import FakeSlack, message_problems


def test_blocks_slack_would_refuse_are_named() -> None:
    assert message_problems({"text": "hi", "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": "ok"}}]}) == []
    long_section = {"type": "section", "text": {"type": "mrkdwn", "text": "x" * 3001}}
    assert "block 0 (section)" in message_problems({"blocks": [long_section]})[0]
    assert message_problems({"blocks": [{"type": "divider"}] * 51}) == ["51 blocks (at most 50)"]
    assert message_problems({"blocks": [{"type": "no-such-block"}]})[0].startswith("block 0: not a block")
    header = {"type": "header", "text": {"type": "plain_text", "text": "h" * 151}}
    assert message_problems({"blocks": [header]})


def test_the_fake_refuses_such_a_message_and_the_test_that_sent_it_fails() -> None:
    from slack_sdk import WebClient
    from slack_sdk.errors import SlackApiError

    with pytest.raises(AssertionError, match="Slack would have refused 1 message"), FakeSlack() as fake:
        client = WebClient(token=fake.token, base_url=fake.api_url)
        with pytest.raises(SlackApiError, match="invalid_blocks"):
            client.chat_postMessage(channel="C0OPS", text="t", blocks=[{"type": "divider"}] * 51)


def test_a_verify_of_four_hundred_nodes_fits_one_slack_message() -> None:
    checks = [Check(name=name, status=CheckStatus.FAIL if i % 7 == 0 else CheckStatus.PASS, scope=f"gpu-node{i}",
                    detail=f"gpu-node{i}: " + "a long explanation of what was seen " * 5)
              for i in range(1, 401) for name in ("pods-ready", "plugin-registered")]
    reply = verification_reply(Verified(target="kube-system/nvidia-device-plugin-daemonset", scope="all nodes",
                                        result=StepResult(ok=False, reason="r" * 500, checks=checks)))
    rendered = render_reply(reply, prefix="/upgrade")
    for payload in (rendered.main, *rendered.thread):
        assert message_problems(payload) == [], message_problems(payload)
