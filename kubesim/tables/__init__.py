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

The printers live by API group: ``core`` (nodes, pods, namespaces, events), ``apps``
(daemonsets, deployments, controllerrevisions), ``policy`` (poddisruptionbudgets), ``dra``
(resource.k8s.io); ``columns`` holds the column definitions and ``formatting`` the shared
cell formatting.

Like the real server (``printers.GenerateOptions{Wide: true}``), every row always
carries the ``-o wide`` cells; kubectl drops the ``priority: 1`` columns itself.
Ages use ``k8s.io/apimachinery/pkg/util/duration.HumanDuration`` against the
simulated clock ``now``.
"""

from __future__ import annotations

import copy
import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass

from kubesim.tables.apps import (
    _CONTROLLER_REVISION_COLUMNS,
    _DAEMONSET_COLUMNS,
    _DEPLOYMENT_COLUMNS,
    _REPLICASET_COLUMNS,
    _STATEFULSET_COLUMNS,
    _controller_revision_cells,
    _daemonset_cells,
    _deployment_cells,
    _replicaset_cells,
    _statefulset_cells,
)
from kubesim.tables.columns import _DOC, _NAME_COL, INCLUDE_OBJECT_VALUES, TABLE_API_VERSION, _col
from kubesim.tables.core import (
    _EVENT_COLUMNS,
    _NAMESPACE_COLUMNS,
    _NODE_COLUMNS,
    _POD_COLUMNS,
    _event_cells,
    _namespace_cells,
    _node_cells,
    _pod_cells,
    _pod_conditions,
)
from kubesim.tables.dra import (
    _NAME_AGE_COLUMNS,
    _POD_SCHEDULING_CONTEXT_COLUMNS,
    _RESOURCE_CLAIM_COLUMNS,
    _RESOURCE_CLASS_COLUMNS,
    _RESOURCE_SLICE_COLUMNS,
    _V1ALPHA2_RESOURCE_CLAIM_COLUMNS,
    _V1ALPHA2_RESOURCE_CLAIM_TEMPLATE_COLUMNS,
    _name_age_cells,
    _pod_scheduling_context_cells,
    _resource_claim_cells,
    _resource_class_cells,
    _resource_slice_cells,
    _v1alpha2_resource_claim_cells,
    _v1alpha2_resource_claim_template_cells,
)
from kubesim.tables.formatting import (
    _meta,
    _name,
    _parse_time,
    format_label_selector,
    format_labels,
    human_duration,
    short_human_duration,
)
from kubesim.tables.install import PRINTERS as _INSTALL_PRINTERS
from kubesim.tables.policy import _POD_DISRUPTION_BUDGET_COLUMNS, _pod_disruption_budget_cells
from kubesim.tables.storage import _CSI_DRIVER_COLUMNS, _csi_driver_cells

__all__ = [
    "format_label_selector",
    "format_labels",
    "human_duration",
    "short_human_duration",
    "to_table",
]


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
    "replicasets": _Printer(_REPLICASET_COLUMNS, _replicaset_cells),
    "statefulsets": _Printer(_STATEFULSET_COLUMNS, _statefulset_cells),
    "controllerrevisions": _Printer(_CONTROLLER_REVISION_COLUMNS, _controller_revision_cells),
    "poddisruptionbudgets": _Printer(_POD_DISRUPTION_BUDGET_COLUMNS, _pod_disruption_budget_cells),
    "csidrivers": _Printer(_CSI_DRIVER_COLUMNS, _csi_driver_cells),
    "resourceclaims": _Printer(_RESOURCE_CLAIM_COLUMNS, _resource_claim_cells),
    "resourceclaimtemplates": _Printer(_NAME_AGE_COLUMNS, _name_age_cells),
    "deviceclasses": _Printer(_NAME_AGE_COLUMNS, _name_age_cells),
    "resourceslices": _Printer(_RESOURCE_SLICE_COLUMNS, _resource_slice_cells),
    "resourceclasses": _Printer(_RESOURCE_CLASS_COLUMNS, _resource_class_cells),
    "podschedulingcontexts": _Printer(
        _POD_SCHEDULING_CONTEXT_COLUMNS, _pod_scheduling_context_cells
    ),
}
_PRINTERS.update({resource: _Printer(*printer) for resource, printer in _INSTALL_PRINTERS.items()})


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


def register_printer(resource: str, columns: tuple[dict, ...], cells: Callable[[dict, dt.datetime], list]) -> None:
    """A printer for a resource served later (a CRD's kind: :mod:`kubesim.crds`); the built-ins stay."""
    if resource not in _PRINTERS or resource in _REGISTERED:
        _PRINTERS[resource] = _Printer(columns, cells)
        _REGISTERED.add(resource)


_REGISTERED: set[str] = set()
