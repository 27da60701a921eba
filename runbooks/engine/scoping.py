"""What a step may change on a cluster: the engine's guard, not each step's care.

A step gets the cluster through :class:`ScopedCluster`. Reads pass through unchanged;
every write goes through the adapter's single ``write_json`` and is checked first: a run
may patch its target DaemonSet (and the other workloads the policy upgrades with it),
delete that DaemonSet's pods (a run that drains: also cordon and uncordon the nodes that
DaemonSet runs on, and evict other pods from cordoned nodes), and create and delete the
smoke test's pods (``gpu-smoke-test-<hex>``), and a DRA driver's smoke-test
ResourceClaimTemplate and the claim made from it, in the smoke test's one namespace. A
migration run may replace or patch its one workload and create and delete the
ResourceClaimTemplates its approved change names, in the workload's namespace. Any other
write raises :class:`OutOfScope` before it is sent (a target the GPU operator renders, ``owner:
clusterpolicy/<name>``: its ClusterPolicy is patched, never the DaemonSet): a bug in a step halts the run instead
of touching another object. A repair run may delete the pods its approved request lists,
and nothing else; a cleanup run the ResourceClaims its approved request lists. A quarantine or
release run may patch its DaemonSet and, on its one node, nothing but the target's quarantine
label and annotation and ``spec.unschedulable`` (a merge patch of those keys only).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from runbooks.cluster.resources import (
    CLUSTER_POLICIES,
    DAEMONSETS,
    DEPLOYMENTS,
    DRA_GROUP,
    NODES,
    PODS,
    WORKLOADS,
)
from runbooks.cluster.writing import Query, Writes
from runbooks.engine.runs import Run, Target
from runbooks.errors import Action, NotFound

SMOKE_NAMESPACE = "upgradebot-smoke"
"""The smoke test's namespace when the policy names none (the install creates it)."""
CORDON_BODIES = ({"spec": {"unschedulable": True}}, {"spec": {"unschedulable": None}})
"""The only node writes a run that drains may make: cordon, uncordon."""
SMOKE_POD_PREFIX = "gpu-smoke-test-"
"""The smoke test's pods (``runbooks.daemonset.smoke_testing`` names them so)."""


class OutOfScope(Exception):
    """A step tried to write something that is not its run's target; nothing was sent."""


class ScopedCluster(Writes):
    """``cluster`` as a step of the run on ``target`` sees it (``scratch``: the namespace of the
    smoke test's pods, none when the policy asks for no smoke test)."""

    def __init__(self, cluster: Any, target: Target, *, scratch: str | None = None,
                 templates: tuple[str, ...] = (), deletions: tuple[str, ...] | None = None,
                 own: tuple[str, ...] = (), fence: Callable[[], None] = lambda: None,
                 marks: tuple[str, str] | None = None) -> None:
        """``templates``: a migration's ResourceClaimTemplates (its approved change names them);
        ``deletions``: a repair's pods (their paths), the only writes it may make; ``own``: the
        workloads of the target's kind the run creates and deletes (a migration canary's duplicate);
        ``fence`` is called right before each write is sent and raises when the run is no longer
        this worker's (:meth:`runbooks.engine.leasing.Lease.fence`): nothing is sent then; ``marks``:
        a quarantine's or release's ``(node, label key)``, the one node it may mark (and nothing
        else but its DaemonSet)."""
        self._cluster, self._target, self._scratch, self._templates = cluster, target, scratch, templates
        self._marks = marks
        self._own = own
        self._deletions, self._fence = deletions, fence

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cluster, name)

    def write_json(
        self, method: str, path: str, *, action: Action, body: Any = None, content_type: str | None = None,
        query: Query | None = None,
    ) -> dict[str, Any]:
        if self._deletions is not None:
            if method != "DELETE" or path not in self._deletions:
                raise OutOfScope(f"a step of the run on {self._target.ref} tried to {method} {path}: only the "
                                 "objects its approved request lists may be deleted; nothing was sent")
        elif self._marks is not None:
            if not self._marks_allow(method, path, body):
                raise OutOfScope(f"a step of the run on {self._target.ref} tried to {method} {path}: only the "
                                 f"DaemonSet and the quarantine marks and cordon of {self._marks[0]} may change; "
                                 "nothing was sent")
        elif not self._allowed(method, path, body):
            what = ("the DaemonSet itself, its pods and the smoke test's pods" + (
                        ", the cordon of its nodes and evictions from cordoned nodes" if self._target.drain else "")
                    if self._target.kind == "DaemonSet"
                    else f"the {self._target.kind} itself and the ResourceClaimTemplates of its approved change")
            raise OutOfScope(f"a step of the run on {self._target.ref} tried to {method} {path}: only "
                             f"{what} may change; nothing was sent")
        self._fence()
        result: dict[str, Any] = self._cluster.write_json(method, path, action=action, body=body,
                                                          content_type=content_type, query=query)
        return result

    def _allowed(self, method: str, path: str, body: Any) -> bool:
        ns, name = self._target.namespace, self._target.name
        if self._target.kind != "DaemonSet":
            return self._migration_allows(method, path, body)
        if self._target.clusterpolicy:  # the operator renders the DaemonSet: the run changes its ClusterPolicy
            if path == CLUSTER_POLICIES.path(None, self._target.clusterpolicy):
                return method == "PATCH"
        elif path == DAEMONSETS.path(ns, name):
            return method == "PATCH"
        if self._target.drain and self._drain_allows(method, path, body):
            return True
        for part in self._target.parts:  # the target's other workloads (policy ``workloads``)
            resource = DAEMONSETS if part.kind == "DaemonSet" else DEPLOYMENTS
            if path == resource.path(ns, part.name):
                return method == "PATCH"
        if path.startswith(PODS.path(ns) + f"/{name}-"):
            return method == "DELETE"
        if not self._scratch:
            return False
        for collection in self._scratch_collections(path):
            if path == collection and method == "POST":
                return str(((body or {}).get("metadata") or {}).get("name", "")).startswith(SMOKE_POD_PREFIX)
            if method == "DELETE" and path.startswith(f"{collection}/{SMOKE_POD_PREFIX}"):
                return True
        return False

    def _marks_allow(self, method: str, path: str, body: Any) -> bool:
        """A quarantine or release: a patch of its DaemonSet, or a merge patch of its node touching
        only the target's label and annotation and ``spec.unschedulable``."""
        assert self._marks is not None
        node, key = self._marks
        if method != "PATCH":
            return False
        if path == DAEMONSETS.path(self._target.namespace, self._target.name):
            return True
        if path != NODES.path(None, node) or not key or not isinstance(body, dict) or not body:
            return False
        meta, spec = body.get("metadata") or {}, body.get("spec") or {}
        if set(body) - {"metadata", "spec"} or set(meta) - {"labels", "annotations"} or set(spec) - {"unschedulable"}:
            return False
        return all(isinstance(meta[part], dict) and set(meta[part]) == {key} for part in meta) and \
            spec.get("unschedulable") in (True, None)

    def _drain_allows(self, method: str, path: str, body: Any) -> bool:
        """A run that drains may cordon and uncordon a node its DaemonSet runs on (a merge patch
        of ``spec.unschedulable`` and nothing else), and evict (never delete) a pod of another
        workload from such a node once it is cordoned."""
        parts = path.split("/")
        if method == "PATCH" and len(parts) == 5 and path == NODES.path(None, parts[4]):
            return body in CORDON_BODIES and self._runs_on(parts[4])
        if method == "POST" and len(parts) == 8 and parts[1:4] == ["api", "v1", "namespaces"] \
                and parts[5] == "pods" and parts[7] == "eviction":
            namespace, pod = parts[4], parts[6]
            if namespace == self._target.namespace and pod.startswith(f"{self._target.name}-"):
                return False  # the plugin's own pods are replaced by deleting them, never evicted
            found = self._cluster.list_objects(PODS, namespace=namespace, field_selector=f"metadata.name={pod}")
            if not found:  # gone meanwhile: the eviction would find nothing either
                raise NotFound(f"cannot evict pod {namespace}/{pod}: not found on {self._cluster.context}",
                               action=Action("create", "pods/eviction", namespace, pod), status=404)
            node = str((found[0].get("spec") or {}).get("nodeName") or "")
            return bool(node) and self._runs_on(node) and bool(
                (self._cluster.get(NODES, node).get("spec") or {}).get("unschedulable"))
        return False

    def _runs_on(self, node: str) -> bool:
        ns, name = self._target.namespace, self._target.name
        pods = self._cluster.list_objects(PODS, namespace=ns, field_selector=f"spec.nodeName={node}")
        return any(str((p.get("metadata") or {}).get("name", "")).startswith(f"{name}-") for p in pods)

    def _migration_allows(self, method: str, path: str, body: Any) -> bool:
        ns, name = self._target.namespace, self._target.name
        workload = WORKLOADS.get(self._target.kind)
        if workload is not None and path == workload.path(ns, name):
            return method in ("PUT", "PATCH")
        if workload is not None and self._own:  # the run's own duplicate: created, deleted, nothing else
            if method == "POST" and path == workload.path(ns):
                return str(((body or {}).get("metadata") or {}).get("name", "")) in self._own
            if any(path == workload.path(ns, own) for own in self._own):
                return method == "DELETE"
        parts = path.split("/")
        prefix = f"/apis/{DRA_GROUP}/"
        if not path.startswith(prefix) or len(parts) < 7 or parts[4:7] != ["namespaces", ns, "resourceclaimtemplates"]:
            return False
        if method == "POST" and len(parts) == 7:
            return str(((body or {}).get("metadata") or {}).get("name", "")) in self._templates
        return method == "DELETE" and len(parts) == 8 and parts[7] in self._templates

    def _scratch_collections(self, path: str) -> list[str]:
        """Where the smoke test may create and delete its own objects: pods, and (a DRA driver's
        smoke test) ResourceClaimTemplates and the ResourceClaims made from them."""
        scratch = self._scratch or ""
        out = [PODS.path(scratch)]
        parts = path.split("/")
        if path.startswith(f"/apis/{DRA_GROUP}/") and len(parts) > 4:
            version = parts[3]
            for plural in ("resourceclaimtemplates", "resourceclaims"):
                out.append(f"/apis/{DRA_GROUP}/{version}/namespaces/{scratch}/{plural}")
        return out


def cleanup_deletions(run: Run) -> tuple[str, ...]:
    """The paths of the ResourceClaims a cleanup run's approved request lists: its only writes."""
    version = str(run.change.get("version") or "")
    return tuple(f"/apis/{DRA_GROUP}/{version}/namespaces/{c['namespace']}/resourceclaims/{c['name']}"
                 for c in run.change.get("delete") or [])
