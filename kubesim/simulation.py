"""The running simulated cluster: store, clock, timers, controllers, events, logs and faults.

A :class:`Simulation` lives on one asyncio event loop. Controllers subscribe to the
store and queue work with :meth:`Simulation.enqueue` (deduplicated by key) or schedule
it on the simulated clock with :meth:`Simulation.call_later`; :meth:`Simulation.run`
fires both. Moving the clock (``advance``) fires every timer that falls due, in order,
before it returns, so a test sees the consequences of "24 hours later" at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import heapq
import itertools
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from kubesim.clock import SimClock, parse_time, rfc3339, rfc3339_micro
from kubesim.errors import ApiError
from kubesim.rbac import Tokens
from kubesim.registry import Registry
from kubesim.resources import ApiSurface
from kubesim.store import Store, key_of

EVENTS = ("", "events")
_EVENT_DEDUP_WINDOW = 600.0  # seconds, as client-go's event correlator


class Controller(Protocol):
    """Something that reacts to the cluster: DaemonSet controller, kubelets, scheduler."""

    def start(self, sim: Simulation) -> None: ...


@dataclass
class Faults:
    """Faults injected through ``POST /sim/v1/faults`` that the HTTP layer applies."""

    api_errors: deque[dict[str, Any]] = field(default_factory=deque)
    forbidden: list[dict[str, Any]] = field(default_factory=list)
    hosts: dict[str, str] = field(default_factory=dict)
    """A node's host fault (``driver-mismatch``, ``no-container-toolkit``): what NVIDIA's device
    plugin finds there when it starts (:mod:`kubesim.pluginreleases`)."""

    def next_api_error(self, path: str) -> dict[str, Any] | None:
        """Pop the next request fault that applies to ``path`` (control API excluded)."""
        if path.startswith("/sim/"):
            return None
        for fault in list(self.api_errors):
            if fault.get("path") and not path.startswith(fault["path"]):
                continue
            fault["remaining"] -= 1
            if fault["remaining"] <= 0:
                self.api_errors.remove(fault)
            return fault
        return None

    def is_forbidden(self, path: str, verb: str) -> bool:
        return any(
            path.startswith(rule["path"]) and rule.get("verb") in (None, verb)
            for rule in self.forbidden
        )


class PodLogs:
    """Container logs the kubelets write and ``GET .../pods/<name>/log`` reads."""

    def __init__(self) -> None:
        self._current: dict[tuple[str, str, str], list[tuple[dt.datetime, str]]] = {}
        self._previous: dict[tuple[str, str, str], list[tuple[dt.datetime, str]]] = {}

    def write(self, ns: str, pod: str, container: str, moment: dt.datetime, line: str) -> None:
        self._current.setdefault((ns, pod, container), []).append((moment, line))

    def touch(self, ns: str, pod: str, container: str) -> None:
        """A container started: its log exists, even while it has printed nothing."""
        self._current.setdefault((ns, pod, container), [])

    def rotate(self, ns: str, pod: str, container: str) -> None:
        """A container restarted: its log becomes the ``--previous`` log."""
        key = (ns, pod, container)
        self._previous[key] = self._current.pop(key, [])

    def forget(self, ns: str, pod: str) -> None:
        for table in (self._current, self._previous):
            for key in [k for k in table if k[0] == ns and k[1] == pod]:
                del table[key]

    def read(
        self,
        ns: str,
        pod: str,
        container: str,
        *,
        previous: bool = False,
        tail: int | None = None,
        since: dt.datetime | None = None,
        timestamps: bool = False,
    ) -> str | None:
        table = self._previous if previous else self._current
        lines = table.get((ns, pod, container))
        if lines is None:
            return None
        if since is not None:
            lines = [entry for entry in lines if entry[0] >= since]
        if tail is not None and tail >= 0:
            lines = lines[-tail:] if tail else []
        if timestamps:
            return "".join(f"{rfc3339_micro(t)} {line}\n" for t, line in lines)
        return "".join(f"{line}\n" for _, line in lines)


RESYNC_EVERY = 200
READS_KEPT = 20_000
"""Reads kept in the read log (``/sim/v1/requests?reads=true``), the oldest dropped first."""
"""Items of other work after which a waiting controller sync runs anyway."""


class Simulation:
    """One simulated cluster of a given release, with its controllers."""

    def __init__(
        self,
        *,
        minor: int = 31,
        event_ttl: float = 3600.0,
        speed: float = 1.0,
        history_size: int = 20_000,
        start: dt.datetime | None = None,
    ) -> None:
        self.minor = minor
        self.surface = ApiSurface.for_release(minor)
        self.clock = SimClock(start=start, speed=speed)
        self.store = Store(self.clock, self.surface, history_size=history_size)
        self.event_ttl = event_ttl
        self.logs = PodLogs()
        self.faults = Faults()
        self.tokens = Tokens()
        self.registry = Registry()
        """The images the nodes can pull: released tags plus those pushed (:mod:`kubesim.registry`)."""
        """ServiceAccount tokens minted by TokenRequest (``kubesim.rbac``)."""
        self.feature_gates: dict[str, bool] = {"DynamicResourceAllocation": True}
        self.mutations: list[dict[str, Any]] = []
        self.reads: deque[dict[str, Any]] = deque(maxlen=READS_KEPT)
        """The last reads (get, list, watch) received: verb, path, query, code, bytes answered."""
        self.controllers: dict[str, Any] = {}
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._queue: dict[Any, Callable[[], None]] = {}
        self._resyncs: dict[Any, Callable[[], None]] = {}
        self._wake: asyncio.Event | None = None
        self._event_index: dict[tuple[str, str, str, str], tuple[str, str]] = {}
        self._next_event_sweep = 0.0

    # ------------------------------------------------------------ scheduling
    def add_controller(self, name: str, controller: Controller) -> None:
        self.controllers[name] = controller
        controller.start(self)

    def call_at(self, when: float, fn: Callable[[], None]) -> None:
        """Run ``fn`` once the simulated clock reaches ``when`` (epoch seconds)."""
        heapq.heappush(self._timers, (when, next(self._seq), fn))
        self.kick()

    def call_later(self, delay: float, fn: Callable[[], None]) -> None:
        self.call_at(self.clock.time() + delay, fn)

    def enqueue(self, key: Any, fn: Callable[[], None]) -> None:
        """Run ``fn`` soon; a second enqueue with the same key before it runs is merged."""
        self._queue[key] = fn
        self.kick()

    def enqueue_resync(self, key: Any, fn: Callable[[], None]) -> None:
        """Run a controller's whole sync (one that reads every object it owns) once the per-object
        work and the timers already due are done; enqueues before it runs are merged.

        This is kube-controller-manager's workqueue: a key added while it waits is not added
        twice, so a burst of pod updates (a rolling update's kubelets all reporting) costs one
        sync of their DaemonSet, not one each. Without it a 5,000-pod rollout is 5,000 x 5,000.
        """
        self._resyncs[key] = fn
        self.kick()

    def _due(self) -> bool:
        return bool(self._timers) and self._timers[0][0] <= self.clock.time()

    def kick(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def settle(self, max_rounds: int = 10_000) -> None:
        """Run queued work and every timer already due, until nothing is left; a controller's
        whole sync (:meth:`enqueue_resync`) runs when the rest is done, or after
        :data:`RESYNC_EVERY` other items, so a steady stream of work never starves it."""
        since_resync = 0
        for _ in range(max_rounds):
            if self._resyncs and (since_resync >= RESYNC_EVERY or not (self._queue or self._due())):
                key = next(iter(self._resyncs))
                self._resyncs.pop(key)()
                since_resync = 0
                continue
            since_resync += 1
            if self._queue:
                key = next(iter(self._queue))
                self._queue.pop(key)()
                continue
            if self._due():
                heapq.heappop(self._timers)[2]()
                continue
            break
        self._expire_events()

    def advance(self, seconds: float) -> None:
        """Move the clock, firing every timer on the way at its own moment."""
        target = self.clock.time() + seconds
        self.settle()
        while self._timers and self._timers[0][0] <= target:
            when = self._timers[0][0]
            gap = when - self.clock.time()
            if gap > 0:
                self.clock.advance(gap)
            self.settle()
        remaining = target - self.clock.time()
        if remaining > 0:
            self.clock.advance(remaining)
        self.settle()

    async def run(self) -> None:
        """The simulation loop: queued work first, then timers as they fall due."""
        self._wake = asyncio.Event()
        while True:
            self._wake.clear()
            self.settle(max_rounds=500)
            if self._queue or self._resyncs:
                await asyncio.sleep(0)
                continue
            delay = 1.0
            if self._timers:
                delay = min(delay, self.clock.real_seconds_until(self._timers[0][0]))
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout=delay)

    # ---------------------------------------------------------------- events
    def record_event(
        self,
        involved: dict[str, Any],
        *,
        reason: str,
        message: str,
        type: str = "Normal",
        component: str = "kubelet",
        host: str | None = None,
        field_path: str | None = None,
    ) -> dict[str, Any]:
        """Write or bump a core/v1 Event the way client-go's recorder does."""
        m = involved.get("metadata") or {}
        ns = m.get("namespace") or "default"
        dedup = (m.get("uid", ""), reason, message, component)
        now = self.clock.now()
        existing = self._event_index.get(dedup)
        if existing is not None:
            current = self.store.get(EVENTS, *existing)
            last = parse_time((current or {}).get("lastTimestamp"))
            if current is not None and last and (now - last).total_seconds() < _EVENT_DEDUP_WINDOW:
                def bump(ev: dict[str, Any]) -> None:
                    ev["count"] = int(ev.get("count") or 1) + 1
                    ev["lastTimestamp"] = rfc3339(now)
                return self.store.mutate(EVENTS, *existing, bump) or current
        involved_ref = {
            "kind": involved.get("kind"),
            "namespace": m.get("namespace"),
            "name": m.get("name"),
            "uid": m.get("uid"),
            "apiVersion": involved.get("apiVersion"),
            "resourceVersion": m.get("resourceVersion"),
        }
        if field_path:
            involved_ref["fieldPath"] = field_path
        involved_ref = {k: v for k, v in involved_ref.items() if v}
        nanos = int(now.timestamp() * 1e9) + next(self._seq)
        event = {
            "metadata": {"name": f"{m.get('name')}.{nanos:x}", "namespace": ns},
            "involvedObject": involved_ref,
            "reason": reason,
            "message": message,
            "source": {k: v for k, v in (("component", component), ("host", host)) if v},
            "firstTimestamp": rfc3339(now),
            "lastTimestamp": rfc3339(now),
            "count": 1,
            "type": type,
            "eventTime": None,
            "reportingComponent": component,
            "reportingInstance": host or "",
        }
        try:
            stored = self.store.create(self.surface.storage_version(*EVENTS), event)
        except ApiError:
            return event  # refused (its namespace is terminating): a recorder logs it and goes on
        self._event_index[dedup] = key_of(stored)
        return stored

    def _expire_events(self) -> None:
        """Delete events older than ``--event-ttl`` since their last write, as etcd leases do."""
        now = self.clock.time()
        if now < self._next_event_sweep:
            return
        self._next_event_sweep = now + min(10.0, self.event_ttl / 4)
        expired = []
        for ev in self.store.iter(EVENTS):
            written = max(
                (
                    t.timestamp()
                    for t in (
                        parse_time(ev.get("lastTimestamp")),
                        parse_time(ev.get("eventTime")),
                        parse_time(ev["metadata"].get("creationTimestamp")),
                    )
                    if t is not None
                ),
                default=now,
            )
            if written + self.event_ttl <= now:
                expired.append(key_of(ev))
        for ns, name in expired:
            self.store.delete(EVENTS, ns, name)
