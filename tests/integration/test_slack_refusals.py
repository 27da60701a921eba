"""Issue 63, deliverable 1: a refusal costs the process that says it little.

Found profiling read-only ``serve`` on main: each refusal was answered on the thread that took the
command, with a fresh TCP connection to its ``response_url`` (16-22 % of the samples), and logged
at INFO under the logging lock (18-20 %). Here a worker's refusals are posted by the notice pool,
over connections its threads keep alive, and logged at DEBUG; the metric still counts each one."""

from __future__ import annotations

import logging
import threading
import time
import urllib.parse
from typing import Any

import pytest

from bot.jobs import Jobs
from bot.slack.serve import Service, build_front, build_service
from bot.storage.redis_store import RedisRunStore
from bot.workers import Quotas
from handlers import messages as msg
from kubesim import KubeSim
from tests.e2e.harness import POLICY, settings_for
from tests.fakeslack import FakeSlack, slash_command

REFUSALS = 4


def body_of(text: str, *, user: str, response_url: str) -> dict[str, Any]:
    """A slash command's fields as the HTTP layer hands them on."""
    return dict(urllib.parse.parse_qsl(slash_command(text, user=user, response_url=response_url).decode()))


def counted(service: Service, verb: str, outcome: str) -> float:
    value: float = service.metrics.commands.labels(verb=verb, outcome=outcome, surface="slack")._value.get()
    return value


def test_a_workers_quota_refusals_go_from_the_notice_pool_over_kept_connections(
        cluster: KubeSim, caplog: pytest.LogCaptureFixture) -> None:
    """U0FULL already runs the one long command the quota allows: each inventory it queues is refused
    (in a worker, :meth:`Listeners.run_job`) without waiting for the post: with the notice pool held,
    nothing is posted yet when ``run_job`` returns; released, the four refusals go out over at most
    one connection per notice thread, none of them logged at INFO, each one counted."""
    with FakeSlack() as fake:
        service = build_service(settings_for(fake, cluster), POLICY,
                                quotas=Quotas(per_user=1, per_channel=10, reads=4))
        listeners, notices = service.listeners, service.notices
        assert listeners is not None and notices is not None
        held, holding = threading.Event(), threading.Semaphore(0)

        def hold() -> None:
            holding.release()
            held.wait(30)

        try:
            for _ in range(notices.size):
                assert notices.submit(hold)
            for _ in range(notices.size):
                assert holding.acquire(timeout=10)
            assert listeners.deps.quotas.take("U0FULL", "C0OPS", read=True) is None
            caplog.set_level(logging.DEBUG, logger="upgradebot")
            for n in range(REFUSALS):
                payload = {"body": body_of("inventory", user="U0FULL", response_url=fake.response_url(f"r{n}")),
                           "retry": None, "queued_at": time.time()}
                listeners.run_job("commands", "long", payload)
            assert fake.of("response_url") == [], "posted by the thread that took the command"
            connections = fake.connections
            held.set()
            said = fake.wait_for("response_url", REFUSALS)
        finally:
            held.set()
            service.stop_workers(timeout=5)
    assert all("long command(s) running" in call.body["text"] for call in said), [c.body["text"] for c in said]
    assert fake.connections - connections <= notices.size, "a connection of its own for each refusal"
    loud = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO and "refused" in r.getMessage()]
    assert loud == [], loud
    assert [r.levelno for r in caplog.records if "refused" in r.getMessage()] == [logging.DEBUG] * REFUSALS
    assert counted(service, "inventory", "limited") == REFUSALS


def test_the_fronts_lane_full_refusal_is_said_in_the_ack_and_logged_at_debug(
        cluster: KubeSim, redis_url: str, caplog: pytest.LogCaptureFixture) -> None:
    """A lane that takes nothing more (here: a backlog of 0, no answers measured yet): the command is
    told it is busy in its ack, counted, and logged at DEBUG only (a burst of them is one metric,
    not a log line each under the logging lock)."""
    store = RedisRunStore.from_url(redis_url)
    with FakeSlack() as fake:
        settings = settings_for(fake, cluster, REDIS_URL=redis_url)
        service = build_front(settings, POLICY, store=store, jobs=Jobs.from_url(redis_url, backlog=0), workers=None)
        listeners = service.listeners
        assert listeners is not None
        caplog.set_level(logging.DEBUG, logger="upgradebot")
        try:
            for n in range(REFUSALS):
                ack = listeners.take(body_of("inventory", user="U0ANA", response_url=fake.response_url(f"r{n}")), None)
                assert ack is not None and msg.BUSY.split(":")[0].encode() in ack, ack
        finally:
            service.stop_workers(timeout=5)
            store.close()
    loud = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO and "refused" in r.getMessage()]
    assert loud == [], loud
    assert len([r for r in caplog.records if r.levelno == logging.DEBUG and "refused" in r.getMessage()]) == REFUSALS
    assert counted(service, "-", "busy") == REFUSALS
