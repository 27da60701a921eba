"""Printers of core/v1 kinds: nodes, pods, namespaces, events."""

from __future__ import annotations

import copy
import datetime as dt
from dataclasses import dataclass
from typing import Any

from kubesim.tables.columns import _AGE_COL, _DOC, _NAME_COL, _col
from kubesim.tables.formatting import (
    _age,
    _aware,
    _int,
    _meta,
    _name,
    _parse_time,
    _since,
    human_duration,
)

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


_NAMESPACE_COLUMNS = (_NAME_COL, _col("Status", "string", "The status of the namespace"), _AGE_COL)


def _namespace_cells(ns: dict, now: dt.datetime) -> list:
    return [_name(ns), (ns.get("status") or {}).get("phase") or "", _age(ns, now)]


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
