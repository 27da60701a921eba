"""Taking an inventory: read the cluster through the adapter, reduce, judge.

Reads are few and bounded: nodes, DaemonSets, the plugin DaemonSets' own pods (by their
selector, or those the caller read already), the DRA objects in the version the cluster
serves, ``/version``, one metric from ``/metrics``, at most ``LOG_BUDGET`` plugin-pod logs,
and for the IN USE column the unfinished pods: of the whole cluster once when every node's is
wanted (the ``inventory`` verb), else of the few nodes asked for, node by node
(``spec.nodeName``), with the cluster's Pending pods (the pods waiting on claims). A worker
reads the nodes and the unfinished pods of the ``inventory`` verb from its watch cache
(:mod:`runbooks.inventory.watch_cache`): listed once, not again per inventory.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections import defaultdict
from collections.abc import Callable, Collection, Mapping, Sequence

from runbooks.cluster import Cluster
from runbooks.cluster.decoding import NodeShape, PodShape, SliceShape
from runbooks.cluster.informing import ClusterWatches
from runbooks.cluster.resources import (
    CONTROLLER_REVISIONS,
    DAEMONSETS,
    NODES,
    PODS,
    DraApis,
    Resource,
)
from runbooks.inventory import plugins, reading, stacks
from runbooks.inventory.findings import all_findings, by_severity, stuck_claim_findings
from runbooks.inventory.models import (
    DaemonSet,
    DeviceClass,
    DraInfo,
    GateState,
    Inventory,
    KubernetesInfo,
    Node,
    PluginKind,
    PluginPod,
    ResourceClaim,
    ResourceSlice,
)
from runbooks.inventory.pod_use import PENDING, PodTally, PodUse, gpus_in_use, pod_use
from runbooks.inventory.reading import Obj
from runbooks.inventory.registration import pods_registered
from runbooks.inventory.watch_cache import cached_reads, cached_slices

DRA_GATE = "DynamicResourceAllocation"
DEFAULT_GPU_RESOURCES = ("nvidia.com/gpu",)


def take_inventory(
    cluster: Cluster,
    *,
    targets: Sequence[str] = (),
    gpu_resources: Sequence[str] = DEFAULT_GPU_RESOURCES,
    log_budget: int = plugins.LOG_BUDGET,
    now: Callable[[], dt.datetime] | None = None,
    registration: Mapping[str, str] | None = None,
    max_unavailable: str | None = None,
    in_use_of: Collection[str] | None = None,
    owned: Mapping[str, Sequence[PluginPod]] | None = None,
    dra_plugins: bool = True,
    watches: ClusterWatches | None = None,
    nodes: Sequence[Node] | None = None,
    log_nodes: Collection[str] | None = None,
) -> Inventory:
    """Everything an operator must know before touching a device plugin or DRA driver.

    ``targets`` (``namespace/name``) are the plugin DaemonSets to look at; empty means
    every DaemonSet recognised as a device plugin or DRA kubelet plugin. ``taken_at`` is
    the API server's clock (so ages match kubectl's) unless ``now`` is given.
    ``max_unavailable`` is the policy's limit on a plugin's rolling update (None: not judged).
    ``in_use_of``: the nodes whose devices in use are wanted (None: every node's, from one list
    of the cluster's unfinished pods; else each node's pods are read by node, and the other
    nodes show none in use). ``owned``: the pods of a plugin DaemonSet (by ``namespace/name``)
    the caller has just read, used instead of listing them again. ``dra_plugins=False``: with
    ``targets``, the DRA kubelet plugins that are not targets are not read (nor their logs): the
    classes they serve are judged without them (a device plugin's canary judges no class), and the
    DRA objects (classes, slices, claims) are not listed either.
    ``watches``: the process's watch cache of this cluster; with ``in_use_of`` None, the nodes and
    unfinished pods are read from it (:mod:`runbooks.inventory.watch_cache`) while its watches hold.
    ``nodes``: the nodes to judge, read by the caller (a canary's own nodes after approval, the rest
    kept from its request): the nodes are not listed. ``log_nodes``: only the plugin pods on these
    nodes have their registration read from their logs (None: the budget chooses among all).
    """
    with contextlib.ExitStack() as held:
        return _take(cluster, held, targets=targets, resources=tuple(gpu_resources), log_budget=log_budget, now=now,
                     registration=registration, max_unavailable=max_unavailable, in_use_of=in_use_of,
                     owned=owned, dra_plugins=dra_plugins, watches=watches, given=nodes, log_nodes=log_nodes)


def _take(
    cluster: Cluster, held: contextlib.ExitStack, *, targets: Sequence[str], resources: tuple[str, ...],
    log_budget: int, now: Callable[[], dt.datetime] | None, registration: Mapping[str, str] | None,
    max_unavailable: str | None, in_use_of: Collection[str] | None, owned: Mapping[str, Sequence[PluginPod]] | None,
    dra_plugins: bool, watches: ClusterWatches | None, given: Sequence[Node] | None = None,
    log_nodes: Collection[str] | None = None,
) -> Inventory:
    version = cluster.version()
    taken_at = now() if now else version.server_time or dt.datetime.now(dt.UTC)
    apis = cluster.dra_apis()
    gate, stage = _gate(cluster)
    notes: list[str] = []

    cache = watches if in_use_of is None else None  # every node's: what a watch cache keeps, from it
    # a device plugin's own inventory (targets, no DRA kubelet plugin read) judges no device class, claim or
    # slice: its findings name its DaemonSet and its nodes only, so the DRA objects are not listed (issue 63:
    # a canary listed every ResourceSlice of a 5,000-node cluster twice, 11 MiB each)
    classes, slices, claims = (([], [], []) if targets and not dra_plugins
                               else _dra_objects(cluster, apis, taken_at, held, cache))
    known_drivers = {d for c in classes for d in c.drivers} | {s.driver for s in slices}
    selection = plugins.select_plugins(cluster.list_objects(DAEMONSETS), targets, known_drivers)
    chosen = [(ds, kind) for ds, kind in selection.plugins
              if dra_plugins or not targets or plugins.ref_of(ds) in targets]
    read = dict(owned or {})
    owners = {(ds.get("metadata") or {}).get("uid", ""): plugins.ref_of(ds) for ds, _ in chosen
              if plugins.ref_of(ds) not in read}
    cached = cached_reads(held, cache, resources, owners) if cache is not None else None
    if given is not None:
        nodes = list(given)
    elif cached is not None:
        nodes = cached.nodes
        notes.append(cached.note())
    else:
        nodes = cluster.list_objects(NODES, item=NodeShape, project=lambda o: reading.node_from(o, resources))
    if in_use_of is None:  # every node's IN USE: one pass over the cluster's unfinished pods, holding the plugins' too
        tally = cached.tally if cached is not None else unfinished_and_plugin_pods(cluster, resources, owners)
        read.update(tally.plugin_pods)
        gpus, waiting = tally.gpus, tally.waiting
    daemonsets = [_plugin_daemonset(cluster, ds, kind, known_drivers, read.get(plugins.ref_of(ds)))
                  for ds, kind in chosen]
    kept = cache.memo("registrations", plugins.Registrations) if cache is not None else None
    daemonsets, log_notes = _registrations(cluster, daemonsets, {n.name: n for n in nodes}, log_budget,
                                           registration or {}, kept, by_slices="ResourceSlice" in apis.chosen,
                                           log_nodes=log_nodes)
    daemonsets, driver_notes = _assign_drivers(daemonsets, slices, classes)
    if "ResourceSlice" in apis.chosen:  # a DRA driver's registration is seen in its slices, its log only supports
        raw = {plugins.ref_of(ds): ds for ds, _ in chosen}
        daemonsets = [pods_registered(ds, raw.get(ds.ref), slices, taken_at) for ds in daemonsets]
    notes += log_notes + driver_notes
    if in_use_of is not None:  # a few nodes' (a canary's): never the whole cluster's pods for them (every
        # node's were read above, with the plugins' pods)
        gpus = gpus_in_use(p for node in sorted(set(in_use_of)) for p in unfinished_pods(cluster, resources, node=node))
        waiting = unfinished_pods(cluster, (), phase=PENDING)
    if any(c.state == "pending" for c in claims):
        claims = with_waiting_pods(cluster, claims, waiting)
    with_devices_in_use(nodes, claims, gpus)

    dra = DraInfo(
        feature_gate=gate, stage=stage, served_versions=apis.served_versions, kinds=apis.kinds,
        read_versions={kind: res.version for kind, res in apis.chosen.items()},
    )
    findings = by_severity(all_findings(
        dra=dra, nodes=nodes, daemonsets=daemonsets, classes=classes, slices=slices, claims=claims,
        gpu_resources=resources, missing_targets=selection.missing_targets, max_unavailable=max_unavailable,
        every_plugin=not targets,
    ) + stuck_claim_findings(
        waiting=[(p.namespace, p.name, p.unschedulable, p.claims) for p in waiting],
        claims=claims, slices=slices if "ResourceSlice" in apis.chosen else None,
        claims_served="ResourceClaim" in apis.chosen,
    ))
    return Inventory(
        taken_at=taken_at, context=cluster.context, server=cluster.server, gpu_resources=list(resources),
        kubernetes=KubernetesInfo(version=version.git_version, minor=version.minor, platform=version.platform),
        dra=dra, nodes=nodes, daemonsets=daemonsets, device_classes=classes, slices=slices, claims=claims,
        classes=stacks.hardware_classes(nodes), findings=findings, notes=notes,
    )


def _gate(cluster: Cluster) -> tuple[GateState, str | None]:
    samples = cluster.metric_samples("kubernetes_feature_enabled")
    for sample in samples or []:
        if sample.labels.get("name") == DRA_GATE:
            state: GateState = "enabled" if sample.value == 1 else "disabled"
            return state, sample.labels.get("stage") or "GA"
    return "unknown", None


def _dra_objects(
    cluster: Cluster, apis: DraApis, now: dt.datetime, held: contextlib.ExitStack, watches: ClusterWatches | None,
) -> tuple[list[DeviceClass], list[ResourceSlice], list[ResourceClaim]]:
    """The DRA objects of the versions served; the slices from ``watches`` while their watch holds."""
    chosen = apis.chosen
    classes: list[DeviceClass] = []
    if "DeviceClass" in chosen:
        classes += cluster.list_objects(chosen["DeviceClass"], project=lambda o: reading.class_from(o, "DeviceClass"))
    if "ResourceClass" in chosen:
        classes += cluster.list_objects(chosen["ResourceClass"], project=lambda o: reading.class_from(o, "ResourceClass"))
    slices: list[ResourceSlice] = []
    if "ResourceSlice" in chosen:
        kept = cached_slices(held, watches, chosen["ResourceSlice"]) if watches is not None else None
        slices = kept if kept is not None else cluster.list_objects(chosen["ResourceSlice"], item=SliceShape,
                                                                    project=reading.slice_from)
    claims: list[ResourceClaim] = []
    if "ResourceClaim" in chosen:
        res: Resource = chosen["ResourceClaim"]
        claims = cluster.list_objects(res, project=lambda o: reading.claim_from(o, version=res.version, now=now))
    return classes, slices, claims


def _plugin_daemonset(cluster: Cluster, ds: Obj, kind: PluginKind, known_drivers: set[str],
                      read: Sequence[PluginPod] | None = None) -> DaemonSet:
    """The plugin DaemonSet with its pods: ``read`` (the caller's), else listed by its selector."""
    meta = ds.get("metadata") or {}
    namespace, uid = meta.get("namespace", ""), meta.get("uid", "")
    selector = reading.selector_string((ds.get("spec") or {}).get("selector") or {})
    owned = list(read) if read is not None else cluster.list_objects(
        PODS, namespace=namespace, label_selector=selector or None, item=PodShape,
        project=lambda o: reading.pod_from(o) if uid in reading.owner_uids(o) else None,
    )
    revisions = cluster.list_objects(
        CONTROLLER_REVISIONS, namespace=namespace,
        project=lambda o: reading.revision_of(o) if uid in reading.owner_uids(o) else None,
    )
    newest = max((r for r in revisions if r is not None), key=lambda r: r[1], default=None)
    drivers = plugins.template_drivers(ds, known_drivers) if kind == "dra-kubelet-plugin" else []
    model = reading.daemonset_from(ds, kind=kind, drivers=drivers, revision=(newest[1], newest[2]) if newest else None)
    pods = sorted((p for p in owned if p is not None), key=lambda p: (p.node, p.name))
    return model.model_copy(update={"pods": pods})


def _registrations(
    cluster: Cluster, daemonsets: list[DaemonSet], nodes: dict[str, Node], budget: int,
    registration: Mapping[str, str], kept: plugins.Registrations | None = None, *, by_slices: bool = False,
    log_nodes: Collection[str] | None = None,
) -> tuple[list[DaemonSet], list[str]]:
    """Plugin pods with ``registered`` read from their logs (within the budget); ``registration``
    names the line to look for per target (else the kind's default). ``kept`` (a worker's, with
    its watch cache): the registrations its earlier inventories saw, not read again while the
    pod and its containers are the same; the budget goes to the others. ``by_slices``: the
    cluster serves ResourceSlices, in which a DRA driver's registration is seen
    (:func:`~runbooks.inventory.registration.pods_registered`), so its logs are not read
    unless the policy names its registration line. ``log_nodes``: only the pods on these nodes are
    candidates (the others keep ``registered`` unknown, without a note: the caller chose them)."""
    known: dict[tuple[str, str], plugins.LogResult] = {}
    candidates = []
    for ds in daemonsets:
        if by_slices and ds.kind == "dra-kubelet-plugin" and ds.ref not in registration:
            continue
        for pod in ds.pods:
            if log_nodes is not None and pod.node not in log_nodes:
                continue
            read = plugins.LogRead(ds.ref, ds.namespace, pod.name, sorted(pod.images), ds.kind,
                                   registration.get(ds.ref))
            seen = kept.get(pod, read) if kept is not None else None
            if seen is not None:
                known[(ds.namespace, pod.name)] = seen
            else:
                candidates.append((pod, read))
    chosen = plugins.choose_logs(candidates, nodes, budget)
    results = plugins.read_registrations(
        [read for _, read in chosen],
        lambda ns, pod, container: cluster.pod_log(ns, pod, container=container, tail_lines=plugins.LOG_TAIL),
    )
    if kept is not None:
        for pod, read in chosen:
            if (found := results.get((read.namespace, read.pod))) is not None:
                kept.keep(pod, read, found)
    results.update(known)
    notes = []
    if known:
        notes.append(f"registration of {len(known)} plugin pods as their logs showed it to an earlier inventory "
                     "(the same pods, not restarted since): not read again")
    if len(chosen) < len(candidates):
        notes.append(
            f"registration read from the logs of {len(chosen)} of {len(candidates)} plugin pods "
            "(the most suspect first); the others show registered=null"
        )
    problems = sorted({r.problem for r in results.values() if r.problem})
    notes += [f"a plugin log could not be read: {p}" for p in problems[:3]]
    updated = []
    for ds in daemonsets:
        pods: list[PluginPod] = []
        log_drivers: set[str] = set()
        for pod in ds.pods:
            result = results.get((ds.namespace, pod.name))
            if result is None:
                pods.append(pod)
                continue
            pods.append(pod.model_copy(update={"registered": result.registered}))
            log_drivers.update(result.drivers)
        drivers = ds.drivers
        if ds.kind == "dra-kubelet-plugin" and not drivers:
            drivers = sorted(log_drivers)
        updated.append(ds.model_copy(update={"pods": pods, "drivers": drivers}))
    return updated, notes


def _assign_drivers(
    daemonsets: list[DaemonSet], slices: list[ResourceSlice], classes: list[DeviceClass]
) -> tuple[list[DaemonSet], list[str]]:
    """DRA plugins whose template and logs named no driver: the drivers of the slices on
    their nodes, else (when it is the only DRA plugin) the drivers of the classes."""
    slice_nodes: dict[str, set[str]] = defaultdict(set)
    for s in slices:
        if s.node:
            slice_nodes[s.driver].add(s.node)
    dra = [ds for ds in daemonsets if ds.kind == "dra-kubelet-plugin"]
    notes: list[str] = []
    out = []
    for ds in daemonsets:
        if ds.kind == "dra-kubelet-plugin" and not ds.drivers:
            drivers = plugins.drivers_by_slices({p.node for p in ds.pods}, slice_nodes)
            if not drivers and len(dra) == 1:
                drivers = sorted({d for c in classes for d in c.drivers})
                if drivers:
                    notes.append(f"{ds.ref} names no driver; taken to serve {', '.join(drivers)}")
            ds = ds.model_copy(update={"drivers": drivers})
        out.append(ds)
    return out, notes


def unfinished_pods(cluster: Cluster, resources: tuple[str, ...], *, phase: str | None = None,
                    node: str | None = None) -> list[PodUse]:
    """The pods not yet Succeeded or Failed (or only those in ``phase``; only those on ``node``)
    that request GPUs or name claims."""
    selector = f"status.phase={phase}" if phase else "status.phase!=Succeeded,status.phase!=Failed"
    if node is not None:
        selector = f"spec.nodeName={node},{selector}"
    found = cluster.list_objects(PODS, field_selector=selector, item=PodShape, project=lambda o: pod_use(o, resources))
    return [p for p in found if p is not None]


def with_devices_in_use(nodes: list[Node], claims: Sequence[ResourceClaim],
                        gpus: Mapping[str, Mapping[str, int]]) -> list[Node]:
    """``nodes`` with what is in use on each: GPUs requested by its unfinished pods (``gpus``, by
    node: :func:`gpus_in_use`), and DRA devices allocated to claims there. Each node is replaced in
    the list itself, one at a time, so 5,000 nodes are never held twice (issue 39)."""
    devices: dict[str, int] = defaultdict(int)
    for claim in claims:
        if claim.node and claim.state.startswith("allocated"):
            devices[claim.node] += claim.devices
    for i, node in enumerate(nodes):
        nodes[i] = node.model_copy(update={"in_use": dict(gpus.get(node.name, {})),
                                           "devices_in_use": devices.get(node.name, 0)})
    return nodes


def with_waiting_pods(cluster: Cluster, claims: list[ResourceClaim],
                      pods: Sequence[PodUse] | None = None) -> list[ResourceClaim]:
    """Claims with the Pending pods that use them: from ``pods`` when the caller listed them,
    else from one list of Pending pods, cluster-wide."""
    listed = pods if pods is not None else unfinished_pods(cluster, (), phase=PENDING)
    waiting: dict[tuple[str, str], list[str]] = defaultdict(list)
    for pod in listed:
        if pod.phase == PENDING:
            for claim in pod.claims:
                waiting[(pod.namespace, claim)].append(pod.name)
    return [
        c.model_copy(update={"waiting_pods": sorted(waiting.get((c.namespace, c.name), []))}) for c in claims
    ]


def unfinished_and_plugin_pods(
    cluster: Cluster, resources: tuple[str, ...], owners: Mapping[str, str],
) -> PodTally:
    """One pass over the cluster's unfinished pods (:class:`PodTally`), decoded as :class:`PodShape`
    (only the fields read), so an inventory of every node lists no plugin's pods again and keeps
    no object per pod (issue 39). A plugin pod Succeeded or Failed is not among them: the
    DaemonSet controller deletes a failed pod and creates another, which is."""
    return cluster.fold_objects(
        PODS, field_selector="status.phase!=Succeeded,status.phase!=Failed", item=PodShape,
        start=lambda: PodTally(resources, owners), add=PodTally.add,
    )
