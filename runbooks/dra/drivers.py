"""DRA driver releases and the kubelet: which gRPC API each release serves, and whether a kubelet takes it.

Purely data and pure functions, each fact with its source (``docs/dra-releases.md`` has the
same tables for people; a test checks them against this module):

- :data:`LIBRARIES`: what a driver built on ``k8s.io/dynamic-resource-allocation`` 0.<minor>
  serves, read off ``kubeletplugin/draplugin.go`` at ``v0.<minor>.0``: the DRA gRPC API
  versions it registers (by default), whether it lists them to the kubelet as gRPC services
  (``v1beta1.DRAPlugin``, ``v1alpha3.NodeService`` for v1alpha4; from 0.32, except a 0.32
  driver serving ``v1alpha4`` only) or
  registers as version ``1.0.0`` (0.26 to 0.31), and the ``resource.k8s.io`` versions it
  reads and writes (0.34 on: ``client/client.go`` falls back from v1 to v1beta2 to v1beta1).
- :data:`KUBELETS`: how the kubelet of each release (:data:`runbooks.dra.releases.RELEASES`
  says which gRPC versions it calls) takes a driver: until 1.31 it reads the registration's
  versions as ``1.x`` semver (a service name such as ``v1beta1.DRAPlugin`` is no version:
  registration fails); 1.32 and 1.33 read them as services, taking ``v1alpha4`` for a driver
  that lists none; from 1.34 a driver listing neither ``v1.DRAPlugin`` nor
  ``v1beta1.DRAPlugin`` is refused ("none of services supported by the plugin … are supported
  by the kubelet", ``pkg/kubelet/cm/dra/plugin``).
- :data:`DRIVERS`: releases of the DRA example driver and NVIDIA's DRA driver, each with the
  library its ``go.mod`` requires at the tag and its Helm chart's ``kubeVersion``. Up to 0.32
  the library registers the gRPC APIs whose server the driver implements (the example
  driver v0.1.0: ``v1beta1`` alone); from 0.33 it serves each itself.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from runbooks.dra import releases
from runbooks.image_names import ImageName, parse

LIB = "https://github.com/kubernetes/dynamic-resource-allocation/blob/v0.{minor}.0/kubeletplugin/draplugin.go"
KUBELET_CODE = "https://github.com/kubernetes/kubernetes/tree/v1.{minor}.0/pkg/kubelet/cm/dra/plugin"
DRA_EXAMPLE = "registry.k8s.io/dra-example-driver/dra-example-driver"
NVIDIA_DRA = "nvcr.io/nvidia/k8s-dra-driver-gpu"
_EXAMPLE = "https://github.com/kubernetes-sigs/dra-example-driver/blob/{tag}/{path}"
_NVIDIA = "https://github.com/NVIDIA/k8s-dra-driver-gpu/blob/{tag}/{path}"
_EXAMPLE_CHART = "deployments/helm/dra-example-driver/Chart.yaml"
_NVIDIA_CHART = "deployments/helm/nvidia-dra-driver-gpu/Chart.yaml"


@dataclass(frozen=True)
class Library:
    """A driver built on k8s.io/dynamic-resource-allocation 0.<minor>, with its default options."""

    minor: int
    grpc: tuple[str, ...]
    """The DRA gRPC API versions it serves, newest first."""
    services: bool
    """Lists them at registration as gRPC services; else registers as version ``1.0.0``."""
    resource_api: tuple[str, ...]
    """The resource.k8s.io versions it uses, the first one served wins."""

    @property
    def source(self) -> str:
        return LIB.format(minor=self.minor)

    @property
    def name(self) -> str:
        return f"k8s.io/dynamic-resource-allocation 0.{self.minor}"


_ALPHA_LIBS = {26: ("v1alpha1",), 27: ("v1alpha2",), 28: ("v1alpha3", "v1alpha2"), 29: ("v1alpha3", "v1alpha2"),
               30: ("v1alpha3", "v1alpha2"), 31: ("v1alpha4",)}
LIBRARIES: dict[int, Library] = {
    **{m: Library(m, grpc, False, ("v1alpha1",) if m == 26 else ("v1alpha3",) if m == 31 else ("v1alpha2",))
       for m, grpc in _ALPHA_LIBS.items()},
    32: Library(32, ("v1beta1", "v1alpha4"), True, ("v1beta1",)),
    33: Library(33, ("v1beta1",), True, ("v1beta1",)),
    **{m: Library(m, ("v1", "v1beta1"), True, ("v1", "v1beta2", "v1beta1")) for m in (34, 35, 36)},
}


@dataclass(frozen=True)
class Kubelet:
    minor: int
    calls: tuple[str, ...]
    """The gRPC API versions it calls, preferred first (a later one when the first is Unimplemented)."""
    reads_services: bool
    """Reads the registration's versions as gRPC service names (1.32 on); before, as ``1.x`` semver."""
    unlisted: tuple[str, ...]
    """What it calls for a driver that lists no service (registered as ``1.0.0``); empty: refused."""

    @property
    def source(self) -> str:
        return releases.KUBELET_DRA.format(minor=self.minor)


def _kubelet(minor: int) -> Kubelet:
    calls = releases.RELEASES[minor].kubelet_grpc
    if minor <= 31:
        return Kubelet(minor, calls, False, calls)
    return Kubelet(minor, calls, True, ("v1alpha4",) if "v1alpha4" in calls else ())


KUBELETS: dict[int, Kubelet] = {m: _kubelet(m) for m in releases.RELEASES}


@dataclass(frozen=True)
class Outcome:
    works: bool
    why: str
    """Why not (empty when it works), a clause: "the 1.34 kubelet …"."""


LISTED = {"v1": "v1.DRAPlugin", "v1beta1": "v1beta1.DRAPlugin", "v1alpha4": "v1alpha3.NodeService"}
"""How a driver lists each gRPC API at registration (``DRAPluginService``/``NodeService`` in
k8s.io/kubelet's ``pkg/apis/dra/<version>/types.go``: v1alpha4's is ``v1alpha3.NodeService``)."""
WIRE = {"v1alpha1": "v1alpha1.Node", "v1alpha2": "v1alpha2.Node", "v1alpha3": "v1alpha3.Node",
        "v1alpha4": "v1alpha3.Node", "v1beta1": "k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin",
        "v1": "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin"}
"""The gRPC service each API's ``api.proto`` declares: v1alpha4 kept v1alpha3's package name, with
other messages (no resource handle in the request, devices instead of CDI device names in the answer)."""


def _listed(grpc: tuple[str, ...], joint: str = ", ") -> str:
    return joint.join(LISTED.get(v, v) for v in grpc)


def with_kubelet(library: Library, minor: int) -> Outcome:
    """Does the kubelet of 1.<minor> register a driver built on ``library`` and call an API it serves?"""
    kubelet = KUBELETS[minor]
    if library.services and not kubelet.reads_services:
        return Outcome(False, f"the 1.{minor} kubelet reads the versions a driver registers as 1.x semver, and "
                              f"{library.name} registers gRPC service names ({_listed(library.grpc)}): "
                              "registration fails")
    if library.services:
        common = [v for v in kubelet.calls if v in library.grpc]
        if common or set(kubelet.unlisted) & set(library.grpc):
            return Outcome(True, "")
        return Outcome(False, f"the 1.{minor} kubelet takes {_listed(kubelet.calls, ' or ')} and {library.name} lists "
                              f"{_listed(library.grpc)}: registration fails")
    if not kubelet.unlisted:
        return Outcome(False, f"the 1.{minor} kubelet accepts only drivers listing {_listed(kubelet.calls, ' or ')}, and "
                              f"{library.name} serves {', '.join(library.grpc)} registered as version 1.0.0, "
                              "listing none: it stops registering")
    if set(kubelet.unlisted) & set(library.grpc):
        return Outcome(True, "")
    same = [v for v in library.grpc if WIRE[v] in {WIRE[c] for c in kubelet.unlisted}]
    if same:
        return Outcome(False, f"the 1.{minor} kubelet calls the DRA gRPC API {' or '.join(kubelet.unlisted)} and "
                              f"{library.name} serves {', '.join(library.grpc)}: both are the gRPC service "
                              f"{WIRE[same[0]]}, with other messages (v1alpha4 has no resource handle in the request "
                              "and devices instead of CDI device names in the answer): it registers, but it cannot "
                              "prepare a claim")
    return Outcome(False, f"the 1.{minor} kubelet calls the DRA gRPC API {' or '.join(kubelet.unlisted)} and "
                          f"{library.name} serves {', '.join(library.grpc)}: it registers, but every "
                          "NodePrepareResources call fails (Unimplemented)")


def resource_api_at(library: Library, minor: int) -> tuple[str | None, bool]:
    """The resource.k8s.io version the driver uses on 1.<minor> (None: it exists in none), and
    whether that version is served by default there."""
    release = releases.RELEASES[minor]
    used = next((v for v in library.resource_api if v in release.kinds), None)
    return used, used is not None and (not release.default_served or used in release.default_served)


@dataclass(frozen=True)
class DriverRelease:
    component: str
    repository: str
    tag: str
    library: int
    kube_min: int | None
    kube_max: int | None
    """The Helm chart's ``kubeVersion`` at the tag, as minors (None: unsaid)."""
    kube_version: str
    """The chart's ``kubeVersion`` as written ("" when the chart has none)."""
    source: str
    """``go.mod`` at the tag (the library it requires)."""
    chart_source: str
    grpc: tuple[str, ...] = ()
    """What it serves when the driver, not the library, decides (0.32 registers the gRPC APIs whose
    server interface the driver implements); empty: the library's."""

    @property
    def name(self) -> str:
        return f"{self.component} {self.tag}"

    @property
    def built_on(self) -> Library:
        library = LIBRARIES[self.library]
        return replace(library, grpc=self.grpc) if self.grpc else library

    @property
    def image(self) -> str:
        return f"{self.repository}:{self.tag}"


def _example(tag: str, library: int, kube_min: int, kube_max: int | None, kube_version: str,
             grpc: tuple[str, ...] = ()) -> DriverRelease:
    return DriverRelease("DRA example driver", DRA_EXAMPLE, tag, library, kube_min, kube_max, kube_version,
                         _EXAMPLE.format(tag=tag, path="go.mod"), _EXAMPLE.format(tag=tag, path=_EXAMPLE_CHART), grpc)


def _nvidia(tag: str, kube_min: int | None) -> DriverRelease:
    # v25.3.0 and v25.3.1 replace the k8s.io modules with kubernetes' staging at 032142c53e54
    # (2025-07-30), whose vendored kubeletplugin serves v1 and v1beta1 as 0.34 does.
    return DriverRelease("NVIDIA DRA driver", NVIDIA_DRA, tag, 34, kube_min, None,
                         f">=1.{kube_min}.0-0" if kube_min else "",
                         _NVIDIA.format(tag=tag, path="go.mod"), _NVIDIA.format(tag=tag, path=_NVIDIA_CHART))


DRIVERS: tuple[DriverRelease, ...] = (
    # v0.1.0 implements the v1beta1 server only (cmd/dra-example-kubeletplugin/driver.go imports
    # k8s.io/kubelet/pkg/apis/dra/v1beta1), so the 0.32 library registers and lists v1beta1 alone
    _example("v0.1.0", 32, 32, 32, "1.32.x", ("v1beta1",)),
    _example("v0.2.0", 34, 32, None, ">=1.32.0-0"),
    _example("v0.2.1", 34, 32, None, ">=1.32.0-0"),
    _example("v0.3.0", 36, 33, None, ">=1.33.0-0"),
    _example("v0.4.0", 36, 33, None, ">=1.33.0-0"),
    _nvidia("v25.3.0", None),
    *(_nvidia(tag, 32) for tag in ("v25.3.1", "v25.3.2", "v25.8.0", "v25.8.1", "v25.12.0")),
)
REPOSITORIES = {d.repository: d.component for d in DRIVERS}


def image_name(image: str) -> ImageName | None:
    try:
        return parse(image)
    except ValueError:
        return None


def release_of(image: str) -> DriverRelease | None:
    name = image_name(image)
    if name is None:
        return None
    return next((d for d in DRIVERS if d.repository == name.repository and d.tag == name.tag), None)


def newest(repository: str) -> DriverRelease:
    """The newest known release of a driver's repository (rows are oldest first)."""
    return [d for d in DRIVERS if d.repository == repository][-1]


def working_libraries(minor: int) -> list[Library]:
    """The libraries a driver working with the 1.<minor> kubelet can be built on."""
    return [lib for lib in LIBRARIES.values() if with_kubelet(lib, minor).works]
