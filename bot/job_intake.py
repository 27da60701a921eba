"""The worker's side of the job queue (:mod:`bot.jobs`): each stored message decoded on its own.

dramatiq's Redis consumer fetched a batch of messages' data without their ids and decoded
them in turn: the first that did not decode raised out of the batch, and the others it had
fetched stayed in the worker's acks set, unrun, until the worker died; an error while its
thread closed the consumer (a delayed entry without its Redis id) ended the thread for good.
Here each message is fetched with its id (:data:`FETCH`), checked to be what this bot
queues (:func:`decode`) and otherwise handed to the broker to dead-letter (``admit``); the
consumer thread outlives any error; each lane's consumer notes that it looks for work
(:data:`BEAT`), busy or idle, for ``serve``'s readiness.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from typing import Any

import dramatiq
from dramatiq.broker import MessageProxy
from dramatiq.brokers.redis import _RedisConsumer
from dramatiq.common import compute_backoff, q_name
from dramatiq.errors import ConnectionClosed
from dramatiq.message import Message
from dramatiq.worker import ConsumerThread

from bot.storage.redis_store import REDIS_ERRORS

log = logging.getLogger("upgradebot.jobs")

MAX_JOB_BYTES = 1024 * 1024
"""A stored job above this is not decoded (the front end takes no body above 1 MiB)."""
CONSUMER_BEAT = 1.0
"""Seconds between two notes of a consumer that it looks for work."""
FIELDS = frozenset({"queue_name", "actor_name", "args", "kwargs", "options", "message_id", "message_timestamp"})

FETCH = """
redis.call("zadd", KEYS[1], ARGV[1], ARGV[2])
local out = {}
for i = 1, tonumber(ARGV[3]) do
    local id = redis.call("lpop", KEYS[2])
    if not id then break end
    redis.call("sadd", KEYS[4], id)
    out[#out + 1] = id
    out[#out + 1] = redis.call("hget", KEYS[3], id)
end
return out
"""
"""dramatiq's ``fetch`` (heartbeat, pop, into the acks set, the data) answering each id with its
data (``false``: an id without data), so an entry that cannot be decoded can be named and moved."""
BEAT = """
redis.replicate_commands()
local t = redis.call("time")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if ARGV[1] ~= "" then redis.call("zadd", KEYS[1], now, ARGV[1]) end
local out = {now}
for i = 2, #ARGV do out[#out + 1] = redis.call("zscore", KEYS[1], ARGV[i]) end
return out
"""
"""With a lane in ARGV[1]: its consumer looked for work now; then Redis's time and the last look
of each lane in ARGV[2:] (one clock, Redis's, for every machine)."""


class Poisoned(Exception):
    """A stored job that is not one this bot queued; its argument is the reason (a metric label)."""


def text_of(value: Any) -> str:
    return value.decode("utf-8", "backslashreplace") if isinstance(value, bytes) else str(value)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def decode(queue_name: str, message_id: str, data: bytes | None) -> Message[Any]:
    """The message this bot queued as ``data`` on ``queue_name`` (``Poisoned`` with the reason if it
    is not one: it must be JSON dramatiq would have written for this lane's actor, ``[kind, payload]``
    with no options of its own but, on the lane's delay queue (``<lane>.DQ``: :meth:`bot.jobs.Jobs.later`),
    its ``eta``; its Redis id is the one it was fetched by)."""
    if data is None:
        raise Poisoned("no_data")
    if len(data) > MAX_JOB_BYTES:
        raise Poisoned("too_large")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise Poisoned("not_utf8") from None
    try:
        fields = json.loads(text, parse_constant=_refuse_constant)
    except (ValueError, RecursionError):
        raise Poisoned("not_json") from None
    if not isinstance(fields, dict) or set(fields) != FIELDS:
        raise Poisoned("bad_shape")
    args, options, stamp = fields["args"], fields["options"], fields["message_timestamp"]
    delayed = queue_name != q_name(queue_name)  # on a lane's delay queue (a long read waiting its turn)
    eta = options.get("eta") if isinstance(options, dict) else None
    if (fields["queue_name"] != queue_name or fields["actor_name"] != f"upgradebot_{q_name(queue_name)}"
            or not isinstance(args, list) or len(args) != 2 or not isinstance(args[0], str)
            or not isinstance(args[1], dict) or fields["kwargs"] != {} or not isinstance(options, dict)
            or set(options) - {"redis_message_id", *(("eta",) if delayed else ())}
            or (delayed and (not isinstance(eta, int) or isinstance(eta, bool)))
            or not isinstance(fields["message_id"], str)
            or not isinstance(stamp, int) or isinstance(stamp, bool)):
        raise Poisoned("bad_shape")
    return Message(queue_name=queue_name, actor_name=fields["actor_name"], args=tuple(args), kwargs={},
                   options={"redis_message_id": message_id, **({"eta": eta} if delayed else {})},
                   message_id=fields["message_id"], message_timestamp=stamp)


class Consumer(_RedisConsumer):
    """dramatiq's Redis consumer, each message fetched with its id and decoded on its own: one that
    cannot be is dead-lettered (the broker's ``admit``) and the others go on; the lane's heartbeat
    (:data:`CONSUMERS`) is noted every :data:`CONSUMER_BEAT` seconds, busy or idle; what it fetched
    and did not hand over goes back on the queue when it closes (a connection lost, a restart)."""

    broker: Any

    def __init__(self, broker: Any, queue_name: str, prefetch: int, timeout: int) -> None:
        super().__init__(broker, queue_name, prefetch, timeout)
        self.message_cache: list[tuple[str, bytes | None]] = []
        self._beaten = 0.0

    def __next__(self) -> MessageProxy | None:
        try:
            if time.monotonic() - self._beaten >= CONSUMER_BEAT and not self.queue_name.endswith(".DQ"):
                self.broker.beat(self.queue_name)
                self._beaten = time.monotonic()
            while self.message_cache:
                message_id, data = self.message_cache.pop(0)
                message = self.broker.admit(self.queue_name, message_id, data)
                if message is not None:
                    self.misses = 0
                    self.queued_message_ids.add(message.message_id)
                    return MessageProxy(message)
            if self.outstanding_message_count < self.prefetch:
                self.message_cache = self.broker.fetch(self.queue_name, self.prefetch - self.outstanding_message_count)
            if not self.message_cache:
                self.misses, backoff_ms = compute_backoff(self.misses, max_backoff=self.timeout)
                time.sleep(backoff_ms / 1000)
            return None
        except REDIS_ERRORS as exc:
            raise ConnectionClosed(exc) from None

    def requeue(self, messages: Any) -> None:
        ids = [m.options.get("redis_message_id") for m in messages]
        if any(ids):
            self.broker.do_requeue(self.queue_name, *(i for i in ids if i))

    def close(self) -> None:
        cached, self.message_cache = self.message_cache, []
        if cached:
            with contextlib.suppress(Exception):  # else they go back when this worker's heartbeat is old
                self.broker.do_requeue(self.queue_name, *(message_id for message_id, _ in cached))


class RestartingConsumerThread(ConsumerThread):
    """dramatiq's consumer thread, which an error while closing its consumer used to end for good:
    any error is logged in one line and the consumer restarted a second later, until stopped."""

    def run(self) -> None:
        while True:
            try:
                super().run()
                return
            except Exception as exc:
                log.error("the consumer of %s failed (%s): restarting it", self.queue_name, type(exc).__name__)
                self.consumer = None
            if not self.running:
                return
            time.sleep(1.0)


class Worker(dramatiq.Worker):
    def _add_consumer(self, queue_name: str, *, delay: bool = False) -> None:
        if queue_name in self.consumers or (self.consumer_whitelist and q_name(queue_name) not in
                                            self.consumer_whitelist):
            return
        consumer = self.consumers[queue_name] = RestartingConsumerThread(
            broker=self.broker, queue_name=queue_name, prefetch=self.delay_prefetch if delay else self.queue_prefetch,
            work_queue=self.work_queue, worker_timeout=self.worker_timeout)
        consumer.start()
