"""What an unfinished pod uses, and the tally of one pass over a cluster's pods (pure).

:func:`pod_use` reduces a pod (a dict, as a watch cache keeps it, or the :class:`PodShape`
a typed list decodes) to the GPUs it requests and the claims it names; :class:`PodTally`
adds them up page by page, with the pods of the plugin DaemonSets; :func:`gpus_in_use`
counts GPUs per node. :mod:`runbooks.inventory.taking` lists the pods and
:mod:`runbooks.inventory.watch_cache` keeps them; both reduce them here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from runbooks.cluster.decoding import MetaShape, PodShape, PodSpecShape, PodStatusShape
from runbooks.inventory import reading
from runbooks.inventory.models import PluginPod
from runbooks.inventory.reading import Obj


@dataclass(frozen=True)
class PodUse:
    """What an unfinished pod holds or waits for: the GPUs it requests, the claims it names."""

    namespace: str
    name: str
    phase: str
    node: str
    requests: dict[str, int]
    claims: list[str]
    unschedulable: str = ""
    """The scheduler's message while the pod is not scheduled (PodScheduled False)."""


def pod_use(obj: Obj | PodShape, resources: tuple[str, ...]) -> PodUse | None:
    """What a pod uses (GPUs of ``resources`` it requests, claims it names); None if neither. The pod
    as listed: a dict (a watch cache's), or the :class:`PodShape` a typed list decodes."""
    if isinstance(obj, PodShape):
        return _use_of_shape(obj, resources)
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    requests, claims = reading.requested(spec, resources), reading.claims_of_pod(obj)
    if not (requests or claims or spec.get("resourceClaims")):
        return None  # page by page, only the pods that matter are kept (a template's pod too)
    status = obj.get("status") or {}
    unscheduled = next((str(c.get("message") or "") for c in status.get("conditions") or []
                        if c.get("type") == "PodScheduled" and c.get("status") == "False"), "")
    return PodUse(namespace=meta.get("namespace", ""), name=meta.get("name", ""),
                  phase=status.get("phase", ""), node=str(spec.get("nodeName") or ""),
                  requests=requests, claims=claims, unschedulable=unscheduled)


def _use_of_shape(pod: PodShape, resources: tuple[str, ...]) -> PodUse | None:
    spec = pod.spec or PodSpecShape()
    requests, claims = reading.requested(spec, resources), reading.claims_of_pod(pod)
    if not (requests or claims or spec.resource_claims):
        return None
    meta, status = pod.metadata or MetaShape(), pod.status or PodStatusShape()
    unscheduled = next((str(c.message or "") for c in status.conditions or []
                        if c.type == "PodScheduled" and c.status == "False"), "")
    return PodUse(namespace=reading.given(meta.namespace, ""), name=reading.given(meta.name, ""),
                  phase=reading.given(status.phase, ""), node=str(spec.node_name or ""),
                  requests=requests, claims=claims, unschedulable=unscheduled)


PENDING = "Pending"


def gpus_in_use(pods: Iterable[PodUse]) -> dict[str, dict[str, int]]:
    """GPUs requested by ``pods`` (unfinished), per node and resource."""
    gpus: dict[str, dict[str, int]] = {}
    for pod in pods:
        add_gpus(gpus, pod.node, pod.requests.items())
    return gpus


def add_gpus(gpus: dict[str, dict[str, int]], node: str, requests: Iterable[tuple[str, int]]) -> None:
    """``requests`` (resource, count) added to ``gpus`` of ``node`` (none: a pod not scheduled)."""
    if node:
        on_node = gpus.setdefault(node, {})
        for name, count in requests:
            on_node[name] = on_node.get(name, 0) + count


@dataclass
class PodTally:
    """What one pass over the cluster's unfinished pods keeps, page by page (issue 39): the GPUs
    requested per node (counts, no pod kept for them), the Pending pods that request GPUs or name
    claims, and the pods of the DaemonSets ``owners`` (uid -> ``namespace/name``) by DaemonSet."""

    resources: tuple[str, ...]
    owners: Mapping[str, str]
    gpus: dict[str, dict[str, int]] = field(default_factory=dict)
    waiting: list[PodUse] = field(default_factory=list)
    plugin_pods: dict[str, list[PluginPod]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.plugin_pods = {ref: [] for ref in self.owners.values()}

    def add(self, pod: PodShape) -> None:
        use = pod_use(pod, self.resources)
        if use is not None:
            add_gpus(self.gpus, use.node, use.requests.items())
            if use.phase == PENDING:
                self.waiting.append(use)
        if self.owners:
            refs = (pod.metadata or MetaShape()).owner_references or []
            owner = next((ref.uid for ref in refs if ref.uid in self.owners), None)
            if owner is not None:
                self.plugin_pods[self.owners[owner]].append(reading.pod_from(pod))
