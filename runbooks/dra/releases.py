"""What each Kubernetes release (1.26 to 1.36) serves of ``resource.k8s.io``, and what it broke.

Purely data, each fact with its source; ``docs/dra-releases.md`` is the same table for
people, and tests check the kinds and fields here against the API definitions each
release publishes, and the doc's table against this module. Two kinds of facts:

- :data:`RELEASES`: per release, the versions that exist (an API server serves them when
  DRA is enabled: alpha and, from 1.24's rule, new beta versions need
  ``--runtime-config``), the ones served by default, the kinds of each version (read off
  ``resource/<version>/register.go`` of k8s.io/api at ``v0.<minor>.0``), the feature gate's
  stage and default, the deprecations the API server warns about (the version's
  ``zz_generated.prerelease-lifecycle.go``), and the DRA gRPC API versions the kubelet
  calls (the ``pkg/apis/dra/<version>`` packages k8s.io/kubelet has at ``v0.<minor>.0``: the
  kubelet can speak no other; :mod:`runbooks.dra.drivers` says what that means for a driver).
- :data:`STEPS`: what one upgrade step (``1.30 -> 1.31``) requires of the objects already
  in the cluster and of the manifests that will be applied after it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

GROUP = "resource.k8s.io"
FIRST, LAST = 26, 36
"""The releases this table knows."""

_CORE = ("ResourceClaim", "ResourceClaimTemplate")
_V1ALPHA2 = frozenset({"ResourceClass", *_CORE, "PodSchedulingContext"})
_STRUCTURED = frozenset({"DeviceClass", *_CORE, "ResourceSlice"})

RN = "https://github.com/kubernetes/kubernetes/blob/master/CHANGELOG/CHANGELOG-1.{minor}.md"
PR = "https://github.com/kubernetes/kubernetes/pull/{number}"
API = "https://github.com/kubernetes/api/tree/v0.{minor}.0/resource"
KEP_4381 = "https://github.com/kubernetes/enhancements/blob/master/keps/sig-node/4381-dra-structured-parameters/README.md"
KEP_3063 = "https://github.com/kubernetes/enhancements/blob/master/keps/sig-node/3063-dynamic-resource-allocation/README.md"
BLOG_134 = "https://kubernetes.io/blog/2025/09/01/kubernetes-v1-34-dra-updates/"
TOMBSTONE = "https://github.com/kubernetes/api/blob/v0.31.0/core/v1/types.go"
KUBELET_DRA = "https://github.com/kubernetes/kubelet/tree/v0.{minor}.0/pkg/apis/dra"
LIFECYCLE = "https://github.com/kubernetes/api/blob/v0.{minor}.0/resource/{version}/zz_generated.prerelease-lifecycle.go"


@dataclass(frozen=True)
class Deprecation:
    """A version the API server warns about: ``<gv> <Kind> is deprecated in v1.D+, unavailable in v1.R+``."""

    since: int
    unavailable: int
    source: str
    kinds: frozenset[str] = frozenset()
    """The kinds it concerns; empty: every kind of the version."""

    def concerns(self, kind: str) -> bool:
        return not self.kinds or kind in self.kinds

    def warning(self, version: str, kind: str) -> str:
        return f"{GROUP}/{version} {kind} is deprecated in v1.{self.since}+, unavailable in v1.{self.unavailable}+"


@dataclass(frozen=True)
class Release:
    minor: int
    kinds: dict[str, frozenset[str]]
    """Each version that exists in the release (served when enabled), newest first, with its kinds."""
    default_served: tuple[str, ...]
    """Versions served without ``--runtime-config``."""
    gate: str
    """The ``DynamicResourceAllocation`` feature gate: stage and default."""
    gate_on: bool
    source: str
    """Where the versions and kinds come from: k8s.io/api's ``resource`` tree at ``v0.<minor>.0``."""
    kubelet_grpc: tuple[str, ...]
    """The DRA gRPC API versions the kubelet calls, preferred first (k8s.io/kubelet ``pkg/apis/dra``)."""
    default_source: str = ""
    """Where "served by default" and the gate's stage come from (blog, KEP, PR)."""
    deprecations: dict[str, Deprecation] = field(default_factory=dict)

    @property
    def kubelet_source(self) -> str:
        return KUBELET_DRA.format(minor=self.minor)

    @property
    def versions(self) -> tuple[str, ...]:
        return tuple(self.kinds)

    @property
    def preferred(self) -> str:
        """The version to write manifests in for this release."""
        return self.default_served[0] if self.default_served else self.versions[0]


def _alpha2(minor: int, extra: frozenset[str] = frozenset()) -> Release:
    grpc = ("v1alpha2",) if minor == 27 else ("v1alpha3", "v1alpha2")
    return Release(minor, {"v1alpha2": _V1ALPHA2 | extra}, (), "alpha, off by default", False, API.format(minor=minor),
                   grpc, KEP_3063)


def _lifecycle(minor: int, version: str, since: int, unavailable: int,
               kinds: frozenset[str] = frozenset()) -> Deprecation:
    return Deprecation(since, unavailable, LIFECYCLE.format(minor=minor, version=version), kinds)


_GA = ("v1", "v1beta1")
"""The kubelet's DRA gRPC APIs from 1.34: ``v1`` and ``v1beta1`` (``v1alpha4`` is gone)."""
_TAINTS = frozenset({"DeviceTaintRule"})

RELEASES: dict[int, Release] = {
    26: Release(26, {"v1alpha1": frozenset({"ResourceClass", *_CORE, "PodScheduling"})}, (),
                "alpha, off by default", False, API.format(minor=26), ("v1alpha1",), KEP_3063),
    27: _alpha2(27), 28: _alpha2(28), 29: _alpha2(29),
    30: _alpha2(30, frozenset({"ResourceSlice", "ResourceClaimParameters", "ResourceClassParameters"})),
    31: Release(31, {"v1alpha3": _STRUCTURED | {"PodSchedulingContext"}}, (), "alpha, off by default", False,
                API.format(minor=31), ("v1alpha4",), KEP_4381),
    32: Release(32, {"v1beta1": _STRUCTURED, "v1alpha3": _STRUCTURED}, (), "beta, off by default", False,
                API.format(minor=32), ("v1beta1", "v1alpha4"), KEP_4381),
    33: Release(33, {"v1beta2": _STRUCTURED, "v1beta1": _STRUCTURED,
                     "v1alpha3": _STRUCTURED | _TAINTS}, (), "beta, off by default", False,
                API.format(minor=33), ("v1beta1", "v1alpha4"), KEP_4381),
    34: Release(34, {"v1": _STRUCTURED, "v1beta2": _STRUCTURED, "v1beta1": _STRUCTURED,
                     "v1alpha3": _TAINTS}, ("v1",), "GA, on by default", True, API.format(minor=34), _GA,
                BLOG_134),
    35: Release(35, {"v1": _STRUCTURED, "v1beta2": _STRUCTURED, "v1beta1": _STRUCTURED,
                     "v1alpha3": _TAINTS}, ("v1",), "GA, locked on", True, API.format(minor=35), _GA,
                PR.format(number=134452), deprecations={"v1beta1": _lifecycle(35, "v1beta1", 35, 38)}),
    36: Release(36, {"v1": _STRUCTURED, "v1beta2": _STRUCTURED | _TAINTS, "v1beta1": _STRUCTURED,
                     "v1alpha3": _TAINTS | {"ResourcePoolStatusRequest"}}, ("v1",), "GA, locked on", True,
                API.format(minor=36), _GA, PR.format(number=134452),
                deprecations={"v1beta1": _lifecycle(36, "v1beta1", 35, 38),
                              "v1beta2": _lifecycle(36, "v1beta2", 36, 39, _STRUCTURED),
                              "v1alpha3": _lifecycle(36, "v1alpha3", 36, 39, _TAINTS)}),
}


# ------------------------------------------------------------------------ steps
@dataclass(frozen=True)
class StepRule:
    """What upgrading to ``minor`` requires. ``kinds``: the cluster objects of these kinds
    (``*`` every DRA kind) must go first; ``field``: objects using this field break."""

    minor: int
    code: str
    problem: str
    fix: str
    source: str
    kinds: frozenset[str] = frozenset()
    field: str = ""
    stored_before: int = 0
    """When set, only a cluster running a release older than this one has such objects."""


STEPS: tuple[StepRule, ...] = (
    StepRule(27, "v1alpha1-removed", "resource.k8s.io/v1alpha1 is replaced by v1alpha2 in 1.27; objects stored as "
             "v1alpha1 are not converted", "delete every v1alpha1 DRA object before upgrading, then recreate it as "
             "v1alpha2 (PodScheduling is now PodSchedulingContext)", PR.format(number=116299), kinds=frozenset({"*"})),
    StepRule(31, "v1alpha2-removed", "resource.k8s.io/v1alpha2 is removed in 1.31 and the new v1alpha3 is not "
             "compatible with it: objects stored as v1alpha2 are not converted",
             "delete them before upgrading and recreate them as v1alpha3 after it (a DeviceClass with a CEL "
             "selector for the driver instead of a ResourceClass; claims name their device class per request)",
             PR.format(number=125488), kinds=frozenset({"*"})),
    StepRule(31, "pod-claim-source", "spec.resourceClaims[].source is removed in 1.31 (tombstoned)",
             "name the claim directly: resourceClaims[].resourceClaimName or .resourceClaimTemplateName",
             TOMBSTONE, field="source"),
    StepRule(32, "classic-dra-removed", "classic DRA (a control-plane controller allocating claims, "
             "PodSchedulingContext) is removed in 1.32; PodSchedulingContext objects left behind cannot be deleted "
             "through the API server afterwards", "delete the workloads using classic DRA and every "
             "PodSchedulingContext before upgrading; use structured parameters (a DRA driver publishing "
             "ResourceSlices)", PR.format(number=128003), kinds=frozenset({"PodSchedulingContext"})),
    StepRule(32, "claim-controller", "ResourceClaim spec.controller (classic DRA) is removed in 1.32",
             "recreate the claim without spec.controller, allocated from ResourceSlices",
             PR.format(number=128003), field="controller"),
    StepRule(34, "pre-1.32-storage", "1.34 no longer reads DRA objects stored by Kubernetes older than 1.32 "
             "(v1alpha3 keeps only DeviceTaintRule), and this cluster runs an older release",
             "after the upgrade to 1.32 or 1.33, rewrite every DRA object (or delete and recreate it) before "
             "going on to 1.34", PR.format(number=132000), kinds=frozenset({"*"}), stored_before=32),
)


@dataclass(frozen=True)
class Note:
    """A fact about a release that concerns the whole cluster, not one object."""

    minor: int
    text: str
    source: str


NOTES: tuple[Note, ...] = (
    Note(27, "the kubelet's DRA gRPC API v1alpha1 is replaced by v1alpha2: drivers built on "
         "k8s.io/dynamic-resource-allocation 0.26 stop working", KUBELET_DRA.format(minor=27)),
    Note(31, "the kubelet calls only the v1alpha4 DRA gRPC API (k8s.io/kubelet v0.31.0 has no v1alpha2 nor v1alpha3): "
         "drivers built on k8s.io/dynamic-resource-allocation 0.30 or older (v1alpha3, v1alpha2) stop working: v1alpha4 "
         "keeps v1alpha3's service name with other messages, so v1alpha3 drivers register but prepare no claim",
         KUBELET_DRA.format(minor=31)),
    Note(31, "a DRA driver's service account needs RBAC to write ResourceSlices", RN.format(minor=31)),
    Note(32, "the kubelet reads a driver's list of gRPC services (v1beta1.DRAPlugin; v1alpha3.NodeService for "
         "v1alpha4) at "
         "registration; drivers built on k8s.io/dynamic-resource-allocation 0.32 or newer list them, which kubelets "
         "older than 1.32 refuse: upgrade the kubelets before such a driver", KUBELET_DRA.format(minor=32)),
    Note(32, "the storage version becomes v1beta1: downgrading to 1.31 with DRA objects is not supported",
         PR.format(number=127511)),
    Note(32, "DRA is beta but still off by default: enable the DynamicResourceAllocation gate on every component "
         "and resource.k8s.io/v1beta1 in the API server's --runtime-config", KEP_4381),
    Note(33, "resource.k8s.io/v1beta2 is added (requests move under exactly/firstAvailable; devices lose the "
         "basic wrapper) and, like v1beta1, must be enabled in --runtime-config", API.format(minor=33)),
    Note(34, "resource.k8s.io/v1 is GA and DRA is on by default; v1beta1 and v1beta2 are served only when "
         "enabled in --runtime-config", BLOG_134),
    Note(34, "DRA objects stored by Kubernetes older than 1.32 and not written since cannot be read: a cluster "
         "upgraded from 1.31 must have rewritten (or recreated) them", PR.format(number=132000)),
    Note(34, "the kubelet accepts only drivers listing the v1.DRAPlugin or v1beta1.DRAPlugin gRPC service "
         "(k8s.io/kubelet v0.34.0 has no v1alpha4): drivers built on k8s.io/dynamic-resource-allocation 0.31 "
         "(v1alpha4, registered as version 1.0.0) stop registering", KUBELET_DRA.format(minor=34)),
    Note(34, "the admin-access namespace label becomes resource.kubernetes.io/admin-access; set both labels "
         "before upgrading", PR.format(number=131996)),
    Note(35, "the DynamicResourceAllocation gate is locked on: remove DynamicResourceAllocation=false from every "
         "component's flags", PR.format(number=134452)),
    Note(35, "the storage version becomes v1: downgrading to 1.33 with DRA objects is not supported",
         PR.format(number=133876)),
    Note(36, "resource.k8s.io/v1beta2 is deprecated (the API server warns: unavailable in 1.39) and DeviceTaintRule "
         "is served in v1beta2 too, its v1alpha3 deprecated; v1alpha3 adds ResourcePoolStatusRequest",
         LIFECYCLE.format(minor=36, version="v1beta2")),
)


def release(minor: int) -> Release | None:
    return RELEASES.get(minor)


def removed_in(kind: str, upto: int) -> Release | None:
    """The first release up to 1.``upto`` that serves ``kind`` in no version, after one that did."""
    served_before = False
    for minor in range(FIRST, min(upto, LAST) + 1):
        has = any(kind in kinds for kinds in RELEASES[minor].kinds.values())
        if served_before and not has:
            return RELEASES[minor]
        served_before = served_before or has
    return None


def steps_between(current: int, target: int) -> list[int]:
    """The releases an upgrade passes through: the control plane goes one minor at a time."""
    return list(range(current + 1, target + 1))
