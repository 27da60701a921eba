"""Events as kube-scheduler writes them (events.k8s.io/v1, read back through core/v1): ``eventTime``
set, ``firstTimestamp``/``lastTimestamp`` null, no ``count``, a ``series`` from the second
occurrence, ``source`` empty and ``reportingInstance`` the scheduler's own (``default-scheduler-<host>``,
client-go ``tools/events`` ``NewRecorder``). The bot reads them as it reads old-style ones: the
times from ``eventTime`` and the series, the count from the series, no node taken from the
scheduler's instance; and orders them with old-style events right."""

from __future__ import annotations

import datetime as dt
from typing import Any

from runbooks.daemonset.events import event_checks, event_from, split
from runbooks.stability.tallying import Scope

UTC = dt.UTC


def new_style(*, at: str, series: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "ml-job.18a2", "namespace": "ml-team", "creationTimestamp": at[:19] + "Z"},
            "involvedObject": {"kind": "Pod", "namespace": "ml-team", "name": "ml-job"},
            "reason": "FailedScheduling", "type": "Warning", "action": "Scheduling",
            "message": "0/4 nodes are available: 3 Insufficient nvidia.com/gpu.",
            "source": {}, "firstTimestamp": None, "lastTimestamp": None, "eventTime": at, "series": series,
            "reportingComponent": "default-scheduler", "reportingInstance": "default-scheduler-control-plane1"}


def old_style(*, first: str, last: str, count: int) -> dict[str, Any]:
    return {"metadata": {"name": "old.1", "namespace": "ml-team"},
            "involvedObject": {"kind": "Pod", "namespace": "ml-team", "name": "old"},
            "reason": "FailedScheduling", "type": "Warning",
            "message": "0/4 nodes are available: 3 Insufficient nvidia.com/gpu.",
            "source": {"component": "default-scheduler"}, "firstTimestamp": first, "lastTimestamp": last,
            "count": count, "eventTime": None, "reportingComponent": "default-scheduler", "reportingInstance": ""}


def test_a_new_style_event_is_read_from_its_event_time_and_series() -> None:
    once = event_from(new_style(at="2026-12-07T10:00:00.123456Z"))
    assert once.first == once.last == dt.datetime(2026, 12, 7, 10, 0, 0, 123456, tzinfo=UTC)
    assert once.count == 1 and once.component == "default-scheduler" and once.host == ""
    again = event_from(new_style(at="2026-12-07T10:00:00.123456Z",
                                 series={"count": 4, "lastObservedTime": "2026-12-07T10:20:00.000001Z"}))
    assert again.count == 4 and again.last == dt.datetime(2026, 12, 7, 10, 20, 0, 1, tzinfo=UTC)


def test_new_and_old_style_events_are_ordered_by_their_own_times() -> None:
    since = dt.datetime(2026, 12, 7, 10, 0, tzinfo=UTC)
    events = [event_from(new_style(at="2026-12-07T10:05:00.000000Z")),
              event_from(new_style(at="2026-12-07T09:00:00.000000Z",
                                   series={"count": 2, "lastObservedTime": "2026-12-07T10:30:00.000000Z"})),
              event_from(new_style(at="2026-12-07T09:00:00.000000Z")),
              event_from(old_style(first="2026-12-07T09:30:00Z", last="2026-12-07T10:10:00Z", count=3))]
    new, again = split(events, since)
    assert [e.first.hour for e in new if e.first] == [10]
    assert sorted(e.count for e in again) == [2, 3]
    checks = event_checks({"FailedScheduling": events}, since=since, nodes=["gpu-node1"], scope="gpu-node1",
                           gpu_resources=["nvidia.com/gpu"], dra=False)
    scheduling = next(c for c in checks if c.name == "events-failed-scheduling")
    assert scheduling.status.value == "fail" and scheduling.evidence["new_count"] == 1


def test_the_stability_tally_reads_a_new_style_event_without_a_node_from_the_scheduler() -> None:
    scope = Scope(namespace="kube-system", daemonset="nvidia-device-plugin-daemonset", nodes=frozenset({"gpu-node1"}))
    seen = scope.matters(new_style(at="2026-12-07T10:00:00.123456Z",
                                   series={"count": 3, "lastObservedTime": "2026-12-07T11:00:00.000000Z"}))
    assert seen is not None
    assert (seen.first, seen.last, seen.node) == ("2026-12-07T10:00:00", "2026-12-07T11:00:00", "")
