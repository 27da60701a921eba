"""Printers of apps/v1 kinds: daemonsets, deployments, controllerrevisions."""

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
