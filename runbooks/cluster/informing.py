"""A watch cache (an informer): one kind of object, listed once, then kept current from a watch.

:class:`Informer` lists (``list_versioned``) and then watches from the list's
resourceVersion on a thread of its own; a watch that ends is opened again from the last
version it saw (bookmarks included), a 410 Gone lists again, an error waits (1 s, doubling
up to 15 s) and tries again; meanwhile ``stale`` is True and a reader reads the cluster
itself (RBAC without ``watch`` only costs the savings). Each object passes through ``project`` (None: not kept), so
50,000 pods are kept as the few fields a step needs. Reading the cache costs no request: a
step that used to list every plugin pod every second reads what changed, once, as it
changed. ``version`` counts the changes seen and :meth:`Informer.wait` returns when the next
one arrives, so a follower can wake on a change instead of a timer.

:class:`Watches` is the process's one watch cache: the steps of every run on a cluster
share an informer per kind of object they follow (the plugin pods of a DaemonSet, its
ControllerRevisions, the nodes), counted while in use and kept for :data:`LINGER` seconds
after the last step let go, so the next wave, the verify after a rollout or another run on
the same DaemonSet reads what changed instead of listing it all again. Each informer of it
reads the cluster through a connection of its own (the engine closes a run's when it stops
driving the run); the reads a step makes itself may share one connection per cluster, kept
as long (:meth:`Watches.connection`).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Hashable, Iterator
from typing import Any, Generic, TypeVar

from runbooks.cluster.resources import Resource
from runbooks.errors import ClusterError, ListExpired, shorten

log = logging.getLogger("upgradebot.cluster.informer")
T = TypeVar("T")
WATCH_SECONDS = 240
RETRY_MAX = 15.0
LINGER = 120.0
"""Seconds a shared informer nobody uses keeps watching before it stops."""


class Informer(Generic[T]):
    def __init__(self, cluster: Any, resource: Resource, *, project: Callable[[Any], T | None],
                 namespace: str | None = None, label_selector: str | None = None, field_selector: str | None = None,
                 watch_seconds: int = WATCH_SECONDS, on_change: Callable[[], None] | None = None,
                 item: type[Any] | None = None) -> None:
        """``on_change`` is called (on the informer's thread) after each change is kept. ``item``: a
        shape of :mod:`runbooks.cluster.decoding` the lists decode each object as (only the fields
        read, several times faster than dicts for 50,000 pods); ``project`` then takes that shape
        from a list and a dict from the watch."""
        self.cluster, self.resource, self.project = cluster, resource, project
        self.namespace, self.label_selector, self.watch_seconds = namespace, label_selector, watch_seconds
        self.field_selector, self.item = field_selector, item
        self._listeners: list[Callable[[], None]] = [on_change] if on_change is not None else []
        self.version = 0
        """Changes seen since the first list (each event that added, changed or removed an object)."""
        self.relists = 0
        self.listed_version = 0
        """``version`` when the last list was kept: while ``version`` is still that, the cache holds what the list showed."""
        self._away_since_error = False
        self._items: dict[str, T] = {}
        self._rv = ""
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._stream: Any = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ life
    def start(self, *, first_page: Callable[[], None] | None = None) -> Informer[T]:
        """List now (``ClusterError`` if that fails: nothing is started), then watch in the background;
        ``first_page()`` when the list's first page is in (the moment the cache starts from)."""
        self._list(first_page)
        self._thread = threading.Thread(target=self._run, name=f"informer-{self.resource.plural}", daemon=True)
        self._thread.start()
        return self

    @property
    def stale(self) -> bool:
        """True while the watch cannot be (re)opened (an error, RBAC without ``watch``) and once
        stopped: the cache may miss changes, so a reader reads the cluster instead."""
        return self._away_since_error or self._stop.is_set()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop watching; wait up to ``timeout`` seconds for the thread to end."""
        self.signal_stop()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=timeout)

    def signal_stop(self) -> None:
        """Stop watching without waiting (``stale`` from now on)."""
        self._stop.set()
        stream = self._stream
        if stream is not None:
            stream.close()
        with self._cond:
            self._cond.notify_all()

    def __enter__(self) -> Informer[T]:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --------------------------------------------------------------- reading
    def items(self) -> list[T]:
        with self._cond:
            return list(self._items.values())

    def wait(self, after: int, timeout: float) -> bool:
        """Until ``version`` is past ``after`` (True) or ``timeout`` seconds passed (False)."""
        with self._cond:
            return self._cond.wait_for(lambda: self.version > after or self._stop.is_set(), timeout=timeout) \
                and self.version > after

    # --------------------------------------------------------------- keeping
    def _list(self, first_page: Callable[[], None] | None = None) -> None:
        signal = {"first_page": first_page} if first_page is not None else {}
        project = self.project  # page by page: a list of 50,000 pods is never held whole
        pairs, rv = self.cluster.list_versioned(self.resource, namespace=self.namespace,
                                                label_selector=self.label_selector, field_selector=self.field_selector,
                                                project=lambda obj: (_key(obj), project(obj)), item=self.item,
                                                **signal)
        kept = {key: value for key, value in pairs if value is not None}
        with self._cond:
            self._items, self._rv = kept, rv
            self.version += 1
            self.listed_version = self.version
            self._cond.notify_all()
        self._changed()

    def listen(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` (on the informer's thread) after each change; returns what stops it."""
        with self._cond:
            self._listeners = [*self._listeners, callback]

        def unlisten() -> None:
            with self._cond:
                self._listeners = [c for c in self._listeners if c is not callback]

        return unlisten

    def _changed(self) -> None:
        for callback in self._listeners:
            callback()

    def _run(self) -> None:
        pause = 1.0
        while not self._stop.is_set():
            try:
                self._watch()
                pause = 1.0
            except ListExpired:
                if self._stop.is_set():
                    return
                self.relists += 1
                try:
                    self._list()
                    self._away_since_error = False
                except ClusterError as exc:
                    self._away(f"listing {self.resource.plural} again failed: {shorten(str(exc))}")
                    self._stop.wait(pause)
            except ClusterError as exc:
                if self._stop.is_set():
                    return
                self._away(f"watching {self.resource.plural} failed (again in {pause:.0f} s): {shorten(str(exc))}")
                self._stop.wait(pause)
                pause = min(RETRY_MAX, pause * 2)

    def _away(self, why: str) -> None:
        if not self._away_since_error:
            log.warning("%s; it is read directly until the watch is back", why)
        else:
            log.debug("%s", why)
        self._away_since_error = True

    def _watch(self) -> None:
        self._stream = self.cluster.watch(self.resource, resource_version=self._rv, namespace=self.namespace,
                                          label_selector=self.label_selector, field_selector=self.field_selector,
                                          timeout_seconds=self.watch_seconds)
        if self._away_since_error:  # watching from where it left off: what it missed comes first
            log.info("watching %s again", self.resource.plural)
            self._away_since_error = False
        try:
            if self._stop.is_set():
                return
            for event in self._stream:
                if self._stop.is_set():
                    return
                self._apply(str(event.get("type") or ""), event.get("object") or {})
        finally:
            self._stream.close()
            self._stream = None

    def _apply(self, kind: str, obj: dict[str, Any]) -> None:
        rv = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        with self._cond:
            if rv:
                self._rv = rv
            if kind == "BOOKMARK":
                return
            key = _key(obj)
            value = self.project(obj) if kind in ("ADDED", "MODIFIED") else None
            if value is None:
                if self._items.pop(key, None) is None:
                    return
            else:
                self._items[key] = value
            self.version += 1
            self._cond.notify_all()
        self._changed()


def _key(obj: Any) -> str:
    """The object's uid (else ``namespace/name``): of a dict, or of a decoded shape's ``metadata``."""
    if isinstance(obj, dict):
        meta = obj.get("metadata") or {}
        return str(meta.get("uid") or f"{meta.get('namespace', '')}/{meta.get('name', '')}")
    meta = getattr(obj, "metadata", None)
    uid, namespace, name = (getattr(meta, field, None) for field in ("uid", "namespace", "name"))
    return str(uid or f"{namespace or ''}/{name or ''}")


Key = tuple[Any, ...]


class _Shared:
    __slots__ = ("cluster", "informer", "ready", "released", "timer", "users")

    def __init__(self) -> None:
        self.users, self.released = 0, 0
        self.ready = threading.Lock()
        self.informer: Informer[Any] | None = None
        self.cluster: Any = None
        self.timer: threading.Timer | None = None


class Watches:
    """The process's watch cache: one :class:`Informer` per cluster and kind of object kept,
    shared by the steps that follow it (see the module's docstring). ``connect(context)``
    opens the connection an informer reads through (the engine's own ``connect``)."""

    def __init__(self, connect: Callable[[str | None], Any], *, linger: float = LINGER) -> None:
        self.connect, self.linger = connect, linger
        self._lock = threading.Lock()
        self._shared: dict[Key, _Shared] = {}
        self._closed = False
        """After :meth:`close`, an informer a step still starts stops when the step lets go of it."""
        self.lists = 0
        """Informers started (each listed its objects once): what sharing saves shows here."""
        self._memos: dict[tuple[str, str], Any] = {}

    def on(self, context: str | None) -> ClusterWatches:
        """The watches of one cluster (``context`` as the run names it: None is the default one)."""
        return ClusterWatches(self, context)

    def memo(self, context: str | None, name: str, make: Callable[[], T]) -> T:
        """What the steps of this process keep of ``context`` under ``name`` besides its informers
        (``make()`` on first use, then the same object for as long as the process runs): facts a
        watch does not bring, kept by what says they still hold (a plugin's registration, by its
        pod's uid and restarts)."""
        with self._lock:
            kept = self._memos.get((context or "", name))
            if kept is None:
                kept = self._memos[(context or "", name)] = make()
            return kept

    @contextlib.contextmanager
    def share(self, context: str | None, resource: Resource, *, kept: Hashable,
              project: Callable[[Any], T | None], namespace: str | None = None,
              label_selector: str | None = None, field_selector: str | None = None,
              first_page: Callable[[], None] | None = None, item: type[Any] | None = None) -> Iterator[Informer[T]]:
        """The informer of ``resource`` (in ``namespace``, selected so) on ``context`` keeping
        ``project(obj)``; ``kept`` names what ``project`` keeps (two callers with the same
        ``kept`` must keep the same). Listed on first use (``ClusterError`` if that fails:
        nothing is kept), released when the block ends. ``first_page()``: when what it keeps is
        in hand (its first list's first page, or at once when it was listed before). ``item``: the
        shape its lists decode objects as (:class:`Informer`; not part of what is kept)."""
        key: Key = (context or "", resource.group, resource.plural, namespace, label_selector, field_selector, kept)
        with self._held(key) as entry:
            with entry.ready:
                if entry.informer is None:
                    cluster = self.connect(context)
                    informer = Informer(cluster, resource, project=project, namespace=namespace,
                                        label_selector=label_selector, field_selector=field_selector, item=item)
                    try:
                        informer.start(first_page=first_page)
                    except BaseException:
                        _close(cluster)
                        raise
                    with self._lock:
                        entry.informer, entry.cluster = informer, cluster
                        self.lists += 1
                elif first_page is not None:
                    first_page()
            yield entry.informer

    @contextlib.contextmanager
    def _held(self, key: Key) -> Iterator[_Shared]:
        """The entry under ``key``, made if new, counted in use (and no longer lingering) until
        the block ends, however it ends."""
        with self._lock:
            entry = self._shared.get(key)
            if entry is None:
                entry = self._shared[key] = _Shared()
            entry.users += 1
            if entry.timer is not None:  # taken again while it lingered
                entry.timer.cancel()
                entry.timer = None
        try:
            yield entry
        finally:
            self._release(key, entry)

    def _release(self, key: Key, entry: _Shared) -> None:
        with self._lock:
            entry.users -= 1
            entry.released += 1
            if entry.users:
                return
            if self._shared.get(key) is entry:
                if (entry.informer is not None or entry.cluster is not None) and self.linger > 0 and not self._closed:
                    entry.timer = threading.Timer(self.linger, self._reap, args=(key, entry, entry.released))
                    entry.timer.daemon = True
                    entry.timer.name = "upgradebot-watch-linger"
                    entry.timer.start()
                    return
                del self._shared[key]
        _stop(entry)  # not kept (no linger), or let go of after close() (which found it still listing)

    def _reap(self, key: Key, entry: _Shared, released: int) -> None:
        """Stop ``entry`` if nobody took it since its release number ``released``."""
        with self._lock:
            if entry.users or entry.released != released or self._shared.get(key) is not entry:
                return
            del self._shared[key]
        _stop(entry)

    @contextlib.contextmanager
    def connection(self, context: str | None) -> Iterator[Any]:
        """A connection to ``context`` for the reads a step makes itself (an inventory's lists and
        plugin logs), shared by the steps of this process and kept :data:`LINGER` seconds after the
        last let go, as an informer is: one client and its TLS connections per cluster, not one per
        inventory (at 5,000 nodes a flood of them opened nine a second). Whatever ``connect``
        raises, it raises, and nothing is kept."""
        key: Key = (context or "", "connection")
        with self._held(key) as entry:
            with entry.ready:
                if entry.cluster is None:
                    cluster = self.connect(context)
                    with self._lock:
                        entry.cluster = cluster
            yield entry.cluster

    def kept(self) -> int:
        """Informers running (in use, or lingering)."""
        with self._lock:
            return sum(e.informer is not None for e in self._shared.values())

    def close(self, timeout: float = 5.0) -> None:
        """Stop every informer (the process is stopping; a step still using one reads the
        cluster), waiting up to ``timeout`` seconds in all for their threads."""
        with self._lock:
            entries, self._shared, self._closed = list(self._shared.values()), {}, True
            for entry in entries:
                if entry.timer is not None:
                    entry.timer.cancel()
                if entry.informer is not None:
                    entry.informer.signal_stop()
        deadline = time.monotonic() + timeout
        for entry in entries:
            _stop(entry, max(0.0, deadline - time.monotonic()))


class ClusterWatches:
    """:class:`Watches` of one cluster: what a step is given."""

    def __init__(self, watches: Watches, context: str | None) -> None:
        self.watches, self.context = watches, context

    def share(self, resource: Resource, **options: Any) -> contextlib.AbstractContextManager[Informer[Any]]:
        return self.watches.share(self.context, resource, **options)

    def memo(self, name: str, make: Callable[[], T]) -> T:
        """:meth:`Watches.memo` of this cluster."""
        return self.watches.memo(self.context, name, make)

    def connection(self) -> contextlib.AbstractContextManager[Any]:
        """:meth:`Watches.connection` to this cluster."""
        return self.watches.connection(self.context)


def held_informer(held: contextlib.ExitStack, cluster: Any, resource: Resource, *, watches: ClusterWatches | None,
                  kept: Hashable, project: Callable[[dict[str, Any]], Any],
                  first_page: Callable[[], None] | None = None, **options: Any) -> Informer[Any]:
    """A started informer of ``resource`` kept until ``held`` closes: the shared one of
    ``watches``, else one of its own on ``cluster`` (``ClusterError`` if its first list fails);
    ``first_page()`` when what it keeps is in hand (:meth:`Watches.share`)."""
    if watches is not None:
        shared: Informer[Any] = held.enter_context(watches.share(resource, kept=kept, project=project,
                                                                 first_page=first_page, **options))
        return shared
    informer: Informer[Any] = Informer(cluster, resource, project=project, **options).start(first_page=first_page)
    held.callback(informer.stop)
    return informer


def _stop(entry: _Shared, timeout: float = 5.0) -> None:
    if entry.informer is not None:
        entry.informer.stop(timeout)  # stale from now on: a step that still holds it reads the cluster
    _close(entry.cluster)


def _close(cluster: Any) -> None:
    close = getattr(cluster, "close", None)
    if callable(close):
        close()
