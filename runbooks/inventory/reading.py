"""From the API's JSON to inventory models: one pure function per kind, no I/O.

Each function reads only the fields the inventory keeps, so a 50,000-pod list is
reduced page by page. Shapes differ between ``resource.k8s.io`` versions (v1alpha2 keeps
``driverName``/``nodeName`` at the top level; v1beta2 and v1 nest a request under
``exactly``); the functions accept all of them.
"""

from __future__ import annotations

import datetime as dt
import re
import sys
from decimal import Decimal, InvalidOperation
from typing import Any

from runbooks.cluster.decoding import (
    MetaShape,
    NodeShape,
    NodeSpecShape,
    NodeStatusShape,
    PodShape,
    PodSpecShape,
    PodStatusShape,
    PoolShape,
    ResourcesShape,
    SliceMetaShape,
    SliceShape,
)
from runbooks.inventory.models import (
    ContainerFacts,
    DaemonSet,
    DeviceClass,
    Manifest,
    Node,
    PluginKind,
    PluginPod,
    ResourceClaim,
    ResourceSlice,
    Taint,
)
from runbooks.inventory.stacks import stack_fields
from runbooks.owners import owners_of

Obj = dict[str, Any]

HASH_LABEL = "controller-revision-hash"
# Labels that say a node has NVIDIA GPUs: NFD's PCI vendor 10de (optionally with the
# class, e.g. pci-0302_10de), and the GPU operator's own.
GPU_HARDWARE_LABELS = (
    re.compile(r"^feature\.node\.kubernetes\.io/pci-(?:[0-9a-f]{4}_)?10de\.present$"),
    re.compile(r"^nvidia\.com/gpu\.present$"),
)
KEPT_LABEL_PREFIXES = ("feature.node.kubernetes.io/pci-", "nvidia.com/", "topology.kubernetes.io/zone")
"""Node labels kept: the GPU hardware's, and the zone (verify's log sample covers every zone)."""
_CEL_DRIVER = re.compile(r"""device\.driver\s*==\s*["']([^"']+)["']""")
_SUFFIXES: dict[str, Decimal] = {
    "": Decimal(1), "k": Decimal(10) ** 3, "M": Decimal(10) ** 6, "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12, "P": Decimal(10) ** 15, "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10, "Mi": Decimal(2) ** 20, "Gi": Decimal(2) ** 30, "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50, "Ei": Decimal(2) ** 60, "m": Decimal("0.001"),
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+)([a-zA-Z]*)$")


_NO_META, _NO_SPEC, _NO_STATUS, _NO_RESOURCES = MetaShape(), PodSpecShape(), PodStatusShape(), ResourcesShape()
_NO_SLICE_META, _NO_POOL = SliceMetaShape(), PoolShape()
_NO_NODE_SPEC, _NO_NODE_STATUS = NodeSpecShape(), NodeStatusShape()


def _meta(obj: Obj) -> Obj:
    return obj.get("metadata") or {}


def shared(value: Any) -> Any:
    """A string the inventory keeps of each of thousands of objects (a node name a pod and a slice
    name too, an image, a label, a phase) as one object for all (``sys.intern``): at 5,000 nodes,
    115,000 copies are 7 MiB (issue 39)."""
    return sys.intern(value) if type(value) is str else value


def given(value: Any, default: str) -> Any:
    """A shape's field as ``dict.get(key, default)`` reads it: the default when the field was absent."""
    return default if value is None else value


def quantity(value: Any) -> int:
    """A resource quantity as a whole number (extended resources are whole numbers)."""
    match = _QUANTITY.fullmatch(str(value).strip())
    if not match or match.group(2) not in _SUFFIXES:
        return 0
    try:
        return int(Decimal(match.group(1)) * _SUFFIXES[match.group(2)])
    except InvalidOperation:
        return 0


def parse_time(value: Any) -> dt.datetime | None:
    if not value:
        return None
    try:
        return dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None


def _two_units(big: int, big_unit: str, small: int, small_unit: str) -> str:
    """``3h20m``, or ``3h`` when the smaller unit is 0."""
    return f"{big}{big_unit}{small}{small_unit}" if small else f"{big}{big_unit}"


def human_duration(delta: dt.timedelta) -> str:
    """kubectl's ``AGE``: ``duration.HumanDuration`` from apimachinery."""
    seconds = int(delta.total_seconds())
    if seconds < -1:
        return "<invalid>"
    if seconds < 0:
        return "0s"
    if seconds < 120:
        return f"{seconds}s"
    minutes, hours = seconds // 60, seconds // 3600
    days, years = hours // 24, hours // 24 // 365
    if minutes < 10:
        return _two_units(minutes, "m", seconds % 60, "s")
    if minutes < 180:
        return f"{minutes}m"
    if hours < 8:
        return _two_units(hours, "h", minutes % 60, "m")
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return _two_units(days, "d", hours % 24, "h")
    if hours < 24 * 365 * 2:
        return f"{days}d"
    if hours < 24 * 365 * 8:
        return _two_units(years, "y", days % 365, "d")
    return f"{years}y"


# ----------------------------------------------------------------------------- nodes
def has_gpu_hardware(labels: dict[str, str]) -> bool:
    return any(
        value == "true" and any(p.fullmatch(key) for p in GPU_HARDWARE_LABELS) for key, value in labels.items()
    )


def node_from(obj: Obj | NodeShape, gpu_resources: tuple[str, ...]) -> Node:
    """A node, from the node as listed: a dict (a watch cache's), or the :class:`NodeShape` a typed
    list decodes (its strings shared: :func:`shared`)."""
    if isinstance(obj, NodeShape):
        return _node_of_shape(obj, gpu_resources)
    meta, spec, status = _meta(obj), obj.get("spec") or {}, obj.get("status") or {}
    labels = meta.get("labels") or {}
    capacity, allocatable = status.get("capacity") or {}, status.get("allocatable") or {}
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    return Node(
        name=meta.get("name", ""),
        ready=conditions.get("Ready") == "True",
        unschedulable=bool(spec.get("unschedulable")),
        taints=[
            Taint(key=t.get("key", ""), value=t.get("value") or "", effect=t.get("effect", ""))
            for t in spec.get("taints") or []
        ],
        gpu_hardware=has_gpu_hardware(labels),
        labels={k: v for k, v in labels.items() if k.startswith(KEPT_LABEL_PREFIXES)},
        capacity={r: quantity(capacity[r]) for r in gpu_resources if r in capacity},
        allocatable={r: quantity(allocatable[r]) for r in gpu_resources if r in allocatable},
        kubelet_version=(status.get("nodeInfo") or {}).get("kubeletVersion", ""),
        **stack_fields(labels, status.get("nodeInfo") or {}),
    )


def _node_of_shape(node: NodeShape, gpu_resources: tuple[str, ...]) -> Node:
    meta, spec, status = node.metadata or _NO_META, node.spec or _NO_NODE_SPEC, node.status or _NO_NODE_STATUS
    labels = {shared(k): shared(v) for k, v in (meta.labels or {}).items()}
    capacity, allocatable = status.capacity or {}, status.allocatable or {}
    conditions = {c.type: c.status for c in status.conditions or []}
    info = {k: shared(v) for k, v in (status.node_info or {}).items()}
    return Node(
        name=shared(given(meta.name, "")),
        ready=conditions.get("Ready") == "True",
        unschedulable=bool(spec.unschedulable),
        taints=[Taint(key=given(t.key, ""), value=t.value or "", effect=given(t.effect, "")) for t in spec.taints or []],
        gpu_hardware=has_gpu_hardware(labels),
        labels={k: v for k, v in labels.items() if k.startswith(KEPT_LABEL_PREFIXES)},
        capacity={r: quantity(capacity[r]) for r in gpu_resources if r in capacity},
        allocatable={r: quantity(allocatable[r]) for r in gpu_resources if r in allocatable},
        kubelet_version=info.get("kubeletVersion", ""),
        **stack_fields(labels, info),
    )


# ------------------------------------------------------------------ daemonsets, pods
def images_of(pod_spec: Obj) -> dict[str, str]:
    return {c.get("name", ""): c.get("image", "") for c in pod_spec.get("containers") or []}


def daemonset_from(obj: Obj, *, kind: PluginKind, drivers: list[str], revision: tuple[int, str] | None) -> DaemonSet:
    meta, spec, status = _meta(obj), obj.get("spec") or {}, obj.get("status") or {}
    strategy = spec.get("updateStrategy") or {}
    max_unavailable = (strategy.get("rollingUpdate") or {}).get("maxUnavailable")
    return DaemonSet(
        namespace=meta.get("namespace", ""),
        name=meta.get("name", ""),
        kind=kind,
        drivers=drivers,
        images=images_of((spec.get("template") or {}).get("spec") or {}),
        update_strategy=strategy.get("type") or "RollingUpdate",
        max_unavailable=None if max_unavailable is None else str(max_unavailable),
        current_revision=revision[0] if revision else None,
        current_revision_hash=revision[1] if revision else None,
        generation=int(meta.get("generation") or 0),
        observed_generation=int(status.get("observedGeneration") or 0),
        desired=int(status.get("desiredNumberScheduled") or 0),
        current=int(status.get("currentNumberScheduled") or 0),
        updated=int(status.get("updatedNumberScheduled") or 0),
        ready=int(status.get("numberReady") or 0),
        available=int(status.get("numberAvailable") or 0),
        selector=dict((spec.get("selector") or {}).get("matchLabels") or {}),
        manifest=manifest_of((spec.get("template") or {}).get("spec") or {}),
        owners=owners_of(obj),
    )


def manifest_of(pod_spec: Obj) -> Manifest:
    """The settings of a pod template the manifest findings judge."""
    containers = []
    for ctr in pod_spec.get("containers") or []:
        context = ctr.get("securityContext") or {}
        escalation = context.get("allowPrivilegeEscalation")
        containers.append(ContainerFacts(
            name=str(ctr.get("name", "")), image=str(ctr.get("image", "")),
            env={str(e.get("name")): str(e.get("value", "")) for e in ctr.get("env") or [] if "valueFrom" not in e},
            args=[str(a) for a in ctr.get("args") or []],
            command=[str(a) for a in ctr.get("command") or []],
            privileged=bool(context.get("privileged")),
            allow_privilege_escalation=None if escalation is None else bool(escalation),
            drops_all="ALL" in ((context.get("capabilities") or {}).get("drop") or []),
            adds=[str(a) for a in (context.get("capabilities") or {}).get("add") or []],
            mounts={str(m.get("mountPath", "")): str(m.get("name", "")) for m in ctr.get("volumeMounts") or []},
        ))
    return Manifest(
        priority_class=str(pod_spec.get("priorityClassName") or ""),
        tolerations=[{k: str(v) for k, v in t.items() if v is not None} for t in pod_spec.get("tolerations") or []],
        host_paths={str(v.get("name")): str((v.get("hostPath") or {}).get("path", ""))
                    for v in pod_spec.get("volumes") or [] if v.get("hostPath")},
        containers=containers,
    )


def pinned_node(spec: Obj) -> str:
    """The one node a pod's required node affinity names by ``metadata.name`` (how a DaemonSet pins
    a pod the scheduler has not bound yet: kube-controller-manager's ``GetTargetNodeName``), else ''."""
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution")) or {}
    for term in required.get("nodeSelectorTerms") or []:
        for req in (term or {}).get("matchFields") or []:
            values = req.get("values") or []
            if req.get("key") == "metadata.name" and req.get("operator") == "In" and len(values) == 1:
                return str(values[0])
    return ""


def _pinned_node_of_shape(spec: PodSpecShape) -> str:
    node_affinity = spec.affinity.node_affinity if spec.affinity else None
    required = node_affinity.required_during_scheduling_ignored_during_execution if node_affinity else None
    for term in (required.node_selector_terms if required else None) or []:
        for req in term.match_fields or []:
            if req.key == "metadata.name" and req.operator == "In" and len(req.values or []) == 1:
                return str((req.values or [""])[0])
    return ""


def _unschedulable(conditions: list[tuple[Any, Any, Any, Any]]) -> str | None:
    """The scheduler's message of a ``PodScheduled=False`` condition with reason ``Unschedulable``."""
    return next((str(msg or "") for kind, status, reason, msg in conditions
                 if kind == "PodScheduled" and status == "False" and reason == "Unschedulable"), None)


def pod_from(obj: Obj | PodShape) -> PluginPod:
    """A plugin's pod, from the pod as listed: a dict (a watch cache's: read as it is, no
    conversion per look), or the :class:`PodShape` a typed list decodes (its strings shared)."""
    if isinstance(obj, PodShape):
        return _pod_of_shape(obj)
    meta, spec, status = _meta(obj), obj.get("spec") or {}, obj.get("status") or {}
    statuses = status.get("containerStatuses") or []
    waiting = [((s.get("state") or {}).get("waiting") or {}).get("reason") for s in statuses]
    waiting_reasons = [w for w in waiting if w]
    return PluginPod(
        name=meta.get("name", ""),
        node=spec.get("nodeName") or pinned_node(spec),
        phase=status.get("phase") or "Unknown",
        ready=any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []),
        restarts=sum(int(s.get("restartCount") or 0) for s in statuses),
        crashloop="CrashLoopBackOff" in waiting_reasons,
        waiting_reason=waiting_reasons[0] if waiting_reasons else None,
        images=images_of(spec),
        image_ids={str(s["name"]): str(s["imageID"]) for s in statuses if s.get("name") and s.get("imageID")},
        revision_hash=(meta.get("labels") or {}).get(HASH_LABEL),
        uid=meta.get("uid"),
        deleting=meta.get("deletionTimestamp") is not None,
        started=_started({s.get("name"): ((s.get("state") or {}).get("running") or {}).get("startedAt")
                          for s in statuses}),
        unschedulable=None if spec.get("nodeName") else _unschedulable(
            [(c.get("type"), c.get("status"), c.get("reason"), c.get("message")) for c in status.get("conditions") or []]),
    )


def _started(running: dict[Any, Any]) -> dict[str, dt.datetime]:
    """``{container: startedAt}`` of the containers running (the others' start says nothing now)."""
    found = {str(name): parse_time(at) for name, at in running.items() if name and at}
    return {name: at for name, at in found.items() if at is not None}


def _pod_of_shape(pod: PodShape) -> PluginPod:
    meta, spec, status = pod.metadata or _NO_META, pod.spec or _NO_SPEC, pod.status or _NO_STATUS
    statuses = status.container_statuses or []
    waiting = [s.state.waiting.reason if s.state and s.state.waiting else None for s in statuses]
    waiting_reasons = [w for w in waiting if w]
    return PluginPod(
        name=given(meta.name, ""),
        node=shared(spec.node_name or _pinned_node_of_shape(spec)),
        phase=shared(status.phase or "Unknown"),
        ready=any(c.type == "Ready" and c.status == "True" for c in status.conditions or []),
        restarts=sum(int(s.restart_count or 0) for s in statuses),
        crashloop="CrashLoopBackOff" in waiting_reasons,
        waiting_reason=waiting_reasons[0] if waiting_reasons else None,
        images={shared(given(c.name, "")): shared(given(c.image, "")) for c in spec.containers or []},
        image_ids={shared(str(s.name)): str(s.image_id) for s in statuses if s.name and s.image_id},
        revision_hash=shared((meta.labels or {}).get(HASH_LABEL)),
        uid=meta.uid,
        deleting=meta.deletion_timestamp is not None,
        started=_started({s.name: s.state.running.started_at if s.state and s.state.running else None
                          for s in statuses}),
        unschedulable=None if spec.node_name else _unschedulable(
            [(c.type, c.status, c.reason, c.message) for c in status.conditions or []]),
    )


def controller_of(obj: Obj) -> Obj | None:
    """The object's controlling owner reference (``controller: true``), None for a bare object."""
    return next((ref for ref in _meta(obj).get("ownerReferences") or [] if ref.get("controller")), None)


def owner_uids(obj: Obj | PodShape) -> set[str]:
    if isinstance(obj, PodShape):
        return {given(ref.uid, "") for ref in (obj.metadata or _NO_META).owner_references or []}
    return {ref.get("uid", "") for ref in _meta(obj).get("ownerReferences") or []}


def revision_of(obj: Obj) -> tuple[str, int, str]:
    """A ControllerRevision as (owner uid list key, revision number, hash)."""
    return ",".join(sorted(owner_uids(obj))), int(obj.get("revision") or 0), (_meta(obj).get("labels") or {}).get(HASH_LABEL, "")


def selector_string(selector: Obj) -> str:
    """A label selector object as the ``labelSelector`` query parameter."""
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key", ""), expr.get("operator", ""), expr.get("values") or []
        if op == "In":
            parts.append(f"{key} in ({','.join(values)})")
        elif op == "NotIn":
            parts.append(f"{key} notin ({','.join(values)})")
        elif op == "Exists":
            parts.append(key)
        elif op == "DoesNotExist":
            parts.append(f"!{key}")
    return ",".join(parts)


# ----------------------------------------------------------------------------- DRA
def class_from(obj: Obj, kind: str) -> DeviceClass:
    if kind == "ResourceClass":
        drivers = [obj["driverName"]] if obj.get("driverName") else []
        return DeviceClass(name=_meta(obj).get("name", ""), kind="ResourceClass", drivers=drivers)
    spec = obj.get("spec") or {}
    found: list[str] = []
    for selector in spec.get("selectors") or []:
        found += _CEL_DRIVER.findall(((selector.get("cel") or {}).get("expression")) or "")
    for config in spec.get("config") or []:
        driver = (config.get("opaque") or {}).get("driver")
        if driver:
            found.append(driver)
    return DeviceClass(name=_meta(obj).get("name", ""), kind="DeviceClass", drivers=sorted(set(found)))


def slice_from(obj: Obj | SliceShape) -> ResourceSlice:
    """A ResourceSlice, from the slice as listed: a dict, or the :class:`SliceShape` a typed list
    decodes (its devices counted, not built)."""
    if isinstance(obj, SliceShape):
        return _slice_of_shape(obj)
    spec = obj.get("spec")
    if spec is None:  # v1alpha2: top-level fields, devices as namedResources instances
        instances = (obj.get("namedResources") or {}).get("instances") or []
        return ResourceSlice(
            name=_meta(obj).get("name", ""), node=obj.get("nodeName"), driver=obj.get("driverName", ""),
            pool=obj.get("nodeName") or "", devices=len(instances), **_published_of(obj, {}),
        )
    pool = spec.get("pool") or {}
    return ResourceSlice(
        name=_meta(obj).get("name", ""), node=spec.get("nodeName"), driver=spec.get("driver", ""),
        pool=pool.get("name", ""), devices=len(spec.get("devices") or []), **_published_of(obj, pool),
    )


def _published_of(obj: Obj, pool: Obj) -> dict[str, Any]:
    meta = _meta(obj)
    return _published(meta.get("creationTimestamp"), [(o.get("kind"), o.get("name")) for o in
                                                      meta.get("ownerReferences") or []],
                      [f.get("time") for f in meta.get("managedFields") or []], pool.get("generation"),
                      pool.get("resourceSliceCount"))


def _slice_of_shape(found: SliceShape) -> ResourceSlice:
    meta = found.metadata or _NO_SLICE_META
    name = given(meta.name, "")
    spec = found.spec
    if spec is None:  # v1alpha2: top-level fields, devices as namedResources instances
        instances = (found.named_resources.instances if found.named_resources else None) or []
        return ResourceSlice(
            name=name, node=shared(found.node_name), driver=shared(given(found.driver_name, "")),
            pool=shared(found.node_name or ""), devices=len(instances), **_published(
                meta.creation_timestamp, [(o.kind, o.name) for o in meta.owner_references or []],
                [f.time for f in meta.managed_fields or []], None, None),
        )
    pool = spec.pool or _NO_POOL
    return ResourceSlice(
        name=name, node=shared(spec.node_name), driver=shared(given(spec.driver, "")),
        pool=shared(given(pool.name, "")), devices=len(spec.devices or []), **_published(
            meta.creation_timestamp, [(o.kind, o.name) for o in meta.owner_references or []],
            [f.time for f in meta.managed_fields or []], pool.generation, pool.resource_slice_count),
    )


def _published(created: Any, owners: list[tuple[Any, Any]], writes: list[Any], generation: Any,
               count: Any) -> dict[str, Any]:
    """What says who published a slice and when: the Node owning it (the kubelet plugin's
    resourceslice controller names it), its pool's generation and slice count, its creation and
    its newest write (a ``managedFields`` time; the creation when none)."""
    made = parse_time(created)
    times = [t for t in (parse_time(w) for w in writes) if t is not None]
    node = next((str(name) for kind, name in owners if kind == "Node" and name), None)
    return {"generation": _int(generation), "slice_count": _int(count) or 1, "owner_node": node, "created": made,
            "written": max([*times, *([made] if made else [])], default=None)}


def _int(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def claim_state(obj: Obj, *, v1alpha2: bool) -> str:
    """The STATE column of ``kubectl get resourceclaims`` (``resourceClaimState``)."""
    deleted = _meta(obj).get("deletionTimestamp") is not None
    status = obj.get("status") or {}
    states = ["deleted"] if deleted else []
    if status.get("allocation") is None:
        if not deleted:
            states.append("pending")
    else:
        states.append("allocated")
        if status.get("reservedFor"):
            states.append("reserved")
        elif v1alpha2 and (deleted or status.get("deallocationRequested")):
            states.append("deallocating")
    return ",".join(states)


def _claim_classes(spec: Obj) -> list[str]:
    if spec.get("resourceClassName"):
        return [spec["resourceClassName"]]
    names: list[str] = []
    for request in (spec.get("devices") or {}).get("requests") or []:
        exact = request.get("exactly") or request
        if exact.get("deviceClassName"):
            names.append(exact["deviceClassName"])
        names += [s.get("deviceClassName", "") for s in request.get("firstAvailable") or []]
    return sorted({n for n in names if n})


def _claim_drivers(status: Obj) -> list[str]:
    allocation = status.get("allocation") or {}
    drivers = [r.get("driver", "") for r in (allocation.get("devices") or {}).get("results") or []]
    if status.get("driverName"):  # v1alpha2
        drivers.append(status["driverName"])
    return sorted({d for d in drivers if d})


def claim_from(obj: Obj, *, version: str, now: dt.datetime) -> ResourceClaim:
    meta, status = _meta(obj), obj.get("status") or {}
    created = parse_time(meta.get("creationTimestamp"))
    return ResourceClaim(
        namespace=meta.get("namespace", ""),
        name=meta.get("name", ""),
        state=claim_state(obj, v1alpha2=version == "v1alpha2"),
        created=created,
        age=human_duration(now - created) if created else "<unknown>",
        classes=_claim_classes(obj.get("spec") or {}),
        drivers=_claim_drivers(status),
        reserved_for=sorted(r.get("name", "") for r in status.get("reservedFor") or []),
        node=allocated_node(status),
        devices=allocated_count(status),
    )


def allocated_node(status: Obj) -> str | None:
    """The node an allocation is on, from its node selector (``availableOnNodes`` in v1alpha2)."""
    allocation = status.get("allocation") or {}
    selector = allocation.get("nodeSelector") or allocation.get("availableOnNodes") or {}
    for term in selector.get("nodeSelectorTerms") or []:
        for field in term.get("matchFields") or []:
            if field.get("key") == "metadata.name" and field.get("operator") == "In" and field.get("values"):
                return str(field["values"][0])
        for expr in term.get("matchExpressions") or []:
            if expr.get("key") == "kubernetes.io/hostname" and expr.get("operator") == "In" and expr.get("values"):
                return str(expr["values"][0])
    return None


def allocated_count(status: Obj) -> int:
    """Devices an allocation holds (v1alpha2: the results of its structured handles, else one per handle)."""
    allocation = status.get("allocation") or {}
    results = (allocation.get("devices") or {}).get("results")
    if results is not None:
        return len(results)
    handles = allocation.get("resourceHandles") or []
    return sum(len((h.get("structuredData") or {}).get("results") or []) or 1 for h in handles)


def container_requests(container: Obj, resources: tuple[str, ...]) -> dict[str, int]:
    """Extended resources one container asks for: its requests (limits when a request is unset),
    in the order of ``resources``."""
    res = container.get("resources") or {}
    out: dict[str, int] = {}
    for name in resources:
        value = (res.get("requests") or {}).get(name, (res.get("limits") or {}).get(name))
        if value is not None:
            out[name] = quantity(value)
    return out


def requested(pod_spec: Obj | PodSpecShape, resources: tuple[str, ...]) -> dict[str, int]:
    """Extended resources a pod asks for: the sum of its containers' (:func:`container_requests`)."""
    if isinstance(pod_spec, PodSpecShape):
        return _requested_of_shape(pod_spec, resources)
    out: dict[str, int] = {}
    for container in pod_spec.get("containers") or []:
        for name, count in container_requests(container, resources).items():
            out[name] = out.get(name, 0) + count
    return out


def claims_of_pod(obj: Obj | PodShape) -> list[str]:
    """Names of the ResourceClaims a pod uses (direct, via ``source`` before 1.31, or generated)."""
    if isinstance(obj, PodShape):
        return _claims_of_shape(obj)
    names = set()
    for ref in (obj.get("spec") or {}).get("resourceClaims") or []:
        source = ref.get("source") or ref
        if source.get("resourceClaimName"):
            names.add(source["resourceClaimName"])
    for ref in (obj.get("status") or {}).get("resourceClaimStatuses") or []:
        if ref.get("resourceClaimName"):
            names.add(ref["resourceClaimName"])
    return sorted(names)


def _requested_of_shape(spec: PodSpecShape, resources: tuple[str, ...]) -> dict[str, int]:
    out: dict[str, int] = {}
    if not resources:
        return out
    for container in spec.containers or []:
        res = container.resources or _NO_RESOURCES
        requests, limits = res.requests or {}, res.limits or {}
        for name in resources:
            value = requests.get(name, limits.get(name))
            if value is not None:
                out[name] = out.get(name, 0) + quantity(value)
    return out


def _claims_of_shape(pod: PodShape) -> list[str]:
    names = set()
    for ref in (pod.spec or _NO_SPEC).resource_claims or []:
        source = ref.source or ref
        if source.resource_claim_name:
            names.add(source.resource_claim_name)
    for ref in (pod.status or _NO_STATUS).resource_claim_statuses or []:
        if ref.resource_claim_name:
            names.add(ref.resource_claim_name)
    return sorted(names)
