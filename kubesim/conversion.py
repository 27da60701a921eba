"""Conversion between served versions of one resource (``resource.k8s.io`` only differs).

Objects are stored in the preferred version; a request for another served version is
converted on the way out and its body on the way in, as the API server's conversion does.
Shapes: v1beta1 requests carry ``deviceClassName`` directly and slice devices wrap their
attributes in ``basic``; v1beta2 and v1 move a request's fields under ``exactly`` and
drop ``basic``.
"""

from __future__ import annotations

import copy
from typing import Any

from kubesim.resources import ResourceType

_FLAT = ("v1alpha3", "v1beta1")
_NESTED = ("v1beta2", "v1")
_EXACT_FIELDS = ("deviceClassName", "selectors", "allocationMode", "count", "adminAccess", "tolerations")


def _requests(spec: dict[str, Any] | None) -> list[dict[str, Any]]:
    return ((spec or {}).get("devices") or {}).get("requests") or []


def _claim_spec(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    if kind == "ResourceClaimTemplate":
        return (obj.get("spec") or {}).get("spec")
    return obj.get("spec")


def _nest_requests(spec: dict[str, Any] | None) -> None:
    for req in _requests(spec):
        if "exactly" in req or "firstAvailable" in req:
            continue
        exact = {f: req.pop(f) for f in _EXACT_FIELDS if f in req}
        if exact:
            req["exactly"] = exact


def _flatten_requests(spec: dict[str, Any] | None) -> None:
    for req in _requests(spec):
        req.update(req.pop("exactly", None) or {})


def convert(obj: dict[str, Any], src: ResourceType, dst: ResourceType) -> dict[str, Any]:
    """``obj`` (in ``src``'s version) as ``dst``'s version of the same resource."""
    if src.version == dst.version:
        return obj
    out = copy.deepcopy(obj)
    out["apiVersion"] = dst.api_version
    to_nested = src.version in _FLAT and dst.version in _NESTED
    to_flat = src.version in _NESTED and dst.version in _FLAT
    if src.kind in ("ResourceClaim", "ResourceClaimTemplate"):
        spec = _claim_spec(out, src.kind)
        if to_nested:
            _nest_requests(spec)
        elif to_flat:
            _flatten_requests(spec)
    elif src.kind == "ResourceSlice":
        for device in (out.get("spec") or {}).get("devices") or []:
            if to_nested and "basic" in device:
                device.update(device.pop("basic") or {})
            elif to_flat and "basic" not in device:
                basic = {f: device.pop(f) for f in ("attributes", "capacity") if f in device}
                device["basic"] = basic
    return out
