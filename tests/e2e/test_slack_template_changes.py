"""A template change and a restart from Slack, end to end: signed slash commands, the request
in the thread shows the template diff as Block Kit Slack accepts, a signed click approves it."""

from __future__ import annotations

from slack_sdk.models.blocks import Block

from runbooks.engine.runs import RunState
from tests.e2e.conftest import RunBot
from tests.e2e.runs_support import TARGET, buttons, eventually, posted_ts, roots, texts, thread

S = RunState


def _request_of(bot: RunBot, text: str, count: int) -> tuple[str, str, str]:
    """Send ``text`` as U0ANA; (run id, root ts, the gate message's text) of the new run."""
    assert bot.slack.command(text).status == 200
    found = eventually(lambda: len(roots(bot.fake)) >= count and roots(bot.fake), f"root message {count}")
    assert isinstance(found, list)
    root_ts = posted_ts(found[count - 1])
    gate = eventually(lambda: next((c for c in thread(bot.fake, root_ts) if buttons(c)), None), "the request")
    for block in gate.body["blocks"]:  # type: ignore[union-attr]
        Block.parse(block).validate_json()  # type: ignore[union-attr]
    return bot.runtime.engine.runs(limit=1)[0].id, root_ts, texts(gate)  # type: ignore[arg-type]


def test_an_env_change_then_a_restart_from_slack(run_bot: RunBot) -> None:
    bot = run_bot
    run_id, root_ts, text = _request_of(bot, f"canary {TARGET} node=gpu-node1 env=PASS_DEVICE_SPECS=true "
                                              "toleration=example.com/maintenance:NoSchedule", 1)
    assert "with `env PASS_DEVICE_SPECS=true; toleration example.com/maintenance:NoSchedule added`" in text
    assert "+    - name: PASS_DEVICE_SPECS" in text and "```" in text
    gate_ts, value = bot.slack.gate(root_ts)
    bot.slack.click("approve", value, user="U0CAT", message_ts=gate_ts, thread_ts=root_ts)
    bot.wait_state(run_id, S.AWAITING_PROMOTION)
    promotion_ts, promotion = bot.slack.gate(root_ts, 2)
    bot.slack.click("approve", promotion, user="U0LEAD", message_ts=promotion_ts, thread_ts=root_ts)
    bot.wait_state(run_id, S.DONE)

    restart_id, restart_ts, text = _request_of(bot, f"restart {TARGET} node=gpu-node2", 2)
    assert restart_id != run_id and "asks to restart the plugin on gpu-node2 first" in text
    gate_ts, value = bot.slack.gate(restart_ts)
    bot.slack.click("approve", value, user="U0CAT", message_ts=gate_ts, thread_ts=restart_ts)
    bot.wait_state(restart_id, S.AWAITING_PROMOTION)
