"""``claims``: the ResourceClaims that are broken, cluster-wide, each with why and the fix.

Read-only. A claim is listed when what holds it is gone:

- ``reserved-for-missing-pods``: ``status.reservedFor`` names pods (by uid) that no longer
  exist or have finished; the resourceclaim controller drops such entries when it sees the
  pod go, so one left over means it missed it, and the devices stay taken.
- ``driver-gone``: allocated to a node that no longer exists, or on which no ResourceSlice of
  the allocating driver is published any more (read only where slices are served, 1.30 on):
  its devices cannot be prepared for a new pod there.
- ``pending-without-pod``: neither allocated nor reserved, no pod in its namespace names it
  (directly or as the claim made from its template), older than :data:`PENDING_GRACE`.
- ``terminating-stuck``: deleted (``deletionTimestamp``) longer than :data:`PENDING_GRACE`
  ago with no live pod reserving it: its finalizer is never going to be removed by the
  controller. Deleting it again does nothing, so ``cleanup-claims`` leaves it to a person
  (the fix names the command).

A claim whose ``status.reservedFor`` names a live pod (:func:`live_holders`: one that exists
and has not finished, a pod being deleted included) is in use: when it is listed all the same
(a stale entry beside the live one, or its driver gone under a running pod) it carries its
``holders`` and is never deletable, and ``cleanup-claims`` checks again just before each delete.

Each :class:`BrokenClaim` carries the claim's uid and resourceVersion as read, so a
cleanup deletes it only as it was listed (a delete precondition on both).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field

from runbooks.cluster import Cluster
from runbooks.cluster.resources import NODES, PODS, Resource

PENDING_GRACE = dt.timedelta(minutes=10)
"""How old a pending claim (or a deletion) must be before it is called broken: a pod being created
names its claim a moment after the claim exists."""
REASONS = ("reserved-for-missing-pods", "driver-gone", "pending-without-pod", "terminating-stuck")
FINISHED = ("Succeeded", "Failed")
"""A pod in these phases has stopped its containers: the resourceclaim controller drops its reservations itself."""


class BrokenClaim(BaseModel):
    namespace: str
    name: str
    uid: str
    resource_version: str
    reason: str = Field(description="one of REASONS")
    detail: str = Field(description="what was seen, in a sentence")
    fix: str = Field(description="what to do, in a sentence")
    deletable: bool = Field(description="cleanup-claims deletes it (a terminating claim, or one in use, is only listed)")
    holders: list[str] = Field(default_factory=list, description="the live pods its status.reservedFor names: "
                               "it is in use, so it is kept")

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"


class ClaimsReport(BaseModel):
    context: str
    version: str = Field(description="the resource.k8s.io version the claims were read in; empty when none is served")
    checked: int = Field(description="how many claims were looked at")
    broken: list[BrokenClaim]


def claim_node(claim: dict[str, Any]) -> str | None:
    """The node an allocated claim's devices are on (``nodeSelector``; v1alpha2 ``availableOnNodes``)."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    selector = allocation.get("nodeSelector") or allocation.get("availableOnNodes") or {}
    for term in selector.get("nodeSelectorTerms") or []:
        for field in term.get("matchFields") or []:
            if field.get("key") == "metadata.name" and field.get("values"):
                return str(field["values"][0])
        for expr in term.get("matchExpressions") or []:
            if expr.get("key") == "kubernetes.io/hostname" and expr.get("values"):
                return str(expr["values"][0])
    return None


def claim_drivers(claim: dict[str, Any]) -> set[str]:
    """The drivers of an allocated claim's devices (v1alpha2: ``status.driverName``)."""
    status = claim.get("status") or {}
    results = (((status.get("allocation") or {}).get("devices") or {}).get("results")) or []
    drivers = {str(r["driver"]) for r in results if r.get("driver")}
    if status.get("driverName"):
        drivers.add(str(status["driverName"]))
    return drivers


def _slice_key(obj: dict[str, Any]) -> tuple[str, str]:
    spec = obj.get("spec") or obj  # v1alpha2 slices keep nodeName and driverName at the top
    return str(spec.get("nodeName") or ""), str(spec.get("driver") or spec.get("driverName") or "")


def _named_claims(pod: dict[str, Any]) -> set[str]:
    """The claims a pod names: directly, or made from its templates (its status names them)."""
    names: set[str] = set()
    for ref in (pod.get("spec") or {}).get("resourceClaims") or []:
        source = ref.get("source") or ref
        if source.get("resourceClaimName"):
            names.add(str(source["resourceClaimName"]))
        elif source.get("resourceClaimTemplateName"):
            names.add(f"{pod['metadata']['name']}-{ref.get('name', '')}")  # 1.27's generated name
    for entry in (pod.get("status") or {}).get("resourceClaimStatuses") or []:
        if entry.get("resourceClaimName"):
            names.add(str(entry["resourceClaimName"]))
    return names


def live_holders(claim: dict[str, Any], pods: Sequence[dict[str, Any]]) -> list[str]:
    """The pods of ``pods`` (the claim's namespace) that ``status.reservedFor`` names by uid and
    that have not finished, each ``name`` (``name (being deleted)`` for one with a
    deletionTimestamp: its containers may still run on the devices until the kubelet stops
    them, and the controller releases the claim once it is gone, so it still holds it)."""
    reserved = {str(r.get("uid")) for r in (claim.get("status") or {}).get("reservedFor") or []
                if r.get("resource", "pods") == "pods"}
    return [str(p["metadata"]["name"]) + (" (being deleted)" if p["metadata"].get("deletionTimestamp") else "")
            for p in pods if str(p["metadata"].get("uid")) in reserved
            and (p.get("status") or {}).get("phase") not in FINISHED]


def _age(claim: dict[str, Any], key: str, now: dt.datetime) -> dt.timedelta:
    stamp = claim["metadata"].get(key)
    if not stamp:
        return dt.timedelta(0)
    return now - dt.datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))


def diagnose(claim: dict[str, Any], *, pods: Sequence[dict[str, Any]], nodes: set[str],
             slices: set[tuple[str, str]] | None, now: dt.datetime) -> BrokenClaim | None:
    """Why ``claim`` is broken, or None. ``pods``: the pods of its namespace (finished ones
    included: they hold nothing); ``slices``: (node, driver) of every published ResourceSlice,
    None where slices are not served. A claim with a live holder is never deletable."""
    meta = claim["metadata"]
    namespace, name = str(meta.get("namespace") or ""), str(meta["name"])
    status = claim.get("status") or {}
    running = [p for p in pods if (p.get("status") or {}).get("phase") not in FINISHED]
    live = {str(p["metadata"]["uid"]) for p in running}
    finished = {str(p["metadata"]["uid"]): str((p.get("status") or {}).get("phase")) for p in pods
                if str(p["metadata"]["uid"]) not in live}
    reserved = [r for r in status.get("reservedFor") or [] if r.get("resource", "pods") == "pods"]
    gone = [r for r in reserved if str(r.get("uid")) not in live]
    holders = live_holders(claim, running)
    allocated = bool(status.get("allocation"))
    users = [p["metadata"]["name"] for p in running if name in _named_claims(p)]

    def broken(reason: str, detail: str, fix: str, *, deletable: bool = True) -> BrokenClaim:
        if holders:  # in use: shown with its holders, never deleted
            detail = f"{detail}; still reserved for live pod(s) {', '.join(holders)}"
            fix = (f"kept: it is in use by {', '.join(holders)} (cleanup-claims does not delete it); "
                   f"once those pods are gone: {fix}")
        return BrokenClaim(namespace=namespace, name=name, uid=str(meta.get("uid") or ""),
                           resource_version=str(meta.get("resourceVersion") or ""), reason=reason, detail=detail,
                           fix=fix, deletable=deletable and not holders, holders=holders)

    if meta.get("deletionTimestamp"):
        if holders or _age(claim, "deletionTimestamp", now) < PENDING_GRACE:
            return None  # kept for the pods it serves, as the API server does
        finalizers = ", ".join(meta.get("finalizers") or []) or "none"
        return broken("terminating-stuck", f"deleted {_age(claim, 'deletionTimestamp', now).total_seconds() / 60:.0f} "
                      f"min ago, no pod reserves it, held by its finalizer(s) {finalizers}",
                      f"check that no pod on its node still uses the devices, then remove the finalizer: kubectl "
                      f"patch resourceclaim {name} -n {namespace} --type=merge -p "
                      "'{\"metadata\":{\"finalizers\":null}}'", deletable=False)
    if gone:
        names = ", ".join(str(r.get("name")) + (f" ({finished[str(r.get('uid'))]})" if str(r.get("uid")) in finished
                                                else "") for r in gone)
        return broken("reserved-for-missing-pods", f"reserved for {'a pod' if len(gone) == 1 else 'pods'} that no "
                      f"longer {'exists or has' if len(gone) == 1 else 'exist or have'} finished ({names}); "
                      + ("the stale entry stays beside the live one" if holders else "its devices stay taken"),
                      "delete it (a claim made from a template is made again for the next pod; a claim a pod names "
                      "directly must be re-created by its owner)")
    node = claim_node(claim) if allocated else None
    if node is not None:
        if node not in nodes:
            return broken("driver-gone", f"allocated to node {node}, which no longer exists",
                          "delete it so it can be allocated again elsewhere")
        missing = sorted(d for d in claim_drivers(claim) if slices is not None and (node, d) not in slices)
        if missing:
            return broken("driver-gone", f"allocated to node {node}, where driver {', '.join(missing)} publishes no "
                          "ResourceSlice any more", "redeploy the driver on that node, or delete the claim so it can "
                          "be allocated where the driver runs")
    if not allocated and not reserved and not users and _age(claim, "creationTimestamp", now) >= PENDING_GRACE:
        return broken("pending-without-pod", f"pending for {_age(claim, 'creationTimestamp', now).total_seconds() / 3600:.0f} h"
                      ", no pod names it",
                      "delete it if nothing is meant to use it")
    return None


def broken_claims(cluster: Cluster) -> ClaimsReport:
    """Every broken ResourceClaim of the cluster (read-only)."""
    chosen = cluster.dra_apis().chosen
    claims_resource: Resource | None = chosen.get("ResourceClaim")
    if claims_resource is None:
        return ClaimsReport(context=cluster.context, version="", checked=0, broken=[])
    claims = cluster.list_objects(claims_resource)
    slices_resource = chosen.get("ResourceSlice")
    slices = ({_slice_key(s) for s in cluster.list_objects(slices_resource)} if slices_resource is not None
              else None)
    nodes = {str(n["metadata"]["name"]) for n in cluster.list_objects(NODES)}
    pods: dict[str, list[dict[str, Any]]] = {}
    for namespace in sorted({str(c["metadata"].get("namespace") or "") for c in claims}):
        pods[namespace] = cluster.list_objects(PODS, namespace=namespace)
    now = cluster.server_time()
    found = [diagnose(c, pods=pods.get(str(c["metadata"].get("namespace") or ""), []), nodes=nodes, slices=slices,
                      now=now) for c in claims]
    broken = sorted((b for b in found if b is not None), key=lambda b: (b.namespace, b.name))
    return ClaimsReport(context=cluster.context, version=claims_resource.version, checked=len(claims), broken=broken)
