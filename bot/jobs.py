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
older one is dropped unrun. A lane holding ``backlog`` messages takes no more
(:meth:`Jobs.submit` answers False and the front end says it is busy); the depth is read
at most twice a second, and counted up by the front end's own submissions in between.

Submissions are written by group commit (:class:`GroupCommit`): one request thread
writes its message at once; those that arrive while it waits on Redis go together in the
next pipeline, each thread answering Slack only once its own message is stored. Fifty
commands at once cost a few round trips, not fifty (the front end's CPU per command was
two thirds Redis round trips).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Collection
from typing import Any

import dramatiq
from dramatiq.brokers.redis import RedisBroker
from dramatiq.common import current_millis
from dramatiq.middleware import AgeLimit

from bot.storage.layout import PREFIX
from bot.storage.redis_store import REDIS_ERRORS, raw_client, unreachable
from runbooks.engine.store import StoreUnavailable

log = logging.getLogger("upgradebot.jobs")

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

Handler = Callable[[str, str, dict[str, Any]], None]
"""``handler(lane, kind, payload)``: runs one message in a worker."""


class _Entry:
    __slots__ = ("done", "error", "item", "lead")

    def __init__(self, item: Any) -> None:
        self.item, self.lead = item, False
        self.done = threading.Lock()
        """Held until the entry is written or its thread is to lead: released once, by whoever
        wrote it (a bare lock as a one-shot signal: cheaper than an Event's condition)."""
        self.done.acquire()
        self.error: BaseException | None = None


class GroupCommit:
    """``submit(item)`` returns once ``write`` has stored it, with the items other threads
    submitted meanwhile in the same ``write`` call (no thread of its own, no waiting for a
    batch to fill: the first submitter writes at once; whoever arrives while a write is in
    flight joins the next one, written by the first of them). An error of ``write`` is
    raised in every thread whose item it held; a write that fails part-way (Redis gone in
    the middle of a pipeline) may have stored some of them, as a single write whose answer
    is lost may have."""

    def __init__(self, write: Callable[[list[Any]], None]) -> None:
        self._write = write
        self._lock = threading.Lock()
        self._pending: list[_Entry] = []
        self._writing = False

    def submit(self, item: Any) -> None:
        entry = _Entry(item)
        with self._lock:
            self._pending.append(entry)
            lead = not self._writing
            self._writing = True
        if not lead:
            entry.done.acquire()
            if not entry.lead:
                if entry.error is not None:
                    raise entry.error
                return
        with self._lock:
            batch, self._pending = self._pending, []
        error: BaseException | None = None
        try:
            self._write([e.item for e in batch])
        except BaseException as exc:  # every waiter hears it; this thread raises it below
            error = exc
        for e in batch:
            if e is not entry:
                e.error = error
                e.done.release()
        with self._lock:
            if self._pending:  # the first who came meanwhile writes the next batch
                nxt = self._pending[0]
                nxt.lead = True
                nxt.done.release()
            else:
                self._writing = False
        if error is not None:
            raise error


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

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._commit = GroupCommit(self._write)

    def do_enqueue(self, queue_name: str, message_id: str, data: bytes) -> None:
        self._commit.submit((queue_name, message_id, data))

    def _write(self, items: list[tuple[str, str, bytes]]) -> None:
        if self._should_do_maintenance("enqueue"):
            queue_name, message_id, data = items[0]
            self.scripts["dispatch"](keys=[self.namespace], args=[
                "enqueue", current_millis(), queue_name, self.broker_id, self.heartbeat_timeout,
                self.dead_message_ttl, 1, self._max_unpack_size(), message_id, data])  # loads the script if Redis lost it
            items = items[1:]
            if not items:
                return
        lanes: dict[str, list[tuple[str, bytes]]] = {}
        for queue_name, message_id, data in items:
            lanes.setdefault(queue_name, []).append((message_id, data))
        pipe = self.client.pipeline(transaction=False)
        for queue_name, messages in lanes.items():
            queue = f"{self.namespace}:{queue_name}"
            pipe.hset(f"{queue}.msgs", mapping=dict(messages))
            pipe.rpush(queue, *(message_id for message_id, _ in messages))
        pipe.execute()


class JobsUnavailable(StoreUnavailable):
    """The queue's Redis does not answer; nothing was queued."""


class Jobs:
    """The lanes on one Redis: :meth:`submit` on the front end, :meth:`consume` in a worker."""

    def __init__(self, client: Any, *, url: str = "", backlog: int = BACKLOG, heartbeat_ms: int = HEARTBEAT_MS,
                 max_age_ms: int = MAX_AGE_MS) -> None:
        self.url, self.backlog = url, backlog
        self.broker = _Broker(client=client, namespace=NAMESPACE, middleware=[AgeLimit(max_age=max_age_ms)],
                              heartbeat_timeout=heartbeat_ms, maintenance_chance=MAINTENANCE_CHANCE)
        self._handler: Handler | None = None
        self._actors = {lane: dramatiq.Actor(self._runner(lane), broker=self.broker, actor_name=f"upgradebot_{lane}",
                                             queue_name=lane, priority=0, options={}) for lane in LANES}
        self._worker: dramatiq.Worker | None = None
        self._depths: dict[str, tuple[float, int]] = {}

    @classmethod
    def from_url(cls, url: str, **options: Any) -> Jobs:
        """The lanes on the Redis at ``url``, checked to answer (``JobsUnavailable`` if not)."""
        jobs = cls(raw_client(url), url=url, **options)
        jobs.ping()
        return jobs

    def _unavailable(self, exc: Exception) -> JobsUnavailable:
        return JobsUnavailable(f"the job queue: {unreachable(self.url, exc)}")

    def ping(self) -> None:
        try:
            self.broker.client.ping()
        except REDIS_ERRORS as exc:
            raise self._unavailable(exc) from exc

    def submit(self, lane: str, kind: str, payload: dict[str, Any]) -> bool:
        """Queue ``kind`` with ``payload`` (JSON) on ``lane``; False when the lane is full,
        ``JobsUnavailable`` when Redis does not answer."""
        try:
            if self._depth(lane) >= self.backlog:
                return False
            self._actors[lane].send(kind, {**payload, "queued_at": time.time()})
            read_at, depth = self._depths.get(lane, (0.0, 0))
            self._depths[lane] = (read_at, depth + 1)  # approximate under races: re-read twice a second
        except REDIS_ERRORS as exc:
            raise self._unavailable(exc) from exc
        return True

    def _depth(self, lane: str) -> int:
        """How many wait on ``lane``, read from Redis at most every :data:`DEPTH_EVERY` seconds and
        counted up by this process's own submissions in between (one round trip per request, not two)."""
        read_at, depth = self._depths.get(lane, (0.0, 0))
        now = time.monotonic()
        if now - read_at >= DEPTH_EVERY or depth >= self.backlog:
            depth = self.waiting(lane)
            self._depths[lane] = (now, depth)
        return depth

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
        self._worker = dramatiq.Worker(self.broker, queues=set(lanes), worker_threads=threads, worker_timeout=250)
        self._worker.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Take no more messages; wait up to ``timeout`` for those running (the rest go back on the queue)."""
        if self._worker is not None:
            self._worker.stop(timeout=int(timeout * 1000))
            self._worker = None
        with contextlib.suppress(*REDIS_ERRORS):
            self.broker.close()


def queued_for(payload: dict[str, Any]) -> float:
    """Seconds since ``payload`` was queued (0 when it says nothing)."""
    queued = payload.get("queued_at")
    return max(0.0, time.time() - float(queued)) if isinstance(queued, (int, float)) else 0.0
