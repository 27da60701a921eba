"""The API surface each simulated Kubernetes release serves: groups, versions, kinds.

Purely data: which resources exist, under which group/version, with which verbs,
short names and subresources, and which ``resource.k8s.io`` versions a release serves
(v1alpha2 up to 1.30, v1alpha3 in 1.31, v1beta1 from 1.32, v1beta2 from 1.33, v1 from 1.34).
"""

from __future__ import annotations

from dataclasses import dataclass, field

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
SUPPORTED_MINORS = range(27, 35)
DRA_GROUP = "resource.k8s.io"
RBAC_GROUP = "rbac.authorization.k8s.io"
POLICY_GROUP = "policy"  # PodDisruptionBudget (policy/v1 is served by every simulated release)


@dataclass(frozen=True)
class ResourceType:
    """One served resource: ``/apis/<group>/<version>/[namespaces/<ns>/]<plural>``."""

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ALL_VERBS
    categories: tuple[str, ...] = ()
    has_spec: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def group_resource(self) -> tuple[str, str]:
        """The storage identity shared by every version of the resource."""
        return (self.group, self.plural)

    @property
    def qualified(self) -> str:
        """``daemonsets.apps`` as API errors name it (just ``pods`` in the core group)."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


def _core() -> list[ResourceType]:
    return [
        ResourceType("", "v1", "Namespace", "namespaces", False, ("ns",), ("status",)),
        ResourceType("", "v1", "Node", "nodes", False, ("no",), ("status",)),
        ResourceType(
            "", "v1", "Pod", "pods", True, ("po",), ("status", "log", "eviction", "exec"),
            categories=("all",),
        ),
        ResourceType("", "v1", "Event", "events", True, ("ev",), has_spec=False),
        ResourceType("", "v1", "ConfigMap", "configmaps", True, ("cm",), has_spec=False),
        ResourceType("", "v1", "ServiceAccount", "serviceaccounts", True, ("sa",), ("token",), has_spec=False),
        ResourceType(
            "apps", "v1", "DaemonSet", "daemonsets", True, ("ds",), ("status",), categories=("all",)
        ),
        ResourceType(
            "apps", "v1", "Deployment", "deployments", True, ("deploy",), ("status", "scale"),
            categories=("all",),
        ),
        ResourceType(
            "apps", "v1", "ReplicaSet", "replicasets", True, ("rs",), ("status", "scale"),
            categories=("all",),
        ),
        ResourceType(
            "apps", "v1", "StatefulSet", "statefulsets", True, ("sts",), ("status", "scale"),
            categories=("all",),
        ),
        ResourceType(
            "apps", "v1", "ControllerRevision", "controllerrevisions", True, has_spec=False
        ),
        ResourceType(POLICY_GROUP, "v1", "PodDisruptionBudget", "poddisruptionbudgets", True, ("pdb",), ("status",)),
        ResourceType(
            "apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions",
            False, ("crd", "crds"), ("status",), categories=("api-extensions",),
        ),
        ResourceType(RBAC_GROUP, "v1", "ClusterRole", "clusterroles", False, has_spec=False),
        ResourceType(RBAC_GROUP, "v1", "ClusterRoleBinding", "clusterrolebindings", False, has_spec=False),
        ResourceType(RBAC_GROUP, "v1", "Role", "roles", True, has_spec=False),
        ResourceType(RBAC_GROUP, "v1", "RoleBinding", "rolebindings", True, has_spec=False),
        ResourceType("authorization.k8s.io", "v1", "SelfSubjectAccessReview", "selfsubjectaccessreviews", False,
                     verbs=("create",)),
        ResourceType("authorization.k8s.io", "v1", "SelfSubjectRulesReview", "selfsubjectrulesreviews", False,
                     verbs=("create",)),
        ResourceType("storage.k8s.io", "v1", "CSIDriver", "csidrivers", False),
    ]


def _authentication(minor: int) -> list[ResourceType]:
    """SelfSubjectReview: authentication.k8s.io/v1 from 1.28 (1.27's v1beta1 is a beta API, not served by default)."""
    if minor < 28:
        return []
    return [ResourceType("authentication.k8s.io", "v1", "SelfSubjectReview", "selfsubjectreviews", False,
                         verbs=("create",), has_spec=False)]


_Kind = tuple[str, str, bool, tuple[str, ...], tuple[str, ...]]


def _dra(version: str, kinds: list[_Kind]) -> list[ResourceType]:
    return [
        ResourceType(DRA_GROUP, version, kind, plural, namespaced, short, subs)
        for kind, plural, namespaced, short, subs in kinds
    ]


_CLAIM: _Kind = ("ResourceClaim", "resourceclaims", True, (), ("status",))
_TEMPLATE: _Kind = ("ResourceClaimTemplate", "resourceclaimtemplates", True, (), ())
_SLICE: _Kind = ("ResourceSlice", "resourceslices", False, (), ())
_DEVICE_CLASS: _Kind = ("DeviceClass", "deviceclasses", False, (), ())
_SCHEDULING: _Kind = ("PodSchedulingContext", "podschedulingcontexts", True, (), ("status",))
_RESOURCE_CLASS: _Kind = ("ResourceClass", "resourceclasses", False, (), ())


def dra_versions(minor: int) -> list[str]:
    """The ``resource.k8s.io`` versions a release serves, preferred (newest) first."""
    if minor <= 30:
        return ["v1alpha2"]
    if minor == 31:
        return ["v1alpha3"]
    if minor == 32:
        return ["v1beta1"]
    if minor == 33:
        return ["v1beta2", "v1beta1"]
    return ["v1", "v1beta2", "v1beta1"]


def _dra_for(minor: int) -> list[ResourceType]:
    out: list[ResourceType] = []
    for version in dra_versions(minor):
        if version == "v1alpha2":
            kinds: list[_Kind] = [_RESOURCE_CLASS, _CLAIM, _TEMPLATE, _SCHEDULING]
            if minor >= 30:
                kinds.append(_SLICE)
        elif version == "v1alpha3":
            kinds = [_DEVICE_CLASS, _CLAIM, _TEMPLATE, _SLICE, _SCHEDULING]
        else:
            kinds = [_DEVICE_CLASS, _CLAIM, _TEMPLATE, _SLICE]
        out.extend(_dra(version, kinds))
    return out


def _install_kinds() -> list[ResourceType]:
    """What an install touches besides workloads: Secrets, Services, network, scheduling and node
    kinds (RuntimeClass, served as ``node.k8s.io/v1`` since 1.20), Leases."""
    net = "networking.k8s.io"
    return [
        ResourceType("", "v1", "Secret", "secrets", True, has_spec=False),
        ResourceType("", "v1", "Service", "services", True, ("svc",), ("status",), categories=("all",)),
        ResourceType(net, "v1", "NetworkPolicy", "networkpolicies", True, ("netpol",)),
        ResourceType(net, "v1", "Ingress", "ingresses", True, ("ing",), ("status",)),
        ResourceType("scheduling.k8s.io", "v1", "PriorityClass", "priorityclasses", False, ("pc",), has_spec=False),
        ResourceType("node.k8s.io", "v1", "RuntimeClass", "runtimeclasses", False, has_spec=False),
        ResourceType("coordination.k8s.io", "v1", "Lease", "leases", True),
        ResourceType("batch", "v1", "Job", "jobs", True, (), ("status",), categories=("all",)),
    ]


@dataclass
class ApiSurface:
    """Every resource one simulated release serves, indexed the ways requests need."""

    minor: int
    resources: list[ResourceType] = field(default_factory=list)

    @classmethod
    def for_release(cls, minor: int) -> ApiSurface:
        if minor not in SUPPORTED_MINORS:
            raise ValueError(f"Kubernetes 1.{minor} is not simulated (1.27 .. 1.34 are)")
        return cls(minor, _core() + _authentication(minor) + _install_kinds() + _dra_for(minor))

    def lookup(self, group: str, version: str, plural: str) -> ResourceType | None:
        for res in self.resources:
            if res.group == group and res.version == version and res.plural == plural:
                return res
        return None

    def by_kind(self, api_version: str, kind: str) -> ResourceType | None:
        group, _, version = api_version.rpartition("/")
        for res in self.resources:
            if res.group == group and res.version == version and res.kind == kind:
                return res
        return None

    def group_versions(self) -> dict[str, list[str]]:
        """``{group: [versions, preferred first]}`` in discovery order (core group is "")."""
        out: dict[str, list[str]] = {}
        for res in self.resources:
            versions = out.setdefault(res.group, [])
            if res.version not in versions:
                versions.append(res.version)
        return out

    def in_group_version(self, group: str, version: str) -> list[ResourceType]:
        return [r for r in self.resources if r.group == group and r.version == version]

    def storage_version(self, group: str, plural: str) -> ResourceType:
        """The version objects of a group/resource are stored in (the preferred one)."""
        for res in self.resources:
            if res.group == group and res.plural == plural:
                return res
        raise KeyError((group, plural))

    @property
    def dra_served(self) -> list[str]:
        return dra_versions(self.minor)


def git_version(minor: int) -> str:
    """A plausible patch release for each simulated minor."""
    patch = {27: 16, 28: 15, 29: 14, 30: 14, 31: 13, 32: 9, 33: 5, 34: 2}[minor]
    return f"v1.{minor}.{patch}"

