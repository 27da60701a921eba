"""Whether a DRA driver is registered on a node, seen in the API: its ResourceSlices (issue 59).

A DRA kubelet plugin built on kubernetes/dynamic-resource-allocation publishes its node's
devices through the library's resourceslice controller (``resourceslice/resourceslicecontroller.go``,
v0.30 and on): slices with ``spec.nodeName`` and ``spec.driver``, owned by the Node
(``ownerReferences``, ``controller: true``), in a pool whose every slice carries the pool's
``generation`` and ``resourceSliceCount``. The kubelet deletes a node's slices of a driver when
it starts and when no plugin of that driver has been connected for its wiping delay
(``pkg/kubelet/cm/dra/plugin``, 30 s), so slices there mean a plugin of the driver registered.

So a driver is registered on a node, for the pod now running there, when its slices for the
node (owned by that Node, or by none) form a complete pool (as many slices at the newest
generation as the pool says) and were written since the container serving the driver started,
or, written before, are still there :data:`KUBELET_WIPING_DELAY` after it started (a plugin that
restarts quickly finds its slices unchanged and writes none; one that never came back would have
had them wiped). Nothing here reads a log: log lines, at whatever verbosity the driver runs, are
supporting evidence only (verbosity 0, the example driver's chart default, logs none). Pure.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from runbooks.inventory.models import DaemonSet, ResourceSlice
from runbooks.inventory.plugins import serving
from runbooks.inventory.reading import Obj

KUBELET_WIPING_DELAY = 30.0
"""Seconds the kubelet keeps a node's slices of a driver none of whose plugins is connected."""
CLOCK_SKEW = 5.0
"""Seconds by which a slice's time (the API server's clock) may read before its container's start
(the kubelet's clock) and still be taken as written since."""

How = Literal["published", "kept", "unproven", "none", "incomplete", "not-running"]


@dataclass(frozen=True)
class SliceRegistration:
    registered: bool | None
    """None: not proven yet (slices older than the container, within the kubelet's wiping delay)."""
    how: How
    detail: str
    devices: int = 0


def slice_registration(node: str, driver: str, slices: Sequence[ResourceSlice], *, started: dt.datetime | None,
                       now: dt.datetime) -> SliceRegistration:
    """Whether ``driver`` is registered on ``node`` by the container that started at ``started``
    (None: none serving it is running), judged at ``now`` (the API server's time)."""
    mine = [s for s in slices if s.node == node and s.driver == driver and s.owner_node in (None, node)]
    if not mine:
        return SliceRegistration(False, "none", f"no ResourceSlice of {driver} published for {node}")
    pools: dict[str, list[ResourceSlice]] = {}
    for s in mine:
        pools.setdefault(s.pool, []).append(s)
    current: list[ResourceSlice] = []
    for pool, members in sorted(pools.items()):
        newest = max(s.generation for s in members)
        at = [s for s in members if s.generation == newest]
        want = max(s.slice_count for s in at)
        if len(at) < want:
            return SliceRegistration(False, "incomplete", f"the pool {pool or '?'} of {driver} on {node} is incomplete: "
                                     f"{len(at)} of {want} ResourceSlices at generation {newest} (the scheduler "
                                     "allocates nothing from it)", sum(s.devices for s in at))
        current += at
    devices = sum(s.devices for s in current)
    if started is None:
        return SliceRegistration(False, "not-running", f"the container serving {driver} on {node} is not running "
                                 "(its ResourceSlices are those of a plugin that is gone)", devices)
    times = [s.written or s.created for s in current]
    written = max((t for t in times if t is not None), default=None)
    if written is None or written >= started - dt.timedelta(seconds=CLOCK_SKEW):
        return SliceRegistration(True, "published", f"ResourceSlices of {driver} published for {node} since its "
                                 "plugin started", devices)
    if (now - started).total_seconds() >= KUBELET_WIPING_DELAY:
        return SliceRegistration(True, "kept", f"ResourceSlices of {driver} for {node} kept {KUBELET_WIPING_DELAY:g}s "
                                 "past its plugin's start (the kubelet wipes those of a driver whose plugin did not "
                                 "register again)", devices)
    return SliceRegistration(None, "unproven", f"the ResourceSlices of {driver} for {node} predate its plugin's start "
                             f"({written:%H:%M:%S} < {started:%H:%M:%S}) and the kubelet's "
                             f"{KUBELET_WIPING_DELAY:g}s wiping delay has not passed", devices)


def started_serving(started: dict[str, dt.datetime], containers: Sequence[str]) -> dt.datetime | None:
    """When the newest of ``containers`` (those serving a driver; none named: all the pod's)
    started running; None when one of them is not running."""
    names = list(containers) or list(started)
    if not names or any(n not in started for n in names):
        return None
    return max(started[n] for n in names)


def by_node(slices: Sequence[ResourceSlice]) -> dict[str, list[ResourceSlice]]:
    """The slices of each node (``spec.nodeName``), so each node's verdict reads its own only."""
    out: dict[str, list[ResourceSlice]] = {}
    for s in slices:
        if s.node:
            out.setdefault(s.node, []).append(s)
    return out


def pods_registered(ds: DaemonSet, raw: Obj | None, slices: Sequence[ResourceSlice], now: dt.datetime) -> DaemonSet:
    """A DRA plugin's pods with ``registered`` as its slices show it, for each driver it serves
    (against the start of the containers serving it): False when a driver's slices are missing
    or incomplete, True when every one's are published (or kept); else (not proven yet) as the
    pod's log showed it, if it did."""
    if ds.kind != "dra-kubelet-plugin" or not ds.drivers:
        return ds
    drivers = serving(raw or {}, ds.drivers)
    index = by_node(slices)
    pods = []
    for pod in ds.pods:
        verdicts = [slice_registration(pod.node, d, index.get(pod.node, []), now=now,
                                       started=started_serving(pod.started, containers))
                    for d, containers in drivers.items()]
        if any(v.registered is False for v in verdicts):
            registered: bool | None = False
        elif all(v.registered for v in verdicts):
            registered = True
        else:
            registered = True if pod.registered else None
        pods.append(pod.model_copy(update={"registered": registered}))
    return ds.model_copy(update={"pods": pods})
