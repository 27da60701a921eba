"""Posting to Slack at about one message per second per channel, in order, from one thread.

Slack allows about one message a second in a channel (short bursts pass, sustained ones
get 429). A run reports every step, so :class:`Pacer` queues the messages of each channel
and sends them in order from a background thread, at most one per ``interval`` per
channel, channels independently. A job submitted with a ``key`` that is still waiting is
not queued twice: the root message of a run, updated at every state change, is sent once
with its latest content however many changes piled up (progress updates are coalesced).
A job that raises is logged and dropped; the next one runs.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger("upgradebot.pacing")

Job = Callable[[], None]


@dataclass
class _Channel:
    jobs: deque[tuple[str | None, Job]] = field(default_factory=deque)
    next_at: float = 0.0


class Pacer:
    def __init__(self, interval: float = 1.0, *, clock: Callable[[], float] = time.monotonic,
                 name: str = "upgradebot-pacer") -> None:
        self.interval = interval
        self._clock = clock
        self._channels: dict[str, _Channel] = {}
        self._running = 0
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def submit(self, channel: str, job: Job, *, key: str | None = None) -> bool:
        """Queue ``job`` for ``channel``; False when a job with ``key`` is already waiting."""
        with self._cond:
            queue = self._channels.setdefault(channel, _Channel())
            if key is not None and any(k == key for k, _ in queue.jobs):
                return False
            queue.jobs.append((key, job))
            self._cond.notify_all()
            return True

    @property
    def pending(self) -> int:
        with self._cond:
            return self._running + sum(len(c.jobs) for c in self._channels.values())

    def wait_idle(self, timeout: float) -> bool:
        """Wait until every queued job ran; False if ``timeout`` passed first."""
        deadline = self._clock() + timeout
        with self._cond:
            while self._running or any(c.jobs for c in self._channels.values()):
                left = deadline - self._clock()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.05))
        return True

    def close(self, timeout: float = 10.0) -> bool:
        """Send what is queued (up to ``timeout``), then stop the thread."""
        finished = self.wait_idle(timeout)
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout=max(0.1, timeout))
        return finished

    def _next(self) -> Job | None:
        """The next due job (marked running), or None after waiting a little."""
        with self._cond:
            if self._closed:
                return None
            now = self._clock()
            ready = [(c.next_at, name) for name, c in self._channels.items() if c.jobs]
            if not ready:
                self._cond.wait(0.5)
                return None
            due, name = min(ready)
            if due > now:
                self._cond.wait(due - now)
                return None
            channel = self._channels[name]
            _, job = channel.jobs.popleft()
            channel.next_at = now + self.interval
            self._running += 1
            return job

    def _loop(self) -> None:
        while True:
            with self._cond:
                if self._closed:
                    return
            job = self._next()
            if job is None:
                continue
            try:
                job()
            except Exception:  # one failed message must not stop the others
                log.exception("a paced Slack call failed")
            finally:
                with self._cond:
                    self._running -= 1
                    self._cond.notify_all()
