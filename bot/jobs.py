"""Work handed from the process that acks Slack to the processes that do it: a job queue on Redis.

The front end (``upgradebot serve``) acks a request and puts one message on a lane;
``upgradebot worker`` processes (children of ``serve`` by default, or on other machines)
take them off and run them. Three lanes, so nothing waits behind what it must not:

- ``decisions``: Approve, Reject, Request rollback, and the commands that decide
  (``approve``, ``reject``, ``rollback``, ``cancel``);
- ``commands``: every other command (``inventory``, ``verify``, ``canary`` …);
- ``runs``: "advance run R" (the engine's ``wake``), taken by the workers that drive runs.

The queue is dramatiq's Redis broker under the store's own hash-tagged prefix. Why
dramatiq and not rq, for work made of idempotent, leased steps:

- a message is acknowledged when its work ends, and the messages of a worker that died
  (SIGKILL, a lost node) go back on the queue once its heartbeat is older than
  :data:`HEARTBEAT_MS`; rq moves an abandoned job to its failed registry instead;
- a worker is one process with many threads, consuming several queues, and keeps what it
  built warm (Slack client, cluster connections); rq's default worker forks a process per
  job, its ``SimpleWorker`` runs one job at a time;
- messages are JSON (rq pickles by default: whoever can write to Redis could run code);
- no time limit kills a thread from outside (dramatiq's ``TimeLimit`` is left out: a
  step is stopped by its own deadlines and checkpoints, never in the middle of a write),
  and no automatic retry (a command is claimed once; a run's wake is idempotent and the
  sweep covers a lost one).

Messages wait at most :data:`MAX_AGE_MS` (Slack's ``response_url`` lives 30 minutes): an
older one is dropped unrun. A long read that finds every long-read slot of its worker taken
waits its turn on the lane's delay queue (:meth:`Jobs.later`), taken again a moment later,
its ``queued_at`` kept, until it has waited :data:`WAIT_MAX` (then answered that it expired). A lane takes as many as its workers answer in
:data:`BACKLOG_SECONDS` at the rate they answered lately, and at least ``backlog``
(:data:`BACKLOG`), at most :data:`BACKLOG_MAX`; beyond, :meth:`Jobs.submit` answers False
and the front end says it is busy. The depth is read at most twice a second, and counted up
by the front end's own submissions in between; what the workers answered is what was counted
less what waits at the next read (issue 39: a fixed 2,000 told people "busy" while the
workers answered a hundred a second).

A worker decodes each stored message on its own (:func:`bot.job_intake.decode`: JSON that dramatiq wrote
for the lane's actor, ``[kind, payload]``, nothing more): one that is not (whoever can write
to Redis can put anything there) is moved to :data:`DEAD_LETTERS` with one log line and
``on_dead_letter`` (the metric), and the messages fetched with it run. A consumer thread
survives any error (logged, restarted); each lane's consumer notes in :data:`CONSUMERS`
that it looks for work, which ``serve``'s readiness reads (:meth:`Jobs.check_consumers`).

Submissions are written by group commit (:class:`GroupCommit`): one request thread
writes its message at once; those that arrive while it waits on Redis go together in the
next pipeline, each thread answering Slack only once its own message is stored. Fifty
commands at once cost a few round trips, not fifty (the front end's CPU per command was
two thirds Redis round trips).
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import threading
import time
from collections.abc import Callable, Collection
from typing import Any

import dramatiq
from dramatiq.brokers.redis import RedisBroker
from dramatiq.common import current_millis, q_name
from dramatiq.message import Message
from dramatiq.middleware import AgeLimit

from bot.job_intake import BEAT, FETCH, Consumer, Poisoned, Worker, decode, text_of
from bot.storage.layout import PREFIX
from bot.storage.redis_store import (
    REDIS_ERRORS,
    REDIS_TIMEOUT,
    NoScriptError,
    raw_client,
    unreachable,
)
from runbooks.engine.store import StoreUnavailable

log = logging.getLogger("upgradebot.jobs")
_SEND_ERRORS: tuple[type[BaseException], ...] = (OSError, *REDIS_ERRORS)

LANES = ("decisions", "commands", "runs")
NAMESPACE = PREFIX + "jobs"
"""Under the store's hash tag: in a Redis Cluster every key of the queue is in the store's slot."""
HEARTBEAT_MS = 15_000
"""A worker silent this long is dead: its unacknowledged messages are queued again."""
MAX_AGE_MS = 15 * 60 * 1000
MAINTENANCE_CHANCE = 50_000
"""Per million broker commands: how often one also requeues a dead worker's messages (dramatiq's default is 1,000)."""
BACKLOG = 2_000
DEPTH_EVERY = 0.5
BACKLOG_SECONDS = 300.0
"""A lane takes what its workers answer in this long (well within :data:`MAX_AGE_MS`)."""
BACKLOG_MAX = 50_000
"""The most messages a lane takes, however fast its workers answer (Redis's memory)."""
RATE_EVERY = 2.0
"""Seconds over which the workers' answer rate is measured (a half of the old rate, a half of the new)."""
DEAD_LETTERS = NAMESPACE + ":dead"
"""Jobs a worker could not decode, newest last (JSON: lane, id, reason, at, the first
:data:`DEAD_DATA_MAX` characters of the entry): read them with ``LRANGE``; at most :data:`DEAD_KEEP`."""
DEAD_KEEP = 1_000
DEAD_DATA_MAX = 64 * 1024
CONSUMERS = NAMESPACE + ":__consumers__"
"""When a consumer of each lane last looked for work (Redis's clock, ms): readiness of the lanes."""
CONSUMER_STALE_MS = 10_000
ACK_DEADLINE = 2.0
"""Seconds ``serve``'s front end gives a submission (Slack wants its ack within 3): each Redis call
waits at most half of it, and a write is not applied by a Redis that runs it later than
:data:`WRITE_SHARE` of that half after it was sent."""
WRITE_SHARE = 0.5

Handler = Callable[[str, str, dict[str, Any]], None]
"""``handler(lane, kind, payload)``: runs one message in a worker."""
DeadLetter = Callable[[str, str], None]
"""``on_dead_letter(lane, reason)``: told of each job moved to :data:`DEAD_LETTERS` (the metric)."""
_ENQUEUE_BY = """
redis.replicate_commands()
local t = redis.call("time")
if tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) > tonumber(ARGV[1]) then
    return 0
end
for i = 2, #ARGV, 3 do
    local queue = KEYS[tonumber(ARGV[i])]
    redis.call("hset", queue .. ".msgs", ARGV[i + 1], ARGV[i + 2])
    redis.call("rpush", queue, ARGV[i + 1])
end
return 1
"""
"""dramatiq's enqueue (the message in ``<queue>.msgs``, then its id on the queue) for a batch
(ARGV: the time after which it is not stored, ms by Redis's clock; then lane index, id, data
for each message), stored only if Redis runs it before that time."""


class ConsumerDown(Exception):
    """No consumer took from a lane lately (readiness)."""


class _Entry:
    __slots__ = ("deadline", "done", "error", "item", "lead")

    def __init__(self, item: Any, deadline: float | None) -> None:
        self.item, self.lead, self.deadline = item, False, deadline
        self.done = threading.Lock()
        """Held until the entry is written or its thread is to lead: released once, by whoever
        wrote it (a bare lock as a one-shot signal: cheaper than an Event's condition)."""
        self.done.acquire()
        self.error: BaseException | None = None


class Expired(Exception):
    """A submission whose deadline came before it could be written (nothing of it was stored)."""


class GroupCommit:
    """``submit(item)`` returns once ``write`` has stored it, with the items other threads
    submitted meanwhile in the same ``write`` call (no thread of its own, no waiting for a
    batch to fill: the first submitter writes at once; whoever arrives while a write is in
    flight joins the next one, written by the first of them). An error of ``write`` is
    raised in every thread whose item it held; a write that fails part-way (Redis gone in
    the middle of a pipeline) may have stored some of them, as a single write whose answer
    is lost may have. ``write`` answering False stored none of them (``Expired``).

    A submission with a ``deadline`` (``time.monotonic()``) goes into a write only if the write
    can end before it (``write_time``: the longest a write waits on Redis); one that cannot
    leaves the queue of submitters at once with ``Expired``, so a thread never waits past its
    deadline by more than one write it is already part of."""

    def __init__(self, write: Callable[[list[Any]], bool | None], *, write_time: float = 0.0) -> None:
        self._write = write
        self.write_time = write_time
        self._lock = threading.Lock()
        self._pending: list[_Entry] = []
        self._writing = False

    def submit(self, item: Any, *, deadline: float | None = None) -> None:
        entry = _Entry(item, deadline)
        with self._lock:
            self._pending.append(entry)
            lead = not self._writing
            self._writing = True
        if not lead:
            if deadline is None:
                entry.done.acquire()
            elif not entry.done.acquire(timeout=max(0.0, deadline - self.write_time - time.monotonic())):
                with self._lock:
                    if not entry.lead and entry in self._pending:  # no write took it yet: it never will
                        self._pending.remove(entry)
                        raise Expired()
                entry.done.acquire()  # in a write already (it ends within write_time), or to lead
            if not entry.lead:
                if entry.error is not None:
                    raise entry.error
                return
        with self._lock:
            now = time.monotonic()
            batch: list[_Entry] = []
            late: list[_Entry] = []
            for e in self._pending:
                (late if e.deadline is not None and e.deadline - now < self.write_time else batch).append(e)
            self._pending = []
        error: BaseException | None = None
        try:
            if batch and self._write([e.item for e in batch]) is False:
                error = Expired()
        except BaseException as exc:  # every waiter hears it; this thread raises it below
            error = exc
        for e in late:
            e.error = Expired()
        for e in batch:
            e.error = error
        for e in (*batch, *late):
            if e is not entry:
                e.done.release()
        with self._lock:
            if self._pending:  # the first who came meanwhile writes the next batch
                nxt = self._pending[0]
                nxt.lead = True
                nxt.done.release()
            else:
                self._writing = False
        if entry.error is not None:
            raise entry.error


class _Broker(RedisBroker):
    """dramatiq's Redis broker, its enqueue written by group commit.

    ``RedisBroker.enqueue`` ends in ``do_enqueue(queue, id, data)``, whose ``dispatch`` script
    stores the message in the queue's hash (``<queue>.msgs``) and appends its id to the
    queue's list (and sometimes does the queue's upkeep: requeues a dead worker's messages).
    Here the messages waiting together are stored as that script stores them, by lane: one
    ``HSET`` of their data, then one ``RPUSH`` of their ids, in one pipeline (a consumer
    that fetches in between finds no id without its data); a batch due for upkeep
    (``maintenance_chance``) runs its first message through the script itself, with the
    arguments ``RedisBroker._dispatch`` gives it (dramatiq 2.x: pinned below 3 in
    pyproject). The keys, the script and the consumers are dramatiq's own."""

    def __init__(self, *, write_time: float = 0.0, **options: Any) -> None:
        super().__init__(**options)
        self._commit = GroupCommit(self._write, write_time=write_time)
        self._enqueue_by = self.client.register_script(_ENQUEUE_BY)
        self._deadline = threading.local()
        self.clock_offset = 0.0
        """Redis's clock minus this machine's, in seconds (measured by :meth:`Jobs.ping`)."""
        self._fetch = self.client.register_script(FETCH)
        self._beat = self.client.register_script(BEAT)
        self.on_dead_letter: DeadLetter | None = None

    def consume(self, queue_name: str, prefetch: int = 1, timeout: int = 5000) -> Consumer:
        return Consumer(self, queue_name, prefetch, timeout)

    def sent(self) -> tuple[str, str] | None:
        """The queue and Redis id of the message this thread's last :meth:`enqueue_by` wrote (None: none)."""
        found: tuple[str, str] | None = getattr(self._deadline, "sent", None)
        return found

    def fetch(self, queue_name: str, prefetch: int) -> list[tuple[str, bytes | None]]:
        """Up to ``prefetch`` messages of ``queue_name``, each id with its data (None: none stored)."""
        if self._should_do_maintenance("fetch"):  # dramatiq's upkeep, as its own fetch would do it
            self.scripts["dispatch"](keys=[self.namespace], args=[
                "fetch", current_millis(), queue_name, self.broker_id, self.heartbeat_timeout,
                self.dead_message_ttl, 1, self._max_unpack_size(), 0])
        queue = f"{self.namespace}:{queue_name}"
        found = self._fetch(keys=[f"{self.namespace}:__heartbeats__", queue, f"{queue}.msgs",
                                  f"{self.namespace}:__acks__.{self.broker_id}.{queue_name}"],
                            args=[current_millis(), self.broker_id, prefetch])
        return [(text_of(found[i]), found[i + 1]) for i in range(0, len(found), 2)]

    def beat(self, lane: str = "", *, lanes: Collection[str] = ()) -> tuple[int, list[float | None]]:
        """Note that a consumer of ``lane`` looks for work; Redis's time (ms) and the last look of each of ``lanes``."""
        now, *seen = self._beat(keys=[CONSUMERS], args=[lane, *lanes])
        return int(now), [None if s is None else float(s) for s in seen]

    def admit(self, queue_name: str, message_id: str, data: bytes | None) -> Message[Any] | None:
        """The message stored as ``data``, or None once it is moved to :data:`DEAD_LETTERS` (one log
        line, without its content; ``on_dead_letter`` told): never an exception for a bad entry."""
        try:
            return decode(queue_name, message_id, data)
        except Exception as exc:
            reason = str(exc) if isinstance(exc, Poisoned) else "error"
        lane = q_name(queue_name)
        log.error("job %s on the %s lane cannot be decoded (%s): moved to the dead-letter list %s",
                  message_id[:80], lane, reason, DEAD_LETTERS)
        record = {"lane": lane, "id": message_id, "reason": reason, "at": time.time(),
                  "data": None if data is None else data[:DEAD_DATA_MAX].decode("utf-8", "backslashreplace")[
                      :DEAD_DATA_MAX]}
        queue = f"{self.namespace}:{queue_name}"
        pipe = self.client.pipeline(transaction=True)
        pipe.rpush(DEAD_LETTERS, json.dumps(record))
        pipe.ltrim(DEAD_LETTERS, -DEAD_KEEP, -1)
        pipe.srem(f"{self.namespace}:__acks__.{self.broker_id}.{queue_name}", message_id)
        pipe.hdel(f"{queue}.msgs", message_id)
        pipe.execute()
        if self.on_dead_letter is not None:
            try:
                self.on_dead_letter(lane, reason)
            except Exception:  # a metric must not stop the consumer
                log.exception("counting a dead-lettered job failed")
        return None

    def enqueue_by(self, message: Message[Any], deadline: float | None) -> None:
        """``enqueue(message)``, given up (``Expired``) when it cannot be stored by ``deadline``."""
        self._deadline.value, self._deadline.sent = deadline, None
        try:
            self.enqueue(message)
        except REDIS_TIMEOUT:  # no answer in time: stored or not, it must not stay stored
            if deadline is not None and (sent := self.sent()) is not None:
                self.retract(*sent)
            raise
        finally:
            self._deadline.value = None

    def retract(self, queue_name: str, message_id: str) -> None:
        """Take back a submission whose write got no answer in time, so that "busy" stays true.

        The write carries its own expiry (:data:`_ENQUEUE_BY`): a Redis that runs it late stores
        nothing. But a Redis stopped after it stored the batch and before it sent the answer has
        stored it, and its answer comes too late. The removal (``HDEL`` of its data, ``LREM`` of its
        id) is written on a socket of its own, without waiting for an answer or for the
        connection's handshake, so it goes out at once even to a stopped Redis, which runs it when it
        runs again. A removal that cannot even be sent (Redis unreachable) is logged."""
        queue = f"{self.namespace}:{queue_name}"
        pool = self.client.connection_pool
        conn = pool.connection_class(**pool.connection_kwargs)
        commands: list[tuple[Any, ...]] = []
        password = getattr(conn, "password", None)
        if password:
            username = getattr(conn, "username", None)
            commands.append(("AUTH", username, password) if username else ("AUTH", password))
        if getattr(conn, "db", 0):
            commands.append(("SELECT", conn.db))
        commands += [("HDEL", f"{queue}.msgs", message_id), ("LREM", queue, 0, message_id)]
        try:
            sock = conn._connect()  # the socket alone: the handshake would wait on a stopped Redis
            try:
                sock.sendall(b"".join(conn.pack_commands(commands)))
            finally:
                sock.close()
        except _SEND_ERRORS as exc:
            log.warning("a submission that got no answer in time could not be taken back (%s): it may run "
                        "although it was refused as busy", type(exc).__name__)

    def do_enqueue(self, queue_name: str, message_id: str, data: bytes) -> None:
        self._deadline.sent = (queue_name, message_id)  # what a caller may have to take back (:meth:`Jobs._retract`)
        self._commit.submit((queue_name, message_id, data), deadline=getattr(self._deadline, "value", None))

    def _write(self, items: list[tuple[str, str, bytes]]) -> bool | None:
        if self._commit.write_time:
            return self._write_by(items)
        if self._should_do_maintenance("enqueue"):
            queue_name, message_id, data = items[0]
            self.scripts["dispatch"](keys=[self.namespace], args=[
                "enqueue", current_millis(), queue_name, self.broker_id, self.heartbeat_timeout,
                self.dead_message_ttl, 1, self._max_unpack_size(), message_id, data])  # loads the script if Redis lost it
            items = items[1:]
            if not items:
                return None
        lanes: dict[str, list[tuple[str, bytes]]] = {}
        for queue_name, message_id, data in items:
            lanes.setdefault(queue_name, []).append((message_id, data))
        pipe = self.client.pipeline(transaction=False)
        for queue_name, messages in lanes.items():
            queue = f"{self.namespace}:{queue_name}"
            pipe.hset(f"{queue}.msgs", mapping=dict(messages))
            pipe.rpush(queue, *(message_id for message_id, _ in messages))
        pipe.execute()
        return None

    def _write_by(self, items: list[tuple[str, str, bytes]]) -> bool:
        """The batch stored by :data:`_ENQUEUE_BY` only if Redis runs it within :data:`WRITE_SHARE` of
        ``write_time`` from now (by Redis's clock): a write this process gave up on (its answer not
        back in ``write_time``) is not applied when a stopped Redis resumes. The upkeep, when due,
        in the same round trip. False: not stored."""
        queues = sorted({queue_name for queue_name, _, _ in items})
        expires = int((time.time() + self.clock_offset + WRITE_SHARE * self._commit.write_time) * 1000)
        args: list[Any] = [expires]
        for queue_name, message_id, data in items:
            args += [queues.index(queue_name) + 1, message_id, data]
        calls: list[tuple[Any, list[str], list[Any]]] = []
        if self._should_do_maintenance("enqueue"):
            calls.append((self.scripts["dispatch"], [self.namespace], [
                "fetch", current_millis(), queues[0], self.broker_id, self.heartbeat_timeout,
                self.dead_message_ttl, 1, self._max_unpack_size(), 0]))
        calls.append((self._enqueue_by, [f"{self.namespace}:{q}" for q in queues], args))
        if len(calls) == 1:  # one script: one EVALSHA (loaded again if Redis lost it), without a pipeline's making
            script, keys, argv = calls[0]
            return bool(script(keys=keys, args=argv))
        pipe = self.client.pipeline(transaction=False)
        for script, keys, argv in calls:
            pipe.evalsha(script.sha, len(keys), *keys, *argv)
        results = pipe.execute(raise_on_error=False)
        for n, ((script, keys, argv), result) in enumerate(zip(calls, results, strict=True)):
            if isinstance(result, NoScriptError):  # Redis restarted: loaded and run again, that one alone
                results[n] = result = script(keys=keys, args=argv)
            if isinstance(result, Exception):
                raise result
        return bool(results[-1])


class JobsUnavailable(StoreUnavailable):
    """The queue's Redis does not answer; nothing was queued."""


class JobsBusy(JobsUnavailable):
    """The queue's Redis did not answer within the submission's deadline; nothing was queued."""


class Jobs:
    """The lanes on one Redis: :meth:`submit` on the front end, :meth:`consume` in a worker."""

    def __init__(self, client: Any, *, url: str = "", backlog: int = BACKLOG, heartbeat_ms: int = HEARTBEAT_MS,
                 max_age_ms: int = MAX_AGE_MS, deadline: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``deadline``: seconds a :meth:`submit` may take (``serve``'s front end: :data:`ACK_DEADLINE`;
        ``client`` then waits on Redis at most half of it, as :meth:`from_url` builds it).
        ``backlog``: the fewest messages a lane takes (:meth:`limit`); ``clock``: seconds, for the
        answer rate."""
        self.url, self.backlog, self.deadline, self._clock = url, backlog, deadline, clock
        self.broker = _Broker(client=client, namespace=NAMESPACE, middleware=[AgeLimit(max_age=max_age_ms)],
                              heartbeat_timeout=heartbeat_ms, maintenance_chance=MAINTENANCE_CHANCE,
                              write_time=deadline / 2 if deadline else 0.0)
        self._handler: Handler | None = None
        self._actors = {lane: dramatiq.Actor(self._runner(lane), broker=self.broker, actor_name=f"upgradebot_{lane}",
                                             queue_name=lane, priority=0, options={}) for lane in LANES}
        self._worker: dramatiq.Worker | None = None
        self._depths: dict[str, tuple[float, int]] = {}
        self._reading = {lane: threading.Lock() for lane in LANES}
        """By lane: held by the one submission reading its depth from Redis."""
        self._answered: dict[str, tuple[float, int]] = {}
        """By lane: since when answers are counted, and how many so far."""
        self._rates: dict[str, float] = {}
        """By lane: messages a second its workers answered lately."""
        self.consumer_stale_ms = CONSUMER_STALE_MS

    @property
    def on_dead_letter(self) -> DeadLetter | None:
        """Told ``(lane, reason)`` of each job a consumer of this process dead-lettered."""
        return self.broker.on_dead_letter

    @on_dead_letter.setter
    def on_dead_letter(self, value: DeadLetter | None) -> None:
        self.broker.on_dead_letter = value

    @classmethod
    def from_url(cls, url: str, **options: Any) -> Jobs:
        """The lanes on the Redis at ``url``, checked to answer (``JobsUnavailable`` if not)."""
        deadline = options.get("deadline")
        jobs = cls(raw_client(url, timeout=deadline / 2 if deadline else None), url=url, **options)
        jobs.ping()
        return jobs

    def _unavailable(self, exc: Exception) -> JobsUnavailable:
        return JobsUnavailable(f"the job queue: {unreachable(self.url, exc)}")

    def ping(self) -> None:
        """Redis answers (``JobsUnavailable`` if not); its clock's offset from this machine's is noted."""
        try:
            before = time.time()
            seconds, micros = self.broker.client.time()
            after = time.time()
        except REDIS_ERRORS as exc:
            raise self._unavailable(exc) from exc
        self.broker.clock_offset = seconds + micros / 1e6 - (before + after) / 2

    def submit(self, lane: str, kind: str, payload: dict[str, Any]) -> bool:
        """Queue ``kind`` with ``payload`` (JSON) on ``lane``; False when the lane is full,
        ``JobsBusy`` when Redis did not store it within :attr:`deadline` (nor will it later),
        ``JobsUnavailable`` when Redis does not answer."""
        until = None if self.deadline is None else time.monotonic() + self.deadline
        try:
            if self._depth(lane) >= self.limit(lane):
                return False
            self.broker.enqueue_by(self._actors[lane].message(kind, {**payload, "queued_at": time.time()}), until)
            read_at, depth = self._depths.get(lane, (0.0, 0))
            self._depths[lane] = (read_at, depth + 1)  # approximate under races: re-read twice a second
        except Expired:
            raise JobsBusy(f"the job queue: Redis did not store it within {self.deadline:.1f} s") from None
        except REDIS_TIMEOUT as exc:
            if self.deadline is None:
                raise self._unavailable(exc) from exc
            raise JobsBusy(f"the job queue: Redis did not answer within {self.deadline / 2:.1f} s") from None
        except REDIS_ERRORS as exc:
            raise self._unavailable(exc) from exc
        return True

    def later(self, lane: str, kind: str, payload: dict[str, Any], *, delay: float | None = None) -> None:
        """Put ``kind`` with ``payload`` (its ``queued_at`` as it is) back on ``lane``, to be taken
        again in ``delay`` seconds (None: :func:`wait_delay` of how many wait there already): on
        the lane's delay queue, held meanwhile by a worker of the lane (back on the queue if that
        worker dies); not counted against the lane's backlog, which counted it when the front end
        queued it. ``JobsUnavailable`` when Redis does not answer."""
        try:
            if delay is None:
                delay = wait_delay(int(self.broker.client.hlen(f"{NAMESPACE}:{lane}.DQ.msgs")))
            self.broker.enqueue(self._actors[lane].message(kind, payload), delay=max(1, int(delay * 1000)))
        except REDIS_ERRORS as exc:
            raise self._unavailable(exc) from exc

    def _depth(self, lane: str) -> int:
        """How many wait on ``lane``, read from Redis at most every :data:`DEPTH_EVERY` seconds and
        counted up by this process's own submissions in between (one round trip per request, not two)."""
        read_at, depth = self._depths.get(lane, (0.0, 0))
        now = self._clock()
        full = depth >= self.limit(lane)
        if now - read_at < DEPTH_EVERY and not full:
            return depth
        # One request reads it; those arriving meanwhile (a burst: one per HTTP thread) count on from
        # the depth known instead of a round trip each before their enqueue, and count no answer
        # twice. Only a lane that looks full makes them wait for the fresh depth.
        reading = self._reading[lane]
        if not reading.acquire(blocking=full):
            return depth
        try:
            read_at, depth = self._depths.get(lane, (0.0, 0))
            if now - read_at < DEPTH_EVERY and depth < self.limit(lane):  # read while this one waited
                return depth
            waiting = self.waiting(lane)
            self._count_answers(lane, now=now, counted=depth, waiting=waiting)
            self._depths[lane] = (now, waiting)
            return waiting
        finally:
            reading.release()

    def limit(self, lane: str) -> int:
        """How many messages ``lane`` takes: what its workers answer in :data:`BACKLOG_SECONDS`
        at their recent rate, at least :attr:`backlog`, at most :data:`BACKLOG_MAX`."""
        return max(self.backlog, min(BACKLOG_MAX, int(self._rates.get(lane, 0.0) * BACKLOG_SECONDS)))

    def _count_answers(self, lane: str, *, now: float, counted: int, waiting: int) -> None:
        """Note what the workers answered since the last read (``counted``: what waited then
        plus this process's submissions since; less what waits now); every :data:`RATE_EVERY`
        seconds with work on the lane, the rate is the mean of the old one and the new. Another
        front end's submissions make it lower than it is, never higher."""
        since, answered = self._answered.get(lane, (now, 0))
        answered += max(0, counted - waiting)
        if now - since >= RATE_EVERY:
            if answered or waiting:  # the workers had work: an idle lane says nothing of their pace
                rate = answered / (now - since)
                old = self._rates.get(lane)
                self._rates[lane] = rate if old is None else (old + rate) / 2
            since, answered = now, 0
        self._answered[lane] = (since, answered)

    def waiting(self, lane: str) -> int:
        """Messages on ``lane`` nobody took yet."""
        return int(self.broker.client.llen(f"{NAMESPACE}:{lane}"))

    def _runner(self, lane: str) -> Callable[[str, dict[str, Any]], None]:
        def run(kind: str, payload: dict[str, Any]) -> None:
            if self._handler is None:
                raise RuntimeError("a message was taken by a process that consumes no lane")
            self._handler(lane, kind, payload)

        run.__name__ = f"run_{lane}"
        return run

    def consume(self, handler: Handler, *, lanes: Collection[str], threads: int) -> None:
        """Take messages off ``lanes`` on ``threads`` threads, each run by ``handler``, until :meth:`stop`."""
        unknown = set(lanes) - set(LANES)
        if unknown or not lanes:
            raise ValueError(f"lanes are {', '.join(LANES)}; not {', '.join(sorted(unknown)) or 'none'}")
        self._handler = handler
        self._worker = Worker(self.broker, queues=set(lanes), worker_threads=threads, worker_timeout=250)
        self._worker.start()

    def dead_lanes(self) -> list[str]:
        """The lanes this process consumes whose consumer thread is no longer running."""
        if self._worker is None:
            return []
        return sorted({q_name(name) for name, thread in self._worker.consumers.items() if not thread.is_alive()})

    def check_consumers(self, lanes: Collection[str] = LANES) -> None:
        """Readiness: a consumer of each of ``lanes`` looked for work in the last
        ``consumer_stale_ms`` (by Redis's clock; ``ConsumerDown`` names the lanes none did)."""
        names = list(lanes)
        try:
            now, seen = self.broker.beat(lanes=names)
        except REDIS_ERRORS as exc:
            raise self._unavailable(exc) from exc
        down = [lane for lane, last in zip(names, seen, strict=True) if last is None or now - last > self.consumer_stale_ms]
        if down:
            raise ConsumerDown(f"no consumer took from the {', '.join(down)} lane(s) in the last "
                               f"{self.consumer_stale_ms / 1000:.0f} s")

    def stop(self, timeout: float = 30.0) -> None:
        """Take no more messages; wait up to ``timeout`` for those running (the rest go back on the queue)."""
        if self._worker is not None:
            self._worker.stop(timeout=int(timeout * 1000))
            self._worker = None
        with contextlib.suppress(*REDIS_ERRORS):
            self.broker.close()


WAIT_RATE = 50.0
"""Long reads waiting their turn on a lane taken again per second, all of them together: each waits
(before it is taken again) as many seconds as there are waiting over this rate, at least
:data:`WAIT_FIRST`, at most :data:`WAIT_MOST`, times a random half to one, so they come back
spread out (a freed slot is taken within a few tens of ms) and not in waves (all waiting 4 s
together answered six every 4 s), at the cost of about this many moves on Redis a second."""
WAIT_FIRST = 0.2
WAIT_MOST = 10.0
WAIT_MAX = 25 * 60.0
"""Seconds a long read may have waited since it was queued and still be run: Slack's ``response_url``
lives 30 minutes, and the read's answer must reach it (a longer wait is answered that it expired)."""


def wait_delay(waiting: int) -> float:
    """Seconds before a long read waiting its turn is taken again, ``waiting`` waiting with it (:data:`WAIT_RATE`)."""
    return random.uniform(0.5, 1.0) * min(WAIT_MOST, max(WAIT_FIRST, waiting / WAIT_RATE))


def queued_at(payload: dict[str, Any]) -> float | None:
    """When ``payload`` was queued (seconds since the epoch, the front end's clock), None when it says nothing."""
    queued = payload.get("queued_at")
    return float(queued) if isinstance(queued, (int, float)) else None


def queued_for(payload: dict[str, Any]) -> float:
    """Seconds since ``payload`` was queued (0 when it says nothing)."""
    queued = queued_at(payload)
    return max(0.0, time.time() - queued) if queued is not None else 0.0
