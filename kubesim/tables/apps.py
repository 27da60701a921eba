"""Printers of apps/v1 kinds: daemonsets, deployments, replicasets, statefulsets, controllerrevisions."""

from __future__ import annotations

import datetime as dt

from kubesim.tables.columns import _AGE_COL, _DOC, _DOC_CONTAINERS, _DOC_IMAGES, _NAME_COL, _col
from kubesim.tables.formatting import (
    _age,
    _containers_cells,
    _int,
    _meta,
    _name,
    _selector_string,
    _template_spec,
    format_label_selector,
    format_labels,
)


def _workload_columns(kind: str, *columns: dict) -> tuple[dict, ...]:
    """NAME, the kind's own columns, AGE, then the wide ones: containers, images, selector."""
    return (
        _NAME_COL, *columns, _AGE_COL,
        _col("Containers", "string", _DOC_CONTAINERS, priority=1),
        _col("Images", "string", _DOC_IMAGES, priority=1),
        _col("Selector", "string", _DOC[f"{kind}Spec.selector"], priority=1),
    )


_DAEMONSET_STATUS = (("Desired", "desiredNumberScheduled"), ("Current", "currentNumberScheduled"),
                     ("Ready", "numberReady"), ("Up-to-date", "updatedNumberScheduled"),
                     ("Available", "numberAvailable"))
_DAEMONSET_COLUMNS = _workload_columns(
    "DaemonSet",
    *(_col(title, "integer", _DOC[f"DaemonSetStatus.{field}"]) for title, field in _DAEMONSET_STATUS),
    _col("Node Selector", "string", _DOC["PodSpec.nodeSelector"]),
)


def _daemonset_cells(ds: dict, now: dt.datetime) -> list:
    status = ds.get("status") or {}
    pod_spec = _template_spec(ds)
    return [
        _name(ds),
        *(_int(status.get(field)) for _, field in _DAEMONSET_STATUS),
        format_labels(pod_spec.get("nodeSelector")),
        _age(ds, now),
        *_containers_cells(pod_spec),
        format_label_selector((ds.get("spec") or {}).get("selector")),
    ]


_DEPLOYMENT_COLUMNS = _workload_columns(
    "Deployment",
    _col("Ready", "string", "Number of the pod with ready state"),
    _col("Up-to-date", "string", _DOC["DeploymentStatus.updatedReplicas"]),
    _col("Available", "string", _DOC["DeploymentStatus.availableReplicas"]),
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


_REPLICASET_COLUMNS = _workload_columns(
    "ReplicaSet",
    _col("Desired", "integer", _DOC["ReplicaSetSpec.replicas"]),
    _col("Current", "integer", _DOC["ReplicaSetStatus.replicas"]),
    _col("Ready", "integer", _DOC["ReplicaSetStatus.readyReplicas"]),
)


def _replicaset_cells(rs: dict, now: dt.datetime) -> list:
    spec, status = rs.get("spec") or {}, rs.get("status") or {}
    desired = spec.get("replicas")
    try:
        selector = _selector_string(spec.get("selector"))
    except ValueError:
        selector = "<invalid>"
    return [
        _name(rs),
        1 if desired is None else int(desired),
        _int(status.get("replicas")),
        _int(status.get("readyReplicas")),
        _age(rs, now),
        *_containers_cells(_template_spec(rs)),
        selector,
    ]


_STATEFULSET_COLUMNS = (
    _NAME_COL,
    _col("Ready", "string", "Number of the pod with ready state"),
    _AGE_COL,
    _col("Containers", "string", _DOC_CONTAINERS, priority=1),
    _col("Images", "string", _DOC_IMAGES, priority=1),
)


def _statefulset_cells(sts: dict, now: dt.datetime) -> list:
    spec, status = sts.get("spec") or {}, sts.get("status") or {}
    desired = spec.get("replicas")
    return [
        _name(sts),
        f"{_int(status.get('readyReplicas'))}/{1 if desired is None else int(desired)}",
        _age(sts, now),
        *_containers_cells(_template_spec(sts)),
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
