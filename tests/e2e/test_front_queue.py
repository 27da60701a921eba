"""The front end of ``upgradebot serve`` queues the bot's commands and clicks itself.

Found measuring acks (``bench_ack``): the front spent ~0.30 ms of CPU per command against
the bare Bolt app's 0.08, a third of it in Bolt's dispatch (a second parse of the body,
the middleware, listener matching, keyword injection) for a listener that only acks and
queues. The HTTP layer, which has checked the signature and parsed the body already,
now queues them (``Listeners.take``); Bolt answers everything else as before. These
tests hold the two paths to the same result.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest

from bot.jobs import NAMESPACE, WAIT_FIRST, WAIT_MAX, Jobs
from bot.settings import Settings
from bot.slack import http as http_module
from bot.slack.http import HttpServer
from bot.slack.serve import Service, build_front
from bot.storage.redis_store import RedisRunStore, raw_client
from bot.workers import Quotas, Workers
from handlers import messages as msg
from tests.e2e.harness import POLICY
from tests.e2e.runs_support import eventually
from tests.fakeslack import BOT_TOKEN, SIGNING_SECRET, FakeSlack, block_action, post, slash_command


@pytest.fixture
def front(served: tuple[Service, HttpServer, Any]) -> tuple[Service, str, Any]:
    """``serve``'s front end (a queue, no workers) on waitress; its service, URL and Redis."""
    service, http, redis = served
    return service, http.url + "/slack/events", redis


@pytest.fixture
def served(redis_url: str) -> Iterator[tuple[Service, HttpServer, Any]]:
    """The front end of :func:`front`, with its HTTP server rather than its URL."""
    raw_client(redis_url).flushdb()
    with FakeSlack() as fake:
        settings = Settings(SLACK_BOT_TOKEN=BOT_TOKEN, SLACK_SIGNING_SECRET=SIGNING_SECRET,
                            SLACK_APP_TOKEN=None, SLACK_API_URL=fake.api_url, REDIS_URL=redis_url,
                            UPGRADEBOT_CONFIG=None)
        store = RedisRunStore.from_url(redis_url)
        service = build_front(settings, POLICY, store=store, jobs=Jobs.from_url(redis_url), workers=None)
        http = HttpServer(service.wsgi(), port=0, threads=4).start()
        try:
            yield service, http, raw_client(redis_url)
        finally:
            http.stop(timeout=5)
            service.stop_workers(timeout=5)
            store.close()


def queued(redis: Any, lane: str) -> list[tuple[str, dict[str, Any]]]:
    """Each message waiting on ``lane``: its kind and payload (without the time it was queued)."""
    found = []
    for raw in redis.hvals(f"{NAMESPACE}:{lane}.msgs"):
        kind, payload = json.loads(raw)["args"]
        payload.pop("queued_at")
        found.append((kind, payload))
    return sorted(found, key=lambda m: json.dumps(m, sort_keys=True))


def bolt_off(service: Service) -> list[dict[str, Any]]:
    """Bolt's dispatch replaced by one that records what reached it and answers 404."""
    from slack_bolt import BoltResponse

    reached: list[dict[str, Any]] = []

    def dispatch(request: Any) -> BoltResponse:
        reached.append(request.body)
        return BoltResponse(status=404, body="")

    service.app.dispatch = dispatch  # type: ignore[method-assign,assignment]
    return reached


REQUESTS = [
    slash_command("runs", trigger_id="t-runs", response_url="https://hooks.slack.test/1"),
    slash_command("status", trigger_id="t-status"),
    slash_command("approve run-0001", trigger_id="t-approve"),  # the decisions lane
    slash_command("verify kube-system/nvidia-device-plugin-daemonset on gpu-node1 payload", trigger_id="t-long"),
    block_action(action_id="approve", value="run-0001", user="U0LEAD"),
    block_action(action_id="reject", value="run-0002", user="U0LEAD"),
]


def test_the_bots_commands_and_clicks_are_queued_before_bolt_and_acked_as_ack_does(front: Any) -> None:
    service, url, redis = front
    reached = bolt_off(service)
    for body in REQUESTS:
        answer = post(url, body, headers={"X-Slack-Retry-Num": "1"} if b"t-status" in body else None)
        assert (answer.status, answer.body) == (200, b""), body[:80]
    assert reached == [], "Bolt saw none of them"
    commands, decisions = queued(redis, "commands"), queued(redis, "decisions")
    assert [k for k, _ in commands] == ["command", "command", "long"]
    assert sorted(k for k, _ in decisions) == ["click", "click", "command"]
    for _, payload in commands + decisions:
        assert "token" not in payload["body"], "Slack's verification token is not queued"
    status = next(p for _, p in commands if p["body"]["trigger_id"] == "t-status")
    assert status["retry"] == "1"
    fields = dict(urllib.parse.parse_qsl(REQUESTS[3].decode(), keep_blank_values=True))
    long_one = next(p for k, p in commands if k == "long")
    assert long_one["body"] == {k: v for k, v in fields.items() if k != "token"}


def test_the_queue_holds_what_the_bolt_listeners_queued_for_the_same_requests(front: Any) -> None:
    """Sent once to the front end as served and once with the HTTP layer's hand-over off (Bolt's
    listeners queue them): the same messages, field for field."""
    service, _, redis = front
    wsgi = service.wsgi()
    by_path = {}
    for take in (True, False):
        redis.flushdb()
        wsgi.take = wsgi.take if take else None
        http = HttpServer(wsgi, port=0, threads=2).start()
        try:
            for body in REQUESTS:
                assert post(http.url + "/slack/events", body).status == 200
        finally:
            http.stop(timeout=5)
        by_path[take] = {lane: queued(redis, lane) for lane in ("commands", "decisions")}
    assert by_path[True] == by_path[False]
    assert sum(len(m) for m in by_path[True].values()) == len(REQUESTS)


def test_help_is_answered_in_the_ack_by_the_front_and_by_bolt_alike_and_nothing_is_queued(front: Any) -> None:
    """issue 39: queued, ``help`` waited behind the store's group commits and the workers' answers
    (its ack p99 1.4-1.9x a bare app's during a 5k promotion). Its answer needs only its words and
    the policy: the ack carries it, an ephemeral message Slack accepts, the same whether the front
    end takes the command or Bolt's listener acks it; nothing reaches Redis or the response_url."""
    service, _, redis = front
    wsgi = service.wsgi()
    acks: dict[bool, list[dict[str, Any]]] = {}
    for take in (True, False):
        wsgi.take = wsgi.take if take else None
        http = HttpServer(wsgi, port=0, threads=2).start()
        try:
            acks[take] = [post(http.url + "/slack/events", slash_command(text, response_url="http://127.0.0.1:9/r/x")
                               ).message for text in ("help", "help approve", "", "help nonsense")]
        finally:
            http.stop(timeout=5)
    assert acks[True] == acks[False]
    assert all(m["response_type"] == "ephemeral" for m in acks[True])
    assert "What I can do" in acks[True][0]["text"] and acks[True][0] == acks[True][2]  # no words: help
    assert "&lt;run&gt;: a run's id" in json.dumps(acks[True][1])
    assert "unknown verb 'nonsense'" in acks[True][3]["text"]
    assert queued(redis, "commands") == queued(redis, "decisions") == [] and redis.dbsize() == 0


def test_the_same_help_in_the_same_channel_is_rendered_once_and_each_is_counted(front: Any) -> None:
    """issue 39: rendering help's Block Kit was most of the front's extra CPU per ``help`` (0.44 ms
    against the bare app's 0.28 at 200 at once). The same words in the same channel are routed and
    rendered once; each command is still counted, and other words or another channel get their own."""
    service, url, redis = front
    routed: list[tuple[str, str | None]] = []
    route = service.router.route

    def counting(text: str, caller: Any) -> Any:
        routed.append((text, caller.channel))
        return route(text, caller)

    service.router.route = counting  # type: ignore[method-assign]
    bodies = [slash_command("help", channel="C0OPS"), slash_command("help", channel="C0OPS", user="U0EVE"),
              slash_command("help approve", channel="C0OPS"), slash_command("help", channel="C0LAB")]
    answers = [post(url, body).message for body in bodies]
    assert answers[0] == answers[1] and answers[0] != answers[2]
    assert routed == [("help", "C0OPS"), ("help approve", "C0OPS"), ("help", "C0LAB")]
    count = service.metrics.commands.labels(verb="help", outcome="ok", surface="slack")._value.get()
    assert count == 4 and redis.dbsize() == 0


def test_a_command_refused_by_a_full_lane_is_told_so_in_its_ack_by_the_front_and_by_bolt_alike(front: Any) -> None:
    """issue 39: at 200 ``inventory`` at once during a 5k promotion, the commands lane filled and
    each refused command's "busy" answer was a POST to its response_url from the front end's own
    notice threads, on the cores its acks need (its ack p99 went from 1.2x to 2.4x the bare
    app's once the bench stopped measuring the bare app beside the workers' backlog). The refusal is
    known before the ack leaves: the ack carries it, an ephemeral message, whether the front end
    takes the command or Bolt's listener acks it; nothing is queued and nothing is sent to the
    response_url. A refused click is still told at its response_url (a click's ack shows nothing)."""
    service, _, redis = front
    jobs = service.jobs
    assert jobs is not None
    jobs.backlog = 0  # every lane full: no command or click is queued
    wsgi = service.wsgi()
    with FakeSlack() as fake:
        acks: dict[bool, list[Any]] = {}
        for take in (True, False):
            wsgi.take = wsgi.take if take else None
            http = HttpServer(wsgi, port=0, threads=2).start()
            try:
                acks[take] = [post(http.url + "/slack/events", slash_command(text, response_url=fake.response_url(
                    "cmd"))).message for text in ("runs", "inventory", "approve run-0001")]
                click = post(http.url + "/slack/events", block_action(action_id="approve", value="run-0001",
                                                                       user="U0LEAD",
                                                                       response_url=fake.response_url("click")))
                assert (click.status, click.body) == (200, b"")
            finally:
                http.stop(timeout=5)
        assert acks[True] == acks[False]
        assert all(m["response_type"] == "ephemeral" and m["text"] == msg.BUSY for m in acks[True]), acks[True]
        clicks = eventually(lambda: (lambda c: c if len(c) == 2 else None)(
            [c for c in fake.of("response_url") if c.path.endswith("/click")]), "each click told", timeout=10)
        assert all(c.body["text"] == msg.BUSY for c in clicks)  # type: ignore[union-attr]
        assert not [c for c in fake.of("response_url") if c.path.endswith("/cmd")], "a command told twice"
    assert queued(redis, "commands") == queued(redis, "decisions") == []
    assert service.metrics.commands.labels(verb="-", outcome="busy", surface="slack")._value.get() == 8


def test_what_the_bot_does_not_queue_is_still_bolts_to_answer(front: Any) -> None:
    service, url, redis = front
    reached = bolt_off(service)
    others = [
        b"ssl_check=1&token=x",  # Slack checking the certificate: Bolt's SslCheck answers it
        slash_command("help", command="/other"),  # a command this app was not given
        block_action(action_id="not-ours", value="x", user="U0LEAD"),  # a button this app has no listener for
    ]
    for body in others:
        assert post(url, body).status == 404, body[:60]  # what the recording dispatch answers
    assert len(reached) == len(others)
    assert queued(redis, "commands") == queued(redis, "decisions") == []


def test_a_forged_or_malformed_request_is_refused_before_it_is_offered(front: Any) -> None:
    service, url, redis = front
    reached = bolt_off(service)
    assert post(url, slash_command("help"), secret="not-the-secret").status == 401
    assert post(url, b"payload=notjson").status == 400
    assert reached == [] and queued(redis, "commands") == queued(redis, "decisions") == []


def test_a_burst_beyond_the_threads_is_logged_once_not_once_a_request(served: Any, monkeypatch: pytest.MonkeyPatch,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    """Twelve commands at once on four threads: waitress logged "Task queue depth is N" for
    every request that found no idle thread (a warning a command under a burst, each written
    at a cost); now the front says once that requests waited.

    The four threads are held in the queueing until the eight other requests wait in
    waitress's queue and the oldest has waited longer than the front's threshold (observed,
    not slept for: on a loaded machine the requests may reach the server spread out)."""
    service, http, _ = served
    url = http.url + "/slack/events"
    monkeypatch.setattr(http_module, "QUEUED_WARN", 0.2)
    assert service.listeners is not None and service.listeners.deps.jobs is not None
    jobs = service.listeners.deps.jobs
    submit = jobs.submit
    dispatcher = http._server.task_dispatcher
    gate = threading.Event()

    def waited_enough() -> bool:
        with dispatcher.lock:
            arrived = [r.arrived for ch in dispatcher.queue for r in list(ch.requests)]
        return len(arrived) == 8 and time.perf_counter() - min(arrived) > http_module.QUEUED_WARN

    def held(*args: Any, **kwargs: Any) -> bool:
        gate.wait(timeout=30)
        return submit(*args, **kwargs)

    jobs.submit = held  # type: ignore[method-assign]
    bodies = [slash_command("runs", response_url=f"http://127.0.0.1:9/r/{n}") for n in range(12)]
    statuses: list[int] = []

    def one(body: bytes) -> None:
        statuses.append(post(url, body).status)

    with caplog.at_level(logging.INFO):
        threads = [threading.Thread(target=one, args=(b,)) for b in bodies]
        for t in threads:
            t.start()
        eventually(waited_enough, "eight requests queued behind the four held, the oldest past the threshold",
                   timeout=30)
        gate.set()
        for t in threads:
            t.join(timeout=30)
    assert statuses == [200] * 12
    assert not [r for r in caplog.records if r.name.startswith("waitress")], "waitress logged the queue"
    waited = [r.getMessage() for r in caplog.records if "waited" in r.getMessage()]
    assert len(waited) == 1 and "for a free HTTP thread" in waited[0], waited


def test_a_worker_answers_a_refused_long_command_itself_even_when_the_notice_pool_is_full(front: Any) -> None:
    """A long command taken off the queue when its user already runs two: the refusal is sent
    from the worker's own thread before it takes the next message. It went through the notice
    pool (two threads, 512 waiting), so a burst of refusals (1,000 ``inventory`` in five
    seconds from one user, as in ``bench_ack``) overflowed it and most were dropped unsaid."""
    service, _, _ = front
    listeners = service.listeners
    assert listeners is not None
    gate = threading.Event()
    full = Workers(1, backlog=0, name="test-notice")
    assert full.submit(gate.wait, 10)  # its one thread busy, no room to wait: every notice is refused
    listeners.deps.notices = full
    said: list[str] = []

    class Recorder:
        response_url = "http://127.0.0.1:9/r/refused"

        def __call__(self, **kwargs: Any) -> Any:
            said.append(kwargs["text"])
            return type("Answer", (), {"status_code": 200})()

    quotas = listeners.deps.quotas
    try:
        assert quotas.take("U0ANA", "C0OPS") is None and quotas.take("U0ANA", "C0OPS") is None
        body = {"user_id": "U0ANA", "channel_id": "C0OPS", "text": "inventory", "trigger_id": "t-refused"}
        listeners.run_long(body, None, Recorder())  # type: ignore[arg-type]
        assert len(said) == 1 and "already has 2 long command(s) running" in said[0], said
    finally:
        quotas.give("U0ANA", "C0OPS")
        quotas.give("U0ANA", "C0OPS")
        gate.set()
        full.shutdown(timeout=5)


def test_a_long_read_finding_every_slot_taken_is_put_back_on_its_lane_with_its_queue_time(
        front: tuple[Service, str, Any], redis_url: str) -> None:
    """Issue 39: in a worker, an ``inventory`` taken while the process's long reads all run is not
    told "busy": it goes back on the commands lane's delay queue, its ``queued_at`` kept and its
    waits counted, nothing said and nothing counted against its user, to be taken again within
    ``WAIT_FIRST`` while few wait."""
    service, _, redis = front
    listeners = service.listeners
    assert listeners is not None
    jobs = Jobs.from_url(redis_url)
    quotas = Quotas(per_user=2, per_channel=4, reads=1)
    listeners.deps.quotas, listeners.deps.later = quotas, jobs.later
    assert quotas.take("U0ZED", None, read=True) is None  # the one long-read slot taken
    queued_at = time.time() - 5
    with FakeSlack() as fake:
        body = {"user_id": "U0ANA", "channel_id": "C0OPS", "text": "inventory", "trigger_id": "t-waits",
                "response_url": fake.response_url("waits")}
        try:
            listeners.run_job("commands", "long", {"body": body, "retry": None, "queued_at": queued_at})
            listeners.run_job("commands", "long", {"body": body, "retry": None, "queued_at": queued_at,
                                                   "waits": 1})
            assert fake.calls == [], [c.body for c in fake.calls]
        finally:
            jobs.stop(timeout=1)
    stored = [json.loads(raw) for raw in redis.hvals(f"{NAMESPACE}:commands.DQ.msgs")]
    assert sorted(m["args"][1]["waits"] for m in stored) == [1, 2]
    assert all(m["args"][0] == "long" and m["args"][1]["queued_at"] == queued_at for m in stored)
    delays = [m["options"]["eta"] - m["message_timestamp"] for m in stored]
    assert all(0.5 * WAIT_FIRST * 1000 <= delay <= WAIT_FIRST * 1000 for delay in delays), delays
    assert quotas.take("U0ANA", "C0OPS") is None and quotas.take("U0ANA", "C0OPS") is None  # its quota free


def test_a_long_read_that_waited_beyond_slacks_answer_is_answered_expired_and_not_run(
        front: tuple[Service, str, Any]) -> None:
    """Issue 39: a long read taken off the queue more than ``WAIT_MAX`` after it was queued (Slack
    keeps a ``response_url`` 30 minutes) is answered that it expired, in one line, and not run:
    its delivery is not claimed and no quota is taken."""
    service, _, redis = front
    listeners = service.listeners
    assert listeners is not None
    with FakeSlack() as fake:
        body = {"user_id": "U0ANA", "channel_id": "C0OPS", "text": "inventory", "trigger_id": "t-expired",
                "response_url": fake.response_url("expired")}
        listeners.run_job("commands", "long", {"body": body, "retry": None, "queued_at": time.time() - WAIT_MAX - 1,
                                               "waits": 12})
        said = [c.body["text"] for c in fake.of("response_url")]
    assert said == [msg.long_read_expired("inventory", int(WAIT_MAX // 60))], said
    assert "\n" not in said[0]
    assert not [key for key in redis.scan_iter("*t-expired*")], "its delivery was claimed"
    quotas = listeners.deps.quotas
    assert quotas.take("U0ANA", "C0OPS") is None and quotas.take("U0ANA", "C0OPS") is None
    quotas.give("U0ANA", "C0OPS")
    quotas.give("U0ANA", "C0OPS")


def test_a_queued_command_reaches_its_handler_with_the_time_it_was_queued(front: tuple[Service, str, Any]) -> None:
    """Issue 39: a worker hands each command's ``queued_at`` to the router as ``Caller.asked_at``,
    a long read's and a short command's alike, so an ``inventory`` asked before the last one
    ended is answered by it (:meth:`handlers.routing.InFlight.since`); a job that says nothing of
    when it was queued is asked now (None)."""
    service, _, _ = front
    listeners = service.listeners
    assert listeners is not None
    router = listeners.deps.router
    asked: list[tuple[str, float | None]] = []
    real_route = router.route

    def route(text: str, caller: Any) -> Any:
        asked.append((text, caller.asked_at))
        return real_route(text, caller)

    router.route = route  # type: ignore[method-assign]
    queued_at = time.time() - 3
    with FakeSlack() as fake:
        for text, kind, payload in (("inventory", "long", {"queued_at": queued_at}),
                                    ("runs", "command", {"queued_at": queued_at + 1}),
                                    ("runs", "command", {})):
            body = {"user_id": "U0ANA", "channel_id": "C0OPS", "team_id": "T0TEST", "text": text,
                    "trigger_id": f"t-asked-{len(asked)}",
                    "response_url": fake.response_url(f"asked-{len(asked)}")}
            listeners.run_job("commands", kind, {"body": body, "retry": None, **payload})
    assert asked == [("inventory", queued_at), ("runs", queued_at + 1), ("runs", None)], asked


def test_a_long_command_gives_its_slots_back_once_its_answer_is_known_before_delivering_it(
        front: tuple[Service, str, Any]) -> None:
    """Issue 39: a long read held its long-read slot, and its user's and channel's, while its
    answer was posted (an inventory's is a message and its thread: several calls to Slack). In a
    flood, inventories answered by one kept read spent their slots posting, the next ones found
    them all taken and went back to wait, over and over: three waits a command, 55 Redis calls
    each, beside the front end's own. The slots count the command's work, not its delivery."""
    service, _, _ = front
    listeners = service.listeners
    assert listeners is not None
    quotas = Quotas(per_user=1, per_channel=1, reads=1)
    listeners.deps.quotas = quotas
    free_while_delivered: list[bool] = []

    class Recorder:
        response_url = "http://127.0.0.1:9/r/slots"

        def __call__(self, **kwargs: Any) -> Any:
            taken = quotas.take("U0ANA", "C0OPS", read=True)  # the same user, channel and slot kind
            free_while_delivered.append(taken is None)
            if taken is None:
                quotas.give("U0ANA", "C0OPS", read=True)
            return type("Answer", (), {"status_code": 200})()

    body = {"user_id": "U0ANA", "channel_id": "C0OPS", "text": "inventory", "trigger_id": "t-slots",
            "team_id": "T0TEST"}
    listeners.run_long(body, None, Recorder())  # type: ignore[arg-type]
    assert free_while_delivered == [True]
    assert quotas.take("U0ANA", "C0OPS", read=True) is None, "given back once, not twice"
    assert quotas.take("U0BOB", "C0DEV", read=True) == "busy"
