"""Which events are new since a step began, and what each event check concludes (pure)."""

from __future__ import annotations

import datetime as dt

from runbooks.daemonset.events import event_checks, event_from, split

T0 = dt.datetime(2025, 1, 6, 9, 0, 0, 500_000, tzinfo=dt.UTC)


def _event(reason: str, *, first: str, last: str | None = None, count: int = 1, host: str = "gpu-node1",
           kind: str = "Pod", name: str = "p", message: str = "", component: str = "kubelet") -> dict:
    return {"reason": reason, "message": message, "count": count, "firstTimestamp": first,
            "lastTimestamp": last or first, "involvedObject": {"kind": kind, "namespace": "kube-system", "name": name},
            "source": {"component": component, "host": host}}


def test_new_means_first_seen_at_or_after_the_step_began() -> None:
    """Second-precision times: an event first seen in the step's first second is new; a recurring old one is not."""
    same_second = event_from(_event("BackOff", first="2025-01-06T09:00:00Z"))
    earlier = event_from(_event("BackOff", first="2025-01-06T08:00:00Z", last="2025-01-06T09:00:05Z", count=7))
    stale = event_from(_event("BackOff", first="2025-01-06T08:00:00Z", last="2025-01-06T08:30:00Z"))
    new, again = split([same_second, earlier, stale], T0)
    assert new == [same_second] and again == [earlier]


def test_event_checks_scope_and_verdicts() -> None:
    """GPU scheduling failures anywhere fail; back-offs count only on nodes in scope; old ones only warn."""
    events = {
        "FailedScheduling": [event_from(_event(
            "FailedScheduling", first="2025-01-06T09:00:03Z", host="", component="default-scheduler",
            message="0/4 nodes are available: 1 Insufficient nvidia.com/gpu."))],
        "BackOff": [event_from(_event("BackOff", first="2025-01-06T09:00:02Z", host="gpu-node2")),
                    event_from(_event("BackOff", first="2025-01-06T08:00:00Z", last="2025-01-06T09:00:09Z"))],
        "Starting": [event_from(_event("Starting", first="2025-01-06T09:00:04Z", kind="Node", name="gpu-node1"))],
    }
    checks = {c.name: c for c in event_checks(events, since=T0, nodes=["gpu-node1"], scope="gpu-node1",
                                              gpu_resources=["nvidia.com/gpu"], dra=False)}
    assert {n: c.status.value for n, c in checks.items()} == {
        "events-failed-scheduling": "fail", "events-backoff": "warn", "events-admission": "pass", "kubelet-restarts": "fail"}
    assert "Insufficient nvidia.com/gpu" in checks["events-failed-scheduling"].detail
    assert checks["events-backoff"].evidence["recurring_count"] == 1
    assert checks["kubelet-restarts"].evidence["nodes"] == ["gpu-node1"]
