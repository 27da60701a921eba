"""The API server's create strategies (``PrepareForCreate``) for a client's create.

What a real API server writes over a client's object before storing it:

- Pod: ``status`` replaced by ``{phase: Pending, qosClass}`` (``qos.GetPodQOS``), a pod with
  scheduling gates given ``PodScheduled=False`` (reason ``SchedulingGated``), pod-level
  ``resources`` dropped while ``PodLevelResources`` is off (before 1.34);
- Namespace: ``status.phase: Active`` and the ``kubernetes`` finalizer appended to its spec
  (the ``kubernetes.io/metadata.name`` label is a defaulting, :mod:`kubesim.defaults`);
- Node: the status as sent (its strategy allows it; ``allocatable`` is defaulted);
- ResourceClaim, PodSchedulingContext and the workload controllers: an empty status.

Only the server's request path calls :func:`prepare_for_create`: kubesim's own controllers
write their objects as the real controllers' later writes would leave them.
"""

from __future__ import annotations

from typing import Any

from kubesim import podstatus as ps
from kubesim.clock import rfc3339
from kubesim.resources import ResourceType

_EMPTY_STATUS = {
    ("resource.k8s.io", "resourceclaims"), ("resource.k8s.io", "podschedulingcontexts"),
    ("apps", "daemonsets"), ("apps", "deployments"), ("apps", "replicasets"), ("apps", "statefulsets"),
    ("apiextensions.k8s.io", "customresourcedefinitions"),
}
GATED_MESSAGE = "Scheduling is blocked due to non-empty scheduling gates"


def prepare_for_create(res: ResourceType, obj: dict[str, Any], *, minor: int, now: Any) -> None:
    """Reset what the kind's create strategy resets, in place (``now``: the server's time)."""
    gr = res.group_resource
    if gr == ("", "pods"):
        _pod(obj, minor=minor, now=now)
    elif gr == ("", "namespaces"):
        obj["status"] = {"phase": "Active"}
        spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else None
        if spec is None:
            spec = obj["spec"] = {}
        finalizers = spec.get("finalizers") or []
        if "kubernetes" not in finalizers:
            spec["finalizers"] = [*finalizers, "kubernetes"]
    elif gr in _EMPTY_STATUS:
        obj["status"] = {}


def _pod(obj: dict[str, Any], *, minor: int, now: Any) -> None:
    spec = obj.get("spec") or {}
    if minor < 34:
        spec.pop("resources", None)  # DropDisabledPodFields: PodLevelResources is off
    status: dict[str, Any] = {"phase": "Pending", "qosClass": ps.qos_class(spec)}
    if spec.get("schedulingGates"):
        status["conditions"] = [ps.condition("PodScheduled", False, rfc3339(now), reason="SchedulingGated",
                                             message=GATED_MESSAGE)]
    obj["status"] = status
