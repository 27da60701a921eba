"""A poisoned job queue (finding 5 of the security review): whoever can write to Redis puts
entries a worker cannot decode among legitimate ones.

Found before: one undecodable entry among 5 legitimate jobs left all 5 unanswered in the
worker's acks set (the consumer dropped the batch it had fetched with the bad one); one
variant (a delayed entry without its Redis id, then any other bad one) killed the lane's
consumer thread for good; ``/readyz`` stayed green."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from bot.jobs import DEAD_LETTERS, NAMESPACE, Jobs
from bot.slack.metrics import Metrics
from bot.storage.redis_store import raw_client
from tests.e2e.runs_support import eventually


def message(**fields: Any) -> bytes:
    """A message shaped as dramatiq stores it, ``fields`` replacing (None: removing) its own."""
    data: dict[str, Any] = {"queue_name": "commands", "actor_name": "upgradebot_commands",
                            "args": ["command", {"n": "poison"}], "kwargs": {},
                            "options": {"redis_message_id": "set-below"}, "message_id": str(uuid.uuid4()),
                            "message_timestamp": int(time.time() * 1000)}
    data.update(fields)
    return json.dumps({k: v for k, v in data.items() if v is not None}).encode()


FUTURE = int(time.time() * 1000) + 3_600_000
POISONS: dict[str, list[bytes | None]] = {
    "not_json": [b"{not json"],
    "not_utf8": [b"\xff\xfe\x00{\"args\": []}"],
    "a_json_list": [b"[1, 2, 3]"],
    "a_json_string": [b'"hello"'],
    "missing_fields": [b'{"queue_name": "commands"}'],
    "unknown_field": [message(extra=1)],
    "args_not_a_list": [message(args="command")],
    "kind_not_a_string": [message(args=[7, {}])],
    "payload_not_an_object": [message(args=["command", "text"])],
    "too_many_args": [message(args=["command", {}, {}])],
    "options_not_an_object": [message(options="eta")],
    "timestamp_not_a_number": [message(message_timestamp="soon")],
    "unknown_actor": [message(actor_name="os.system")],
    "another_lanes_actor": [message(actor_name="upgradebot_decisions")],
    "huge": [message(args=["command", {"pad": "x" * (2 * 1024 * 1024)}])],
    "id_without_data": [None],
    "delayed_without_redis_id_then_garbage": [message(options={"eta": FUTURE}), b"{"],
    "delayed_with_infinite_eta": [message(options={"eta": float("inf")})],
}


@pytest.fixture
def lanes(redis_url: str) -> Iterator[tuple[Jobs, Jobs, Any]]:
    """A front end that queues, a worker's Jobs (not consuming yet) and a raw client."""
    redis = raw_client(redis_url)
    redis.flushdb()
    front, worker = Jobs.from_url(redis_url), Jobs.from_url(redis_url)
    try:
        yield front, worker, redis
    finally:
        worker.stop(timeout=5)
        front.stop(timeout=1)


def poison(redis: Any, entries: list[bytes | None]) -> list[str]:
    """Write ``entries`` onto the commands lane as an attacker with Redis access would; their ids."""
    ids = []
    for data in entries:
        message_id = f"poison-{uuid.uuid4()}"
        if data is not None:
            redis.hset(f"{NAMESPACE}:commands.msgs", message_id, data)
        redis.rpush(f"{NAMESPACE}:commands", message_id)
        ids.append(message_id)
    return ids


def acks_of(redis: Any) -> int:
    return sum(redis.scard(key) for key in redis.scan_iter(f"{NAMESPACE}:__acks__.*"))


@pytest.mark.parametrize("variant", sorted(POISONS))
def test_an_undecodable_job_is_dead_lettered_and_the_others_are_answered(lanes: Any, variant: str) -> None:
    """Finding 5 of the security review: an undecodable job among 5 legitimate ones goes to the
    dead-letter list (one log line, counted in ``upgradebot_jobs_dead_lettered_total``); the 5
    are all run, nothing stays in the acks set and the lane's consumer is still alive."""
    front, worker, redis = lanes
    metrics = Metrics()
    worker.on_dead_letter = lambda lane, reason: metrics.jobs_dead_lettered.labels(lane=lane, reason=reason).inc()
    for n in range(2):
        assert front.submit("commands", "command", {"n": n})
    bad = poison(redis, POISONS[variant])
    for n in range(2, 5):
        assert front.submit("commands", "command", {"n": n})
    seen: list[Any] = []
    lock = threading.Lock()

    def handle(lane: str, kind: str, payload: dict[str, Any]) -> None:
        with lock:
            seen.append(payload.get("n"))

    worker.consume(handle, lanes={"commands"}, threads=2)
    eventually(lambda: sorted(seen) == [0, 1, 2, 3, 4], f"the 5 legitimate jobs answered (seen {seen})", timeout=15)
    eventually(lambda: redis.llen(DEAD_LETTERS) == len(bad), "the bad entries dead-lettered", timeout=10)
    dead = [json.loads(raw) for raw in redis.lrange(DEAD_LETTERS, 0, -1)]
    assert sorted(d["id"] for d in dead) == sorted(bad)
    assert all(d["lane"] == "commands" and d["reason"] for d in dead), dead
    assert all(len(d["data"] or "") <= 64 * 1024 for d in dead), "what is kept of an entry is bounded"
    eventually(lambda: acks_of(redis) == 0 and redis.hlen(f"{NAMESPACE}:commands.msgs") == 0,
               "nothing left in the acks set or the lane's hash")
    exposition = metrics.exposition()[0].decode()
    counted = sum(float(line.rsplit(" ", 1)[1]) for line in exposition.splitlines()
                  if line.startswith("upgradebot_jobs_dead_lettered_total{"))
    assert counted == len(bad), exposition
    assert worker.dead_lanes() == [], "the consumer thread is alive"
    assert front.submit("commands", "command", {"n": 5})  # and it still takes work
    eventually(lambda: 5 in seen, "a later job answered")
    assert sorted(seen) == [0, 1, 2, 3, 4, 5], "each legitimate job ran once"


def test_an_undecodable_job_logs_one_bounded_line_without_its_content(lanes: Any,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    """Finding 5 of the security review: the log line of a dead-lettered job names the lane, the id
    and the reason, never the job's content (a response_url is a credential)."""
    _, worker, redis = lanes
    secret = "https://hooks.slack.com/commands/T0/1/s3cr3t-token"
    (bad,) = poison(redis, [message(args=["command", secret])])
    seen: list[Any] = []
    with caplog.at_level("INFO", logger="upgradebot.jobs"):
        worker.consume(lambda lane, kind, payload: seen.append(payload), lanes={"commands"}, threads=1)
        eventually(lambda: redis.llen(DEAD_LETTERS) == 1, "dead-lettered")
    lines = [r.getMessage() for r in caplog.records if "dead-letter" in r.getMessage()]
    assert len(lines) == 1 and bad in lines[0] and "commands" in lines[0], lines
    assert secret not in caplog.text and "s3cr3t" not in caplog.text
    assert all(len(r.getMessage()) < 300 for r in caplog.records)


def test_an_error_escaping_the_consumer_loop_restarts_the_consumer_instead_of_ending_it(
        lanes: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Finding 5 of the security review: dramatiq's consumer thread ended for good when closing
    its consumer raised (what the delayed entry without a Redis id did); any error out of its
    loop is now logged and the consumer started again, and the lane's jobs still run."""
    from bot.job_intake import Consumer

    front, worker, _ = lanes
    failures = iter([RuntimeError("fetch"), RuntimeError("close")])
    fetch, close = Consumer.__next__, Consumer.close

    def failing_next(self: Consumer) -> Any:
        if next(failures, None) is not None:  # the first fails in the loop, the second in the close after it
            raise KeyError("redis_message_id")
        return fetch(self)

    def failing_close(self: Consumer) -> None:
        close(self)
        raise KeyError("redis_message_id")

    monkeypatch.setattr(Consumer, "__next__", failing_next)
    monkeypatch.setattr(Consumer, "close", failing_close)
    seen: list[Any] = []
    worker.consume(lambda lane, kind, payload: seen.append(payload["n"]), lanes={"commands"}, threads=1)
    time.sleep(0.5)
    assert worker.dead_lanes() == [], "the consumer thread outlived the error"
    monkeypatch.setattr(Consumer, "close", close)
    assert front.submit("commands", "command", {"n": 1})
    eventually(lambda: seen == [1], "a job taken after the restart", timeout=15)
