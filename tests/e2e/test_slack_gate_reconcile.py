"""Every open gate of a Slack run gets its message, whatever became of the root (finding 4 of
the security review).

A run's root message goes out first, its gate message in the root's thread after it. A bot
killed between storing the run and recording the root's ts, or a root post Slack refused,
left a run without ``origin.ts``; the gate message was dropped ("no root message") and
reconcile skipped such runs, so the request was never shown and could only expire. Reconcile
now posts the root first (recorded with the run's compare-and-set, as the normal path does)
and the gate in its thread; a failed root post is tried again by the next reconcile.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from bot.slack.threads import SlackThreads
from runbooks.daemonset.steps import DaemonSetSteps
from runbooks.engine.approving import Actor
from runbooks.engine.commands import Engine
from runbooks.engine.runs import Run, RunState
from tests.e2e.conftest import RunBot
from tests.e2e.runs_support import (
    CANARY,
    NEW,
    POLICY,
    TARGET,
    buttons,
    eventually,
    posted_ts,
    roots,
    thread,
)
from tests.starving import Starvation

S = RunState
ROOT = Path(__file__).resolve().parents[2]


def gates_in(bot: RunBot, root_ts: str) -> list[str]:
    """The ts of the messages with Approve in the thread of ``root_ts``."""
    return [posted_ts(c) for c in thread(bot.fake, root_ts) if "approve" in buttons(c)]


def restarted(bot: RunBot) -> SlackThreads:
    """The Slack threads of a bot that just started: nothing known but what Redis holds."""
    (threads,) = bot.runtime.observers.of_type(SlackThreads)
    return SlackThreads(web=threads.web, pacer=threads.pacer, set_origin=bot.runtime.engine.set_origin)


def reconciled(bot: RunBot, threads: SlackThreads) -> int:
    queued = threads.reconcile(bot.runtime.engine.runs(active_only=True))
    assert threads.pacer.wait_idle(30)
    return queued


def test_a_bot_killed_before_the_root_was_recorded_posts_root_and_gate_at_restart(run_bot: RunBot) -> None:
    """Finding 4: the run and its gate are in Redis, no root ts and no gate ts (the bot was killed
    before its pacer posted them): the restarted bot's reconcile posts exactly one root and one gate
    in its thread, records both ts with the run, posts nothing more at the next reconcile, and the
    gate's Approve decides the run."""
    bot = run_bot
    stopped = Engine(store=bot.runtime.store, steps=DaemonSetSteps(), policy=POLICY, connect=bot.runtime.connect)
    run = stopped.request_canary(actor=Actor("U0ANA"), target=TARGET, image=NEW, node="gpu-node1",
                                 origin={"surface": "slack", "channel": "C0OPS"}).run
    assert run.gate is not None and run.gate.is_open and "ts" not in run.origin and roots(bot.fake) == []

    threads = restarted(bot)
    assert reconciled(bot, threads) == 1
    (root,) = roots(bot.fake)
    root_ts = posted_ts(root)
    (gate_ts,) = gates_in(bot, root_ts)
    stored = bot.runtime.engine.get(run.id)
    assert stored.origin["ts"] == root_ts and gate_ts in stored.origin.values()

    assert reconciled(bot, threads) == 0 and reconciled(bot, restarted(bot)) == 0
    assert len(roots(bot.fake)) == 1 and len(gates_in(bot, root_ts)) == 1

    (_, value) = bot.slack.gate(root_ts)
    bot.slack.click("approve", value, user="U0LEAD", message_ts=gate_ts, thread_ts=root_ts)
    eventually(lambda: bot.state(run.id) is not S.AWAITING_APPROVAL, "the gate's Approve decided the run")
    assert [e["actor"] for e in bot.runtime.engine.audit(run.id) if e["kind"] == "decision"] == ["U0LEAD"]


def test_a_failed_root_post_is_retried_with_its_gate_by_the_next_reconcile(run_bot: RunBot) -> None:
    """Finding 4: Slack refuses the run's root message (the bot is not in the channel yet), so its
    gate message is dropped; a reconcile while Slack still refuses posts nothing; once the bot may
    post, the next reconcile (what every sweep runs) posts the root, then the gate in its thread,
    each once, and their ts are kept with the run."""
    bot = run_bot
    bot.fake.not_in_channels.add("C0OPS")
    bot.slack.command(CANARY, user="U0ANA")
    run = eventually(lambda: next(iter(bot.runtime.engine.runs()), None), "the run")
    assert isinstance(run, Run)
    bot.wait_state(run.id, S.AWAITING_APPROVAL)
    eventually(bot.idle, "everything sent")
    assert roots(bot.fake) and all(c.answer.get("error") == "not_in_channel" for c in bot.fake.of("chat.postMessage"))
    assert "ts" not in bot.runtime.engine.get(run.id).origin
    (threads,) = bot.runtime.observers.of_type(SlackThreads)

    refused = len(bot.fake.of("chat.postMessage"))
    assert reconciled(bot, threads) == 1
    assert [c.answer.get("ok") for c in bot.fake.of("chat.postMessage")[refused:]] == [False], "the root alone, refused"

    bot.fake.not_in_channels.discard("C0OPS")  # the bot was invited
    assert reconciled(bot, threads) == 1
    (root,) = [c for c in roots(bot.fake) if c.answer.get("ok")]
    root_ts = posted_ts(root)
    (gate_ts,) = gates_in(bot, root_ts)
    stored = bot.runtime.engine.get(run.id)
    assert stored.origin["ts"] == root_ts and gate_ts in stored.origin.values()
    assert reconciled(bot, threads) == 0
    assert len([c for c in bot.fake.of("chat.postMessage") if c.answer.get("ok")]) == 2


def holding(redis_url: str, run_id: str, effect: str) -> subprocess.Popen[str]:
    """A process that claimed ``effect`` of the run as a ``serve`` worker does and holds it
    (:mod:`tests.claim_holder`), ready to be killed or stopped in what it would post."""
    proc = subprocess.Popen([sys.executable, "-m", "tests.claim_holder", redis_url, run_id, effect], cwd=ROOT,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "claimed"
    return proc


def unrooted(bot: RunBot) -> Run:
    """A Slack run with its gate open and nothing posted yet (no root ts, no gate ts)."""
    stopped = Engine(store=bot.runtime.store, steps=DaemonSetSteps(), policy=POLICY, connect=bot.runtime.connect)
    run = stopped.request_canary(actor=Actor("U0ANA"), target=TARGET, image=NEW, node="gpu-node1",
                                 origin={"surface": "slack", "channel": "C0OPS"}).run
    assert run.gate is not None and run.gate.is_open and "ts" not in run.origin
    return run


def test_a_root_claimed_by_a_killed_worker_is_posted_with_its_gate_at_once(run_bot: RunBot, redis_url: str) -> None:
    """Finding 10: a worker claimed the run's root message and was SIGKILLed (``serve`` killed)
    before it recorded Slack's answer. Its claim held the root, so the gate message with it
    (it goes in the root's thread), for the claim's 10 minutes. The claim records who holds it
    (pid, start time, boot and pid namespace): the reconcile of the bot that runs next sees the
    holder is dead and takes the claim over at once: one root, the gate in its thread, both
    recorded with the run."""
    bot = run_bot
    run = unrooted(bot)
    worker = holding(redis_url, run.id, "ts")
    worker.kill()
    worker.wait()  # dead and reaped: its pid is gone

    (threads,) = bot.runtime.observers.of_type(SlackThreads)  # serve's, with serve's claims
    assert reconciled(bot, threads) == 1
    (root,) = roots(bot.fake)
    root_ts = posted_ts(root)
    (gate_ts,) = gates_in(bot, root_ts)
    stored = bot.runtime.engine.get(run.id)
    assert stored.origin["ts"] == root_ts and gate_ts in stored.origin.values()
    assert reconciled(bot, threads) == 0 and len(bot.fake.of("chat.postMessage")) == 2


def test_a_root_claimed_by_a_stopped_worker_is_left_to_it(run_bot: RunBot, redis_url: str,
                                                          starvation: Starvation) -> None:
    """Finding 10, the other side: the claim's holder is stopped (SIGSTOP), not dead, maybe in
    the middle of its Slack call; its claim is respected (no second root, no gate without its
    root) until it runs again or its 10 minutes are over."""
    bot = run_bot
    run = unrooted(bot)
    worker = holding(redis_url, run.id, "ts")
    try:
        starvation.stop(worker.pid)
        (threads,) = bot.runtime.observers.of_type(SlackThreads)
        assert reconciled(bot, threads) == 1  # the gate queued, then dropped: it has no root yet
        assert reconciled(bot, threads) == 1
        assert bot.fake.of("chat.postMessage") == []
        assert "ts" not in bot.runtime.engine.get(run.id).origin
    finally:
        starvation.resume(worker.pid)
        worker.kill()
        worker.wait()
