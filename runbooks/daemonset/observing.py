"""Reading a plugin DaemonSet as the steps need it, and waiting on the step's clock.

:func:`observe` reads the DaemonSet, the pods it owns and its ControllerRevisions into a
:class:`Snapshot` (three requests); :class:`Following` makes the same snapshots during a
rollout from watch caches, and wakes on their changes; the snapshot answers the questions every step asks
(which revision is current, which pod runs on a node, which pods are behind).
:func:`wait_for` polls on the step's :class:`~runbooks.engine.steps.Clock`, so tests can drive
time (:class:`runbooks.engine.clocks.SystemClock` is the real one, for the shell).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, TypeVar

from runbooks.cluster import Cluster
from runbooks.cluster.informing import ClusterWatches, Informer, held_informer
from runbooks.cluster.resources import CONTROLLER_REVISIONS, DAEMONSETS, PODS, Resource
from runbooks.engine.clocks import wait_on
from runbooks.engine.steps import Clock
from runbooks.errors import ClusterError, shorten
from runbooks.inventory import PluginPod
from runbooks.inventory.reading import HASH_LABEL, images_of, owner_uids, pod_from, selector_string

log = logging.getLogger("upgradebot.daemonset")
T = TypeVar("T")
Obj = dict[str, Any]


def daemonset_done(ds: Obj) -> bool:
    """The DaemonSet controller has seen the current spec and counts every node that should
    run it as updated and available: kubectl's own test for ``rollout status`` (a count above
    desired, while a node leaves, is done too)."""
    meta, status = ds.get("metadata") or {}, ds.get("status") or {}
    desired = int(status.get("desiredNumberScheduled") or 0)
    return int(status.get("observedGeneration") or 0) >= int(meta.get("generation") or 0) \
        and int(status.get("updatedNumberScheduled") or 0) >= desired and int(status.get("numberAvailable") or 0) >= desired


@dataclass(frozen=True)
class Revision:
    """One ControllerRevision of the DaemonSet."""

    name: str
    number: int
    hash: str
    data: Obj = field(repr=False)

    @property
    def template(self) -> Obj:
        """The pod template the revision holds (its ``kubectl rollout undo`` patch, unwrapped)."""
        template = dict(((self.data.get("spec") or {}).get("template")) or {})
        template.pop("$patch", None)
        return template

    def as_progress(self) -> dict[str, Any]:
        return {"name": self.name, "number": self.number, "hash": self.hash}


@dataclass(frozen=True)
class Snapshot:
    """The DaemonSet, its pods and its revisions, read together."""

    ds: Obj
    pods: list[PluginPod]
    revisions: list[Revision]

    @property
    def meta(self) -> Obj:
        return self.ds.get("metadata") or {}

    @property
    def spec(self) -> Obj:
        return self.ds.get("spec") or {}

    @property
    def status(self) -> Obj:
        return self.ds.get("status") or {}

    @property
    def template(self) -> Obj:
        return self.spec.get("template") or {}

    @property
    def strategy(self) -> Obj:
        return self.spec.get("updateStrategy") or {"type": "RollingUpdate"}

    @property
    def strategy_type(self) -> str:
        return str(self.strategy.get("type") or "RollingUpdate")

    @property
    def images(self) -> dict[str, str]:
        return images_of(self.template.get("spec") or {})

    @property
    def generation(self) -> int:
        return int(self.meta.get("generation") or 0)

    @property
    def settled(self) -> bool:
        """The controller has seen the latest spec (observedGeneration caught up) and its revision exists."""
        return int(self.status.get("observedGeneration") or 0) >= self.generation and self.current_revision is not None

    @property
    def current_revision(self) -> Revision | None:
        """The revision holding the current template; ``None`` until the controller has written it.

        Matched by content; should a server serialize the template differently from the
        revision's copy, the newest revision once the controller has seen this generation
        (it renumbers the current revision to the highest number when it syncs)."""
        template = self.template
        match = next((r for r in self.revisions if r.template == template), None)
        if match is None and self.revisions and int(self.status.get("observedGeneration") or 0) >= self.generation:
            return max(self.revisions, key=lambda r: r.number)
        return match

    def revision_named(self, name: str) -> Revision | None:
        return next((r for r in self.revisions if r.name == name), None)

    @cached_property
    def _by_node(self) -> dict[str, PluginPod]:
        """Each node's plugin pod: the live one, else one that is terminating (one pass over
        the pods, sorted by node, terminating last, then name)."""
        out: dict[str, PluginPod] = {}
        for pod in self.pods:
            known = out.get(pod.node)
            if known is None or (known.deleting and not pod.deleting):
                out[pod.node] = pod
        return out

    def pod_on(self, node: str) -> PluginPod | None:
        """The plugin pod serving ``node``: the live one, else one that is terminating."""
        return self._by_node.get(node)

    @cached_property
    def nodes(self) -> list[str]:
        return sorted(n for n in self._by_node if n)

    def behind(self, revision_hash: str, nodes: list[str] | None = None) -> list[str]:
        """Nodes whose plugin pod is not yet a Ready pod of ``revision_hash``."""
        out = []
        for node in nodes if nodes is not None else self.nodes:
            pod = self.pod_on(node)
            if pod is None or pod.deleting or pod.revision_hash != revision_hash or not (pod.phase == "Running" and pod.ready):
                out.append(node)
        return out


def observe(cluster: Cluster, namespace: str, name: str) -> Snapshot:
    """The DaemonSet ``namespace/name`` with the pods and revisions it owns (``NotFound`` if absent)."""
    ds = cluster.get(DAEMONSETS, name, namespace)
    uid, selector = _ownership(ds)
    owned = cluster.list_objects(PODS, namespace=namespace, label_selector=selector, project=_pods_of(uid))
    return Snapshot(ds=ds, pods=_in_order(p for p in owned if p is not None),
                    revisions=_revisions(cluster, namespace, uid))


def _ownership(ds: Obj) -> tuple[str, str | None]:
    """The DaemonSet's uid (what its pods and revisions name as owner) and its pods' label selector."""
    return (ds.get("metadata") or {}).get("uid", ""), selector_string((ds.get("spec") or {}).get("selector") or {}) or None


def _pods_of(uid: str) -> Callable[[Obj], PluginPod | None]:
    return lambda o: pod_from(o) if uid in owner_uids(o) else None


def _revisions_of(uid: str) -> Callable[[Obj], Revision | None]:
    return lambda o: _revision(o) if uid in owner_uids(o) else None


def _in_order(pods: Iterable[PluginPod]) -> list[PluginPod]:
    """By node, a terminating pod after the live one, then by name (what :meth:`Snapshot.pod_on` relies on)."""
    return sorted(pods, key=lambda p: (p.node, p.deleting, p.name))


def _revisions(cluster: Cluster, namespace: str, uid: str) -> list[Revision]:
    owned = cluster.list_objects(CONTROLLER_REVISIONS, namespace=namespace, project=_revisions_of(uid))
    return _by_number(r for r in owned if r is not None)


def _by_number(revisions: Iterable[Revision]) -> list[Revision]:
    """Oldest first, as the controller numbers them."""
    return sorted(revisions, key=lambda r: r.number)


LOOK_GAP = 0.5
"""Seconds a follower woken by a change lets pass after its last look: a rollout's stream
of pod events is at most two looks a second, however many nodes move."""
LOOK_GAP_PER_POD = 0.0002
"""Seconds more per pod the cache holds: a look sorts and scans every pod, so looks at a fixed
pace cost a rollout's follower CPU per node that grew with the cluster (1.4-1.9x from 5,000 to
10,000 nodes, issue 63); at 10,000 pods a look comes every 2 s, 1/100 of the rollout's time."""


class Following:
    """Snapshots of a DaemonSet during a rollout from watch caches
    (:class:`~runbooks.cluster.informing.Informer`): the DaemonSet itself (by name), the pods
    it owns (by its selector) and its ControllerRevisions, each listed once and then kept
    from a watch. A :meth:`snapshot` reads nothing from the API server, so a look costs the
    same at 50 nodes as at 5,000, and :meth:`wait` wakes on the next change any cache sees
    rather than on a timer. While a watch is away (an error, no ``watch`` in the RBAC) what
    it keeps is read directly, as :func:`observe` does. With ``watches`` (the process's
    watch cache, :class:`~runbooks.cluster.informing.Watches`) the caches are the ones every
    step on this DaemonSet shares, kept between steps; without, they are the step's own. A
    context manager: the step lets go of them (its own ones stop) when it ends."""

    def __init__(self, cluster: Cluster, namespace: str, name: str, *, watches: ClusterWatches | None = None,
                 first_page: Callable[[], None] | None = None, pods_only: bool = False) -> None:
        """``first_page()``: when the pods' cache is in hand (its list's first page, or at once when shared
        and kept); ``pods_only``: no cache of the DaemonSet and its revisions (each look reads them:
        ``snapshot(read_daemonset=True)``, verify's)."""
        self.cluster, self.namespace, self.name, self.watches = cluster, namespace, name, watches
        ds = cluster.get(DAEMONSETS, name, namespace)
        self.uid, self._selector = _ownership(ds)
        self.desired = int((ds.get("status") or {}).get("desiredNumberScheduled") or 0)
        """The nodes the DaemonSet should run on, as its controller last counted them."""
        self._first_page, self._pods_only = first_page, pods_only
        self._changed = threading.Event()
        self._sorted: tuple[int, list[PluginPod]] = (-1, [])
        self._held = contextlib.ExitStack()
        self.pods: Informer[PluginPod] | None = None
        self.daemonset: Informer[Obj] | None = None
        self.revisions: Informer[Revision] | None = None

    def __enter__(self) -> Following:
        uid, ns = self.uid, self.namespace
        with self._held as held:
            self.pods = self._cache(PODS, ("pods of", uid), _pods_of(uid), namespace=ns, label_selector=self._selector,
                                    first_page=self._first_page)
            if self._pods_only:
                self._held = held.pop_all()
                return self
            try:  # without list or watch on it, the DaemonSet is read at each look instead
                self.daemonset = self._cache(
                    DAEMONSETS, ("daemonset", uid), lambda o: o if (o.get("metadata") or {}).get("uid") == uid else None,
                    namespace=ns, field_selector=f"metadata.name={self.name}")
            except ClusterError as exc:
                log.info("the DaemonSet %s/%s read at each look: %s", ns, self.name, shorten(str(exc)))
            try:  # and so are its revisions
                self.revisions = self._cache(CONTROLLER_REVISIONS, ("revisions of", uid), _revisions_of(uid),
                                             namespace=ns)
            except ClusterError as exc:
                log.info("the revisions of %s/%s read at each look: %s", ns, self.name, shorten(str(exc)))
            self._held = held.pop_all()
        return self

    def _cache(self, resource: Resource, kept: tuple[str, str], project: Callable[[Obj], Any],
               **options: Any) -> Informer[Any]:
        """A started informer (shared when there are ``watches``) that wakes :meth:`wait`, held until exit."""
        informer = held_informer(self._held, self.cluster, resource, watches=self.watches, kept=kept, project=project,
                                 **options)
        self._held.callback(informer.listen(self._changed.set))
        return informer

    def __exit__(self, *exc: object) -> None:
        self._held.close()

    def snapshot(self, *, read_daemonset: bool = False) -> Snapshot:
        """The DaemonSet, its pods and revisions as the caches keep them; ``read_daemonset``: the
        DaemonSet and its revisions read from the API server now (a few small objects), only its
        pods from the cache (what a step saves before changing anything is never a moment old)."""
        self._changed.clear()  # what changes from now on wakes the next wait
        pods = self.pods
        if pods is None or pods.stale:  # the watch is away: the cache may be behind, so read everything now
            return observe(self.cluster, self.namespace, self.name)
        version = pods.version  # before the items: a change meanwhile sorts them again at the next look
        if self._sorted[0] != version:
            self._sorted = (version, _in_order(pods.items()))
        ds, revisions = (None, None) if read_daemonset else (_kept(self.daemonset), _kept(self.revisions))
        return Snapshot(ds=ds[0] if ds else self.cluster.get(DAEMONSETS, self.name, self.namespace),
                        pods=self._sorted[1],
                        revisions=_by_number(revisions) if revisions is not None
                        else _revisions(self.cluster, self.namespace, self.uid))

    def wait(self, clock: Clock, seconds: float) -> None:
        """Until one of the caches changes after the last :meth:`snapshot`, at most ``seconds``
        and no sooner than :data:`LOOK_GAP` (on ``clock``: a test's fake clock just sleeps), or
        :data:`LOOK_GAP_PER_POD` per pod of the last look when longer."""
        gap = max(min(seconds, LOOK_GAP), len(self._sorted[1]) * LOOK_GAP_PER_POD)
        clock.sleep(gap)
        wait_on(clock, self._changed, max(seconds - gap, 0.0))


def _kept(informer: Informer[T] | None) -> list[T] | None:
    """What ``informer`` keeps, or None when there is none or its watch is away (read the cluster)."""
    return informer.items() if informer is not None and not informer.stale else None


def _revision(obj: Obj) -> Revision:
    meta = obj.get("metadata") or {}
    return Revision(
        name=meta.get("name", ""), number=int(obj.get("revision") or 0),
        hash=(meta.get("labels") or {}).get(HASH_LABEL, ""), data=obj.get("data") or {},
    )


def wait_for(
    clock: Clock, *, timeout: float, interval: float, probe: Callable[[], T | None],
    pause: Callable[[float], None] | None = None,
) -> T | None:
    """``probe()`` every ``interval`` seconds until it returns something other than ``None``,
    or ``None`` once ``timeout`` seconds have passed on ``clock``; ``pause(interval)`` waits
    between two probes (``clock.sleep``, or a :meth:`Following.wait` that wakes sooner)."""
    deadline = clock.now() + dt.timedelta(seconds=timeout)
    while True:
        result = probe()
        if result is not None:
            return result
        if clock.now() >= deadline:
            return None
        (pause or clock.sleep)(interval)


@contextlib.contextmanager
def looking(cluster: Cluster, namespace: str, name: str, *,
            watches: ClusterWatches | None) -> Iterator[Callable[..., Snapshot]]:
    """What a step that looks at the DaemonSet more than once looks with (issue 39): with the
    process's ``watches`` (a run's step), :meth:`Following.snapshot` on the caches every step on
    this DaemonSet shares (its pods listed once for the canary, its verify and the promotion,
    while the caches are kept); without, :func:`observe` at each look (``NotFound`` either way)."""
    if watches is None:
        yield lambda **_: observe(cluster, namespace, name)
        return
    with Following(cluster, namespace, name, watches=watches) as following:
        yield following.snapshot
