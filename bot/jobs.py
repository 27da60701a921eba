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
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Collection
from typing import Any

import dramatiq
from dramatiq.brokers.redis import RedisBroker
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


class JobsUnavailable(StoreUnavailable):
    """The queue's Redis does not answer; nothing was queued."""


class Jobs:
    """The lanes on one Redis: :meth:`submit` on the front end, :meth:`consume` in a worker."""

    def __init__(self, client: Any, *, url: str = "", backlog: int = BACKLOG, heartbeat_ms: int = HEARTBEAT_MS,
                 max_age_ms: int = MAX_AGE_MS) -> None:
        self.url, self.backlog = url, backlog
        self.broker = RedisBroker(client=client, namespace=NAMESPACE, middleware=[AgeLimit(max_age=max_age_ms)],
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
