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

Every tag resolves to a digest (:meth:`Registry.resolve`), the one the kubelet reports in
``imageID`` as containerd's repo digest, ``<repository>@sha256:<hex>`` (containerd
pkg/cri/server/helpers.go ``getRepoDigestAndTag``, v1.7.27). A tag pushed again gets a new
digest; the old one still pulls by digest (a registry keeps an untagged manifest until it is
garbage-collected). A reference naming a digest (``repo@sha256:…``, or ``repo:tag@sha256:…``,
whose tag containerd drops: distribution/reference ``ParseDockerRef``) pulls exactly that
digest, and fails ``not found`` when the repository has no such digest. What an image does
(:func:`kubesim.podstatus.behaviour`) follows the tag its digest was pushed as
(:meth:`Registry.content`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

from kubesim.podstatus import first_digest, image_ref

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

_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


def _host(image: str) -> str:
    first = image.split("/", 1)[0]
    return first if "/" in image and ("." in first or ":" in first or first == "localhost") else "docker.io"


def _repository(ref: str) -> str:
    return ref.rsplit(":", 1)[0]


def _reference(image: str) -> tuple[str, str, str]:
    """``(repository, tagged ref, digest)`` of an image reference; the digest '' when it names none."""
    name, _, digest = image.strip().partition("@")
    ref = image_ref(name)
    return _repository(ref), ref, digest


class Registry:
    """The images a simulated cluster's nodes can pull: the released ones plus those pushed,
    each tag resolving to its current digest."""

    def __init__(self, pushed: Iterable[str] = ()) -> None:
        self._pushed: set[str] = set()
        self._tags: dict[str, str] = {}
        """Tagged ref -> its digest, for the tags pushed (a released tag not pushed again: its first digest)."""
        self._contents: dict[str, str] = {}
        """``repository@digest`` -> the tagged ref it was pushed as (what its bytes do)."""
        for image in pushed:
            self.push(image)

    def push(self, image: str) -> str:
        """Add ``image`` (a tagged reference, ``repo:tag``) as a test's ``docker push`` would;
        returns its fully qualified name. ``repo:tag@sha256:<hex>`` pushes a copy of published bytes:
        the digest is theirs (a digest is its content's hash: a mirror holds the upstream's). A tag that exists already is pushed again: it gets a new
        digest (the old digest still pulls by digest). A reference that is not one raises ValueError."""
        text, _, given = str(image).strip().partition("@")
        if not _REFERENCE.match(text) or (given and not _DIGEST.match(given)):
            raise ValueError(f"{image!r} is not a tagged image reference (repository:tag[@sha256:<64 hex>])")
        ref = image_ref(text)
        if given:  # a copy of published bytes (a mirror's push): the digest is its content's
            digest = given
        elif self._exists(ref):
            pushes = sum(1 for content in self._contents.values() if content == ref)
            digest = "sha256:" + hashlib.sha256(f"{ref}\n{pushes + (ref in _RELEASED_REFS)}".encode()).hexdigest()
        else:
            digest = first_digest(ref)
        self._pushed.add(ref)
        self._tags[ref] = digest
        self._contents[f"{_repository(ref)}@{digest}"] = ref
        return ref

    @property
    def pushed(self) -> list[str]:
        return sorted(self._pushed)

    def digests(self) -> dict[str, str]:
        """Each pushed tag's current digest."""
        return {ref: self._tags[ref] for ref in sorted(self._pushed)}

    def _exists(self, ref: str) -> bool:
        return ref in _RELEASED_REFS or ref in self._pushed

    def _tag_digest(self, ref: str) -> str | None:
        if ref in self._tags:
            return self._tags[ref]
        return first_digest(ref) if ref in _RELEASED_REFS else None

    def content(self, image: str) -> str:
        """The tagged reference whose bytes ``image`` pulls: for a digest, the tag it was pushed
        as (what it does follows that tag); a tag, or a digest kubesim does not hold: ``image``."""
        repo, _, digest = _reference(image)
        if not digest:
            return image
        known = self._contents.get(f"{repo}@{digest}")
        if known is not None:
            return known
        released = next((f"{repo}:{tag}" for tag in RELEASED.get(repo, ()) if first_digest(f"{repo}:{tag}") == digest), None)
        return released or image

    def resolve(self, image: str) -> str | None:
        """The digest (``sha256:<hex>``) ``image`` pulls now: its tag's current digest, or the digest
        it names when the repository holds it; None when the registry has no such image."""
        repo, ref, digest = _reference(image)
        if not digest:
            return self._tag_digest(ref)
        if f"{repo}@{digest}" in self._contents or self.content(image) != image:
            return digest
        return None

    def image_id(self, image: str) -> str:
        """``<repository>@sha256:<hex>`` as containerd reports the image a container runs (``imageID``);
        '' when the image does not pull."""
        digest = self.resolve(image)
        return f"{_reference(image)[0]}@{digest}" if digest else ""

    def has(self, image: str) -> bool:
        """Whether the image exists: a tag released or pushed, a digest the repository holds."""
        return self.resolve(image) is not None

    def pull_error(self, image: str) -> str | None:
        """Why the runtime cannot pull ``image``, as containerd says it, else None (a reference
        with a digest is named by it alone: containerd's ``ParseDockerRef`` drops the tag)."""
        repo, ref, digest = _reference(image)
        host = _host(image)
        if host.endswith(".invalid"):
            path, tag = ref.split("/", 1)[1].rsplit(":", 1)
            name = f"{repo}@{digest}" if digest else ref
            return (f'rpc error: code = Unknown desc = failed to pull and unpack image "{name}": failed to resolve '
                    f'reference "{name}": failed to do request: Head "https://{host}/v2/{path}/manifests/'
                    f'{digest or tag}": dial tcp: lookup {host}: no such host')
        if self.has(image):
            return None
        name = f"{repo}@{digest}" if digest else ref
        return (f'rpc error: code = NotFound desc = failed to pull and unpack image "{name}": failed to resolve '
                f'reference "{name}": {name}: not found')
