"""Collecting a run's events while it is monitored: list, watch, resume, dedupe, tally.

:class:`Counting` is the pure part (and the benchmark's subject): it applies watch events
to the :class:`~runbooks.stability.tallying.Tally`, counting each event's *new*
occurrences only, by its uid and ``count``: a re-delivered event (after a restart, a
re-list, a second watch) adds nothing, a recurring one adds the difference. An event
whose last occurrence is older than the window counts nothing; one that began before
the window and recurred in it counts once. Deleted events (expired from the cluster) are
forgotten, so what is kept is bounded by what the cluster holds (and by :data:`MAX_SEEN`).

:class:`Collector` drives it over the cluster adapter: it lists the events once, then
watches from the list's resourceVersion; a dropped watch resumes from the last version,
a 410 Gone lists again (the dedupe state keeps re-listed events from counting twice).
Once an hour it also lists the nodes and keeps the GPU nodes' allocatable GPUs in the tally
(the report's chart). Every ``flush_every`` seconds it stores the tally, the dedupe changes and the version
together in one atomic write of a :class:`CollectionStore` (the bot's Redis store), fenced
by the collecting process's lease: a bot restarted at any point resumes from what was
stored, and neither loses nor double-counts an event.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from runbooks.cluster.resources import EVENTS, NODES
from runbooks.errors import ClusterError, ListExpired, TemporaryClusterError, shorten
from runbooks.inventory.reading import quantity
from runbooks.metrics import MetricsUnavailable
from runbooks.stability.tallying import Scope, Tally, occurrences

log = logging.getLogger(__name__)
MAX_SEEN = 50_000
"""Event uids remembered for deduplication (events expire, so live ones are far fewer)."""


@dataclass
class Collected:
    """What the store keeps of a run's collection."""

    rv: str = ""
    tally: Tally = field(default_factory=Tally)
    seen: dict[str, int] = field(default_factory=dict)
    info: dict[str, str] = field(default_factory=dict)
    """``since`` (window start), ``started`` (first watched), ``flushed_at``, ``relists``, ``watching`` (who)."""


class CollectionStore(Protocol):
    def load_collection(self, run_id: str) -> Collected:
        """The stored collection of ``run_id`` (empty when nothing was stored)."""
        ...

    def save_collection(
        self, run_id: str, *, owner: str, rv: str, tally: Tally, seen: dict[str, int], gone: Collection[str],
        info: dict[str, str],
    ) -> bool:
        """Store it all in one atomic write, only while ``owner`` holds the collecting lease;
        ``seen`` are uids to set, ``gone`` uids to forget. False (nothing written) when not."""
        ...


class Counting:
    """The tally of one run and the counts already counted per event uid."""

    def __init__(self, scope: Scope, tally: Tally | None = None, seen: dict[str, int] | None = None) -> None:
        self.scope = scope
        self.tally = tally or Tally()
        self.seen: dict[str, int] = seen or {}
        self.dirty: dict[str, int] = {}
        self.gone: set[str] = set()

    def apply(self, kind: str, obj: dict[str, Any]) -> None:
        """One watch event (``ADDED``, ``MODIFIED``, ``DELETED``) or one listed event (``ADDED``)."""
        meta = obj.get("metadata") or {}
        uid = meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}"
        if kind == "DELETED":
            self.forget(uid)
            return
        count = occurrences(obj)
        before = self.seen.get(uid, 0)
        if count <= before:
            return
        seen = self.scope.matters(obj)
        if seen is None:
            return
        if seen.last < self.scope.since:
            by = 0
        elif before == 0 and seen.first < self.scope.since:
            by = 1
        else:
            by = count - before
        if before == 0 and len(self.seen) >= MAX_SEEN:
            self.forget(next(iter(self.seen)))
        self.seen[uid] = self.dirty[uid] = count
        self.gone.discard(uid)
        self.tally.add(seen, by, new=before == 0)

    def forget(self, uid: str) -> None:
        if self.seen.pop(uid, None) is not None:
            self.dirty.pop(uid, None)
            self.gone.add(uid)

    def retain(self, uids: Iterable[str]) -> None:
        """After a re-list: forget events the cluster no longer has (their deletion was missed)."""
        keep = set(uids)
        for uid in [u for u in self.seen if u not in keep]:
            self.forget(uid)

    def take_changes(self) -> tuple[dict[str, int], set[str]]:
        changes = (self.dirty, self.gone)
        self.dirty, self.gone = {}, set()
        return changes


class LeaseLost(Exception):
    """Another process collects now; this collector stops."""


class Collector:
    """Watches the events of one cluster for one run until stopped (or its lease is lost)."""

    def __init__(
        self, *, run_id: str, scope: Scope, cluster: Any, store: CollectionStore, owner: str,
        flush_every: float = 2.0, watch_timeout: int = 60, retry_delay: float = 5.0,
        monotonic: Callable[[], float] = time.monotonic, now_stamp: Callable[[], str] | None = None,
        metrics: Callable[[list[str]], dict[str, dict[str, float]]] | None = None,
    ) -> None:
        self.run_id, self.cluster, self.store, self.owner = run_id, cluster, store, owner
        self.flush_every, self.watch_timeout, self.retry_delay = flush_every, watch_timeout, retry_delay
        self.monotonic = monotonic
        self.metrics = metrics
        self.now_stamp = now_stamp or (lambda: time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()))
        stored = store.load_collection(run_id)
        self.counting = Counting(scope, stored.tally, stored.seen)
        self.rv = stored.rv
        self.info = {"since": scope.since, "started": self.now_stamp(), "relists": "0", **stored.info, "watching": owner}
        self._stop = threading.Event()
        self._stream: Any = None
        self._flushed = monotonic()
        self._lock = threading.Lock()

    def stop(self) -> None:
        self._stop.set()
        stream = self._stream
        if stream is not None:
            stream.close()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def run(self) -> None:
        """List once, then watch and resume until stopped; flushes before it returns."""
        try:
            while not self._stop.is_set():
                try:
                    if not self.rv:
                        self._list()
                    self._sample()
                    self._watch()
                except ListExpired:
                    log.info("run %s: the event watch expired (410): listing again", self.run_id)
                    self._expired()
                except TemporaryClusterError as exc:
                    log.warning("run %s: events: %s; again in %.0fs", self.run_id, shorten(str(exc)), self.retry_delay)
                    self._stop.wait(self.retry_delay)
                except ClusterError as exc:
                    log.warning("run %s: events: %s; again in %.0fs", self.run_id, shorten(str(exc)), self.retry_delay * 6)
                    self._stop.wait(self.retry_delay * 6)
            self.flush()
        except LeaseLost:
            log.info("run %s: another process collects its events now", self.run_id)

    def catch_up(self, timeout_seconds: int = 1) -> None:
        """Read what the cluster has now, synchronously, and store it: list if needed, then
        one short watch that replays the history since the stored version (tests, the demo)."""
        for _ in range(3):
            try:
                if not self.rv:
                    self._list()
                self._sample()
                self._watch(timeout_seconds)
                break
            except ListExpired:
                self._expired()
        self.flush()

    def _expired(self) -> None:
        self.rv = ""
        self.info["relists"] = str(int(self.info.get("relists", "0")) + 1)

    def _list(self) -> None:
        items, rv = self.cluster.list_versioned(EVENTS)
        with self._lock:
            for obj in items:
                self.counting.apply("ADDED", obj)
            self.counting.retain((o.get("metadata") or {}).get("uid", "") for o in items)
            self.rv = rv
        self.flush()

    def _sample(self) -> None:
        """The GPU nodes' allocatable GPUs, once an hour; a failed read is only logged (the
        events matter more, and the next hour samples again)."""
        stamp = self.now_stamp()
        scope = self.counting.scope
        with self._lock:
            if self.counting.tally.sampled(stamp):
                return
        try:
            items, _ = self.cluster.list_versioned(NODES)
        except ClusterError as exc:
            log.warning("run %s: nodes: %s; the GPU sample of this hour is skipped", self.run_id, shorten(str(exc)))
            return
        allocatable: dict[str, int] = {}
        for node in items:
            name = (node.get("metadata") or {}).get("name") or ""
            if name in scope.nodes:
                values = (node.get("status") or {}).get("allocatable") or {}
                allocatable[name] = sum(quantity(values.get(r, 0)) for r in scope.gpu_resources)
        with self._lock:
            self.counting.tally.sample(stamp, allocatable)
        self._sample_metrics(stamp, sorted(scope.nodes))

    def _sample_metrics(self, stamp: str, nodes: list[str]) -> None:
        """The metric view's values this hour (``metrics``: the policy's Prometheus); not
        answering is only logged (the report reads the values now, and says so)."""
        if self.metrics is None:
            return
        try:
            values = self.metrics(nodes)
        except MetricsUnavailable as exc:
            log.warning("run %s: metrics: %s; the metric sample of this hour is skipped", self.run_id, exc)
            return
        with self._lock:
            self.counting.tally.sample_metrics(stamp, values)

    def _watch(self, timeout_seconds: int | None = None) -> None:
        timeout = timeout_seconds if timeout_seconds is not None else self.watch_timeout
        self._stream = self.cluster.watch(EVENTS, resource_version=self.rv, timeout_seconds=timeout)
        try:
            if self._stop.is_set():  # stopped while the watch was being opened
                return
            for event in self._stream:
                if self._stop.is_set():
                    return
                obj = event.get("object") or {}
                with self._lock:
                    if event.get("type") != "BOOKMARK":
                        self.counting.apply(str(event.get("type")), obj)
                    self.rv = str((obj.get("metadata") or {}).get("resourceVersion") or self.rv)
                if self.monotonic() - self._flushed >= self.flush_every:
                    self.flush()
        finally:
            self._stream.close()
            self._stream = None

    def flush(self) -> None:
        """Store the tally, the dedupe changes and the version at once; ``LeaseLost`` if not ours."""
        with self._lock:
            seen, gone = self.counting.take_changes()
            self.info["flushed_at"] = self.now_stamp()
            saved = self.store.save_collection(self.run_id, owner=self.owner, rv=self.rv, tally=self.counting.tally,
                                               seen=seen, gone=gone, info=dict(self.info))
            self._flushed = self.monotonic()
        if not saved:
            self._stop.set()
            raise LeaseLost(self.run_id)
