"""Slash commands end to end: signed requests to /slack/events, answers on the fake Slack."""

from __future__ import annotations

import threading
import time

import pytest

from bot.slack import app as app_module
from tests.e2e.harness import Bot
from tests.fakeslack import Call, post, sign, slash_command

MAX_BLOCKS, MAX_SECTION = 50, 3000


def texts(call: Call) -> str:
    """Every text of a recorded message: its blocks' sections, fields and context."""
    out = [call.body.get("text", "")]
    for block in call.body.get("blocks", []):
        out.append(block.get("text", {}).get("text", ""))
        out += [f["text"] for f in block.get("fields", [])]
        out += [e.get("text", "") for e in block.get("elements", []) if isinstance(e.get("text"), str)]
    return "\n".join(out)


def assert_within_limits(call: Call) -> None:
    blocks = call.body.get("blocks", [])
    assert len(blocks) <= MAX_BLOCKS
    assert all(len(b.get("text", {}).get("text", "")) <= MAX_SECTION for b in blocks)


def test_help(bot: Bot) -> None:
    """help answers every verb's usage line in the ack itself, only to the caller, and posts or
    sends nothing (issue 39: queued, it waited behind the store's writes and the workers)."""
    ack = bot.command("help")
    assert ack.status == 200
    bot.settle()
    answer = Call("ack", "", ack.message, {}, 0.0)
    assert answer.body["response_type"] == "ephemeral"
    for line in ("`/upgrade help [verb]`", "`/upgrade inventory [cluster=&lt;context&gt;]`", "`/upgrade ask &lt;what&gt;`"):
        assert line in texts(answer)
    assert [c.method for c in bot.fake.calls if c.method != "auth.test"] == []


def test_a_bare_command_is_help_answered_in_the_ack(bot: Bot) -> None:
    """``/upgrade`` with no words is help, answered in the ack as help is."""
    ack = bot.command("")
    bot.settle()
    assert "`/upgrade help [verb]`" in texts(Call("ack", "", ack.message, {}, 0.0))
    assert bot.fake.of("response_url") == []


def test_unknown_verb(bot: Bot) -> None:
    """An unknown verb gets the reason and the help list, ephemeral; nothing starts."""
    bot.command("upgrayedd everything")
    (answer,) = bot.fake.wait_for("response_url")
    bot.settle()
    assert answer.body["response_type"] == "ephemeral"
    assert "unknown verb 'upgrayedd'" in texts(answer)
    assert "`/upgrade inventory [cluster=&lt;context&gt;]`" in texts(answer)
    assert bot.fake.of("chat.postMessage") == [] and not bot.started.is_set()


def test_bad_argument(bot: Bot) -> None:
    """A bad argument gets the reason and that verb's usage line; no inventory is taken."""
    bot.command("inventory colour=blue")
    (answer,) = bot.fake.wait_for("response_url")
    bot.settle()
    text = texts(answer)
    assert "unknown argument colour=" in text and "`/upgrade inventory [cluster=&lt;context&gt;]`" in text
    assert bot.fake.of("chat.postMessage") == []


def test_inventory_message_and_thread(bot: Bot) -> None:
    """inventory posts a summary in the channel (default cluster) and its details in the thread,
    in one message there (Slack allows about one message a second in a channel)."""
    assert bot.command("inventory").status == 200
    bot.fake.wait_for("chat.postMessage", 2)
    bot.settle()
    root, *thread = bot.fake.of("chat.postMessage")
    assert root.body["channel"] == "C0OPS" and "thread_ts" not in root.body
    assert "Inventory of kubesim" in texts(root) and "<@U0ANA> ran `/upgrade inventory`" in texts(root)
    root_ts = "1700000001.000100"
    assert len(thread) == 1 and all(c.body["thread_ts"] == root_ts for c in thread)
    details = "\n".join(texts(c) for c in thread)
    assert "Nodes (" in details and "kube-system/nvidia-device-plugin-daemonset" in details
    for call in [root, *thread]:
        assert_within_limits(call)
    assert bot.fake.of("response_url") == []


def test_command_in_a_channel_not_allowed(bot: Bot) -> None:
    """A command outside the policy's channels is refused with where to go instead."""
    bot.command("inventory", channel="C0RANDOM")
    (answer,) = bot.fake.wait_for("response_url")
    bot.settle()
    assert "not accepted in <#C0RANDOM>" in texts(answer) and "<#C0OPS>" in texts(answer)
    assert bot.fake.of("chat.postMessage") == []


def test_mutating_verb_limited_to_requesters(bot: Bot) -> None:
    """ask is mutating: a requester's usergroup member may, anyone else is refused."""
    bot.command("ask canary", user="U0BEN")
    bot.fake.wait_for("chat.postMessage")
    bot.command("ask canary", user="U0EVE")
    (answer,) = bot.fake.wait_for("response_url")
    bot.settle()
    assert "may not request upgrades" in texts(answer)
    assert len(bot.fake.of("chat.postMessage")) == 1
    assert [c.body["usergroup"] for c in bot.fake.of("usergroups.users.list")] == ["S0PLATFORM"]  # cached


def test_bot_not_in_channel_says_so(bot: Bot) -> None:
    """When Slack answers not_in_channel, the caller is told to invite the bot."""
    bot.command("ask canary", channel="C0LAB")
    (answer,) = bot.fake.wait_for("response_url")
    assert "invite me first" in texts(answer)


def test_forged_signature_and_stale_timestamp(bot: Bot) -> None:
    """A wrong signature and a correctly signed five-minute-old request get 401; nothing is posted."""
    body = slash_command("inventory", response_url=bot.fake.response_url("forged"))
    forged = post(bot.events, body, secret="not-the-signing-secret")
    stale = post(bot.events, body, signed=False, headers=sign(body, timestamp=int(time.time()) - 301))
    unsigned = post(bot.events, body, signed=False)
    assert (forged.status, stale.status, unsigned.status) == (401, 401, 401)
    time.sleep(0.3)
    bot.settle()
    assert [c.method for c in bot.fake.calls if c.method != "auth.test"] == []


def test_retried_delivery_starts_once(bot: Bot) -> None:
    """The same command delivered again with X-Slack-Retry-Num is acknowledged and dropped."""
    body = slash_command("ask canary", response_url=bot.fake.response_url("retry"))
    first = post(bot.events, body)
    again = post(bot.events, body, headers={"X-Slack-Retry-Num": "1", "X-Slack-Retry-Reason": "http_timeout"})
    assert (first.status, again.status) == (200, 200)
    bot.fake.wait_for("chat.postMessage")
    bot.settle()
    assert len(bot.fake.of("chat.postMessage")) == 1 and len(bot.book.gates) == 1
    metrics = bot.service.metrics.exposition()[0].decode()
    assert 'upgradebot_slack_duplicates_total{kind="command"} 1.0' in metrics


def test_acknowledged_before_the_work_is_done(bot: Bot) -> None:
    """The HTTP answer arrives well within 3 s while the command's work is still running."""
    answer = bot.command("hold")
    assert answer.status == 200 and answer.seconds < 1.0
    assert bot.started.wait(5) and bot.fake.of("chat.postMessage") == []
    bot.release.set()
    bot.fake.wait_for("chat.postMessage")
    bot.settle()
    assert "held and released" in texts(bot.fake.of("chat.postMessage")[0])


def test_rate_limited_post_is_retried(bot: Bot) -> None:
    """A 429 from chat.postMessage is retried after Retry-After; the message is posted once."""
    bot.fake.rate_limit_once("chat.postMessage", retry_after=0)
    bot.command("ask canary")
    bot.fake.wait_for("chat.postMessage", 2)
    bot.settle()
    assert len(bot.fake.of("chat.postMessage")) == 2  # the 429 and the retry
    metrics = bot.service.metrics.exposition()[0].decode()
    assert 'upgradebot_slack_api_errors_total{error="ratelimited",method="chat.postMessage"} 1.0' in metrics


def test_a_full_bot_says_busy_from_a_few_threads(bot: Bot, monkeypatch: pytest.MonkeyPatch) -> None:
    """With every worker and backlog slot held, each further command is acked and told the bot is
    busy; those answers come from the bounded notice pool, not a thread each."""
    started: list[threading.Thread] = []

    class Counted(threading.Thread):
        def start(self) -> None:
            started.append(self)
            super().start()

    monkeypatch.setattr(app_module.threading, "Thread", Counted)
    slots = bot.service.workers.size + bot.service.workers.backlog
    for _ in range(slots):
        assert bot.command("hold").status == 200
    assert bot.started.wait(5)
    answers = [bot.command("hold", user=f"U0B{i:03}") for i in range(60)]
    assert all(a.status == 200 and a.seconds < 1.0 for a in answers)
    told = bot.fake.wait_for("response_url", 60)
    assert all("busy" in str(c.body.get("text", "")) for c in told)
    per_answer = [t for t in started if getattr(getattr(t, "_target", None), "__name__", "") == "_say"]
    assert per_answer == [], f"{len(per_answer)} threads started, one per answer"
    assert len([t for t in threading.enumerate() if t.name.startswith("upgradebot-notice")]) <= 2
    bot.release.set()
    bot.settle()
