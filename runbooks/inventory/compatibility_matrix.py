"""The compatibility matrix, as data: what each plugin release says it needs.

One row per release line (``v0.17.x``) of the NVIDIA device plugin and of the DRA example
driver, as their own documentation states it at the release's tag; :mod:`.compatibility`
loads and validates the rows (pydantic) and checks a request against them. A field the
source leaves unsaid stays ``None`` (open), and the row's ``note`` says so: no number here
is guessed.

- NVIDIA device plugin, README "Prerequisites" at the newest tag of each line (``v0.14.5``,
  ``v0.15.1``, ``v0.16.2``, ``v0.17.4``, ``v0.18.2``, ``v0.19.3``, ``v0.20.0``), the same four
  lines at every tag (quoted in ``prerequisites``): "NVIDIA drivers ~= 384.81", "nvidia-docker
  >= 2.0 || nvidia-container-toolkit >= 1.7.0 (>= 1.11.0 to use integrated GPUs on Tegra-based
  systems)", "nvidia-container-runtime configured as the default low-level runtime",
  "Kubernetes version >= 1.10". No newest Kubernetes is stated. Its "Preparing your GPU
  Nodes" section documents ``docker`` and ``containerd`` up to v0.14.x, and ``CRI-O`` too from
  v0.15.0 ("Notes on `CRI-O` configuration"). The container toolkit and the default runtime
  are on the host, where no node object reports them: ``unchecked`` names them, and the check
  says so instead of passing them.
- Its CHANGELOG.md (first in the repository at v0.15.0, which also holds the v0.14.x notes)
  at the same tag: ``changelog`` quotes, with the version heading each stands under, the notes
  that touch what a node needs (runtime, base image, Kubernetes, toolkit). Its "Bump NVIDIA
  Container Toolkit" notes are the Go module the plugin is built with (``go.mod``
  ``github.com/NVIDIA/nvidia-container-toolkit``, for CDI), not a host floor: the README's
  ``>= 1.7.0`` stands.
- DRA example driver: README "Prerequisites" (``v0.1.0`` .. ``v0.4.0``) lists the demo's
  tools only (kind, helm, kubectl >= 1.18); it states no Kubernetes range and needs no
  NVIDIA driver (its devices are simulated). Its demo cluster (``demo/scripts/common.sh``,
  ``KIND_K8S_TAG``) runs v1.32.0 at v0.1.0, v1.34.0 at v0.2.x, v1.36.0 at v0.3.0 and v1.36.1
  at v0.4.0: what it was tried on, not a stated range, so the rows leave the range open.

Distribution suffixes (``variants``): the device plugin's ``deployments/container/Makefile`` at
each cited tag builds ``IMAGE_TAG ?= $(IMAGE_VERSION)-$(DIST)`` for each of its
``DISTRIBUTIONS`` and copies the default one to the bare version (``push-short``):
``ubuntu20.04`` (default) and ``ubi8`` at v0.14.5; ``ubuntu22.04`` (default) and ``ubi8`` at
v0.15.1 and v0.16.2; ``ubi9`` alone at v0.17.4; from v0.18.0 (to v0.20.0)
``IMAGE_TAG ?= $(IMAGE_VERSION)``, no suffix. ``v0.17.0-ubi9`` is therefore the release
``v0.17.0`` (:func:`runbooks.image_names.release` splits the version from the suffixes); a
suffix a line does not publish keeps the tag out of its row. No Makefile at any tag makes a
``-driver<branch>`` tag: the image carries no NVML (the host's library is injected), so
there is no build per driver to pick. The DRA example driver's rows list none.
"""

from __future__ import annotations

from typing import Any

DEVICE_PLUGIN = "nvcr.io/nvidia/k8s-device-plugin"
DRA_EXAMPLE = "registry.k8s.io/dra-example-driver/dra-example-driver"
_DP_MAKEFILE = "https://github.com/NVIDIA/k8s-device-plugin/blob/{tag}/deployments/container/Makefile"
_DP_README = "https://github.com/NVIDIA/k8s-device-plugin/blob/{tag}/README.md#prerequisites"
_DP_CHANGELOG = "https://github.com/NVIDIA/k8s-device-plugin/blob/{tag}/CHANGELOG.md"
_DP_PREREQ = ("NVIDIA drivers ~= 384.81; nvidia-docker >= 2.0 || nvidia-container-toolkit >= 1.7.0; "
              "Kubernetes version >= 1.10")
_DP_DRIVERS = "NVIDIA drivers ~= 384.81"
_DP_TOOLKIT = ("nvidia-docker >= 2.0 || nvidia-container-toolkit >= 1.7.0 "
               "(>= 1.11.0 to use integrated GPUs on Tegra-based systems)")
_DP_RUNTIME = "nvidia-container-runtime configured as the default low-level runtime"
_DP_KUBERNETES = "Kubernetes version >= 1.10"
_DRA_README = "https://github.com/kubernetes-sigs/dra-example-driver/blob/{tag}/README.md#prerequisites"


def _device_plugin(
    line: str, tag: str, *, runtimes: list[str], variants: list[str], changelog: list[str],
    changelog_tag: str = "",
) -> dict[str, Any]:
    changelog_tag = changelog_tag or tag
    return {
        "component": "NVIDIA device plugin", "release": f"{line}.x", "repositories": [DEVICE_PLUGIN],
        "tags": "^" + line.replace(".", r"\.") + r"\.\d+$", "variants": variants,
        "variants_source": _DP_MAKEFILE.format(tag=tag),
        "kubernetes_min": "1.10", "kubernetes_max": None, "min_driver": "384", "container_toolkit": "1.7.0",
        "runtimes": runtimes,
        "prerequisites": [_DP_DRIVERS, _DP_TOOLKIT, _DP_RUNTIME, _DP_KUBERNETES],
        "unchecked": [_DP_TOOLKIT, _DP_RUNTIME],
        "source": {"title": f"NVIDIA/k8s-device-plugin {tag} README, Prerequisites: {_DP_PREREQ}",
                   "url": _DP_README.format(tag=tag)},
        "changelog": changelog,
        "changelog_source": {"title": f"NVIDIA/k8s-device-plugin {changelog_tag} CHANGELOG.md",
                             "url": _DP_CHANGELOG.format(tag=changelog_tag)},
        "note": "the README states no newest Kubernetes (kubernetes_max open); '~= 384.81' is read as driver "
                "branch 384 or newer; runtimes are those its node preparation documents; the container "
                "toolkit and the default runtime are the host's, which no node object reports (unchecked)",
    }


def _dra_example(line: str, tag: str, kind_k8s: str) -> dict[str, Any]:
    return {
        "component": "DRA example driver", "release": f"{line}.x", "repositories": [DRA_EXAMPLE],
        "tags": "^" + line.replace(".", r"\.") + r"\.\d+$",
        "kubernetes_min": None, "kubernetes_max": None, "min_driver": None, "container_toolkit": None,
        "runtimes": None,
        "source": {"title": f"kubernetes-sigs/dra-example-driver {tag} README, Prerequisites (demo tools only)",
                   "url": _DRA_README.format(tag=tag)},
        "note": f"the README states no Kubernetes range (its demo cluster runs {kind_k8s}) nor runtimes; "
                "no NVIDIA driver: its devices are simulated",
    }


_DOCKER_CONTAINERD = ["docker", "containerd"]
_WITH_CRIO = ["docker", "containerd", "cri-o"]

ROWS: list[dict[str, Any]] = [
    _device_plugin("v0.14", "v0.14.5", runtimes=_DOCKER_CONTAINERD, variants=["ubuntu20.04", "ubi8"],
                   changelog_tag="v0.15.0", changelog=[  # no CHANGELOG.md at the v0.14.x tags
                       "v0.14.0: Bumped `nvidia-container-toolkit` dependency to latest version for newer CDI "
                       "spec generation code",
                       "v0.14.5: Bump CUDA base image version to 12.3.2."]),
    _device_plugin("v0.15", "v0.15.1", runtimes=_WITH_CRIO, variants=["ubuntu22.04", "ubi8"], changelog=[
        "v0.15.0-rc.1: Import GPU Feature Discovery into the GPU Device Plugin repo. This means that the same "
        "version and container image is used for both components.",
        "v0.15.0-rc.1: Remove `legacyDaemonsetAPI` config option. This was only required for k8s versions < 1.16.",
        "v0.15.0: Switch to Ubuntu22.04-based CUDA image for default image.",
        "v0.15.0: Add new CUDA driver and runtime version labels to align with other NFD version labels."]),
    _device_plugin("v0.16", "v0.16.2", runtimes=_WITH_CRIO, variants=["ubuntu22.04", "ubi8"], changelog=[
        "v0.16.0: Update CUDA base image version to 12.5.1",
        "v0.16.1: Bump nvidia-container-toolkit to v1.16.1 to fix a bug with CDI spec generation for MIG devices",
        "v0.16.2: Add CAP_SYS_ADMIN if volume-mounts list strategy is included (fixes #856)"]),
    _device_plugin("v0.17", "v0.17.4", runtimes=_WITH_CRIO, variants=["ubi9"], changelog=[
        "v0.17.0-rc.1: Switch to a ubi9-based base image",
        "v0.17.0-rc.1: Add CAP_SYS_ADMIN if volume-mounts list strategy is included",
        "v0.17.3: Bump nvidia-container-toolkit to 1.17.8"]),
    _device_plugin("v0.18", "v0.18.2", runtimes=_WITH_CRIO, variants=[], changelog=[
        "v0.18.0: Switch to distroless golang image",
        "v0.18.0: Update README.md with RuntimeClass",
        "v0.18.2: Bump NVIDIA Container Toolkit to v1.18.2"]),
    _device_plugin("v0.19", "v0.19.3", runtimes=_WITH_CRIO, variants=[], changelog=[
        "v0.19.1: Default to `nvml` strategy when platform cannot be detected.",
        "v0.19.2: Bump nvidia-container-toolkit to v1.19.1 (#1798)",
        "v0.19.3: bump nvcr.io/nvidia/distroless/go to v4.0.8-dev (#1852)"]),
    _device_plugin("v0.20", "v0.20.0", runtimes=_WITH_CRIO, variants=[], changelog=[
        "v0.20.0: Add support for the Rubin architecture family (#1909)",
        "v0.20.0: Bump NVIDIA Container Toolkit to v1.20.0 (#1958)"]),
    _dra_example("v0.1", "v0.1.0", "v1.32.0"),
    _dra_example("v0.2", "v0.2.1", "v1.34.0"),
    _dra_example("v0.3", "v0.3.0", "v1.36.0"),
    _dra_example("v0.4", "v0.4.0", "v1.36.1"),
]
"""The rows, newest line last per component; validated by :class:`.compatibility.Row`."""
