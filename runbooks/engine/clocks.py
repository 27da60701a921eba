"""Clocks the engine and the steps read time from (tests pass a fake one)."""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the protocol only: the steps' settings models are not loaded with a clock (issue 39)
    from runbooks.engine.steps import Clock


class Cancelled(Exception):
    """A wait gave up because the process is stopping (a long read, never a run's step)."""


class SystemClock:
    """Wall-clock time in UTC; ``sleep`` really sleeps."""

    def now(self) -> dt.datetime:
        return dt.datetime.now(dt.UTC)

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))

    def wait(self, event: threading.Event, seconds: float) -> bool:
        """Sleep until ``event`` is set or ``seconds`` have passed (whether it was set)."""
        return event.wait(max(0.0, seconds))


class ClusterClock(SystemClock):
    """A cluster's clock: the API server's ``Date`` (``Cluster.server_time``); it sleeps as
    :class:`SystemClock` does.

    The demo and the tests give it to the report scheduler so that moving kubesim's clock
    24 hours ahead makes the 24 h report due: the clock is faked, the world is not.
    """

    def __init__(self, server_time: Callable[[], dt.datetime]) -> None:
        self.server_time = server_time

    def now(self) -> dt.datetime:
        return self.server_time()


class StoppableClock:
    """``inner``'s time, whose ``sleep`` raises :class:`Cancelled` within ``slice_`` seconds of
    ``stop`` being set: what long reads (``verify``'s observation window) wait on in a
    serving bot, so SIGTERM ends the process within its drain. Run steps keep the engine's
    own clock: a step is never cut short, a stopped process's runs resume after a restart."""

    def __init__(self, inner: Clock, stop: threading.Event, *, slice_: float = 0.25) -> None:
        self.inner, self.stop, self.slice = inner, stop, slice_

    def now(self) -> dt.datetime:
        return self.inner.now()

    def sleep(self, seconds: float) -> None:
        left = max(0.0, seconds)
        while True:
            if self.stop.is_set():
                raise Cancelled("the process is stopping")
            if left <= 0:
                return
            step = min(left, self.slice)
            self.inner.sleep(step)
            left -= step

    def wait(self, event: threading.Event, seconds: float) -> bool:
        left = max(0.0, seconds)
        while True:
            if self.stop.is_set():
                raise Cancelled("the process is stopping")
            if left <= 0:
                return event.is_set()
            step = min(left, self.slice)
            if wait_on(self.inner, event, step):
                return True
            left -= step


def wait_on(clock: Clock, event: threading.Event, seconds: float) -> bool:
    """``clock.wait(event, seconds)`` when the clock can wake on an event (the real ones);
    else (a test's fake clock) ``clock.sleep(seconds)``, then whether ``event`` is set."""
    wait = getattr(clock, "wait", None)
    if wait is not None:
        return bool(wait(event, seconds))
    clock.sleep(seconds)
    return event.is_set()
