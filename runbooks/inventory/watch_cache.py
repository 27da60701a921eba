"""An inventory's nodes, ResourceSlices and unfinished pods read from the process's watch cache
(issue 39).

The ``inventory`` verb wants every node, every ResourceSlice and, for the IN USE column, every
unfinished pod of the cluster: at 5,000 nodes that is 50,000 pods and 5,000 slices, about
140 MiB read and two CPU-seconds of the API server's per inventory. A worker that answers
``inventory`` again and again keeps them in the process's
:class:`~runbooks.cluster.informing.Watches` instead: listed once, then kept current from a
watch, kept :data:`~runbooks.cluster.informing.LINGER` seconds after the last inventory let go
of them. The nodes and the slices are the informers verify shares (the same projections), the
pods are kept as :class:`KeptPod` records (with the pods of the plugin DaemonSets as
:class:`~runbooks.inventory.models.PluginPod`).

Like every informer, the cache is current to within the watch's delivery (what a controller
reads); while a watch is away (:attr:`~runbooks.cluster.informing.Informer.stale`) the
inventory reads the cluster itself, as the shell's always does.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from runbooks.cluster.decoding import NodeShape, PodShape, SliceShape
from runbooks.cluster.informing import ClusterWatches, Informer
from runbooks.cluster.resources import NODES, PODS, Resource
from runbooks.inventory import reading
from runbooks.inventory.models import Node, PluginPod, ResourceSlice
from runbooks.inventory.pod_use import PENDING, PodTally, PodUse, add_gpus, pod_use

UNFINISHED = "status.phase!=Succeeded,status.phase!=Failed"


@dataclass(frozen=True, slots=True)
class KeptPod:
    """What the cache keeps of an unfinished pod: its node and the GPUs it requests (shared between
    the pods that request the same), the pod's use when it is Pending (what the stuck-claim findings
    read), and when a plugin DaemonSet owns it, the DaemonSet (``namespace/name``) and the pod as
    the inventory shows it. At 5,000 nodes the three caches (nodes, slices, 50,000 pods) add about
    30 MB to the process."""

    node: str
    requests: tuple[tuple[str, int], ...]
    waiting: PodUse | None = None
    plugin: str = ""
    pod: PluginPod | None = None


@functools.lru_cache(maxsize=1024)
def _shared(requests: tuple[tuple[str, int], ...]) -> tuple[tuple[str, int], ...]:
    """One tuple for every pod requesting the same GPUs."""
    return requests


def kept_pod(obj: dict[str, Any] | PodShape, resources: tuple[str, ...], owners: Mapping[str, str]) -> KeptPod | None:
    """The record of a pod, as listed (a :class:`PodShape`) or watched (a dict); None: it neither uses
    a GPU or claim nor belongs to a plugin (not kept)."""
    use = pod_use(obj, resources)
    owner = next((uid for uid in reading.owner_uids(obj) if uid in owners), None)
    if use is None and owner is None:
        return None
    node = sys.intern(use.node) if use is not None else ""
    requests = _shared(tuple(sorted(use.requests.items()))) if use is not None and use.node else ()
    waiting = use if use is not None and use.phase == PENDING else None
    if owner is None:
        return KeptPod(node, requests, waiting)
    return KeptPod(node, requests, waiting, owners[owner], reading.pod_from(obj))


@dataclass(frozen=True)
class CachedReads:
    """The nodes and the tally of the unfinished pods, as the cache holds them now."""

    nodes: list[Node]
    tally: PodTally

    def note(self) -> str:
        return ("nodes and unfinished pods read from the bot's watch cache (listed once, "
                "kept current by a watch)")


def cached_reads(held: contextlib.ExitStack, watches: ClusterWatches, resources: tuple[str, ...],
                 owners: Mapping[str, str]) -> CachedReads | None:
    """The nodes and unfinished pods from ``watches`` (listed now if nobody kept them), held until
    ``held`` closes; None while either watch is away (read the cluster then). ``owners``: the plugin
    DaemonSets whose pods the inventory shows (uid -> ``namespace/name``); ``ClusterError`` if a
    first list fails."""
    node_cache: Informer[Node] = held.enter_context(watches.share(
        NODES, kept=("nodes", resources), project=lambda o: reading.node_from(o, resources), item=NodeShape))
    frozen_owners = dict(owners)
    pod_cache: Informer[KeptPod] = held.enter_context(watches.share(
        PODS, field_selector=UNFINISHED, kept=("inventory-pods", resources, frozenset(frozen_owners.items())),
        project=lambda o: kept_pod(o, resources, frozen_owners), item=PodShape))
    if node_cache.stale or pod_cache.stale:
        return None
    nodes = sorted(node_cache.items(), key=lambda n: n.name)
    tally = PodTally(resources, frozen_owners)
    for kept in pod_cache.items():
        add_gpus(tally.gpus, kept.node, kept.requests)
        if kept.waiting is not None:
            tally.waiting.append(kept.waiting)
        if kept.pod is not None:
            tally.plugin_pods[kept.plugin].append(kept.pod)
    tally.waiting.sort(key=lambda p: (p.namespace, p.name))
    return CachedReads(nodes=nodes, tally=tally)


def cached_slices(held: contextlib.ExitStack, watches: ClusterWatches, resource: Resource) -> list[ResourceSlice] | None:
    """Every ResourceSlice (one per node and driver: 5,000 nodes' are 12 MB a list) from the informer
    verify's window shares, held until ``held`` closes; None while its watch is away."""
    cache: Informer[ResourceSlice] = held.enter_context(watches.share(resource, kept=("slices",),
                                                                      project=reading.slice_from, item=SliceShape))
    return None if cache.stale else sorted(cache.items(), key=lambda s: s.name)
