"""The simulated clock: wall time scaled by a speed factor, plus jumps that tests ask for.

Every controller in kubesim reads time from here, never from ``time.time()``, so a test
can move the cluster 24 hours ahead with ``POST /sim/v1/clock`` and watch events expire,
crash-loop back-offs grow and slow images become ready.
"""

from __future__ import annotations

import datetime as dt
import re
import time

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str | float | int) -> float:
    """Seconds in a Go-style duration such as ``90s``, ``1h30m`` or ``24h`` (numbers are seconds)."""
    if isinstance(text, int | float):
        return float(text)
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    pos, total = 0, 0.0
    for match in _DURATION.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        pos = match.end()
    if pos != len(text) or not text:
        raise ValueError(f"invalid duration {text!r}: use forms like 90s, 15m, 1h30m, 24h")
    return total


def rfc3339(moment: dt.datetime) -> str:
    """Kubernetes' timestamp form: second precision, UTC, a trailing Z."""
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def rfc3339_micro(moment: dt.datetime) -> str:
    """MicroTime form (events' eventTime): microsecond precision, UTC, a trailing Z."""
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: str | None) -> dt.datetime | None:
    """Parse an RFC 3339 timestamp as Kubernetes writes it (``None`` stays ``None``)."""
    if not text:
        return None
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


class SimClock:
    """Simulated time: ``start + (monotonic elapsed) * speed + advanced``."""

    def __init__(self, start: dt.datetime | None = None, speed: float = 1.0) -> None:
        self._start = (start or dt.datetime.now(dt.UTC)).astimezone(dt.UTC)
        self._mono0 = time.monotonic()
        self._advanced = 0.0
        self.speed = speed

    def time(self) -> float:
        """Seconds since the Unix epoch, in simulated time."""
        elapsed = (time.monotonic() - self._mono0) * self.speed
        return self._start.timestamp() + elapsed + self._advanced

    def now(self) -> dt.datetime:
        """The simulated moment as an aware UTC datetime."""
        return dt.datetime.fromtimestamp(self.time(), dt.UTC)

    def advance(self, seconds: float) -> None:
        """Jump forward; timers that fall due are fired by the simulation loop."""
        if seconds < 0:
            raise ValueError("the clock only moves forward")
        self._advanced += seconds

    def real_seconds_until(self, sim_moment: float) -> float:
        """Wall-clock seconds until the simulated moment (0 when it has passed)."""
        return max(0.0, (sim_moment - self.time()) / self.speed)
