"""The image registry kubesim's kubelets pull from: only images that exist are pulled.

An image exists when it is a released tag of a repository kubesim knows (:data:`RELEASED`, each
read from its upstream repository, cited beside it and in ``docs/kubesim.md``), or when it was
pushed: by a test (``KubeSim(pushed=[...])``, :meth:`kubesim.running.KubeSim.push`, ``POST
/sim/v1/registry``) or by a scenario for its own workloads. kubesim's fault images
(``…:v0.17.0-crash``, ``-silent``, ``-slow``, ``-xid``, ``-noalloc``, ``-crash-on-<word>``: see
:func:`kubesim.podstatus.behaviour`) are builds of the bot's own tests, never NVIDIA's: they
exist only once a test pushes them.

Anything else fails as containerd fails it (:meth:`Registry.pull_error`): a registry host
under ``.invalid`` (RFC 2606 keeps it unresolvable) with ``no such host``; any other reference
with ``NotFound … : not found``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from kubesim.podstatus import image_ref

_K8S_PATCHES = ("v1.27.16", "v1.28.15", "v1.29.14", "v1.30.14", "v1.31.13", "v1.32.9", "v1.33.5", "v1.34.2")
"""The patch releases kubesim serves (:func:`kubesim.resources.git_version`)."""


def _with_variants(releases: dict[tuple[str, ...], tuple[str, ...]]) -> tuple[str, ...]:
    return tuple(version + suffix for versions, suffixes in releases.items() for version in versions
                 for suffix in suffixes)


RELEASED: dict[str, tuple[str, ...]] = {
    # NVIDIA/k8s-device-plugin, deployments/container/Makefile at each tag: the image is pushed
    # as $(VERSION)-$(DIST) for each of DISTRIBUTIONS and, for DEFAULT_PUSH_TARGET, as the short
    # tag $(VERSION) (push-short); from v0.18.0 IMAGE_TAG is $(VERSION) alone. REGISTRY is
    # nvcr.io/nvidia (versions.mk). Release tags v0.14.0 … v0.20.0 (git tags, no -rc).
    "nvcr.io/nvidia/k8s-device-plugin": _with_variants({
        ("v0.14.0", "v0.14.1", "v0.14.2", "v0.14.3", "v0.14.4", "v0.14.5"): ("", "-ubuntu20.04", "-ubi8"),
        ("v0.15.0", "v0.15.1", "v0.16.0", "v0.16.1", "v0.16.2"): ("", "-ubuntu22.04", "-ubi8"),
        ("v0.17.0", "v0.17.1", "v0.17.2", "v0.17.3", "v0.17.4"): ("", "-ubi9"),
        ("v0.18.0", "v0.18.1", "v0.18.2", "v0.19.0", "v0.19.1", "v0.19.2", "v0.19.3", "v0.20.0"): ("",),
    }),
    # kubernetes-sigs/dra-example-driver, RELEASE.md: a `v`-prefixed git tag releases the
    # container images, pushed to registry.k8s.io/dra-example-driver/dra-example-driver (the
    # chart's values.yaml `image.repository`, its tag the chart's appVersion).
    "registry.k8s.io/dra-example-driver/dra-example-driver": ("v0.1.0", "v0.2.0", "v0.2.1", "v0.3.0", "v0.4.0"),
    # NVIDIA/k8s-dra-driver-gpu, versions.mk (REGISTRY nvcr.io/nvidia, DRIVER_NAME
    # k8s-dra-driver-gpu) and deployments/container/Makefile: v25.3.x push $(VERSION)-ubi9 and
    # the short $(VERSION); from v25.8.0 IMAGE_TAG is $(VERSION) alone.
    "nvcr.io/nvidia/k8s-dra-driver-gpu": _with_variants({
        ("v25.3.0", "v25.3.1", "v25.3.2"): ("", "-ubi9"),
        ("v25.8.0", "v25.8.1", "v25.12.0"): ("",),
    }),
    # NVIDIA/k8s-dra-driver-gpu v0.4.0: versions.mk REGISTRY registry.k8s.io/dra-driver-nvidia,
    # DRIVER_NAME dra-driver-nvidia-gpu, the VERSION file v0.4.0.
    "registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu": ("v0.4.0",),
    # NVIDIA/gpu-operator: the operator's image, which from v25.10.0 is also its validator's
    # (deployments/gpu-operator/values.yaml `validator: repository nvcr.io/nvidia, image
    # gpu-operator`, the version the chart's appVersion), the one the device plugin's and GFD's
    # `toolkit-validation` init containers run; Makefile IMAGE_TAG $(VERSION) (versions.mk).
    "nvcr.io/nvidia/gpu-operator": ("v25.10.0", "v25.10.1", "v26.3.0", "v26.3.1", "v26.3.2", "v26.3.3", "v26.7.0"),
    # The CUDA sample the device plugin's README runs (README.md `gpu-pod`: vectoradd-cuda10.2
    # at v0.14.0 … v0.16.x, vectoradd-cuda12.5.0 from v0.17.0) and the GPU operator's
    # tests/gpu-pod.yaml (v26.7.0: vectoradd-cuda12.5.0-ubuntu22.04); the bot's smoke test
    # default (docs/policy.md) is vectoradd-cuda12.5.0.
    "nvcr.io/nvidia/k8s/cuda-sample": ("vectoradd-cuda10.2", "vectoradd-cuda12.5.0", "vectoradd-cuda12.5.0-ubuntu22.04"),
    # kube-proxy of each Kubernetes release kubesim serves (gpu-large's kube-proxy DaemonSet):
    # kubernetes/kubernetes publishes registry.k8s.io/kube-proxy:<release> with every release.
    "registry.k8s.io/kube-proxy": _K8S_PATCHES,
    # prometheus/node_exporter release tags v1.0.0 … v1.12.1 (git tags), published to
    # quay.io/prometheus/node-exporter (its README's `docker run`; gpu-large runs v1.8.1).
    "quay.io/prometheus/node-exporter": (
        "v1.0.0", "v1.0.1", "v1.1.0", "v1.1.1", "v1.1.2", "v1.2.0", "v1.2.1", "v1.2.2", "v1.3.0", "v1.3.1",
        "v1.4.0", "v1.4.1", "v1.5.0", "v1.6.0", "v1.6.1", "v1.7.0", "v1.8.0", "v1.8.1", "v1.8.2", "v1.9.0",
        "v1.9.1", "v1.10.0", "v1.10.1", "v1.10.2", "v1.11.0", "v1.11.1", "v1.12.0", "v1.12.1"),
}
"""Repository -> its released tags: the images that exist before anything is pushed."""

_RELEASED_REFS = frozenset(f"{repo}:{tag}" for repo, tags in RELEASED.items() for tag in tags)

_REFERENCE = re.compile(
    r"^(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::[0-9]+)?/)?"
    r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
    r":[\w][\w.-]{0,127}$")
"""A tagged image reference as the distribution reference grammar spells it (no digest)."""


def _host(image: str) -> str:
    first = image.split("/", 1)[0]
    return first if "/" in image and ("." in first or ":" in first or first == "localhost") else "docker.io"


class Registry:
    """The images a simulated cluster's nodes can pull: the released ones plus those pushed."""

    def __init__(self, pushed: Iterable[str] = ()) -> None:
        self._pushed: set[str] = set()
        for image in pushed:
            self.push(image)

    def push(self, image: str) -> str:
        """Add ``image`` (a tagged reference, ``repo:tag``) as a test's ``docker push`` would;
        returns its fully qualified name. A reference that is not one raises ValueError."""
        text = str(image).strip()
        if not _REFERENCE.match(text):
            raise ValueError(f"{image!r} is not a tagged image reference (repository:tag)")
        ref = image_ref(text)
        self._pushed.add(ref)
        return ref

    @property
    def pushed(self) -> list[str]:
        return sorted(self._pushed)

    def has(self, image: str) -> bool:
        """Whether the image exists (by tag; a digest reference ``…@sha256:`` is judged by its
        repository and tag when it has one, and exists when its repository is known)."""
        name, _, digest = image.partition("@")
        ref = image_ref(name)
        if ref in _RELEASED_REFS or ref in self._pushed:
            return True
        if digest and ":" not in name.rsplit("/", 1)[-1]:
            repo = ref.rsplit(":", 1)[0]
            return repo in RELEASED or any(p.rsplit(":", 1)[0] == repo for p in self._pushed)
        return False

    def pull_error(self, image: str) -> str | None:
        """Why the runtime cannot pull ``image``, as containerd says it, else None."""
        ref = image_ref(image)
        host = _host(image)
        if host.endswith(".invalid"):
            repo, tag = ref.split("/", 1)[1].rsplit(":", 1)
            return (f'rpc error: code = Unknown desc = failed to pull and unpack image "{ref}": failed to resolve '
                    f'reference "{ref}": failed to do request: Head "https://{host}/v2/{repo}/manifests/{tag}": '
                    f"dial tcp: lookup {host}: no such host")
        if self.has(image):
            return None
        return (f'rpc error: code = NotFound desc = failed to pull and unpack image "{ref}": failed to resolve '
                f'reference "{ref}": {ref}: not found')
