"""Server-side ``meta.k8s.io/v1`` Table rendering, as kube-apiserver does it.

``kubectl get`` asks for ``application/json;as=Table;v=v1;g=meta.k8s.io`` and prints
whatever columns the server sends.  This module reproduces the server side:

* the column definitions and cell computations of the built-in printers in
  kubernetes ``pkg/printers/internalversion/printers.go`` (one small helper per kind,
  registered in ``_PRINTERS``);
* the apiserver's default table convertor (``Name`` / ``Created At``) for every
  other resource (``k8s.io/apiserver/pkg/registry/rest/table.go``);
* the ``includeObject`` handling of ``asTable`` in
  ``k8s.io/apiserver/pkg/endpoints/handlers/response.go``.

Like the real server (``printers.GenerateOptions{Wide: true}``), every row always
carries the ``-o wide`` cells; kubectl drops the ``priority: 1`` columns itself.
Ages use ``k8s.io/apimachinery/pkg/util/duration.HumanDuration`` against the
simulated clock ``now``.
"""

from __future__ import annotations

import copy
import datetime as dt
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "format_label_selector",
    "format_labels",
    "human_duration",
    "short_human_duration",
    "to_table",
]

TABLE_API_VERSION = "meta.k8s.io/v1"
INCLUDE_OBJECT_VALUES = ("None", "Object", "Metadata")

# --------------------------------------------------------------------------------------
# Column descriptions: the ``<Type>{}.SwaggerDoc()[<field>]`` strings the printers use
# (k8s.io/api and k8s.io/apimachinery v0.36; the v1alpha2 ones from k8s.io/api v0.30).
# --------------------------------------------------------------------------------------

_DOC = {
    "ObjectMeta.creationTimestamp": "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata",
    "ObjectMeta.name": "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names",
    "ControllerRevision.revision": "revision indicates the revision of the state represented by Data.",
    "DaemonSetSpec.selector": "A label query over pods that are managed by the daemon set. Must match in order to be controlled. If empty, defaulted to labels on Pod template. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors",
    "DaemonSetStatus.currentNumberScheduled": "The number of nodes that are running at least 1 daemon pod and are supposed to run the daemon pod. More info: https://kubernetes.io/docs/concepts/workloads/controllers/daemonset/",
    "DaemonSetStatus.desiredNumberScheduled": "The total number of nodes that should be running the daemon pod (including nodes correctly running the daemon pod). More info: https://kubernetes.io/docs/concepts/workloads/controllers/daemonset/",
    "DaemonSetStatus.numberAvailable": "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and available (ready for at least spec.minReadySeconds)",
    "DaemonSetStatus.numberReady": "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and ready.",
    "DaemonSetStatus.updatedNumberScheduled": "The total number of nodes that are running updated daemon pod",
    "DeploymentSpec.selector": "Label selector for pods. Existing ReplicaSets whose pods are selected by this will be the ones affected by this deployment.",
    "DeploymentStatus.availableReplicas": "Total number of available non-terminating pods (ready for at least minReadySeconds) targeted by this deployment.",
    "DeploymentStatus.updatedReplicas": "Total number of non-terminating pods targeted by this deployment that have the desired template spec.",
    "Event.count": "The number of times this event has occurred.",
    "Event.firstTimestamp": "The time at which the event was first recorded. (Time of server receipt is in TypeMeta.)",
    "Event.involvedObject": "The object that this event is about.",
    "Event.lastTimestamp": "The time at which the most recent occurrence of this event was recorded.",
    "Event.message": "A human-readable description of the status of this operation.",
    "Event.reason": "This should be a short, machine understandable string that gives the reason for the transition into the object's current status.",
    "Event.source": "The component reporting this event. Should be a short machine understandable string.",
    "Event.type": "Type of this event (Normal, Warning), new types could be added in the future",
    "NodeStatus.addresses": "List of addresses reachable to the node. Queried from cloud provider, if available. More info: https://kubernetes.io/docs/reference/node/node-status/#addresses Note: This field is declared as mergeable, but the merge key is not sufficiently unique, which can cause data corruption when it is merged. Callers should instead use a full-replacement patch. See https://pr.k8s.io/79391 for an example. Consumers should assume that addresses can change during the lifetime of a Node. However, there are some exceptions where this may not be possible, such as Pods that inherit a Node's address in its own status or consumers of the downward API (status.hostIP).",
    "NodeSystemInfo.containerRuntimeVersion": "ContainerRuntime Version reported by the node through runtime remote API (e.g. containerd://1.4.2).",
    "NodeSystemInfo.kernelVersion": "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64).",
    "NodeSystemInfo.kubeletVersion": "Kubelet Version reported by the node.",
    "NodeSystemInfo.osImage": "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy)).",
    "ObjectReference.fieldPath": 'If referring to a piece of an object instead of an entire object, this string should contain a valid JSON/Go field access statement, such as desiredState.manifest.containers[2]. For example, if the object reference is to a container within a pod, this would take on a value like: "spec.containers{name}" (where "name" refers to the name of the container that triggered the event) or if no container name is specified "spec.containers[2]" (container with index 2 in this pod). This syntax is chosen only to have some well-defined way of referencing a part of an object.',
    "PodSpec.nodeName": "NodeName indicates in which node this pod is scheduled. If empty, this pod is a candidate for scheduling by the scheduler defined in schedulerName. Once this field is set, the kubelet for this node becomes responsible for the lifecycle of this pod. This field should not be used to express a desire for the pod to be scheduled on a specific node. https://kubernetes.io/docs/concepts/scheduling-eviction/assign-pod-node/#nodename",
    "PodSpec.nodeSelector": "NodeSelector is a selector which must be true for the pod to fit on a node. Selector which must match a node's labels for the pod to be scheduled on that node. More info: https://kubernetes.io/docs/concepts/configuration/assign-pod-node/",
    "PodSpec.readinessGates": 'If specified, all readiness gates will be evaluated for pod readiness. A pod is ready when all its containers are ready AND all conditions specified in the readiness gates have status equal to "True" More info: https://git.k8s.io/enhancements/keps/sig-network/580-pod-readiness-gates',
    "PodStatus.nominatedNodeName": "nominatedNodeName is set only when this pod preempts other pods on the node, but it cannot be scheduled right away as preemption victims receive their graceful termination periods. This field does not guarantee that the pod will be scheduled on this node. Scheduler may decide to place the pod elsewhere if other nodes become available sooner. Scheduler may also decide to give the resources on this node to a higher priority pod that is created after preemption. As a result, this field may be different than PodSpec.nodeName when the pod is scheduled.",
    "PodStatus.podIP": "podIP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated.",
    "ResourcePool.name": "Name is used to identify the pool. For node-local devices, this is often the node name, but this is not required.\n\nIt must not be longer than 253 characters and must consist of one or more DNS sub-domains separated by slashes. This field is immutable.",
    "ResourceSliceSpec.driver": "Driver identifies the DRA driver providing the capacity information. A field selector can be used to list only ResourceSlice objects with a certain driver name.\n\nMust be a DNS subdomain and should end with a DNS domain owned by the vendor of the driver. It should use only lower case characters. This field is immutable.",
    "ResourceSliceSpec.nodeName": "NodeName identifies the node which provides the resources in this pool. A field selector can be used to list only ResourceSlice objects belonging to a certain node.\n\nThis field can be used to limit access from nodes to ResourceSlices with the same node name. It also indicates to autoscalers that adding new nodes of the same type as some old node might also make new resources available.\n\nExactly one of NodeName, NodeSelector, AllNodes, and PerDeviceNodeSelection must be set. This field is immutable.",
    "v1alpha2.PodSchedulingContextSpec.selectedNode": 'SelectedNode is the node for which allocation of ResourceClaims that are referenced by the Pod and that use "WaitForFirstConsumer" allocation is to be attempted.',
    "v1alpha2.ResourceClaimSpec.allocationMode": 'Allocation can start immediately or when a Pod wants to use the resource. "WaitForFirstConsumer" is the default.',
    "v1alpha2.ResourceClaimSpec.resourceClassName": "ResourceClassName references the driver and additional parameters via the name of a ResourceClass that was created as part of the driver deployment.",
    "v1alpha2.ResourceClass.driverName": "DriverName defines the name of the dynamic resource driver that is used for allocation of a ResourceClaim that uses this class.\n\nResource drivers have a unique name in forward domain order (acme.example.com).",
}
_DOC_CONTAINERS = "Names of each container in the template."
_DOC_IMAGES = "Images referenced by each container in the template."


def _col(name: str, type_: str, description: str, *, fmt: str = "", priority: int = 0) -> dict:
    """One ``TableColumnDefinition`` (all five keys are always serialized)."""
    return {
        "name": name,
        "type": type_,
        "format": fmt,
        "description": description,
        "priority": priority,
    }


_NAME_COL = _col("Name", "string", _DOC["ObjectMeta.name"], fmt="name")
_AGE_COL = _col("Age", "string", _DOC["ObjectMeta.creationTimestamp"])

# --------------------------------------------------------------------------------------
# Durations and timestamps
# --------------------------------------------------------------------------------------

_US_PER_S = 1_000_000
_S_PER_MIN = 60
_S_PER_HOUR = 3600


def _to_microseconds(delta: dt.timedelta) -> int:
    return (delta.days * 86_400 + delta.seconds) * _US_PER_S + delta.microseconds


def _trunc_div(a: int, b: int) -> int:
    """Integer division truncating toward zero, like Go's ``int(...)`` conversions."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def human_duration(delta: dt.timedelta) -> str:
    """``duration.HumanDuration``: ~2-3 significant figures (``2m3s``, ``3h20m``, ``2y10d``)."""
    us = _to_microseconds(delta)
    seconds = _trunc_div(us, _US_PER_S)
    if seconds < -1:
        return "<invalid>"
    if seconds < 0:
        return "0s"
    if seconds < 2 * _S_PER_MIN:
        return f"{seconds}s"
    minutes = seconds // _S_PER_MIN
    if minutes < 10:
        s = seconds % 60
        return f"{minutes}m" if s == 0 else f"{minutes}m{s}s"
    if minutes < 3 * 60:
        return f"{minutes}m"
    hours = seconds // _S_PER_HOUR
    if hours < 8:
        m = minutes % 60
        return f"{hours}h" if m == 0 else f"{hours}h{m}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        h = hours % 24
        return f"{hours // 24}d" if h == 0 else f"{hours // 24}d{h}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        years = hours // 24 // 365
        return f"{years}y" if days == 0 else f"{years}y{days}d"
    return f"{hours // 24 // 365}y"


def short_human_duration(delta: dt.timedelta) -> str:
    """``duration.ShortHumanDuration``: one unit only (``5s``, ``10m``, ``3h``, ``45d``, ``2y``)."""
    us = _to_microseconds(delta)
    seconds = _trunc_div(us, _US_PER_S)
    if seconds < -1:
        return "<invalid>"
    if seconds < 0:
        return "0s"
    if seconds < 60:
        return f"{seconds}s"
    if (minutes := us // (_US_PER_S * _S_PER_MIN)) < 60:
        return f"{minutes}m"
    if (hours := us // (_US_PER_S * _S_PER_HOUR)) < 24:
        return f"{hours}h"
    if hours < 24 * 365:
        return f"{hours // 24}d"
    return f"{hours // 24 // 365}y"


_FRACTION = re.compile(r"(\.\d{6})\d+")


def _parse_time(value: Any) -> dt.datetime | None:
    """Parse an RFC3339 ``Time``/``MicroTime``; ``None`` stands for Go's zero time."""
    if not value:
        return None
    if isinstance(value, dt.datetime):
        parsed = value
    else:
        text = _FRACTION.sub(r"\1", str(value).strip())  # nanoseconds -> microseconds
        parsed = dt.datetime.fromisoformat(text.replace("z", "Z"))
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    if parsed.year == 1 and parsed.replace(tzinfo=None) == dt.datetime(1, 1, 1):
        return None  # "0001-01-01T00:00:00Z" is Go's zero time
    return parsed


def _aware(now: dt.datetime) -> dt.datetime:
    return now if now.tzinfo is not None else now.replace(tzinfo=dt.UTC)


def _since(value: Any, now: dt.datetime) -> str:
    """``translateTimestampSince`` / ``translateMicroTimestampSince``."""
    when = _parse_time(value)
    if when is None:
        return "<unknown>"
    return human_duration(_aware(now) - when)


def _age(obj: dict, now: dt.datetime) -> str:
    return _since(_meta(obj).get("creationTimestamp"), now)


# --------------------------------------------------------------------------------------
# Labels and selectors (labels.FormatLabels, metav1.FormatLabelSelector)
# --------------------------------------------------------------------------------------

_LABEL_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_SELECTOR_OPERATORS = {"In": " in ", "NotIn": " notin ", "Exists": "", "DoesNotExist": ""}


def format_labels(labels: dict[str, str] | None) -> str:
    """``labels.FormatLabels``: sorted ``k=v`` pairs joined by ``,``; ``<none>`` when empty."""
    pairs = sorted(f"{k}={v}" for k, v in (labels or {}).items())
    return ",".join(pairs) or "<none>"


def _valid_label_key(key: str) -> bool:
    parts = key.split("/")
    if len(parts) > 2:
        return False
    name = parts[-1]
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix or len(prefix) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(prefix):
            return False
    return 0 < len(name) <= 63 and bool(_LABEL_NAME.fullmatch(name))


def _valid_label_value(value: str) -> bool:
    return len(value) <= 63 and (value == "" or bool(_LABEL_NAME.fullmatch(value)))


def _selector_string(selector: dict | None) -> str:
    """``metav1.LabelSelectorAsSelector(sel).String()``; raises ``ValueError`` if invalid."""
    if selector is None:
        return ""  # labels.Nothing()
    requirements: list[tuple[str, str]] = []  # (key, rendered requirement)
    for key, value in (selector.get("matchLabels") or {}).items():
        if not _valid_label_key(key) or not _valid_label_value(str(value)):
            raise ValueError(f"invalid label requirement {key}={value}")
        requirements.append((key, f"{key}={value}"))
    for expr in selector.get("matchExpressions") or []:
        key, op = expr.get("key", ""), expr.get("operator", "")
        values = [str(v) for v in expr.get("values") or []]
        if op not in _SELECTOR_OPERATORS or not _valid_label_key(key):
            raise ValueError(f"invalid label selector requirement {expr!r}")
        if (op in ("In", "NotIn")) != bool(values):
            raise ValueError(f"invalid values for operator {op}: {values!r}")
        if not all(_valid_label_value(v) for v in values):
            raise ValueError(f"invalid label values {values!r}")
        if op == "Exists":
            rendered = key
        elif op == "DoesNotExist":
            rendered = "!" + key
        else:
            shown = values[0] if len(values) == 1 else ",".join(sorted(values))
            rendered = f"{key}{_SELECTOR_OPERATORS[op]}({shown})"
        requirements.append((key, rendered))
    requirements.sort(key=lambda req: req[0])
    return ",".join(rendered for _, rendered in requirements)


def format_label_selector(selector: dict | None) -> str:
    """``metav1.FormatLabelSelector``: ``<none>`` when it selects nothing/everything."""
    try:
        return _selector_string(selector) or "<none>"
    except ValueError:
        return "<error>"


# --------------------------------------------------------------------------------------
# Small accessors
# --------------------------------------------------------------------------------------


def _meta(obj: dict) -> dict:
    return obj.get("metadata") or {}


def _name(obj: dict) -> str:
    return _meta(obj).get("name") or ""


def _int(value: Any) -> int:
    return int(value or 0)


def _containers_cells(pod_spec: dict) -> list[str]:
    """``layoutContainerCells``: comma-joined container names and images."""
    containers = pod_spec.get("containers") or []
    return [
        ",".join(c.get("name") or "" for c in containers),
        ",".join(c.get("image") or "" for c in containers),
    ]


def _template_spec(obj: dict) -> dict:
    return ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}


# --------------------------------------------------------------------------------------
# nodes
# --------------------------------------------------------------------------------------

_NODE_COLUMNS = (
    _NAME_COL,
    _col("Status", "string", "The status of the node"),
    _col("Roles", "string", "The roles of the node"),
    _AGE_COL,
    _col("Version", "string", _DOC["NodeSystemInfo.kubeletVersion"]),
    _col("Internal-IP", "string", _DOC["NodeStatus.addresses"], priority=1),
    _col("External-IP", "string", _DOC["NodeStatus.addresses"], priority=1),
    _col("OS-Image", "string", _DOC["NodeSystemInfo.osImage"], priority=1),
    _col("Kernel-Version", "string", _DOC["NodeSystemInfo.kernelVersion"], priority=1),
    _col("Container-Runtime", "string", _DOC["NodeSystemInfo.containerRuntimeVersion"], priority=1),
)


def _node_status(node: dict) -> str:
    conditions = {c.get("type"): c for c in (node.get("status") or {}).get("conditions") or []}
    ready = conditions.get("Ready")
    if ready is None:
        status = ["Unknown"]
    else:
        status = ["Ready" if ready.get("status") == "True" else "NotReady"]
    if (node.get("spec") or {}).get("unschedulable"):
        status.append("SchedulingDisabled")
    return ",".join(status)


def _node_roles(node: dict) -> str:
    """``findNodeRoles``: ``node-role.kubernetes.io/<role>`` keys and ``kubernetes.io/role``."""
    roles = set()
    for key, value in (_meta(node).get("labels") or {}).items():
        if key.startswith("node-role.kubernetes.io/"):
            if role := key.removeprefix("node-role.kubernetes.io/"):
                roles.add(role)
        elif key == "kubernetes.io/role" and value:
            roles.add(value)
    return ",".join(sorted(roles)) or "<none>"


def _node_address(node: dict, kind: str) -> str:
    for address in (node.get("status") or {}).get("addresses") or []:
        if address.get("type") == kind:
            return address.get("address") or ""
    return "<none>"


def _node_cells(node: dict, now: dt.datetime) -> list:
    info = (node.get("status") or {}).get("nodeInfo") or {}
    return [
        _name(node),
        _node_status(node),
        _node_roles(node),
        _age(node, now),
        info.get("kubeletVersion") or "",
        _node_address(node, "InternalIP"),
        _node_address(node, "ExternalIP"),
        info.get("osImage") or "<unknown>",
        info.get("kernelVersion") or "<unknown>",
        info.get("containerRuntimeVersion") or "<unknown>",
    ]


# --------------------------------------------------------------------------------------
# pods
# --------------------------------------------------------------------------------------

_POD_COLUMNS = (
    _NAME_COL,
    _col("Ready", "string", "The aggregate readiness state of this pod for accepting traffic."),
    _col("Status", "string", "The aggregate status of the containers in this pod."),
    _col(
        "Restarts",
        "string",
        "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.",
    ),
    _AGE_COL,
    _col("IP", "string", _DOC["PodStatus.podIP"], priority=1),
    _col("Node", "string", _DOC["PodSpec.nodeName"], priority=1),
    _col("Nominated Node", "string", _DOC["PodStatus.nominatedNodeName"], priority=1),
    _col("Readiness Gates", "string", _DOC["PodSpec.readinessGates"], priority=1),
)

_POD_SUCCEEDED_CONDITIONS = [
    {
        "type": "Completed",
        "status": "True",
        "reason": "Succeeded",
        "message": "The pod has completed successfully.",
    }
]
_POD_FAILED_CONDITIONS = [
    {"type": "Completed", "status": "True", "reason": "Failed", "message": "The pod failed."}
]


def _is_sidecar(container: dict | None) -> bool:
    """``IsRestartableInitContainer``: an init container with ``restartPolicy: Always``."""
    return container is not None and container.get("restartPolicy") == "Always"


def _pod_condition_true(status: dict, type_: str) -> bool:
    for condition in status.get("conditions") or []:
        if condition.get("type") == type_:
            return condition.get("status") == "True"
    return False


def _last_terminated_at(container_status: dict) -> dt.datetime | None:
    terminated = (container_status.get("lastState") or {}).get("terminated")
    return _parse_time(terminated.get("finishedAt")) if terminated is not None else None


def _later(a: dt.datetime | None, b: dt.datetime | None) -> dt.datetime | None:
    if a is None or b is None:
        return a or b
    return max(a, b)


def _terminated_reason(terminated: dict, prefix: str = "") -> str:
    if terminated.get("reason"):
        return prefix + terminated["reason"]
    if terminated.get("signal"):
        return f"{prefix}Signal:{terminated['signal']}"
    return f"{prefix}ExitCode:{_int(terminated.get('exitCode'))}"


@dataclass
class _PodTally:
    reason: str
    ready: int = 0
    restarts: int = 0
    last_restart: dt.datetime | None = None


def _tally_init_containers(pod: dict, tally: _PodTally) -> tuple[bool, int, dt.datetime | None]:
    """First loop of ``printPod``: init containers. Returns (initializing, sidecar restarts/last)."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    init_specs = {c.get("name"): c for c in spec.get("initContainers") or []}
    sidecar_restarts, sidecar_last = 0, None
    for index, cs in enumerate(status.get("initContainerStatuses") or []):
        tally.restarts += _int(cs.get("restartCount"))
        tally.last_restart = _later(tally.last_restart, _last_terminated_at(cs))
        sidecar = _is_sidecar(init_specs.get(cs.get("name")))
        if sidecar:
            sidecar_restarts += _int(cs.get("restartCount"))
            sidecar_last = _later(sidecar_last, _last_terminated_at(cs))
        state = cs.get("state") or {}
        terminated, waiting = state.get("terminated"), state.get("waiting")
        if terminated is not None and _int(terminated.get("exitCode")) == 0:
            continue
        if sidecar and cs.get("started"):
            tally.ready += 1 if cs.get("ready") else 0
            continue
        if terminated is not None:
            tally.reason = _terminated_reason(terminated, "Init:")
        elif (
            waiting is not None and waiting.get("reason") and waiting["reason"] != "PodInitializing"
        ):
            tally.reason = "Init:" + waiting["reason"]
        else:
            tally.reason = f"Init:{index}/{len(spec.get('initContainers') or [])}"
        return True, sidecar_restarts, sidecar_last
    return False, sidecar_restarts, sidecar_last


def _tally_containers(pod: dict, tally: _PodTally) -> None:
    """Second loop of ``printPod``: regular containers, last to first."""
    status = pod.get("status") or {}
    has_running = False
    for cs in reversed(status.get("containerStatuses") or []):
        tally.restarts += _int(cs.get("restartCount"))
        tally.last_restart = _later(tally.last_restart, _last_terminated_at(cs))
        state = cs.get("state") or {}
        waiting, terminated = state.get("waiting"), state.get("terminated")
        if waiting is not None and waiting.get("reason"):
            tally.reason = waiting["reason"]
        elif terminated is not None:
            tally.reason = _terminated_reason(terminated)
        elif cs.get("ready") and state.get("running") is not None:
            has_running = True
            tally.ready += 1
    # a pod whose remaining containers still run is not "Completed"
    if tally.reason == "Completed" and has_running:
        tally.reason = "Running" if _pod_condition_true(status, "Ready") else "NotReady"


def _pod_summary(pod: dict) -> _PodTally:
    """READY / STATUS / RESTARTS bookkeeping of ``printPod``."""
    status = pod.get("status") or {}
    phase = status.get("phase") or ""
    tally = _PodTally(reason=status.get("reason") or phase)
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("reason") == "SchedulingGated":
            tally.reason = "SchedulingGated"

    initializing, sidecar_restarts, sidecar_last = _tally_init_containers(pod, tally)
    if not initializing or _pod_condition_true(status, "Initialized"):
        tally.restarts, tally.last_restart = sidecar_restarts, sidecar_last
        _tally_containers(pod, tally)

    if _meta(pod).get("deletionTimestamp") is not None:
        if status.get("reason") == "NodeLost":
            tally.reason = "Unknown"
        elif phase not in ("Succeeded", "Failed"):
            tally.reason = "Terminating"
    return tally


def _readiness_gates(pod: dict) -> str:
    gates = (pod.get("spec") or {}).get("readinessGates") or []
    if not gates:
        return "<none>"
    conditions = (pod.get("status") or {}).get("conditions") or []
    true_count = 0
    for gate in gates:
        for condition in conditions:
            if condition.get("type") == gate.get("conditionType"):
                true_count += condition.get("status") == "True"
                break
    return f"{true_count}/{len(gates)}"


def _pod_ip(status: dict) -> str:
    pod_ips = status.get("podIPs") or []
    # the v1 -> internal conversion fills podIPs from podIP when only the latter is set
    ip = (pod_ips[0].get("ip") if pod_ips else status.get("podIP")) or ""
    return ip or "<none>"


def _pod_cells(pod: dict, now: dt.datetime) -> list:
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    total = len(spec.get("containers") or []) + sum(
        1 for c in spec.get("initContainers") or [] if _is_sidecar(c)
    )
    tally = _pod_summary(pod)
    restarts = str(tally.restarts)
    if tally.restarts != 0 and tally.last_restart is not None:
        restarts = f"{tally.restarts} ({human_duration(_aware(now) - tally.last_restart)} ago)"
    return [
        _name(pod),
        f"{tally.ready}/{total}",
        tally.reason,
        restarts,
        _age(pod, now),
        _pod_ip(status),
        spec.get("nodeName") or "<none>",
        status.get("nominatedNodeName") or "<none>",
        _readiness_gates(pod),
    ]


def _pod_conditions(pod: dict) -> list[dict] | None:
    phase = (pod.get("status") or {}).get("phase")
    if phase == "Succeeded":
        return copy.deepcopy(_POD_SUCCEEDED_CONDITIONS)
    if phase == "Failed":
        return copy.deepcopy(_POD_FAILED_CONDITIONS)
    return None


# --------------------------------------------------------------------------------------
# namespaces
# --------------------------------------------------------------------------------------

_NAMESPACE_COLUMNS = (_NAME_COL, _col("Status", "string", "The status of the namespace"), _AGE_COL)


def _namespace_cells(ns: dict, now: dt.datetime) -> list:
    return [_name(ns), (ns.get("status") or {}).get("phase") or "", _age(ns, now)]


# --------------------------------------------------------------------------------------
# events (core/v1; events.k8s.io/v1 objects are mapped onto the core field names)
# --------------------------------------------------------------------------------------

_EVENT_COLUMNS = (
    _col("Last Seen", "string", _DOC["Event.lastTimestamp"]),
    _col("Type", "string", _DOC["Event.type"]),
    _col("Reason", "string", _DOC["Event.reason"]),
    _col("Object", "string", _DOC["Event.involvedObject"]),
    _col("Subobject", "string", _DOC["ObjectReference.fieldPath"], priority=1),
    _col("Source", "string", _DOC["Event.source"], priority=1),
    _col("Message", "string", _DOC["Event.message"]),
    _col("First Seen", "string", _DOC["Event.firstTimestamp"], priority=1),
    _col("Count", "string", _DOC["Event.count"], priority=1),
    _col("Name", "string", _DOC["ObjectMeta.name"], fmt="name", priority=1),
)

# events.k8s.io/v1 field -> core/v1 field (both are stored as the same internal type)
_EVENTS_V1_FIELDS = {
    "regarding": "involvedObject",
    "note": "message",
    "deprecatedSource": "source",
    "deprecatedFirstTimestamp": "firstTimestamp",
    "deprecatedLastTimestamp": "lastTimestamp",
    "deprecatedCount": "count",
    "reportingController": "reportingComponent",
}


def _core_event(event: dict) -> dict:
    if not str(event.get("apiVersion") or "").startswith("events.k8s.io/"):
        return event
    return {_EVENTS_V1_FIELDS.get(k, k): v for k, v in event.items()}


def _first_non_empty(*values: Any) -> str:
    return next((v for v in values if v), "")


def _event_source(event: dict) -> str:
    """``formatEventSource``: ``component[, host]`` with reportingComponent/Instance fallbacks."""
    source = event.get("source") or {}
    component = _first_non_empty(source.get("component"), event.get("reportingComponent"))
    instance = _first_non_empty(source.get("host"), event.get("reportingInstance"))
    return f"{component}, {instance}" if instance else component


def _event_cells(event: dict, now: dt.datetime) -> list:
    event = _core_event(event)
    if _parse_time(event.get("firstTimestamp")) is not None:
        first_seen = _since(event.get("firstTimestamp"), now)
    else:
        first_seen = _since(event.get("eventTime"), now)
    if _parse_time(event.get("lastTimestamp")) is not None:
        last_seen = _since(event.get("lastTimestamp"), now)
    else:
        last_seen = first_seen
    count = _int(event.get("count"))
    if (series := event.get("series")) is not None:
        last_seen = _since(series.get("lastObservedTime"), now)
        count = _int(series.get("count"))
    elif count == 0:
        count = 1  # singleton events don't have a count set in the new API
    involved = event.get("involvedObject") or {}
    target = (involved.get("kind") or "").lower()
    if involved.get("name"):
        target = f"{target}/{involved['name']}"
    return [
        last_seen,
        event.get("type") or "",
        event.get("reason") or "",
        target,
        involved.get("fieldPath") or "",
        _event_source(event),
        (event.get("message") or "").strip(),
        first_seen,
        count,
        _name(event),
    ]


# --------------------------------------------------------------------------------------
# daemonsets, deployments, controllerrevisions
# --------------------------------------------------------------------------------------

_DAEMONSET_COLUMNS = (
    _NAME_COL,
    _col("Desired", "integer", _DOC["DaemonSetStatus.desiredNumberScheduled"]),
    _col("Current", "integer", _DOC["DaemonSetStatus.currentNumberScheduled"]),
    _col("Ready", "integer", _DOC["DaemonSetStatus.numberReady"]),
    _col("Up-to-date", "integer", _DOC["DaemonSetStatus.updatedNumberScheduled"]),
    _col("Available", "integer", _DOC["DaemonSetStatus.numberAvailable"]),
    _col("Node Selector", "string", _DOC["PodSpec.nodeSelector"]),
    _AGE_COL,
    _col("Containers", "string", _DOC_CONTAINERS, priority=1),
    _col("Images", "string", _DOC_IMAGES, priority=1),
    _col("Selector", "string", _DOC["DaemonSetSpec.selector"], priority=1),
)


def _daemonset_cells(ds: dict, now: dt.datetime) -> list:
    status = ds.get("status") or {}
    pod_spec = _template_spec(ds)
    return [
        _name(ds),
        _int(status.get("desiredNumberScheduled")),
        _int(status.get("currentNumberScheduled")),
        _int(status.get("numberReady")),
        _int(status.get("updatedNumberScheduled")),
        _int(status.get("numberAvailable")),
        format_labels(pod_spec.get("nodeSelector")),
        _age(ds, now),
        *_containers_cells(pod_spec),
        format_label_selector((ds.get("spec") or {}).get("selector")),
    ]


_DEPLOYMENT_COLUMNS = (
    _NAME_COL,
    _col("Ready", "string", "Number of the pod with ready state"),
    _col("Up-to-date", "string", _DOC["DeploymentStatus.updatedReplicas"]),
    _col("Available", "string", _DOC["DeploymentStatus.availableReplicas"]),
    _AGE_COL,
    _col("Containers", "string", _DOC_CONTAINERS, priority=1),
    _col("Images", "string", _DOC_IMAGES, priority=1),
    _col("Selector", "string", _DOC["DeploymentSpec.selector"], priority=1),
)


def _deployment_cells(deploy: dict, now: dt.datetime) -> list:
    spec, status = deploy.get("spec") or {}, deploy.get("status") or {}
    desired = spec.get("replicas")
    desired = 1 if desired is None else int(desired)  # apps/v1 defaulting
    try:
        selector = _selector_string(spec.get("selector"))
    except ValueError:
        selector = "<invalid>"
    return [
        _name(deploy),
        f"{_int(status.get('readyReplicas'))}/{desired}",
        _int(status.get("updatedReplicas")),
        _int(status.get("availableReplicas")),
        _age(deploy, now),
        *_containers_cells(_template_spec(deploy)),
        selector,
    ]


_CONTROLLER_REVISION_COLUMNS = (
    _NAME_COL,
    _col("Controller", "string", "Controller of the object"),
    _col("Revision", "string", _DOC["ControllerRevision.revision"]),
    _AGE_COL,
)


def _controller_name(obj: dict) -> str:
    """``metav1.GetControllerOf`` + ``formatResourceName``: ``kind.group/name``."""
    ref = next((r for r in _meta(obj).get("ownerReferences") or [] if r.get("controller")), None)
    if ref is None:
        return "<none>"
    api_version = ref.get("apiVersion") or ""
    if api_version.count("/") > 1:
        raise ValueError(f"unexpected GroupVersion string: {api_version}")
    group = api_version.split("/")[0] if "/" in api_version else ""
    kind = ref.get("kind") or ""
    if not group and not kind:
        return ref.get("name") or ""
    group_kind = f"{kind}.{group}" if group else kind
    return f"{group_kind.lower()}/{ref.get('name') or ''}"


def _controller_revision_cells(rev: dict, now: dt.datetime) -> list:
    return [_name(rev), _controller_name(rev), _int(rev.get("revision")), _age(rev, now)]


# --------------------------------------------------------------------------------------
# resource.k8s.io (DRA)
# --------------------------------------------------------------------------------------

_NAME_AGE_COLUMNS = (_NAME_COL, _AGE_COL)
_CLAIM_STATE_COL = _col(
    "State", "string", "A summary of the current state (allocated, pending, reserved, etc.)."
)
_RESOURCE_CLAIM_COLUMNS = (_NAME_COL, _CLAIM_STATE_COL, _AGE_COL)

# Until v1.30 (resource.k8s.io/v1alpha2 only) claims and templates had two more columns.
_V1ALPHA2_RESOURCE_CLAIM_COLUMNS = (
    _NAME_COL,
    _col("ResourceClassName", "string", _DOC["v1alpha2.ResourceClaimSpec.resourceClassName"]),
    _col("AllocationMode", "string", _DOC["v1alpha2.ResourceClaimSpec.allocationMode"]),
    _CLAIM_STATE_COL,
    _AGE_COL,
)
_V1ALPHA2_RESOURCE_CLAIM_TEMPLATE_COLUMNS = (
    _NAME_COL,
    _col("ResourceClassName", "string", _DOC["v1alpha2.ResourceClaimSpec.resourceClassName"]),
    _col("AllocationMode", "string", _DOC["v1alpha2.ResourceClaimSpec.allocationMode"]),
    _AGE_COL,
)

_RESOURCE_SLICE_COLUMNS = (
    _NAME_COL,
    _col("Node", "string", _DOC["ResourceSliceSpec.nodeName"]),
    _col("Driver", "string", _DOC["ResourceSliceSpec.driver"]),
    _col("Pool", "string", _DOC["ResourcePool.name"]),
    _AGE_COL,
)

_RESOURCE_CLASS_COLUMNS = (
    _NAME_COL,
    _col("DriverName", "string", _DOC["v1alpha2.ResourceClass.driverName"]),
    _AGE_COL,
)

_POD_SCHEDULING_CONTEXT_COLUMNS = (
    _NAME_COL,
    _col("SelectedNode", "string", _DOC["v1alpha2.PodSchedulingContextSpec.selectedNode"]),
    _AGE_COL,
)


def _resource_claim_state(claim: dict, *, v1alpha2: bool = False) -> str:
    """``resourceClaimState``; the v1alpha2-era printer also reported ``deallocating``."""
    deleted = _meta(claim).get("deletionTimestamp") is not None
    status = claim.get("status") or {}
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


def _name_age_cells(obj: dict, now: dt.datetime) -> list:
    return [_name(obj), _age(obj, now)]


def _resource_claim_cells(claim: dict, now: dt.datetime) -> list:
    return [_name(claim), _resource_claim_state(claim), _age(claim, now)]


def _v1alpha2_claim_spec_cells(spec: dict) -> list:
    return [
        spec.get("resourceClassName") or "",
        spec.get("allocationMode") or "WaitForFirstConsumer",
    ]


def _v1alpha2_resource_claim_cells(claim: dict, now: dt.datetime) -> list:
    return [
        _name(claim),
        *_v1alpha2_claim_spec_cells(claim.get("spec") or {}),
        _resource_claim_state(claim, v1alpha2=True),
        _age(claim, now),
    ]


def _v1alpha2_resource_claim_template_cells(template: dict, now: dt.datetime) -> list:
    claim_spec = ((template.get("spec") or {}).get("spec")) or {}
    return [_name(template), *_v1alpha2_claim_spec_cells(claim_spec), _age(template, now)]


def _resource_slice_cells(rs: dict, now: dt.datetime) -> list:
    spec = rs.get("spec")
    if spec is None:  # v1alpha2: nodeName/driverName at the top level, no pools
        return [_name(rs), rs.get("nodeName") or "", rs.get("driverName") or "", "", _age(rs, now)]
    pool = spec.get("pool") or {}
    return [
        _name(rs),
        spec.get("nodeName") or "",
        spec.get("driver") or "",
        pool.get("name") or "",
        _age(rs, now),
    ]


def _resource_class_cells(rc: dict, now: dt.datetime) -> list:
    return [_name(rc), rc.get("driverName") or "", _age(rc, now)]


def _pod_scheduling_context_cells(ctx: dict, now: dt.datetime) -> list:
    return [_name(ctx), (ctx.get("spec") or {}).get("selectedNode") or "", _age(ctx, now)]


# --------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Printer:
    columns: tuple[dict, ...]
    cells: Callable[[dict, dt.datetime], list]
    conditions: Callable[[dict], list[dict] | None] | None = None


_PRINTERS: dict[str, _Printer] = {
    "nodes": _Printer(_NODE_COLUMNS, _node_cells),
    "pods": _Printer(_POD_COLUMNS, _pod_cells, _pod_conditions),
    "namespaces": _Printer(_NAMESPACE_COLUMNS, _namespace_cells),
    "events": _Printer(_EVENT_COLUMNS, _event_cells),
    "daemonsets": _Printer(_DAEMONSET_COLUMNS, _daemonset_cells),
    "deployments": _Printer(_DEPLOYMENT_COLUMNS, _deployment_cells),
    "controllerrevisions": _Printer(_CONTROLLER_REVISION_COLUMNS, _controller_revision_cells),
    "resourceclaims": _Printer(_RESOURCE_CLAIM_COLUMNS, _resource_claim_cells),
    "resourceclaimtemplates": _Printer(_NAME_AGE_COLUMNS, _name_age_cells),
    "deviceclasses": _Printer(_NAME_AGE_COLUMNS, _name_age_cells),
    "resourceslices": _Printer(_RESOURCE_SLICE_COLUMNS, _resource_slice_cells),
    "resourceclasses": _Printer(_RESOURCE_CLASS_COLUMNS, _resource_class_cells),
    "podschedulingcontexts": _Printer(
        _POD_SCHEDULING_CONTEXT_COLUMNS, _pod_scheduling_context_cells
    ),
}

# Printers of a kube-apiserver that serves resource.k8s.io/v1alpha2 (v1.27 - v1.30).
_V1ALPHA2 = "resource.k8s.io/v1alpha2"
_V1ALPHA2_PRINTERS: dict[str, _Printer] = {
    "resourceclaims": _Printer(_V1ALPHA2_RESOURCE_CLAIM_COLUMNS, _v1alpha2_resource_claim_cells),
    "resourceclaimtemplates": _Printer(
        _V1ALPHA2_RESOURCE_CLAIM_TEMPLATE_COLUMNS, _v1alpha2_resource_claim_template_cells
    ),
}

_DEFAULT_COLUMNS = (
    _NAME_COL,
    _col("Created At", "date", _DOC["ObjectMeta.creationTimestamp"]),
)


def _created_at(obj: dict) -> str:
    """Default convertor cell: ``creationTimestamp.UTC().Format(time.RFC3339)``."""
    when = _parse_time(_meta(obj).get("creationTimestamp"))
    if when is None:
        return "0001-01-01T00:00:00Z"
    return when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _printer_for(resource: str, objs: list[dict], api_version: str | None) -> _Printer | None:
    if api_version is None and objs:
        api_version = objs[0].get("apiVersion")
    if api_version == _V1ALPHA2 and resource in _V1ALPHA2_PRINTERS:
        return _V1ALPHA2_PRINTERS[resource]
    return _PRINTERS.get(resource)


# --------------------------------------------------------------------------------------
# Table assembly
# --------------------------------------------------------------------------------------


def _row_object(obj: dict, include_object: str) -> dict | None:
    """``asTable``'s ``includeObject`` handling."""
    if include_object == "None":
        return None
    if include_object == "Object":
        return copy.deepcopy(obj)
    metadata = copy.deepcopy(_meta(obj))
    metadata.setdefault("creationTimestamp", None)  # metav1.Time zero value marshals as null
    return {"kind": "PartialObjectMetadata", "apiVersion": TABLE_API_VERSION, "metadata": metadata}


def _default_list_meta(objs: list[dict]) -> dict:
    """ListMeta when the caller passes none: a single object's, or the newest item's version."""
    versions = [str(_meta(o).get("resourceVersion") or "") for o in objs]
    versions = [v for v in versions if v]
    if not versions:
        return {}
    newest = max(versions, key=lambda v: (v.isdigit(), int(v) if v.isdigit() else 0, v))
    return {"resourceVersion": newest}


def to_table(
    resource: str,
    objs: list[dict],
    *,
    now: dt.datetime,
    include_object: str = "Metadata",
    list_meta: dict | None = None,
    api_version: str | None = None,
) -> dict:
    """Render ``objs`` (JSON dicts of one resource) as a ``meta.k8s.io/v1`` Table.

    ``resource`` is the plural resource name (``pods``, ``resourceclaims`` ...); others get
    the apiserver's default ``Name``/``Created At`` columns.  ``include_object`` is the
    ``includeObject`` query parameter (``None``/``Object``/``Metadata``; empty means
    Metadata).  ``list_meta`` is the list's metadata (``resourceVersion``, ``continue``,
    ``remainingItemCount``).  ``api_version`` pins the served version for kinds whose
    printer changed with it (resource.k8s.io/v1alpha2 claims and claim templates);
    by default it is taken from the first object.
    """
    include_object = include_object or "Metadata"
    if include_object not in INCLUDE_OBJECT_VALUES:
        raise ValueError(f"unrecognized includeObject value: {include_object!r}")

    printer = _printer_for(resource, objs, api_version)
    rows: list[dict] = []
    for obj in objs:
        if printer is None:
            row: dict = {"cells": [_name(obj), _created_at(obj)]}
        else:
            row = {"cells": printer.cells(obj, now)}
            if printer.conditions is not None and (conditions := printer.conditions(obj)):
                row["conditions"] = conditions
        row["object"] = _row_object(obj, include_object)
        rows.append(row)
    columns = printer.columns if printer is not None else _DEFAULT_COLUMNS
    return {
        "kind": "Table",
        "apiVersion": TABLE_API_VERSION,
        "metadata": copy.deepcopy(list_meta) if list_meta is not None else _default_list_meta(objs),
        "columnDefinitions": [dict(c) for c in columns],
        # the default convertor never allocates its rows slice, so no rows is "rows": null
        "rows": None if printer is None and not rows else rows,
    }
