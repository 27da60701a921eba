"""A decided gate's message is rewritten once (issue 40, item 1: the decision's update).

A click on Approve is decided by the engine; the clicked message then loses its buttons
for who decided and when. Two paths rewrite it: the click's own answer (the decision, at
once) and the run thread's closing of the gate (for gates closed by the shell or by expiry,
in whichever process closes it, and in every replica's sweep). Both are one effect,
claimed in Redis before the Slack call: one ``chat.update`` per decision (before issue 40,
every approval rewrote the message twice).
"""

from __future__ import annotations

from runbooks.engine.runs import RunState
from tests.e2e.conftest import RunBot
from tests.e2e.runs_support import CANARY, eventually, posted_ts, roots, texts, updates
from tests.fakeslack import slash_command


def test_an_approved_gate_message_is_rewritten_once(run_bot: RunBot) -> None:
    """Issue 40: U0ANA's canary request, approved by U0LEAD: the request's message gets one
    ``chat.update``, with "Approved by <@U0LEAD>" and no buttons, recorded with the run."""
    bot = run_bot
    assert bot.slack.command("", body=slash_command(CANARY, user="U0ANA")).status == 200
    (root,) = eventually(lambda: roots(bot.fake), "the root message")  # type: ignore[misc]
    root_ts = posted_ts(root)
    gate_ts, value = bot.slack.gate(root_ts)
    bot.slack.click("approve", value, user="U0LEAD", message_ts=gate_ts, thread_ts=root_ts)
    (run,) = bot.runtime.engine.runs()
    bot.wait_state(run.id, RunState.AWAITING_PROMOTION)
    eventually(bot.idle, "everything sent")
    (rewritten,) = updates(bot.fake, gate_ts)
    assert "Approved by <@U0LEAD>" in texts(rewritten) and not any(
        b.get("type") == "actions" for b in rewritten.body.get("blocks", []))
    assert f"gate|{value}|closed" in bot.runtime.engine.get(run.id).origin
