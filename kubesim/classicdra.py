"""Classic DRA (``resource.k8s.io/v1alpha2``, 1.27-1.30): what the API server and the
scheduler add to a claim-using pod's objects.

- ``SetDefaults_ResourceClaimSpec``: a claim (or a template's claim) without an
  ``allocationMode`` gets ``WaitForFirstConsumer``.
- The scheduler's DynamicResources plugin, for a pod whose claims wait for their first
  consumer, creates the pod's ``PodSchedulingContext`` (named as the pod, owned by it) with
  the nodes that passed the filters as ``potentialNodes`` and the chosen node as
  ``selectedNode``: how classic drivers learn where to allocate.
"""

from __future__ import annotations

from typing import Any

from kubesim import dra

SCHEDULING_CONTEXTS = ("resource.k8s.io", "podschedulingcontexts")
MAX_POTENTIAL_NODES = 128
"""``resourcev1alpha2.PodSchedulingNodeListMaxSize``."""


def _claim_spec(spec: Any) -> None:
    if isinstance(spec, dict) and "resourceClassName" in spec:  # the v1alpha2 shape only
        spec.setdefault("allocationMode", "WaitForFirstConsumer")


def claim(obj: dict[str, Any]) -> None:
    """``SetDefaults_ResourceClaimSpec`` of a ResourceClaim."""
    _claim_spec(obj.get("spec"))


def claim_template(obj: dict[str, Any]) -> None:
    """``SetDefaults_ResourceClaimSpec`` of a ResourceClaimTemplate's claim."""
    _claim_spec((obj.get("spec") or {}).get("spec"))


DEFAULTERS = {dra.CLAIMS: claim, dra.TEMPLATES: claim_template}


def waits_for_consumer(claims: list[dict[str, Any]]) -> bool:
    return any((c.get("spec") or {}).get("allocationMode") == "WaitForFirstConsumer"
               and not (c.get("status") or {}).get("allocation") for c in claims)


def scheduling_context(sim: Any, pod: dict[str, Any], *, node: str, potential: list[str]) -> None:
    """Create (or update) the pod's PodSchedulingContext as the scheduler does before binding."""
    if dra.storage_version(sim.minor) != "v1alpha2":
        return
    store = sim.store
    m = pod["metadata"]
    spec = {"selectedNode": node, "potentialNodes": sorted(potential)[:MAX_POTENTIAL_NODES]}
    if store.get(SCHEDULING_CONTEXTS, m["namespace"], m["name"]) is not None:
        store.mutate(SCHEDULING_CONTEXTS, m["namespace"], m["name"], lambda obj: obj.update(spec=spec))
        return
    store.create(store.storage_type(SCHEDULING_CONTEXTS), {
        "metadata": {"name": m["name"], "namespace": m["namespace"], "ownerReferences": [
            {"apiVersion": "v1", "kind": "Pod", "name": m["name"], "uid": m["uid"], "controller": True,
             "blockOwnerDeletion": True}]},
        "spec": spec,
    })
