"""New-style events, as a component using client-go's ``tools/events`` recorder writes them
(kube-scheduler does: its ``FailedScheduling`` and ``Scheduled``), beside the core/v1 recorder of
:meth:`kubesim.simulation.Simulation.record_event` that kubelets and controllers use.

Read in kubernetes/client-go v0.34.2 ``tools/events/event_broadcaster.go`` and ``event_recorder.go``:

- ``NewRecorder(scheme, reportingController)``: ``reportingInstance`` is ``<controller>-<hostname>``;
  each event is named ``<regarding's name>.<unix nanos in hex>`` with ``eventTime`` (a MicroTime)
  set and no ``deprecated*`` fields, so its core/v1 view has ``firstTimestamp`` and
  ``lastTimestamp`` null, no ``count`` and an empty ``source``;
- ``recordToSink`` and ``getKey``: an event isomorphic to a cached one (same type, action, reason,
  reporting controller and instance, regarding and related object: the note does not count) is
  not written again; the second occurrence patches the first with ``series: {count: 2,
  lastObservedTime}``; later ones only bump the cached series, which ``refreshExistingEventSeries``
  writes every 30 minutes and ``finishSeries`` writes once no occurrence came for 6 minutes
  (then forgets it); an event without a series is forgotten 6 minutes after its ``eventTime``.

Both timers run on kubesim's simulated clock.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

from kubesim.clock import rfc3339_micro
from kubesim.errors import ApiError
from kubesim.store import key_of

if TYPE_CHECKING:
    from kubesim.simulation import Simulation

EVENTS = ("", "events")
REFRESH_SECONDS = 30 * 60.0
"""``refreshTime``: how often the recorder writes its open series."""
FINISH_SECONDS = 6 * 60.0
"""``finishTime``: how long after its last occurrence a series (or a lone event) is closed."""
HOSTNAME = "control-plane1"
"""The host kubesim's control-plane components run on (``os.Hostname()``)."""


def reference(obj: dict[str, Any]) -> dict[str, Any]:
    """``reference.GetReference``: the object's kind, namespace, name, uid, apiVersion, resourceVersion."""
    m = obj.get("metadata") or {}
    ref = {"kind": obj.get("kind"), "namespace": m.get("namespace"), "name": m.get("name"), "uid": m.get("uid"),
           "apiVersion": obj.get("apiVersion"), "resourceVersion": m.get("resourceVersion")}
    return {k: v for k, v in ref.items() if v}


class Recorder:
    """One component's new-style recorder (``reportingController``), with its isomorphic-event cache."""

    def __init__(self, sim: Simulation, controller: str) -> None:
        self.sim = sim
        self.controller = controller
        self.instance = f"{controller}-{HOSTNAME}"
        self._cache: dict[str, dict[str, Any]] = {}  # getKey -> the event as last recorded (series in memory)
        self._stored: dict[str, tuple[str, str]] = {}  # getKey -> the stored event's key
        self._refresh_started = False

    def _key(self, regarding: dict[str, Any], reason: str, type: str, action: str) -> str:
        return repr((type, action, reason, self.controller, self.instance, sorted(regarding.items())))

    def eventf(self, regarding_obj: dict[str, Any], *, type: str, reason: str, action: str, note: str) -> dict[str, Any]:
        """``Eventf(regarding, nil, type, reason, action, note)``: write or join an isomorphic series."""
        now = self.sim.clock.now()
        regarding = reference(regarding_obj)
        key = self._key(regarding, reason, type, action)
        cached = self._cache.get(key)
        if cached is not None:
            series = cached.get("series")
            if series is not None:  # a running series: counted in memory, written by the timers
                series["count"] += 1
                series["lastObservedTime"] = rfc3339_micro(now)
                return cached
            cached["series"] = {"count": 2, "lastObservedTime": rfc3339_micro(now)}
            self._write(key)
            self._later(key, FINISH_SECONDS)
            return cached
        ns = regarding.get("namespace") or "default"
        nanos = int(now.timestamp() * 1e9) + next(self.sim._seq)
        event = {
            "metadata": {"name": f"{regarding.get('name')}.{nanos:x}", "namespace": ns},
            "involvedObject": regarding, "reason": reason, "message": note, "type": type, "action": action,
            "source": {}, "firstTimestamp": None, "lastTimestamp": None, "eventTime": rfc3339_micro(now),
            "reportingComponent": self.controller, "reportingInstance": self.instance,
        }
        self._cache[key] = event
        self._write(key)
        self._later(key, FINISH_SECONDS)
        if not self._refresh_started:
            self._refresh_started = True
            self.sim.call_later(REFRESH_SECONDS, self._refresh)
        return event

    def _write(self, key: str) -> None:
        """``recordEvent``: a series is patched onto the stored event (made again if it is gone)."""
        event = self._cache[key]
        store = self.sim.store
        stored = self._stored.get(key)
        if stored is not None and event.get("series") is not None:
            series = dict(event["series"])

            def patch(ev: dict[str, Any]) -> None:
                ev["series"] = series
            if store.mutate(EVENTS, *stored, patch) is not None:
                return
        try:
            created = store.create(store.storage_type(EVENTS), {k: v for k, v in event.items() if v is not None
                                                               or k in ("firstTimestamp", "lastTimestamp")})
        except ApiError:
            return  # refused (its namespace is terminating): the recorder logs it and goes on
        self._stored[key] = key_of(created)

    def _later(self, key: str, delay: float) -> None:
        self.sim.call_later(delay, lambda: self._finish(key))

    def _finish(self, key: str) -> None:
        """``finishSeries``: a series idle for 6 minutes is written one last time and forgotten;
        a lone event is forgotten 6 minutes after it was written."""
        event = self._cache.get(key)
        if event is None:
            return
        series = event.get("series")
        last = series["lastObservedTime"] if series else event["eventTime"]
        idle = (self.sim.clock.now() - dt.datetime.fromisoformat(last.replace("Z", "+00:00"))).total_seconds()
        if idle < FINISH_SECONDS:
            self._later(key, FINISH_SECONDS - idle)
            return
        if series:
            self._write(key)
        del self._cache[key]
        self._stored.pop(key, None)

    def _refresh(self) -> None:
        """``refreshExistingEventSeries``: every open series written, every 30 minutes."""
        for key, event in list(self._cache.items()):
            if event.get("series") is not None:
                self._write(key)
        self.sim.call_later(REFRESH_SECONDS, self._refresh)
