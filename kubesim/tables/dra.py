"""Printers of resource.k8s.io kinds in every served version (v1alpha2 .. v1)."""

from __future__ import annotations

import datetime as dt

from kubesim.tables.columns import _AGE_COL, _DOC, _NAME_COL, _col
from kubesim.tables.formatting import _age, _meta, _name


def _named(*columns: dict) -> tuple[dict, ...]:
    """NAME, the kind's own columns, then AGE: how every DRA kind prints."""
    return (_NAME_COL, *columns, _AGE_COL)


_NAME_AGE_COLUMNS = _named()


_CLAIM_STATE_COL = _col(
    "State", "string", "A summary of the current state (allocated, pending, reserved, etc.)."
)


_RESOURCE_CLAIM_COLUMNS = _named(_CLAIM_STATE_COL)


# Until v1.30 (resource.k8s.io/v1alpha2 only) claims and templates had two more columns.
_V1ALPHA2_CLAIM_SPEC_COLUMNS = (
    _col("ResourceClassName", "string", _DOC["v1alpha2.ResourceClaimSpec.resourceClassName"]),
    _col("AllocationMode", "string", _DOC["v1alpha2.ResourceClaimSpec.allocationMode"]),
)
_V1ALPHA2_RESOURCE_CLAIM_COLUMNS = _named(*_V1ALPHA2_CLAIM_SPEC_COLUMNS, _CLAIM_STATE_COL)
_V1ALPHA2_RESOURCE_CLAIM_TEMPLATE_COLUMNS = _named(*_V1ALPHA2_CLAIM_SPEC_COLUMNS)
_RESOURCE_SLICE_COLUMNS = _named(
    _col("Node", "string", _DOC["ResourceSliceSpec.nodeName"]),
    _col("Driver", "string", _DOC["ResourceSliceSpec.driver"]),
    _col("Pool", "string", _DOC["ResourcePool.name"]),
)
_RESOURCE_CLASS_COLUMNS = _named(_col("DriverName", "string", _DOC["v1alpha2.ResourceClass.driverName"]))
_POD_SCHEDULING_CONTEXT_COLUMNS = _named(
    _col("SelectedNode", "string", _DOC["v1alpha2.PodSchedulingContextSpec.selectedNode"]))


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
