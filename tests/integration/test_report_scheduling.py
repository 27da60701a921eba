"""The report schedule: derived from the runs in Redis, one leader among bot processes, each report once.

Two report schedulers here are two bot processes as far as Redis can tell: each has its own
connections, its own schedule, its own owner id. Slack is the fake Slack server, which
records every call.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from slack_sdk import WebClient

from bot.slack.metrics import Metrics
from bot.slack.threads import SlackOutlet
from bot.slack.web import SlackWeb
from kubesim import KubeSim
from runbooks.engine.approving import Actor
from runbooks.engine.clocks import SystemClock
from runbooks.engine.runs import RunState
from tests.fakeslack import BOT_TOKEN, FakeSlack
from tests.report_support import Posts, World, monitoring_run, policy, wait_until, world


@pytest.fixture(scope="module")
def sim() -> Iterator[KubeSim]:
    """A quiet gpu-small kubesim (the reports here only read it)."""
    with KubeSim(scenario="gpu-small", k8s_version="1.31") as served:
        yield served


@pytest.fixture
def slack() -> Iterator[FakeSlack]:
    with FakeSlack() as fake:
        yield fake



def bot_process(redis_url: str, sim: KubeSim, slack: FakeSlack, owner: str, *after: str) -> World:
    """One bot process's report machinery, on the wall clock, posting to the fake Slack."""
    pol = policy(*after)
    web = SlackWeb(WebClient(token=BOT_TOKEN, base_url=slack.api_url), Metrics())
    return world(redis_url, sim, pol, SlackOutlet(web, pol), owner=owner, clock=SystemClock(), threaded=True,
                 tick=0.1, lease_ttl=3.0, retry_after=1.0)


def reports_posted(slack: FakeSlack, after: str) -> list[tuple[str, str | None]]:
    """(channel, thread_ts) of each report message (not its thread items) posted for ``after``."""
    return [(c.body["channel"], c.body.get("thread_ts")) for c in slack.of("chat.postMessage")
            if str(c.body.get("text", "")).startswith(f"Stability report ({after})")]


def test_two_bot_processes_post_each_report_once_and_the_survivor_takes_over(
    sim: KubeSim, redis_url: str, slack: FakeSlack
) -> None:
    """Both run schedulers against one Redis: one leads; it stops after the first report; the
    other takes the lease and posts the second; each report once, in the thread and to on-call."""
    a = bot_process(redis_url, sim, slack, "bot-a", "2s", "4s")
    b = bot_process(redis_url, sim, slack, "bot-b", "2s", "4s")
    run = monitoring_run(a.store, sim)
    a.scheduler.start()
    b.scheduler.start()
    try:
        wait_until(lambda: len(reports_posted(slack, "2s")) == 2)
        leader, other = (a, b) if a.scheduler.leading else (b, a)
        assert not other.scheduler.leading
        leader.scheduler.stop()
        wait_until(lambda: a.engine.get(run.id).state is RunState.DONE)
        assert other.scheduler.leading
        time.sleep(0.5)  # anything fired twice would have posted by now
    finally:
        a.stop()
        b.stop()
    for after in ("2s", "4s"):
        assert sorted(reports_posted(slack, after)) == [("C0ONCALL", None), ("C0OPS", "1700000000.000100")]
    record = a.store.report_record(run.id, "4s")
    assert record["verdict"] == "stable" and record["thread"] and record["oncall"]
    assert a.store.lock_holder(run.target.key) is None, "the target is free after the last report"
    assert a.engine.audit(run.id)[-1]["name"] == "monitoring -> done"


def test_a_report_due_while_no_bot_ran_is_posted_once_when_one_starts(
    sim: KubeSim, redis_url: str, slack: FakeSlack
) -> None:
    """The report is scheduled, every bot stops before it is due; a bot started later posts it, once."""
    first = bot_process(redis_url, sim, slack, "bot-a", "2s")
    run = monitoring_run(first.store, sim)
    first.scheduler.start()
    wait_until(lambda: [j["id"] for j in first.scheduler.jobs()] == [f"report:{run.id}:2s"])
    first.stop()
    time.sleep(2.5)
    assert reports_posted(slack, "2s") == [] and first.store.get(run.id).state is RunState.MONITORING  # type: ignore[union-attr]
    later = bot_process(redis_url, sim, slack, "bot-c", "2s")
    later.scheduler.start()
    try:
        wait_until(lambda: later.engine.get(run.id).state is RunState.DONE)
        time.sleep(0.5)
    finally:
        later.stop()
    assert len(reports_posted(slack, "2s")) == 2


def test_the_schedule_follows_an_injected_clock_and_posting_is_idempotent(sim: KubeSim, redis_url: str) -> None:
    """On the cluster's clock (kubesim moved 24 h, then 48 h): each report fires once; a second
    firing of a posted report posts nothing; after the last the run is done and has no jobs."""
    posts = Posts()
    w = world(redis_url, sim, policy(), posts, owner="bot-a")
    try:
        run = monitoring_run(w.store, sim)
        assert w.scheduler.run_due() == []
        assert sorted(j["id"] for j in w.scheduler.jobs()) == [f"report:{run.id}:24h", f"report:{run.id}:48h"]
        sim.advance("24h")
        assert w.scheduler.run_due() == [(run.id, "24h", "posted")]
        assert w.scheduler.fire(run.id, "24h") == "already"
        assert w.engine.get(run.id).state is RunState.MONITORING
        sim.advance("24h")
        assert w.scheduler.run_due() == [(run.id, "48h", "posted")]
        assert w.engine.get(run.id).state is RunState.DONE and w.scheduler.jobs() == []
    finally:
        w.stop()
    assert posts.titles() == [
        ("thread", f"Stability report (24h) of {run.id}: STABLE"), ("oncall", f"Stability report (24h) of {run.id}: STABLE"),
        ("thread", f"Stability report (48h) of {run.id}: STABLE"), ("oncall", f"Stability report (48h) of {run.id}: STABLE")]


def test_closing_a_run_early_ends_its_monitoring_and_cancels_its_reports(sim: KubeSim, redis_url: str) -> None:
    """`close <run>` during monitoring: done at once; the next round drops its jobs and its collector,
    keeps its tally (for `report`), and no report is posted."""
    posts = Posts()
    w = world(redis_url, sim, policy(), posts, owner="bot-a")
    try:
        run = monitoring_run(w.store, sim)
        w.scheduler.run_due()
        assert w.collectors.runs == [run.id] and len(w.scheduler.jobs()) == 2
        assert w.engine.close(run.id, actor=Actor("U0ALICE")).run.state is RunState.DONE
        sim.advance("48h")
        assert w.scheduler.run_due() == [] and w.scheduler.jobs() == [] and w.collectors.runs == []
        tally, _ = w.store.read_tally(run.id)
        assert tally is not None and w.store.load_collection(run.id).seen == {}
    finally:
        w.stop()
    assert posts.items == []
