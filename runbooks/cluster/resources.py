"""The resources the bot reads and writes, and the choice of ``resource.k8s.io`` version.

Purely data: a :class:`Resource` names one resource of one group/version and builds its
REST paths; :func:`choose_dra_versions` picks, per DRA kind, the version to read from
what discovery says the cluster serves.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

DRA_GROUP = "resource.k8s.io"
# Newest first: the bot reads every DRA kind in the first of these the cluster serves.
DRA_PREFERENCE = ("v1", "v1beta2", "v1beta1", "v1alpha3", "v1alpha2")


@dataclass(frozen=True)
class Resource:
    """``/apis/<group>/<version>/[namespaces/<ns>/]<plural>[/<name>[/<sub>]]``."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool

    @property
    def qualified(self) -> str:
        """``daemonsets.apps`` as RBAC and kubectl name it (``pods`` in the core group)."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None, sub: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if namespace and self.namespaced:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name:
            base += f"/{name}"
            if sub:
                base += f"/{sub}"
        return base


NODES = Resource("", "v1", "nodes", "Node", False)
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", False)
PODS = Resource("", "v1", "pods", "Pod", True)
EVENTS = Resource("", "v1", "events", "Event", True)
DAEMONSETS = Resource("apps", "v1", "daemonsets", "DaemonSet", True)
CONTROLLER_REVISIONS = Resource("apps", "v1", "controllerrevisions", "ControllerRevision", True)
DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment", True)
STATEFULSETS = Resource("apps", "v1", "statefulsets", "StatefulSet", True)
REPLICASETS = Resource("apps", "v1", "replicasets", "ReplicaSet", True)
JOBS = Resource("batch", "v1", "jobs", "Job", True)
SECRETS = Resource("", "v1", "secrets", "Secret", True)
"""Read only for a Helm release's Secrets (:mod:`runbooks.helm_release`), never logged."""
CLUSTER_POLICIES = Resource("nvidia.com", "v1", "clusterpolicies", "ClusterPolicy", False)
"""The GPU operator's ClusterPolicy (cluster-scoped; NVIDIA/gpu-operator api/nvidia/v1)."""
WORKLOADS: dict[str, Resource] = {"Deployment": DEPLOYMENTS, "StatefulSet": STATEFULSETS, "Job": JOBS, "Pod": PODS}
"""The workloads ``migrate`` reads, in the order a bare name is looked up."""

DRA_PLURALS = {
    "DeviceClass": ("deviceclasses", False),
    "ResourceClass": ("resourceclasses", False),
    "ResourceClaim": ("resourceclaims", True),
    "ResourceClaimTemplate": ("resourceclaimtemplates", True),
    "ResourceSlice": ("resourceslices", False),
    "PodSchedulingContext": ("podschedulingcontexts", True),
}


def dra_resource(kind: str, version: str) -> Resource:
    plural, namespaced = DRA_PLURALS[kind]
    return Resource(DRA_GROUP, version, plural, kind, namespaced)


def choose_dra_versions(served: dict[str, list[str]]) -> dict[str, Resource]:
    """``{kind: Resource}`` in the preferred version serving each kind.

    ``served`` maps each served version to its kinds, as discovery lists them. Versions
    the bot does not know are ignored; a kind served by none of them is left out.
    """
    chosen: dict[str, Resource] = {}
    for version in DRA_PREFERENCE:
        for kind in served.get(version, []):
            if kind in DRA_PLURALS and kind not in chosen:
                chosen[kind] = dra_resource(kind, version)
    return chosen


def sort_dra_versions(versions: list[str]) -> list[str]:
    """Known versions in preference order, then any others as the server listed them."""
    known = [v for v in DRA_PREFERENCE if v in versions]
    return known + [v for v in versions if v not in DRA_PREFERENCE]


@dataclass(frozen=True)
class ServerVersion:
    """``/version``: ``v1.31.13``, major 1, minor 31."""

    git_version: str
    major: int
    minor: int
    platform: str = ""
    server_time: dt.datetime | None = None
    """The server's clock (its ``Date`` header): ages are computed against it, as kubectl's are."""


@dataclass(frozen=True)
class DraApis:
    """What discovery says about ``resource.k8s.io`` and what the bot reads it with."""

    served_versions: list[str]
    """Served versions, in the bot's preference order (newest first)."""
    kinds: dict[str, list[str]]
    """Kinds served in each version."""
    chosen: dict[str, Resource]
    """Per kind, the resource in the preferred served version."""

    @property
    def served(self) -> bool:
        return bool(self.served_versions)


def leading_int(text: str) -> int:
    """``"31+"`` (as EKS and GKE report the minor) -> 31; no digits -> 0."""
    digits = ""
    for char in text:
        if not char.isdigit():
            break
        digits += char
    return int(digits) if digits else 0
