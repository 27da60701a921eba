"""A click decides only the run of the message it was made on (finding 11 of the security review).

Two runs wait at their canary requests, each gate message in its own run's thread. A signed
click carrying run A's gate on run B's gate message used to decide A and rewrite B's message
with A's decision: B's buttons were gone for good. Each gate message's ts is kept with its
run, so the bot knows which run a message belongs to; a click whose value names another run's
gate is refused with one ephemeral line and no message is rewritten.
"""

from __future__ import annotations

from runbooks.engine.runs import Run, RunState
from tests.e2e.conftest import RunBot
from tests.e2e.runs_support import (
    CANARY,
    buttons,
    eventually,
    posted_ts,
    roots,
    updates,
)

DRA = "canary dra-example-driver/dra-example-driver-kubeletplugin " \
      "image=registry.k8s.io/dra-example-driver/dra-example-driver:v0.2.0 node=gpu-node1"
S = RunState


def waiting(bot: RunBot, text: str, count: int) -> tuple[str, str]:
    """``text`` requested by U0ANA: the ``count``-th run waiting at its canary request; (run id, root ts)."""
    bot.slack.command(text, user="U0ANA")
    found = eventually(lambda: len(roots(bot.fake)) >= count and roots(bot.fake), f"root message {count}")
    assert isinstance(found, list)
    root_ts = posted_ts(found[count - 1])
    run = eventually(lambda: next((r for r in bot.runtime.engine.runs() if r.origin.get("ts") == root_ts), None),
                     f"run {count}")
    assert isinstance(run, Run)
    bot.wait_state(run.id, S.AWAITING_APPROVAL)
    return run.id, root_ts


def test_a_click_of_run_a_on_run_bs_gate_message_is_refused_and_b_keeps_its_buttons(run_bot: RunBot) -> None:
    """Finding 11: Approve carrying run A's gate, clicked on run B's gate message, is refused with one
    ephemeral line; neither run is decided, B's message is not rewritten (no chat.update on it), and
    B's own buttons still decide B afterwards (the message then shows B's decision)."""
    bot = run_bot
    run_a, root_a = waiting(bot, CANARY, 1)
    run_b, root_b = waiting(bot, DRA, 2)
    gate_a_ts, value_a = bot.slack.gate(root_a)
    gate_b_ts, value_b = bot.slack.gate(root_b)
    assert value_a.startswith(run_a) and value_b.startswith(run_b)
    eventually(bot.idle, "everything sent")

    answers = len(bot.fake.of("response_url"))
    assert bot.slack.click("approve", value_a, user="U0LEAD", message_ts=gate_b_ts, thread_ts=root_b).status == 200
    (said,) = bot.fake.wait_for("response_url", answers + 1)[answers:]
    assert said.body["response_type"] == "ephemeral" and "\n" not in said.body["text"].strip()
    assert run_a in said.body["text"] and "nothing was decided" in said.body["text"]
    eventually(bot.idle, "everything sent")
    assert bot.state(run_a) is S.AWAITING_APPROVAL and bot.state(run_b) is S.AWAITING_APPROVAL
    assert updates(bot.fake, gate_b_ts) == [] and updates(bot.fake, gate_a_ts) == []
    assert bot.runtime.engine.audit(run_a)[-1]["kind"] != "decision"

    bot.slack.click("approve", value_b, user="U0LEAD", message_ts=gate_b_ts, thread_ts=root_b)
    rewritten = eventually(lambda: updates(bot.fake, gate_b_ts), "B's gate message rewritten with B's decision")
    assert isinstance(rewritten, list) and not buttons(rewritten[0])
    assert "Approved by <@U0LEAD>" in str(rewritten[0].body) and run_b in str(rewritten[0].body)
    assert [e["actor"] for e in bot.runtime.engine.audit(run_b) if e["kind"] == "decision"] == ["U0LEAD"]
    assert bot.state(run_a) is S.AWAITING_APPROVAL and updates(bot.fake, gate_a_ts) == []
    assert "approve" in buttons(next(c for c in bot.fake.of("chat.postMessage") if posted_ts(c) == gate_a_ts))
