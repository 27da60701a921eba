"""``migrate``: from device-plugin resources to ResourceClaims, for one workload.

Read-only. For a Deployment, StatefulSet, Job or Pod whose containers ask for a device
plugin's extended resource (``nvidia.com/gpu: 2``), the plan is: one ResourceClaimTemplate
per such container, in the ``resource.k8s.io`` version the cluster serves and in that
version's request shape (``exactly`` from v1beta2, ``resourceClassName`` in v1alpha2),
asking as many devices of the device class; and the workload with the extended resource
taken out of the container and the claim named instead (``resources.claims`` and the
pod's ``resourceClaims``, with ``source`` up to 1.30). The plan goes through a server-side
dry run (``dryRun=All``) of every object in it, and the server's answers are reported as
given. Applying it, as an approved run, is not this module's: it only says what would change.

The plan applies as printed (``kubectl apply --server-side -f``): what the server set on the live
object is left out (uid, resourceVersion, status, managedFields, owner references, the stale
``last-applied-configuration`` and the Deployment's revision annotation, a Job's generated
selector), and a pod's ``spec.nodeName`` becomes a required node affinity on the node's hostname,
because a pod created with a node name skips the scheduler, the only one that allocates claims.
"""

from __future__ import annotations

import copy
import datetime as dt
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field

from runbooks.cluster import Cluster
from runbooks.cluster.resources import WORKLOADS
from runbooks.dra.preflight import POD_TEMPLATE_PATHS, Discovered, DryRun, Manifest, dry_run
from runbooks.dra.shapes import claim_spec, pod_claim
from runbooks.engine.refusals import Refused
from runbooks.errors import NotFound
from runbooks.inventory.reading import class_from, container_requests

SERVER_FIELDS = ("uid", "resourceVersion", "generation", "creationTimestamp", "managedFields", "selfLink",
                 "deletionTimestamp", "deletionGracePeriodSeconds", "ownerReferences")
"""Metadata the server (or a controller) writes: a plan to apply holds none of it."""
SERVER_ANNOTATIONS = ("kubectl.kubernetes.io/last-applied-configuration", "deployment.kubernetes.io/revision")
"""Annotations written for the live object: the last client-side apply (stale once the plan changes
the object) and the Deployment controller's revision."""
JOB_LABELS = ("controller-uid", "batch.kubernetes.io/controller-uid", "job-name", "batch.kubernetes.io/job-name")
"""What the API server adds to a Job's selector and pod template (unless ``manualSelector``)."""
HOSTNAME = "kubernetes.io/hostname"


class MigrationError(Refused):
    """The workload cannot be migrated as asked: the sentence says why and what to do."""


class ClaimPlan(BaseModel):
    container: str
    resource: str = Field(description="the extended resource it asked for, e.g. nvidia.com/gpu")
    count: int
    template: str = Field(description="the ResourceClaimTemplate made for it")
    claim: str = Field(description="the pod's name for the claim")


class Migration(BaseModel):
    context: str
    kind: str
    namespace: str
    name: str
    version: str = Field(description="the resource.k8s.io version the plan is written in")
    device_class: str
    claims: list[ClaimPlan]
    objects: list[dict[str, Any]] = Field(description="the objects to apply, templates first, then the workload")
    dry_runs: list[DryRun]
    notes: list[str] = Field(default_factory=list)
    taken_at: dt.datetime

    @property
    def accepted(self) -> bool:
        return all(d.accepted for d in self.dry_runs)

    @property
    def ref(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


# ------------------------------------------------------------------ shapes
def _requests(container: dict[str, Any], resources: Sequence[str]) -> tuple[str, int] | None:
    """The first of ``resources`` the container asks any of, and how many."""
    asked = container_requests(container, tuple(resources))
    return next(((name, count) for name, count in asked.items() if count > 0), None)


def _without(container: dict[str, Any], resource: str, claim: str) -> dict[str, Any]:
    out = copy.deepcopy(container)
    res = out.setdefault("resources", {})
    for part in ("limits", "requests"):
        if isinstance(res.get(part), dict):
            res[part].pop(resource, None)
            if not res[part]:
                del res[part]
    res["claims"] = [*(c for c in res.get("claims") or [] if c.get("name") != claim), {"name": claim}]
    return out


def _without_server_fields(obj: dict[str, Any], kind: str) -> None:
    """Drop what the server set on the live object, so the plan applies as a new object would."""
    meta = obj.setdefault("metadata", {})
    for field in SERVER_FIELDS:
        meta.pop(field, None)
    annotations = meta.get("annotations") or {}
    for key in SERVER_ANNOTATIONS:
        annotations.pop(key, None)
    if not annotations:
        meta.pop("annotations", None)
    obj.pop("status", None)
    spec = obj.get("spec") or {}
    if kind == "Job" and not spec.get("manualSelector"):
        spec.pop("selector", None)
        labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
        for key in JOB_LABELS:
            labels.pop(key, None)


def _to_the_scheduler(pod_spec: dict[str, Any]) -> None:
    """A pod pinned with ``spec.nodeName`` skips the scheduler, which is what allocates claims: the
    node becomes a required node affinity on its hostname (ANDed into every existing term)."""
    node = pod_spec.pop("nodeName", None)
    if not node:
        return
    pin = {"key": HOSTNAME, "operator": "In", "values": [node]}
    required = (pod_spec.setdefault("affinity", {}).setdefault("nodeAffinity", {})
                .setdefault("requiredDuringSchedulingIgnoredDuringExecution", {}))
    terms = required.get("nodeSelectorTerms") or [{}]
    required["nodeSelectorTerms"] = [{**t, "matchExpressions": [*(t.get("matchExpressions") or []), pin]}
                                     for t in terms]


def plan(workload: dict[str, Any], kind: str, *, version: str, device_class: str,
         resources: Sequence[str]) -> tuple[list[ClaimPlan], list[dict[str, Any]]]:
    """The claims and the objects (templates, then the workload) that replace the extended resources."""
    meta = workload.get("metadata") or {}
    name, namespace = str(meta.get("name", "")), str(meta.get("namespace", ""))
    path = POD_TEMPLATE_PATHS[kind]
    new = copy.deepcopy(workload)
    spec: dict[str, Any] = new
    for key in path:
        spec = spec.setdefault(key, {})
    claims: list[ClaimPlan] = []
    containers = []
    for container in spec.get("containers") or []:
        wants = _requests(container, resources)
        if wants is None:
            containers.append(container)
            continue
        claim = f"{container['name']}-{wants[0].rsplit('/', 1)[-1]}"
        claims.append(ClaimPlan(container=container["name"], resource=wants[0], count=wants[1],
                                template=f"{name}-{claim}", claim=claim))
        containers.append(_without(container, wants[0], claim))
    if not claims:
        raise MigrationError(f"{kind} {namespace}/{name} asks for none of {', '.join(resources)}: nothing to migrate")
    spec["containers"] = containers
    mine = {c.claim for c in claims}
    spec["resourceClaims"] = [*(c for c in spec.get("resourceClaims") or [] if c.get("name") not in mine),
                              *(pod_claim(c.claim, c.template, source=version == "v1alpha2") for c in claims)]
    _without_server_fields(new, kind)
    if kind == "Pod":
        _to_the_scheduler(spec)
    templates = [{
        "apiVersion": f"resource.k8s.io/{version}", "kind": "ResourceClaimTemplate",
        "metadata": {"name": c.template, "namespace": namespace,
                     "labels": {"app.kubernetes.io/managed-by": "upgradebot"}},
        "spec": {"spec": claim_spec(version, device_class, c.count, c.claim)},
    } for c in claims]
    return claims, [*templates, new]


# ------------------------------------------------------------------ reading
def find_workload(cluster: Cluster, namespace: str, name: str, kind: str | None) -> tuple[str, dict[str, Any]]:
    """The workload by kind (or the one kind that has this name), with its apiVersion and kind."""
    kinds = [kind] if kind else list(WORKLOADS)
    found: list[tuple[str, dict[str, Any]]] = []
    for candidate in kinds:
        resource = WORKLOADS[candidate]
        try:
            obj = cluster.get(resource, name, namespace)
        except NotFound:
            continue
        found.append((candidate, {**obj, "apiVersion": resource.api_version, "kind": candidate}))
    if not found:
        what = kind or " or ".join(WORKLOADS)
        raise MigrationError(f"there is no {what} {namespace}/{name} in cluster {cluster.context}")
    if len(found) > 1:
        raise MigrationError(f"{namespace}/{name} is a {' and a '.join(k for k, _ in found)}: name the kind "
                             f"({namespace}/{found[0][0].lower()}/{name})")
    return found[0]


def choose_class(cluster: Cluster, given: str | None) -> str:
    chosen = cluster.dra_apis().chosen
    kind = "DeviceClass" if "DeviceClass" in chosen else "ResourceClass" if "ResourceClass" in chosen else None
    if kind is None:
        raise MigrationError(f"cluster {cluster.context} serves no resource.k8s.io device classes: DRA is not "
                             "enabled there (`inventory` shows what it serves)")
    names = sorted(class_from(o, kind).name for o in cluster.list_objects(chosen[kind]))
    if given:
        if given not in names:
            raise MigrationError(f"there is no {kind} {given}: use one of {', '.join(names) or '(none)'}")
        return given
    if len(names) != 1:
        raise MigrationError(f"which {kind}? give class=<{'|'.join(names) or 'name'}>")
    return names[0]


def migrate(cluster: Cluster, namespace: str, name: str, *, kind: str | None = None, device_class: str | None = None,
            resources: Sequence[str] = ("nvidia.com/gpu",), now: dt.datetime | None = None) -> Migration:
    """The plan for one workload, and the server's answers to its dry run."""
    kind, workload = find_workload(cluster, namespace, name, kind)
    chosen = cluster.dra_apis().chosen
    if "ResourceClaimTemplate" not in chosen:
        raise MigrationError(f"cluster {cluster.context} serves no ResourceClaimTemplate API: DRA is not enabled there")
    version = chosen["ResourceClaimTemplate"].version
    klass = choose_class(cluster, device_class)
    claims, objects = plan(workload, kind, version=version, device_class=klass, resources=resources)
    discovered = Discovered(cluster)
    notes: list[str] = []
    checked = objects
    if kind == "Pod":  # a pod's spec cannot change in place: it is deleted and created again
        checked = objects[:-1]
        notes.append(f"a pod cannot be changed in place: delete {namespace}/{name} and create it again from this "
                     "spec (better, let a Deployment or Job own it); only the claim templates were dry-run")
        owner = next((o for o in (workload.get("metadata") or {}).get("ownerReferences") or []
                      if o.get("controller")), None)
        if owner:
            notes.append(f"{namespace}/{name} belongs to {owner.get('kind')} {owner.get('name')}, which would make "
                         "its pod again beside this one: migrate the workload that owns it instead (the plan holds "
                         "no owner reference)")
        pinned = (workload.get("spec") or {}).get("nodeName")
        if pinned:
            notes.append(f"its spec.nodeName {pinned} is now a required node affinity ({HOSTNAME} In [{pinned}]): "
                         "a pod with spec.nodeName skips the scheduler, and only the scheduler allocates claims")
    if kind == "Job":
        notes.append(f"a Job's pod template cannot change: delete {namespace}/{name} and create it again from this "
                     "plan; its generated selector and labels were left out for the server to make again")
    runs = [answer for obj in checked
            if (answer := dry_run(cluster, discovered, Manifest("migration", obj))) is not None]
    return Migration(context=cluster.context, kind=kind, namespace=namespace, name=name, version=version,
                     device_class=klass, claims=claims, objects=objects, dry_runs=runs, notes=notes,
                     taken_at=now or cluster.server_time())
