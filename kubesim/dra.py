"""Dynamic Resource Allocation shapes for each ``resource.k8s.io`` storage version.

v1alpha2 (1.27-1.30): ResourceClass with top-level ``driverName``, claims with
``spec.resourceClassName``, allocations as ``resourceHandles`` + ``availableOnNodes``, and
(1.30) ResourceSlices with top-level ``nodeName``/``driverName``/``namedResources``.
v1alpha3 (1.31) and v1beta1 (1.32): DeviceClass with CEL selectors, claims with
``spec.devices.requests[]`` (flat), slices with ``spec.devices[].basic``; v1beta2 (1.33) and
v1 (1.34) nest a request's fields under ``exactly`` and drop ``basic``.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

DRIVER = "gpu.example.com"
CLAIMS = ("resource.k8s.io", "resourceclaims")
TEMPLATES = ("resource.k8s.io", "resourceclaimtemplates")
SLICES = ("resource.k8s.io", "resourceslices")
RESOURCE_CLASSES = ("resource.k8s.io", "resourceclasses")
DEVICE_CLASSES = ("resource.k8s.io", "deviceclasses")
BUILTIN_FINALIZER = "resource.kubernetes.io/delete-protection"
"""Set on a claim before the scheduler allocates it (structured parameters, 1.30 on); the
resourceclaim controller removes it once the claim is neither reserved nor allocated, so a claim
deleted while a pod uses it stays, with a deletionTimestamp, until the pod is gone."""
_CEL_DRIVER = re.compile(r"""device\.driver\s*==\s*["']([^"']+)["']""")


def storage_version(minor: int) -> str:
    if minor <= 30:
        return "v1alpha2"
    return {31: "v1alpha3", 32: "v1beta1", 33: "v1beta2"}.get(minor, "v1")


def has_slices(minor: int) -> bool:
    return minor >= 30


def node_selector(node: str) -> dict[str, Any]:
    return {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
        ]
    }


# ------------------------------------------------------------------ classes
def device_class(minor: int, name: str = DRIVER, driver: str = DRIVER) -> tuple[tuple[str, str], dict[str, Any]]:
    """The class object of the release: (group-resource, object)."""
    if minor <= 30:
        return RESOURCE_CLASSES, {"metadata": {"name": name}, "driverName": driver}
    return DEVICE_CLASSES, {
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{driver}'"}}]},
    }


def class_driver(store: Any, minor: int, class_name: str) -> str | None:
    """The driver a class hands out devices of (None when the class does not exist)."""
    if minor <= 30:
        obj = store.get(RESOURCE_CLASSES, "", class_name)
        return obj.get("driverName") if obj else None
    obj = store.get(DEVICE_CLASSES, "", class_name)
    if obj is None:
        return None
    for sel in (obj.get("spec") or {}).get("selectors") or []:
        match = _CEL_DRIVER.search(((sel or {}).get("cel") or {}).get("expression") or "")
        if match:
            return match.group(1)
    return None


# ------------------------------------------------------------------ devices and slices
def device_uuid(node: str, index: int) -> str:
    h = hashlib.sha256(f"{node}/{index}".encode()).hexdigest()
    return f"gpu-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def device_names(count: int) -> list[str]:
    return [f"gpu-{i}" for i in range(count)]


def has_pools(minor: int) -> bool:
    """ResourceSlices belong to pools (``spec.pool``) from 1.31; 1.30's v1alpha2 slices have none."""
    return minor >= 31


def resource_slice(minor: int, node: str, node_uid: str, count: int, driver: str = DRIVER, *,
                   slices_in_pool: int = 1, devices: list[Any] | None = None) -> dict[str, Any]:
    """A ResourceSlice publishing ``count`` GPUs of ``node`` in the release's storage shape.

    ``slices_in_pool`` is what the slice says its pool has (``pool.resourceSliceCount``): a
    driver that says 2 but publishes 1 leaves the pool incomplete, and the scheduler
    allocates nothing from an incomplete pool. ``devices``: the driver's own (name, attributes,
    capacity) triples (:mod:`kubesim.dradrivers`) instead of ``count`` generic GPUs (1.31 on)."""
    meta = {
        "generateName": f"{node}-{driver}-",
        "ownerReferences": [
            {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid, "controller": True}
        ],
    }
    version = storage_version(minor)
    if version == "v1alpha2":
        instances = [
            {
                "name": f"gpu-{i}",
                "attributes": [
                    {"name": "index", "int": i},
                    {"name": "uuid", "string": device_uuid(node, i)},
                    {"name": "model", "string": "LATEST-GPU-MODEL"},
                    {"name": "driverVersion", "version": "1.0.0"},
                ],
            }
            for i in range(count)
        ]
        return {"metadata": meta, "nodeName": node, "driverName": driver, "namedResources": {"instances": instances}}
    if devices is not None and version != "v1alpha2":
        return {"metadata": meta, "spec": {"driver": driver, "nodeName": node,
                                           "pool": {"name": node, "generation": 0, "resourceSliceCount": slices_in_pool},
                                           "devices": [_device(version, *d) for d in devices]}}
    devices = []
    for i in range(count):
        attributes = {
            "index": {"int": i},
            "uuid": {"string": device_uuid(node, i)},
            "model": {"string": "LATEST-GPU-MODEL"},
            "driverVersion": {"version": "1.0.0"},
        }
        capacity: dict[str, Any] = {"memory": "80Gi"} if version == "v1alpha3" else {"memory": {"value": "80Gi"}}
        body = {"attributes": attributes, "capacity": capacity}
        if version in ("v1alpha3", "v1beta1"):
            devices.append({"name": f"gpu-{i}", "basic": body})
        else:
            devices.append({"name": f"gpu-{i}", **body})
    spec = {
        "driver": driver,
        "nodeName": node,
        "pool": {"name": node, "generation": 0, "resourceSliceCount": slices_in_pool},
        "devices": devices,
    }
    return {"metadata": meta, "spec": spec}


def _device(version: str, name: str, attributes: dict[str, Any], capacity: dict[str, str]) -> dict[str, Any]:
    """One device of a slice in the version's shape (``basic`` up to v1beta1, flat from v1beta2)."""
    body: dict[str, Any] = {"attributes": attributes}
    if capacity:
        body["capacity"] = dict(capacity) if version == "v1alpha3" else {k: {"value": v} for k, v in capacity.items()}
    return {"name": name, "basic": body} if version in ("v1alpha3", "v1beta1") else {"name": name, **body}


def slice_node_driver(obj: dict[str, Any]) -> tuple[str, str]:
    if "spec" in obj and isinstance(obj["spec"], dict) and "driver" in obj["spec"]:
        return obj["spec"].get("nodeName") or "", obj["spec"].get("driver") or ""
    return obj.get("nodeName") or "", obj.get("driverName") or ""


def slice_pool(obj: dict[str, Any]) -> tuple[str, int, int] | None:
    """``(pool name, generation, resourceSliceCount)``; None for slices without a pool (v1alpha2)."""
    pool = (obj.get("spec") or {}).get("pool") if isinstance(obj.get("spec"), dict) else None
    if not isinstance(pool, dict):
        return None
    return str(pool.get("name", "")), int(pool.get("generation") or 0), int(pool.get("resourceSliceCount") or 1)


def slice_devices(obj: dict[str, Any]) -> list[str]:
    if "namedResources" in obj:
        return [i["name"] for i in (obj["namedResources"] or {}).get("instances") or []]
    return [d["name"] for d in (obj.get("spec") or {}).get("devices") or []]


# ------------------------------------------------------------------ claims
def claim_spec(minor: int, class_name: str = DRIVER, request: str = "gpu", count: int = 1) -> dict[str, Any]:
    """A claim's spec asking for ``count`` devices of a class, in the storage shape."""
    version = storage_version(minor)
    if version == "v1alpha2":
        return {"resourceClassName": class_name, "allocationMode": "WaitForFirstConsumer"}
    exact = {"deviceClassName": class_name, "allocationMode": "ExactCount", "count": count}
    if version in ("v1alpha3", "v1beta1"):
        return {"devices": {"requests": [{"name": request, **exact}]}}
    return {"devices": {"requests": [{"name": request, "exactly": exact}]}}


def claim_requests(claim: dict[str, Any]) -> list[tuple[str, str, int | None]]:
    """(request name, class name, count or None for All) in any storage version."""
    spec = claim.get("spec") or {}
    if "resourceClassName" in spec:
        return [("", spec["resourceClassName"], 1)]
    out: list[tuple[str, str, int | None]] = []
    for req in (spec.get("devices") or {}).get("requests") or []:
        body = req.get("exactly") or (req.get("firstAvailable") or [None])[0] or req
        mode = body.get("allocationMode") or "ExactCount"
        count = None if mode == "All" else int(body.get("count") or 1)
        out.append((req.get("name", ""), body.get("deviceClassName", ""), count))
    return out


def allocation_status(minor: int, node: str, results: list[tuple[str, str, str]]) -> dict[str, Any]:
    """``status`` fields for an allocation of (request, driver, device) triples on ``node``."""
    version = storage_version(minor)
    if version == "v1alpha2":
        driver = results[0][1] if results else DRIVER
        if minor >= 30:
            handle = {
                "driverName": driver,
                "structuredData": {
                    "nodeName": node,
                    "results": [{"namedResources": {"name": dev}} for _, _, dev in results],
                },
            }
        else:
            data = {"devices": [dev for _, _, dev in results], "nodeName": node}
            handle = {"driverName": driver, "data": json.dumps(data, separators=(",", ":"))}
        return {
            "driverName": driver,
            "allocation": {"resourceHandles": [handle], "shareable": True, "availableOnNodes": node_selector(node)},
        }
    return {
        "allocation": {
            "devices": {
                "results": [
                    {"request": req, "driver": drv, "pool": node, "device": dev} for req, drv, dev in results
                ]
            },
            "nodeSelector": node_selector(node),
        }
    }


def allocated_node(claim: dict[str, Any]) -> str | None:
    alloc = (claim.get("status") or {}).get("allocation")
    if not alloc:
        return None
    selector = alloc.get("nodeSelector") or alloc.get("availableOnNodes") or {}
    for term in selector.get("nodeSelectorTerms") or []:
        for field in term.get("matchFields") or []:
            if field.get("key") == "metadata.name" and field.get("values"):
                return field["values"][0]
    return None


def allocated_devices(claim: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(driver, pool or node, device) of every allocated device."""
    status = claim.get("status") or {}
    alloc = status.get("allocation")
    if not alloc:
        return []
    if "devices" in alloc:
        return [(r.get("driver", ""), r.get("pool", ""), r.get("device", "")) for r in alloc["devices"].get("results") or []]
    node = allocated_node(claim) or ""
    out = []
    for handle in alloc.get("resourceHandles") or []:
        structured = handle.get("structuredData")
        if structured:
            for res in structured.get("results") or []:
                out.append((handle.get("driverName", ""), node, (res.get("namedResources") or {}).get("name", "")))
        elif handle.get("data"):
            try:
                devices = json.loads(handle["data"]).get("devices") or []
            except (ValueError, AttributeError):
                devices = []
            out.extend((handle.get("driverName", ""), node, d) for d in devices)
    return out


def claim_drivers(claim: dict[str, Any]) -> set[str]:
    drivers = {d for d, _, _ in allocated_devices(claim) if d}
    status = claim.get("status") or {}
    if status.get("driverName"):
        drivers.add(status["driverName"])
    return drivers


def reserved_uids(claim: dict[str, Any]) -> list[str]:
    return [r.get("uid", "") for r in (claim.get("status") or {}).get("reservedFor") or []]


# ------------------------------------------------------------------ pods
def pod_claim_refs(pod: dict[str, Any]) -> list[tuple[str, str | None, str | None]]:
    """(pod claim name, ResourceClaim name, ResourceClaimTemplate name) for each pod claim.

    Reads both shapes: ``source: {...}`` (up to 1.30) and the flat fields (1.31 on).
    """
    out = []
    for ref in (pod.get("spec") or {}).get("resourceClaims") or []:
        src = ref.get("source") or ref
        out.append((ref.get("name", ""), src.get("resourceClaimName"), src.get("resourceClaimTemplateName")))
    return out


def pod_claim_ref(minor: int, name: str, *, claim: str | None = None, template: str | None = None) -> dict[str, Any]:
    """A ``spec.resourceClaims[]`` entry in the release's shape."""
    body = {"resourceClaimName": claim} if claim else {"resourceClaimTemplateName": template}
    return {"name": name, "source": body} if minor <= 30 else {"name": name, **body}


def resolved_claim_names(pod: dict[str, Any], minor: int) -> dict[str, str | None]:
    """Pod claim name -> ResourceClaim name (None while a template's claim is not created)."""
    statuses = {s.get("name"): s.get("resourceClaimName") for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []}
    out: dict[str, str | None] = {}
    for name, claim, template in pod_claim_refs(pod):
        if claim:
            out[name] = claim
        elif template:
            if minor <= 27:
                out[name] = f"{pod['metadata']['name']}-{name}"
            else:
                out[name] = statuses.get(name)
    return out


# ------------------------------------------------------------------ protection
def claim_finalizer(minor: int, driver: str) -> str:
    """The finalizer an allocated claim carries: the scheduler's (1.30 on), else the classic DRA
    driver controller's own (``<driver>/deletion-protection``)."""
    return BUILTIN_FINALIZER if minor >= 30 else f"{driver}/deletion-protection"


def unreserved_message(minor: int, pod: dict[str, Any], claim: dict[str, Any]) -> str:
    """The kubelet's FailedPrepareDynamicResources message for a claim not reserved for the pod
    (a pod created with ``spec.nodeName`` skips the scheduler, which allocates and reserves)."""
    p, c = pod["metadata"], claim["metadata"]
    if minor >= 33:
        why = f"pod {p['name']} ({p['uid']}) is not allowed to use ResourceClaim {c['name']} ({c['uid']})"
    else:
        why = f"pod {p['name']}({p['uid']}) is not allowed to use resource claim {c['name']}({c['uid']})"
    return f"Failed to prepare dynamic resources: {why}"
