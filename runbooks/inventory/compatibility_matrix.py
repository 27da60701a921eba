"""The compatibility matrix, as data: what each plugin release says it needs.

One row per release line (``v0.17.x``) of the NVIDIA device plugin and of the DRA example
driver, as their own documentation states it at the release's tag; :mod:`.compatibility`
loads and validates the rows (pydantic) and checks a request against them. A field the
source leaves unsaid stays ``None`` (open), and the row's ``note`` says so: no number here
is guessed.

- NVIDIA device plugin: README "Prerequisites" at every tag ``v0.14.0`` .. ``v0.18.2``
  states the same lines: "NVIDIA drivers ~= 384.81", "nvidia-docker >= 2.0 ||
  nvidia-container-toolkit >= 1.7.0", "nvidia-container-runtime configured as the default
  low-level runtime", "Kubernetes version >= 1.10". No newest Kubernetes is stated. Its
  "Preparing your GPU Nodes" section documents ``docker`` and ``containerd`` up to v0.14.x,
  and ``CRI-O`` too from v0.15.0.
- DRA example driver: README "Prerequisites" (``v0.1.0`` .. ``v0.4.0``) lists the demo's
  tools only (kind, helm, kubectl >= 1.18); it states no Kubernetes range and needs no
  NVIDIA driver (its devices are simulated). Its demo cluster (``demo/scripts/common.sh``,
  ``KIND_K8S_TAG``) runs v1.32.0 at v0.1.0, v1.34.0 at v0.2.x, v1.36.0 at v0.3.0 and v1.36.1
  at v0.4.0: what it was tried on, not a stated range, so the rows leave the range open.

Distribution suffixes (``variants``): the device plugin's ``deployments/container/Makefile`` at
each cited tag builds ``IMAGE_TAG ?= $(IMAGE_VERSION)-$(DIST)`` for each of its
``DISTRIBUTIONS`` and copies the default one to the bare version (``push-short``):
``ubuntu20.04`` (default) and ``ubi8`` at v0.14.5; ``ubuntu22.04`` (default) and ``ubi8`` at
v0.15.1 and v0.16.2; ``ubi9`` alone at v0.17.4; from v0.18.0 ``IMAGE_TAG ?= $(IMAGE_VERSION)``,
no suffix. ``v0.17.0-ubi9`` is therefore the release ``v0.17.0`` (:func:`runbooks.image_names.release`
splits the version from the suffixes); a suffix a line does not publish keeps the tag out of
its row. The DRA example driver's rows list none.

A tag may carry a ``-driver<branch>`` suffix (``v0.17.0-driver550``): a build for that NVIDIA
driver branch or newer; it raises the row's minimum (kubesim's images honour it).
"""

from __future__ import annotations

from typing import Any

DEVICE_PLUGIN = "nvcr.io/nvidia/k8s-device-plugin"
DRA_EXAMPLE = "registry.k8s.io/dra-example-driver/dra-example-driver"
_DP_MAKEFILE = "https://github.com/NVIDIA/k8s-device-plugin/blob/{tag}/deployments/container/Makefile"
_DP_README = "https://github.com/NVIDIA/k8s-device-plugin/blob/{tag}/README.md#prerequisites"
_DP_PREREQ = ("NVIDIA drivers ~= 384.81; nvidia-docker >= 2.0 || nvidia-container-toolkit >= 1.7.0; "
              "Kubernetes version >= 1.10")
_DRA_README = "https://github.com/kubernetes-sigs/dra-example-driver/blob/{tag}/README.md#prerequisites"


def _device_plugin(line: str, tag: str, runtimes: list[str], variants: list[str]) -> dict[str, Any]:
    return {
        "component": "NVIDIA device plugin", "release": f"{line}.x", "repositories": [DEVICE_PLUGIN],
        "tags": "^" + line.replace(".", r"\.") + r"\.\d+$", "variants": variants,
        "variants_source": _DP_MAKEFILE.format(tag=tag),
        "kubernetes_min": "1.10", "kubernetes_max": None, "min_driver": "384", "container_toolkit": "1.7.0",
        "runtimes": runtimes,
        "source": {"title": f"NVIDIA/k8s-device-plugin {tag} README, Prerequisites: {_DP_PREREQ}",
                   "url": _DP_README.format(tag=tag)},
        "note": "the README states no newest Kubernetes (kubernetes_max open); '~= 384.81' is read as driver "
                "branch 384 or newer; runtimes are those its node preparation documents",
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
    _device_plugin("v0.14", "v0.14.5", _DOCKER_CONTAINERD, ["ubuntu20.04", "ubi8"]),
    _device_plugin("v0.15", "v0.15.1", _WITH_CRIO, ["ubuntu22.04", "ubi8"]),
    _device_plugin("v0.16", "v0.16.2", _WITH_CRIO, ["ubuntu22.04", "ubi8"]),
    _device_plugin("v0.17", "v0.17.4", _WITH_CRIO, ["ubi9"]),
    _device_plugin("v0.18", "v0.18.2", _WITH_CRIO, []),
    _dra_example("v0.1", "v0.1.0", "v1.32.0"),
    _dra_example("v0.2", "v0.2.1", "v1.34.0"),
    _dra_example("v0.3", "v0.3.0", "v1.36.0"),
    _dra_example("v0.4", "v0.4.0", "v1.36.1"),
]
"""The rows, newest line last per component; validated by :class:`.compatibility.Row`."""
