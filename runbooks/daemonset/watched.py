"""What verify reads once its window ends: the events of the watched reasons, and on a DRA
driver the ResourceSlices, the ResourceClaims and the Pending pods that wait on claims.

Outside a run (``upgradebot verify``) each is listed once, at the end. In a run, the
window holds the process's shared informers of them (:class:`~runbooks.cluster.informing.Watches`)
from its start, so the end reads what the watches kept: a promotion's waves, the verify
after them and another run on the same cluster list each kind once between them (for
as long as the cache keeps it, ``LINGER``) instead of once per verify. Whatever cannot be
watched (the first list is refused, the watch is away: ``stale``) is listed at the end as
outside a run, so a refusal reads the same either way. A change the server made in the
last instant of the window that the watch has not yet delivered counts as after it, as a
list sent that instant later would.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
from collections.abc import Callable, Sequence
from typing import Any

from runbooks.cluster import Cluster
from runbooks.cluster.decoding import SliceShape
from runbooks.cluster.informing import ClusterWatches, Informer, held_informer
from runbooks.cluster.resources import EVENTS, PODS, Resource
from runbooks.daemonset.events import Event, event_from, read_events
from runbooks.errors import ClusterError, shorten
from runbooks.inventory import ResourceClaim, ResourceSlice
from runbooks.inventory.pod_use import PENDING, pod_use
from runbooks.inventory.reading import claim_from, human_duration, slice_from
from runbooks.inventory.taking import with_waiting_pods

log = logging.getLogger("upgradebot.verify")
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


class EndReads:
    """The reads at the end of one verify window (see the module's docstring). ``reasons``:
    the event reasons judged; ``dra``: the target is a DRA driver (slices, claims, Pending pods)."""

    def __init__(self, cluster: Cluster, reasons: Sequence[str], *, dra: bool,
                 watches: ClusterWatches | None = None) -> None:
        self.cluster, self.reasons, self.dra, self.watches = cluster, tuple(reasons), dra, watches
        self._held = contextlib.ExitStack()
        self._events: dict[str, Informer[Event]] = {}
        self._chosen: dict[str, Resource] | None = None
        self._slices: Informer[ResourceSlice] | None = None
        self._claims: Informer[ResourceClaim] | None = None
        self._pending: Informer[Any] | None = None

    def __enter__(self) -> EndReads:
        if self.watches is None:
            return self
        for reason in self.reasons:
            informer = self._hold(EVENTS, ("events",), event_from, field_selector=f"reason={reason}")
            if informer is not None:
                self._events[reason] = informer
        if self.dra:
            chosen = self.chosen()
            if "ResourceSlice" in chosen:
                self._slices = self._hold(chosen["ResourceSlice"], ("slices",), slice_from, item=SliceShape)
            if "ResourceClaim" in chosen:
                res = chosen["ResourceClaim"]
                self._claims = self._hold(res, ("claims", res.version),
                                          lambda o: claim_from(o, version=res.version, now=_EPOCH))
                self._pending = self._hold(PODS, ("pod-uses", ()), lambda o: pod_use(o, ()),
                                           field_selector=f"status.phase={PENDING}")
        return self

    def __exit__(self, *exc: object) -> None:
        self._held.close()

    def _hold(self, resource: Resource, kept: tuple[Any, ...], project: Callable[[dict[str, Any]], Any],
              **options: Any) -> Informer[Any] | None:
        assert self.watches is not None
        try:
            return held_informer(self._held, self.cluster, resource, watches=self.watches, kept=kept,
                                 project=project, **options)
        except ClusterError as exc:  # listed at the end instead, where a refusal is judged
            log.debug("not watching %s for verify (%s): listed at the end", resource.plural, shorten(str(exc)))
            return None

    def chosen(self) -> dict[str, Resource]:
        """The DRA kinds served, each in the version read (one discovery per window)."""
        if self._chosen is None:
            self._chosen = dict(self.cluster.dra_apis().chosen)
        return self._chosen

    # ------------------------------------------------------------------ the end
    def events(self) -> dict[str, list[Event]]:
        """Events of each reason: kept by the watch, else listed now."""
        kept = {r: informer for r in self.reasons if (informer := _fresh(self._events.get(r))) is not None}
        listed = read_events(self.cluster, [r for r in self.reasons if r not in kept])
        return {r: kept[r].items() if r in kept else listed[r] for r in self.reasons}

    def slices(self) -> list[ResourceSlice] | None:
        """Every ResourceSlice (None: the cluster serves none)."""
        chosen = self.chosen()
        if "ResourceSlice" not in chosen:
            return None
        kept = _fresh(self._slices)
        return kept.items() if kept is not None else self.cluster.list_objects(chosen["ResourceSlice"],
                                                                                 project=slice_from)

    def claims(self, now: dt.datetime) -> list[ResourceClaim] | None:
        """Every ResourceClaim, with the Pending pods waiting on it (None: the cluster serves none)."""
        chosen = self.chosen()
        if "ResourceClaim" not in chosen:
            return None
        res = chosen["ResourceClaim"]
        kept, pending = _fresh(self._claims), _fresh(self._pending)
        if kept is None:
            claims = self.cluster.list_objects(res, project=lambda o: claim_from(o, version=res.version, now=now))
        else:
            claims = [c.model_copy(update={"age": human_duration(now - c.created) if c.created else c.age})
                      for c in kept.items()]
        return with_waiting_pods(self.cluster, claims, pending.items() if pending is not None else None)


def _fresh(informer: Informer[Any] | None) -> Informer[Any] | None:
    return informer if informer is not None and not informer.stale else None
