"""Background work: the bounded pool that does everything after ``ack()``, and the run driver.

:class:`Workers`: at most ``size`` jobs run at once and at most ``backlog`` wait;
:meth:`Workers.submit` answers False when both are full, so the front end can say it is
busy instead of queueing without end. :meth:`Workers.shutdown` stops taking work and
waits for what runs (graceful shutdown on SIGTERM).

:class:`Advancer` runs ``engine.advance`` for a run in its own pool of workers (cluster
steps take minutes; commands and clicks keep their own pool): it is the engine's
``wake`` in a serving bot. One process never drives a run from two threads: a run
already being advanced here is marked to be looked at again when the current drive ends
(the run's lease keeps other processes out). :meth:`Advancer.sweep` is ``engine.resume``
for a serving bot: it closes overdue gates (``expire_due``) and advances every unfinished
run that waits for work, not for people; :meth:`Advancer.start` sweeps at once and then
every ``interval`` seconds, so runs left by a restart or a dead replica go on, and
requests nobody decided expire.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from bot import logs
from runbooks.engine.commands import Engine
from runbooks.engine.driving import StepPaused
from runbooks.engine.runs import Run
from runbooks.engine.store import StoreUnavailable

log = logging.getLogger("upgradebot.workers")
run_log = logging.getLogger("upgradebot.runs")


class Workers:
    def __init__(self, size: int, *, backlog: int | None = None, name: str = "upgradebot-work") -> None:
        if size < 1:
            raise ValueError("a worker pool needs at least one thread")
        self.size = size
        self.backlog = size * 8 if backlog is None else backlog
        self._pool = ThreadPoolExecutor(max_workers=size, thread_name_prefix=name)
        self._slots = threading.BoundedSemaphore(size + self.backlog)
        self._pending = 0
        self._closed = False
        self._idle = threading.Condition()

    @property
    def pending(self) -> int:
        """Jobs running or waiting."""
        return self._pending

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> bool:
        """Run ``fn`` in the background; False (and nothing runs) when full or shut down."""
        if self._closed or not self._slots.acquire(blocking=False):
            return False
        with self._idle:
            self._pending += 1
        try:
            self._pool.submit(self._run, fn, args, kwargs)
        except RuntimeError:  # shut down between the check and the submit
            self._done()
            return False
        return True

    def _run(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        try:
            fn(*args, **kwargs)
        except Exception:
            log.exception("background job %s failed", getattr(fn, "__name__", fn))
        finally:
            self._done()

    def _done(self) -> None:
        self._slots.release()
        with self._idle:
            self._pending -= 1
            self._idle.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        """Wait until nothing runs or waits; False if ``timeout`` passed first."""
        deadline = time.monotonic() + timeout
        with self._idle:
            while self._pending:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(left)
        return True

    def shutdown(self, timeout: float = 30.0) -> bool:
        """Take no more work, wait up to ``timeout`` for the rest; True if all finished."""
        self._closed = True
        finished = self.wait_idle(timeout)
        if not finished:
            log.warning("shutting down with %d job(s) still running", self._pending)
        self._pool.shutdown(wait=finished, cancel_futures=True)
        return finished


class Slots(Protocol):
    """Where quotas are counted across processes (:class:`~bot.storage.redis_store.RedisRunStore`)."""

    def take_slot(self, sets: Sequence[tuple[str, str, int]], token: str, lease: float) -> int: ...

    def renew_slot(self, sets: Sequence[tuple[str, str]], token: str, lease: float) -> int: ...

    def give_slot(self, sets: Sequence[tuple[str, str]], token: str) -> None: ...


QUOTA_LEASE = 60.0
"""Seconds a running long command's slot is held without renewal: a worker that dies frees
its slots this long after (renewed every third of it while the command runs)."""


class Quotas:
    """How many long jobs one user and one channel may have running at once.

    :meth:`take` counts a job in (or says which quota is full: ``"user"`` or ``"channel"``),
    :meth:`give` counts it out. Counted in this process and, with ``shared`` (the store),
    across every worker process and replica: there a running job holds a slot whose lease
    (``lease`` seconds) a thread of this process renews until it is given back, so the slots
    of a process that died go free on their own (leases are scored by each process's own
    clock: machines whose clocks differ by more than a lease would see each other's slots as
    lapsed). When the store does not answer, the job is counted here only (the limit then
    holds per process) rather than refused.

    ``reads``: how many long *reads* (a long command that requests nothing: ``verify`` and its
    window, ``inventory``, ``report`` …) this process runs at once, whoever asks (:func:`long_reads`,
    its command threads but those reserved): beyond, :meth:`take` answers ``"busy"``, so the
    threads left answer short commands (``help``, ``runs``, ``status``) and requests
    (``canary``). Counted in this process, whose threads it keeps free."""

    def __init__(self, *, per_user: int, per_channel: int, shared: Slots | None = None,
                 lease: float = QUOTA_LEASE, reads: int | None = None) -> None:
        self.per_user, self.per_channel = per_user, per_channel
        self.shared, self.lease = shared, lease
        self.reads = reads
        self._reading = 0
        """Long reads taken and not given back in this process."""
        self._users: dict[str, int] = {}
        self._channels: dict[str, int] = {}
        self._held: dict[tuple[str, str | None], list[str | None]] = {}
        """Tokens of the shared slots this process holds, by user and channel (None: a job
        counted here only, the store not answering when it was taken)."""
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._renewer: threading.Thread | None = None

    def take(self, user: str, channel: str | None, *, read: bool = False) -> str | None:
        """Count a long command in (``read``: a long read, also against :attr:`reads`), or say
        what is full: ``"user"``, ``"channel"`` or ``"busy"`` (this process's long reads)."""
        with self._lock:
            if self._users.get(user, 0) >= self.per_user:
                return "user"
            if channel and self._channels.get(channel, 0) >= self.per_channel:
                return "channel"
            if read and self.reads is not None and self._reading >= self.reads:
                return "busy"
            self._count(user, channel, +1)
            self._reading += int(read)
        if self.shared is None:
            return None
        token = uuid.uuid4().hex
        limits = {"user": self.per_user, "channel": self.per_channel}
        sets = [(kind, name, limits[kind]) for kind, name in _sets(user, channel)]
        try:
            full = self.shared.take_slot(sets, token, self.lease)
        except StoreUnavailable as exc:
            log.warning("long commands are counted in this process only for now: %s", exc)
            with self._lock:  # no slot: whichever job of this user and channel ends first gives none back
                self._held.setdefault((user, channel), []).append(None)
            return None
        if full:
            with self._lock:
                self._count(user, channel, -1)
                self._reading -= int(read)
            return sets[full - 1][0]
        with self._lock:
            self._held.setdefault((user, channel), []).append(token)
            self._start_renewing()
        return None

    def give(self, user: str, channel: str | None, *, read: bool = False) -> None:
        """Count out a command :meth:`take` counted in (with the same ``read``)."""
        with self._lock:
            self._count(user, channel, -1)
            self._reading -= int(read)
            tokens = self._held.get((user, channel))
            token = tokens.pop() if tokens else None
            if tokens == []:
                del self._held[(user, channel)]
        if token is not None and self.shared is not None:
            try:
                self.shared.give_slot(_sets(user, channel), token)
            except StoreUnavailable as exc:  # no longer renewed: free once its lease runs out
                log.warning("a long command's slot is given back when its lease ends: %s", exc)

    def close(self, timeout: float = 5.0) -> None:
        """Stop renewing (what is still held goes free when its lease runs out)."""
        self._closed.set()
        if self._renewer is not None:
            self._renewer.join(timeout=timeout)

    def _count(self, user: str, channel: str | None, step: int) -> None:
        for counts, key in ((self._users, user), (self._channels, channel)):
            if key:
                counts[key] = counts.get(key, 0) + step
                if counts[key] <= 0:
                    del counts[key]

    def _start_renewing(self) -> None:
        if self._renewer is None and not self._closed.is_set():
            self._renewer = threading.Thread(target=self._renew, name="upgradebot-quotas", daemon=True)
            self._renewer.start()

    def _renew(self) -> None:
        while not self._closed.wait(self.lease / 3):
            with self._lock:
                held = [(key, token) for key, tokens in self._held.items() for token in tokens if token]
            for (user, channel), token in held:
                try:
                    assert self.shared is not None
                    self.shared.renew_slot(_sets(user, channel), token, self.lease)
                except StoreUnavailable as exc:
                    log.warning("renewing the slots of long commands failed (again in %.0f s): %s",
                                self.lease / 3, exc)
                    break
                except Exception:  # this thread must outlive any one failure: a slot not renewed lapses
                    log.exception("renewing the slots of long commands failed (again in %.0f s)", self.lease / 3)
                    break


def long_reads(workers: int, reserved: int) -> int:
    """How many long reads a process with ``workers`` command threads runs at once: all but
    ``reserved`` of them (``UPGRADEBOT_RESERVED_WORKERS``), and at least one (a process of one
    thread reserves none)."""
    return max(1, workers - reserved)


def _sets(user: str, channel: str | None) -> list[tuple[str, str]]:
    """The slot sets a job of ``user`` in ``channel`` counts in (a direct message: the user's only)."""
    return [("user", user)] + ([("channel", channel)] if channel else [])


class Advancer:
    def __init__(self, engine: Engine, *, workers: int = 4, interval: float = 30.0) -> None:
        self.engine = engine
        self.interval = interval
        self.workers = Workers(workers, name="upgradebot-run")
        self._busy: set[str] = set()
        self._again: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.also: list[Callable[[list[Run]], object]] = []
        """Called with the active runs after each sweep."""

    def submit(self, run_id: str) -> None:  # the engine's ``wake``: queued, so no run to return
        """Advance ``run_id`` in the background (once more after the drive in progress, if any)."""
        with self._lock:
            if run_id in self._busy:
                self._again.add(run_id)
                return
            self._busy.add(run_id)
        if not self.workers.submit(self._drive, run_id):
            with self._lock:
                self._busy.discard(run_id)
            run_log.warning("no worker free for run %s: the next sweep advances it", run_id)

    def _drive(self, run_id: str) -> None:
        with logs.bound(run=run_id):
            self._drive_bound(run_id)

    def _drive_bound(self, run_id: str) -> None:
        while True:
            try:
                run = self.engine.advance(run_id)
                run_log.info("run %s is %s", run_id, run.state.value)
            except StepPaused as exc:
                run_log.warning("%s", exc)
            except Exception:  # logged; the run keeps its state and the next sweep tries again
                run_log.exception("advancing run %s failed", run_id)
            with self._lock:
                if run_id not in self._again:
                    self._busy.discard(run_id)
                    return
                self._again.discard(run_id)

    def sweep(self) -> int:
        """Close overdue gates, advance every unfinished run that needs work, then let each
        ``also`` callback see the active runs (the Slack threads post a gate message that
        did not go out); how many runs were queued."""
        self.engine.expire_due()
        queued = 0
        active = self.engine.runs(active_only=True, limit=10_000)
        for run in active:
            if self.engine.needs_work(run):
                self.submit(run.id)
                queued += 1
        for also in list(self.also):
            try:
                also(active)
            except Exception:  # a front end failing must not stop the sweep
                run_log.exception("a sweep callback failed")
        return queued

    def _sweeping(self) -> None:
        while True:
            try:
                count = self.sweep()
                if count:
                    run_log.info("resumed %d unfinished run(s)", count)
            except Exception:  # the store may be down for a while; the next sweep retries
                run_log.exception("sweeping the unfinished runs failed")
            if self._stop.wait(self.interval):
                return

    def start(self) -> Advancer:
        """Sweep now (``resume`` at start-up), then every ``interval`` seconds."""
        self._thread = threading.Thread(target=self._sweeping, name="upgradebot-sweep", daemon=True)
        self._thread.start()
        return self

    def wait_idle(self, timeout: float) -> bool:
        return self.workers.wait_idle(timeout)

    def stop(self, timeout: float = 30.0) -> bool:
        """No more sweeps; wait up to ``timeout`` for the drives in progress (leases cover the rest)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        return self.workers.shutdown(timeout=timeout)
