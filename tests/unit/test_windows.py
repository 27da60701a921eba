"""Maintenance windows: the policy's days, hours and time zones, and the spans they open."""

from __future__ import annotations

import datetime as dt

import pytest
from pydantic import ValidationError

from runbooks.policy import Policy, Window
from runbooks.windows import describe, next_span, span_at

UTC = dt.UTC


def at(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text).replace(tzinfo=UTC) if "+" not in text else dt.datetime.fromisoformat(text)


def test_days_accept_ranges_across_the_weekend() -> None:
    assert Window(days=["mon-wed", "fri"]).days == ["mon", "tue", "wed", "fri"]
    assert Window(days="fri-mon").days == ["fri", "sat", "sun", "mon"]
    assert Window().days == ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]


@pytest.mark.parametrize(("fields", "says"), [
    ({"days": ["funday"]}, "is not a day"),
    ({"days": []}, "at least one day"),
    ({"hours": "9-17"}, "is not a span of hours"),
    ({"hours": "09:00-09:00"}, "is not a span of hours"),
    ({"hours": "24:00-02:00"}, "is not a span of hours"),
    ({"hours": "09:00-24:30"}, "is not a span of hours"),
    ({"timezone": "Mars/Olympus"}, "is not a time zone"),
])
def test_bad_windows_are_refused(fields: dict[str, object], says: str) -> None:
    with pytest.raises(ValidationError, match=says):
        Window.model_validate(fields)


def test_a_soak_longer_than_every_window_is_refused_at_start_up() -> None:
    with pytest.raises(ValidationError, match="longer than any maintenance window"):
        Policy.model_validate({"targets": [{"namespace": "kube-system", "name": "plugin",
                                            "windows": [{"hours": "09:00-10:00"}],
                                            "waves": [{"nodes": 1, "soak": "2h"}, "100%"]}]})


def test_a_working_day_window_in_berlin_follows_its_daylight_saving_time() -> None:
    windows = [Window(days=["mon-fri"], hours="09:00-17:00", timezone="Europe/Berlin")]
    # Tuesday 2026-12-01 (CET, UTC+1): open 08:00-16:00 UTC
    assert span_at(windows, at("2026-12-01T07:59:00")) is None
    span = span_at(windows, at("2026-12-01T08:00:00"))
    assert span is not None and (span.start, span.end) == (at("2026-12-01T08:00:00"), at("2026-12-01T16:00:00"))
    # in July (CEST, UTC+2): 07:00-15:00 UTC
    span = span_at(windows, at("2026-07-07T07:30:00"))
    assert span is not None and span.start == at("2026-07-07T07:00:00")
    # Friday evening: the next opens on Monday
    nxt = next_span(windows, at("2026-12-04T18:00:00"))
    assert nxt is not None and nxt.start == at("2026-12-07T08:00:00")
    assert describe(windows) == "mon,tue,wed,thu,fri 09:00-17:00 Europe/Berlin"


def test_a_night_window_runs_past_midnight_and_touching_windows_are_one_span() -> None:
    night = [Window(days=["sat"], hours="22:00-02:00")]
    span = span_at(night, at("2026-12-06T01:00:00"))  # Sunday 01:00 belongs to Saturday's window
    assert span is not None and (span.start, span.end) == (at("2026-12-05T22:00:00"), at("2026-12-06T02:00:00"))
    always = [Window()]
    span = span_at(always, at("2026-12-01T12:00:00"))
    assert span is not None and span.end - span.start > dt.timedelta(days=7)
    split = [Window(days=["tue"], hours="10:00-12:00"), Window(days=["tue"], hours="12:00-13:00")]
    span = span_at(split, at("2026-12-01T11:00:00"))
    assert span is not None and span.end == at("2026-12-01T13:00:00")


def test_the_next_span_is_one_the_soak_fits_in() -> None:
    windows = [Window(days=["mon-fri"], hours="09:00-10:00")]
    now = at("2026-12-01T09:40:00")
    current = next_span(windows, now)
    assert current is not None and (current.start, current.end) == (now, at("2026-12-01T10:00:00"))
    assert current.fits(now, 20 * 60) and not current.fits(now, 21 * 60)
    later = next_span(windows, now, fitting=30 * 60)
    assert later is not None and later.start == at("2026-12-02T09:00:00")
    assert next_span(windows, now, fitting=2 * 3600) is None
