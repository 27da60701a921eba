"""Clocks the engine and the steps read time from (tests pass a fake one)."""

from __future__ import annotations

import datetime as dt
import time


class SystemClock:
    """Wall-clock time in UTC; ``sleep`` really sleeps."""

    def now(self) -> dt.datetime:
        return dt.datetime.now(dt.UTC)

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))
