"""Clocks the engine and the steps read time from (tests pass a fake one)."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable


class SystemClock:
    """Wall-clock time in UTC; ``sleep`` really sleeps."""

    def now(self) -> dt.datetime:
        return dt.datetime.now(dt.UTC)

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))


class ClusterClock:
    """A cluster's clock: the API server's ``Date`` (``Cluster.server_time``).

    The demo and the tests give it to the report scheduler so that moving kubesim's clock
    24 hours ahead makes the 24 h report due: the clock is faked, the world is not.
    """

    def __init__(self, server_time: Callable[[], dt.datetime]) -> None:
        self.server_time = server_time

    def now(self) -> dt.datetime:
        return self.server_time()

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))
