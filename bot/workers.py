"""The bounded pool of background workers that does everything after ``ack()``.

At most ``size`` commands run at once and at most ``backlog`` wait; :meth:`Workers.submit`
answers False when both are full, so the front end can say it is busy instead of
queueing without end. :meth:`Workers.shutdown` stops taking work and waits for what
runs (graceful shutdown on SIGTERM).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

log = logging.getLogger("upgradebot.workers")


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
