"""The cluster as a stability report sees it now: the plugin's pods, its nodes, DRA objects.

A few bounded reads through the adapter (the DaemonSet with its pods, the plugin's nodes,
ResourceSlices and ResourceClaims in the version the cluster serves), reduced to
:class:`ClusterNow`. What cannot be read (RBAC, an API the release lacks) becomes a note,
never a failure of the report: a report that says what it could not see beats no report.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from runbooks.cluster import Cluster
from runbooks.daemonset.baselines import Baseline
from runbooks.daemonset.observing import observe
from runbooks.daemonset.verifying import sample_nodes
from runbooks.errors import Forbidden, NotFound, shorten
from runbooks.inventory import Node, PluginPod, ResourceClaim, ResourceSlice
from runbooks.inventory.reading import claim_from, slice_from


@dataclass(frozen=True)
class ClusterNow:
    taken_at: dt.datetime
    pods: dict[str, PluginPod] = field(default_factory=dict)
    """node -> the live plugin pod on it."""
    nodes: dict[str, Node] = field(default_factory=dict)
    slices: list[ResourceSlice] | None = None
    claims: list[ResourceClaim] | None = None
    daemonset_found: bool = True
    notes: list[str] = field(default_factory=list)


def read_now(cluster: Cluster, baseline: Baseline) -> ClusterNow:
    """The plugin DaemonSet of ``baseline``, its nodes and the DRA objects, as they are now."""
    taken_at = cluster.server_time()
    namespace, _, name = baseline.daemonset.partition("/")
    notes: list[str] = []
    pods: dict[str, PluginPod] = {}
    found = True
    try:
        snap = observe(cluster, namespace, name)
        for node in snap.nodes:
            pod = snap.pod_on(node)
            if pod is not None and not pod.deleting:
                pods[node] = pod
    except NotFound:
        found = False
        notes.append(f"daemonset {baseline.daemonset} no longer exists")
    except Forbidden as exc:
        notes.append(f"cannot read the plugin's pods: {shorten(str(exc))}")
    names = sorted(set(baseline.nodes) | set(pods))
    try:
        nodes = sample_nodes(cluster, names, tuple(baseline.gpu_resources), {})
    except Forbidden as exc:
        nodes = {}
        notes.append(f"cannot read the nodes: {shorten(str(exc))}")
    slices: list[ResourceSlice] | None = None
    claims: list[ResourceClaim] | None = None
    try:
        chosen = cluster.dra_apis().chosen
        if "ResourceSlice" in chosen:
            slices = cluster.list_objects(chosen["ResourceSlice"], project=slice_from)
        if "ResourceClaim" in chosen:
            res = chosen["ResourceClaim"]
            claims = cluster.list_objects(res, project=lambda o: claim_from(o, version=res.version, now=taken_at))
    except Forbidden as exc:
        notes.append(f"cannot read the DRA objects: {shorten(str(exc))}")
    return ClusterNow(taken_at=taken_at, pods=pods, nodes=nodes, slices=slices, claims=claims,
                      daemonset_found=found, notes=notes)
