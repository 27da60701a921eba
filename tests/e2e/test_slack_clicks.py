"""Approve/Reject clicks end to end: payload= bodies, the decision callback, chat.update."""

from __future__ import annotations

from tests.e2e.harness import Bot
from tests.fakeslack import Call


def buttons(call: Call) -> dict[str, str]:
    """action_id -> value of the buttons of a recorded message."""
    return {e["action_id"]: e["value"] for b in call.body["blocks"] if b["type"] == "actions" for e in b["elements"]}


def asked(bot: Bot) -> tuple[str, str]:
    """U0ANA asks; the gate's value and the posted message's ts."""
    bot.command("ask canary")
    (call,) = bot.fake.wait_for("chat.postMessage")
    bot.settle()
    values = buttons(call)
    assert set(values) == {"approve", "reject"} and values["approve"] == values["reject"]
    return values["approve"], "1700000001.000100"


def test_self_approval_refused_then_approved_once(bot: Bot) -> None:
    """The requester's own Approve is refused; another approver's counts; a third click is told it is decided."""
    gate, ts = asked(bot)
    assert bot.click("approve", gate, user="U0ANA", message_ts=ts).status == 200
    (own,) = bot.fake.wait_for("response_url")
    bot.settle()
    assert "another approver must approve" in own.body["text"] and own.body["response_type"] == "ephemeral"
    assert bot.fake.of("chat.update") == [] and bot.book.gates[gate].decided_by is None

    bot.click("approve", gate, user="U0CAT", message_ts=ts)  # an approver through the S0LEADS group
    (update,) = bot.fake.wait_for("chat.update")
    bot.settle()
    assert (update.body["channel"], update.body["ts"]) == ("C0OPS", ts)
    assert not [b for b in update.body["blocks"] if b["type"] == "actions"], "the buttons give way to the verdict"
    assert "Approved by <@U0CAT>" in update.body["blocks"][1]["text"]["text"]
    thread_posts = [c for c in bot.fake.of("chat.postMessage") if c.body.get("thread_ts") == ts]
    assert len(thread_posts) == 1 and bot.book.gates[gate].approved is True

    bot.click("reject", gate, user="U0LEAD", message_ts=ts)
    answers = bot.fake.wait_for("response_url", 2)
    bot.settle()
    assert "already approved by <@U0CAT>" in answers[-1].body["text"]
    assert len(bot.fake.of("chat.update")) == 1


def test_unauthorized_click_changes_nothing(bot: Bot) -> None:
    """Someone who is no approver gets an ephemeral explanation; the gate stays open."""
    gate, ts = asked(bot)
    bot.click("reject", gate, user="U0BEN", message_ts=ts)
    (answer,) = bot.fake.wait_for("response_url")
    bot.settle()
    assert "not an approver" in answer.body["text"] and answer.body["replace_original"] is False
    assert bot.fake.of("chat.update") == [] and bot.book.gates[gate].decided_by is None
    metrics = bot.service.metrics.exposition()[0].decode()
    assert 'upgradebot_approvals_total{action="reject",outcome="refused"} 1.0' in metrics


def test_double_click_decides_once(bot: Bot) -> None:
    """Two quick Approve clicks by the same approver: one decision, one message update."""
    gate, ts = asked(bot)
    bot.click("approve", gate, user="U0LEAD", message_ts=ts)
    bot.click("approve", gate, user="U0LEAD", message_ts=ts)
    bot.fake.wait_for("chat.update")
    bot.fake.wait_for("response_url")
    bot.settle()
    assert len(bot.fake.of("chat.update")) == 1 and bot.book.gates[gate].decided_by == "U0LEAD"
