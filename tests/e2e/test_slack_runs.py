"""Runs driven from Slack end to end: signed commands and clicks to the bot ``serve`` builds
(the engine on a real Redis, the DaemonSet steps on kubesim), answers on the fake Slack."""

from __future__ import annotations

import datetime as dt

from bot.slack.threads import SlackThreads
from runbooks.engine.approving import Actor
from runbooks.engine.runs import Run, RunState, Step
from tests.e2e.conftest import RunBot
from tests.e2e.runs_support import (
    CANARY,
    buttons,
    eventually,
    posted_ts,
    roots,
    texts,
    thread,
    updates,
)
from tests.fakeslack import slash_command

S = RunState


def requested(bot: RunBot) -> tuple[str, str]:
    """U0ANA's canary, delivered twice (a Slack retry): one run, one root message; (run id, root ts)."""
    body = slash_command(CANARY, user="U0ANA", response_url=bot.fake.response_url("canary"))
    assert bot.slack.command("", body=body).status == 200
    assert bot.slack.command("", body=body, headers={"X-Slack-Retry-Num": "1"}).status == 200
    (root,) = eventually(lambda: roots(bot.fake), "the root message")  # type: ignore[misc]
    runs = bot.runtime.engine.runs()
    assert len(runs) == 1
    # the root goes out at the run's first event, which may come just before it waits for approval
    bot.wait_state(runs[0].id, S.AWAITING_APPROVAL)
    return runs[0].id, posted_ts(root)


def canary_verified(bot: RunBot, approver: str = "U0LEAD") -> tuple[str, str]:
    """:func:`requested`, its canary approved by ``approver``, run and verified: the run waits for
    its promotion request; (run id, root ts)."""
    run_id, root_ts = requested(bot)
    gate_ts, value = bot.slack.gate(root_ts)
    bot.slack.click("approve", value, user=approver, message_ts=gate_ts, thread_ts=root_ts)
    bot.wait_state(run_id, S.AWAITING_PROMOTION)
    return run_id, root_ts


def test_canary_to_done_in_one_thread(run_bot: RunBot) -> None:
    """canary (retried once) -> own Approve refused -> double-clicked Approve -> canary -> promotion approved -> done."""
    bot = run_bot
    run_id, root_ts = requested(bot)
    gate_ts, value = bot.slack.gate(root_ts)
    bot.slack.click("approve", value, user="U0ANA", message_ts=gate_ts, thread_ts=root_ts)
    own = eventually(lambda: next((c for c in bot.fake.of("response_url") if c.path.endswith("/a-U0ANA")), None),
                     "the answer to U0ANA's own Approve")  # the canary's own answer went to another response_url
    assert "another approver must approve" in own.body["text"] and own.body["response_type"] == "ephemeral"
    assert bot.state(run_id) is S.AWAITING_APPROVAL and updates(bot.fake, gate_ts) == []

    bot.slack.click("approve", value, user="U0CAT", message_ts=gate_ts, thread_ts=root_ts)  # via S0LEADS
    bot.slack.click("approve", value, user="U0CAT", message_ts=gate_ts, thread_ts=root_ts)  # a double click
    bot.wait_state(run_id, S.AWAITING_PROMOTION)
    promotion_ts, promotion = bot.slack.gate(root_ts, 2)
    bot.slack.click("approve", promotion, user="U0LEAD", message_ts=promotion_ts, thread_ts=root_ts)
    bot.wait_state(run_id, S.DONE)
    eventually(bot.idle, "everything sent")

    audit = bot.runtime.engine.audit(run_id)
    assert [e["actor"] for e in audit if e["kind"] == "decision"] == ["U0CAT", "U0LEAD"]
    assert len(roots(bot.fake)) == 1, "one root message"
    root_updates = updates(bot.fake, root_ts)
    assert root_updates and "done" in texts(root_updates[-1]) and "<@U0ANA>" in texts(root_updates[-1])
    items = thread(bot.fake, root_ts)
    assert len(items) == 7, "the two requests and one message per step: pre-checks, canary, verify, promotion, verify"
    assert all({"details"} == set(buttons(c)) or {"approve", "reject"} == set(buttons(c)) for c in items)
    assert "Approved by <@U0CAT>" in texts(updates(bot.fake, gate_ts)[0])
    assert any("Approved by <@U0LEAD>" in texts(c) for c in updates(bot.fake, promotion_ts))
    for call in bot.fake.of("chat.postMessage") + bot.fake.of("chat.update"):
        blocks = call.body.get("blocks", [])
        assert len(blocks) <= 50 and all(len(b.get("text", {}).get("text", "")) <= 3000 for b in blocks)
    said = [c.body.get("text", "") for c in bot.fake.of("response_url")]
    assert any("already approved by U0CAT" in s for s in said), said
    metrics = bot.service.metrics.exposition()[0].decode()
    for step in ("canary", "verify_canary", "promote", "verify_all"):
        assert f'upgradebot_step_duration_seconds_count{{result="ok",step="{step}"}} 1.0' in metrics
    assert 'upgradebot_approvals_total{action="approve",outcome="accepted"} 2.0' in metrics

    for text in (f"status {run_id}", f"audit {run_id}", f"verify {run_id} window=1s"):
        bot.slack.command(text, user="U0EVE")  # reading needs no requester rights
    verified = eventually(lambda: [c for c in bot.fake.of("chat.postMessage") if "Verify of" in texts(c)], "verify")
    answers = bot.fake.wait_for("response_url", len(said) + 2)[len(said):]
    assert "all checks passed" in texts(verified[0])  # type: ignore[index]
    assert any("State" in texts(a) and "done" in texts(a) for a in answers)
    assert any(f"Audit of {run_id}" in texts(a) and len(a.body["blocks"]) <= 50 for a in answers)


def test_rollback_request_approved(run_bot: RunBot) -> None:
    """After the canary, `rollback <run>` posts a rollback request; an approver's click rolls back."""
    bot = run_bot
    run_id, root_ts = canary_verified(bot)
    bot.slack.command(CANARY, user="U0BEN")
    refused = eventually(lambda: [c for c in bot.fake.of("response_url") if "already has an active run" in
                                  c.body.get("text", "")], "the second canary refused")
    assert isinstance(refused, list) and refused[0].body["response_type"] == "ephemeral"
    assert len(bot.runtime.engine.runs()) == 1 and len(roots(bot.fake)) == 1, "nothing started"
    gauge = bot.service.metrics.exposition()[0].decode()
    assert 'upgradebot_runs{state="awaiting_promotion"} 1.0' in gauge

    bot.slack.command(f"rollback {run_id} reason=mine", user="U0BEN")  # a requester, not this run's nor an approver
    eventually(lambda: any(f"may not roll back run {run_id}" in c.body.get("text", "")
                           for c in bot.fake.of("response_url")), "another requester's rollback refused")
    assert bot.runtime.engine.get(run_id).gate.kind.value == "promotion"  # type: ignore[union-attr]
    bot.slack.command(f"rollback {run_id} reason=testing", user="U0ANA")  # the run's requester
    rollback_ts, rollback = bot.slack.gate(root_ts, 3)
    assert "Rollback request" in texts(next(c for c in thread(bot.fake, root_ts) if posted_ts(c) == rollback_ts))
    bot.slack.click("approve", rollback, user="U0EVE", message_ts=rollback_ts, thread_ts=root_ts)
    eventually(lambda: any("not an approver" in c.body.get("text", "") for c in bot.fake.of("response_url")),
               "an unauthorized click explained")
    assert bot.state(run_id) is S.AWAITING_PROMOTION and bot.runtime.engine.get(run_id).gate.is_open  # type: ignore[union-attr]
    bot.slack.click("approve", rollback, user="U0CAT", message_ts=rollback_ts, thread_ts=root_ts)
    bot.wait_state(run_id, S.ROLLED_BACK)
    eventually(bot.idle, "everything sent")
    assert "rolled back" in texts(updates(bot.fake, root_ts)[-1])
    assert bot.runtime.store.lock_holder(bot.runtime.engine.get(run_id).target.key) is None


def test_gate_messages_survive_a_restart(run_bot: RunBot) -> None:
    """A gate message's ts is kept in Redis with the run: a bot that did not post it (a restart, another
    replica) still turns its buttons into the decision when the gate closes; and a gate whose message was
    never posted (the bot stopped first) gets its buttons when a bot starts and reconciles."""
    bot = run_bot
    run_id, root_ts = canary_verified(bot)
    promotion_ts, _ = bot.slack.gate(root_ts, 2)
    eventually(bot.idle, "everything sent")
    (threads,) = bot.runtime.observers.of_type(SlackThreads)

    threads._gates.clear()  # what a restart forgets: nothing of it may be needed
    bot.runtime.engine.reject(run_id, actor=Actor("U0LEAD"))  # decided from the shell, not by a click
    eventually(lambda: updates(bot.fake, promotion_ts), "the old promotion message rewritten")
    assert not any(buttons(c) for c in updates(bot.fake, promotion_ts))
    assert "Rejected by <@U0LEAD>" in texts(updates(bot.fake, promotion_ts)[-1])

    # a gate whose message never went out (the bot stopped between storing the gate and posting it):
    # the gate is in Redis, its message's ts is not; a bot that reconciles posts it, with its buttons
    bot.wait_state(run_id, S.ROLLED_BACK)
    eventually(bot.idle, "everything sent")
    bot.slack.command(CANARY, user="U0ANA")
    second = eventually(lambda: next((r for r in bot.runtime.engine.runs(active_only=True)
                                      if r.state is S.AWAITING_APPROVAL and r.origin.get("ts")), None), "a second run")
    assert isinstance(second, Run)
    eventually(bot.idle, "everything sent")
    stored = bot.runtime.engine.get(second.id)
    bot.runtime.store.save(stored.model_copy(update={"origin": {k: v for k, v in stored.origin.items()
                                                                 if not k.startswith("gate|")}}))
    before = len([c for c in thread(bot.fake, second.origin["ts"]) if buttons(c)])
    restarted = SlackThreads(web=threads.web, pacer=threads.pacer, set_origin=bot.runtime.engine.set_origin)
    restarted.reconcile(bot.runtime.engine.runs(active_only=True))
    eventually(lambda: len([c for c in thread(bot.fake, second.origin["ts"]) if buttons(c)]) == before + 1,
               "the missing gate message posted with its buttons")
    assert any(k.startswith("gate|") for k in bot.runtime.engine.get(second.id).origin)


def test_a_step_message_another_process_posted_is_edited_whole(run_bot: RunBot) -> None:
    """A step's message ts is kept with the run: a bot that did not post it (a restart, another
    replica) reads the step's entries from the audit once and edits that message, never a new one."""
    bot = run_bot
    run_id, root_ts = canary_verified(bot)
    eventually(bot.idle, "everything sent")
    (threads,) = bot.runtime.observers.of_type(SlackThreads)
    run = bot.runtime.engine.get(run_id)
    verify_ts = run.origin["step|verify_canary"]
    posted = len(thread(bot.fake, root_ts))
    restarted = SlackThreads(web=threads.web, pacer=threads.pacer, set_origin=bot.runtime.engine.set_origin,
                             audit=bot.runtime.engine.audit)
    late = Step(name="verify_canary.smoke-test", kind="check", status="failed", detail="the smoke pod never ran",
                at=dt.datetime.now(dt.UTC))
    restarted.on_step(run, late)
    edited = eventually(lambda: [c for c in updates(bot.fake, verify_ts) if "Smoke test" in texts(c)], "the edit")
    assert isinstance(edited, list)
    text = texts(edited[-1])
    assert "No new BackOff events" in text and "the smoke pod never ran" in text, "the earlier rows, from the audit"
    assert text.index("Smoke test") < text.index("No new BackOff events"), "the failure first"
    assert len(thread(bot.fake, root_ts)) == posted, "no new message"
