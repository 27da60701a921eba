"""kubesim's new-style event recorder (:mod:`kubesim.eventseries`), as client-go's ``tools/events``
recorder writes (kube-scheduler's): ``eventTime`` set and no deprecated fields (core/v1 view:
``firstTimestamp``/``lastTimestamp`` null, no ``count``, empty ``source``), ``reportingInstance``
``<controller>-<host>``; the second isomorphic occurrence patches ``series: {count: 2}``, later
ones are written by the 30-minute refresh or when the series ends (6 idle minutes)."""

from __future__ import annotations

from _simkit import EVENTS, PODS, get, small

from kubesim.eventseries import Recorder

NOTE = "0/4 nodes are available: 3 Insufficient nvidia.com/gpu, 1 node(s) didn't match Pod's node affinity/selector."


def stored(sim, name: str):  # type: ignore[no-untyped-def]
    return [e for e in sim.store.list(EVENTS) if e["involvedObject"].get("name") == name
            and e.get("reportingComponent") == "default-scheduler"]


def test_an_event_is_written_new_style_and_its_repeats_as_a_series() -> None:
    sim = small(34)
    pod = next(p for p in sim.store.list(PODS) if p["metadata"]["namespace"] == "ml-team")
    name = pod["metadata"]["name"]
    recorder = Recorder(sim, "default-scheduler")
    recorder.eventf(pod, type="Warning", reason="FailedScheduling", action="Scheduling", note=NOTE)
    [event] = stored(sim, name)
    assert event["firstTimestamp"] is None and event["lastTimestamp"] is None and "count" not in event
    assert event["source"] == {} and event["action"] == "Scheduling" and event["message"] == NOTE
    assert event["reportingInstance"] == "default-scheduler-control-plane1"
    assert len(event["eventTime"]) == len("2026-12-07T10:00:00.000000Z") and event["eventTime"].endswith("Z")
    assert event["metadata"]["name"].startswith(f"{name}.") and event.get("series") is None
    sim.advance(10)
    recorder.eventf(pod, type="Warning", reason="FailedScheduling", action="Scheduling", note=NOTE)
    [event] = stored(sim, name)
    assert event["series"]["count"] == 2
    sim.advance(10)
    recorder.eventf(pod, type="Warning", reason="FailedScheduling", action="Scheduling", note=NOTE)
    assert stored(sim, name)[0]["series"]["count"] == 2  # counted in memory until the series is written
    sim.advance(7 * 60)  # 6 idle minutes end the series: its last count is written
    [event] = stored(sim, name)
    assert event["series"]["count"] == 3 and event["series"]["lastObservedTime"] > event["eventTime"]
    recorder.eventf(pod, type="Warning", reason="FailedScheduling", action="Scheduling", note=NOTE)
    assert len(stored(sim, name)) == 2  # a new event once the series is over
    assert get(sim, EVENTS, event["metadata"]["namespace"], event["metadata"]["name"]) is not None
