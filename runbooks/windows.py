"""Maintenance windows: when a target may change (policy ``targets[].windows``), no I/O.

Each :class:`~runbooks.policy.Window` opens on its days at its start, in its time zone
(wall-clock time, so it follows daylight-saving changes), for its length; windows that
touch or overlap (``mon-sun 00:00-24:00``, or one ending when the next begins) are one
span. :func:`span_at` is the span a moment falls in, :func:`next_span` the next one to
open; both answer in UTC.
"""

from __future__ import annotations

import datetime as dt
import zoneinfo
from collections.abc import Sequence
from dataclasses import dataclass

from runbooks.policy_rollout import DAYS, Window

LOOK_AHEAD_DAYS = 15
"""Spans are computed from the day before a moment to this many days after it (a weekly
window always opens within eight days; the rest lets spans that touch be merged)."""


@dataclass(frozen=True)
class Span:
    """When a target may change: from ``start`` to ``end`` (UTC)."""

    start: dt.datetime
    end: dt.datetime

    def fits(self, moment: dt.datetime, seconds: float) -> bool:
        """Whether something started at ``moment`` and lasting ``seconds`` ends inside the span."""
        return self.start <= moment and moment + dt.timedelta(seconds=seconds) <= self.end


def _spans(windows: Sequence[Window], moment: dt.datetime) -> list[Span]:
    found: list[tuple[dt.datetime, dt.datetime]] = []
    for window in windows:
        zone = zoneinfo.ZoneInfo(window.timezone)
        start_min, length = window.minutes
        local_day = moment.astimezone(zone).date()
        for offset in range(-1, LOOK_AHEAD_DAYS):
            day = local_day + dt.timedelta(days=offset)
            if DAYS[day.weekday()] not in window.days:
                continue
            opens = dt.datetime.combine(day, dt.time(start_min // 60, start_min % 60), tzinfo=zone)
            closes = opens + dt.timedelta(minutes=length)  # wall-clock arithmetic: follows DST
            found.append((opens.astimezone(dt.UTC), closes.astimezone(dt.UTC)))
    merged: list[Span] = []
    for start, end in sorted(found):
        if merged and start <= merged[-1].end:
            if end > merged[-1].end:
                merged[-1] = Span(merged[-1].start, end)
            continue
        merged.append(Span(start, end))
    return merged


def span_at(windows: Sequence[Window], moment: dt.datetime) -> Span | None:
    """The open span ``moment`` falls in, or None (outside every window, or no windows)."""
    return next((s for s in _spans(windows, moment) if s.start <= moment < s.end), None)


def next_span(windows: Sequence[Window], moment: dt.datetime, *, fitting: float = 0.0) -> Span | None:
    """The first span after ``moment`` (the current one when it still has ``fitting`` seconds
    left) in which ``fitting`` seconds fit from its start; None when none does."""
    for span in _spans(windows, moment):
        if span.end <= moment:
            continue
        begin = max(span.start, moment)
        if begin + dt.timedelta(seconds=fitting) <= span.end:
            return Span(begin, span.end)
    return None


def describe(windows: Sequence[Window]) -> str:
    """``mon,tue 09:00-17:00 Europe/Berlin; sat 10:00-12:00 UTC``."""
    return "; ".join(str(w) for w in windows)
