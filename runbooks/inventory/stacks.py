"""The software stack of a GPU node, and the hardware classes nodes fall into (pure, no I/O).

A node's OS image, kernel, container runtime and kubelet come from ``status.nodeInfo``;
its GPU product, family, count, NVIDIA driver and CUDA versions from the labels NVIDIA GPU
Feature Discovery (GFD) publishes: ``nvidia.com/cuda.driver-version.full`` (else the
``*.major``/``*.minor``/``*.revision`` labels, else the deprecated ``cuda.driver.*``),
``nvidia.com/cuda.runtime-version.full`` (else ``cuda.runtime(-version).major/minor``),
``nvidia.com/gpu.product``, ``gpu.family`` and ``gpu.count``. What a node does not say is
``None``: unknown, never guessed.

A hardware class is GPU product x driver branch (the driver's major version) x runtime
branch (``containerd 1.7``): the nodes a plugin upgrade can break in the same way.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from runbooks.inventory.models import HardwareClass, Node

GFD = "nvidia.com/"
UNKNOWN = "unknown"
_RUNTIME = re.compile(r"^(?P<name>[a-z0-9.-]+)://v?(?P<major>\d+)\.(?P<minor>\d+)")


def _first(labels: Mapping[str, str], *keys: str) -> str | None:
    return next((labels[k].strip() for k in keys if labels.get(k, "").strip()), None)


def _joined(labels: Mapping[str, str], *alternatives: tuple[str, ...]) -> str | None:
    """The version whose parts (major, minor[, revision]) one family of labels carries in full."""
    for keys in alternatives:
        parts = [labels.get(GFD + k, "").strip() for k in keys]
        if all(parts):
            return ".".join(parts)
    return None


def driver_of(labels: Mapping[str, str]) -> str | None:
    """The NVIDIA driver version GFD published (``550.127.05``), or None."""
    return _first(labels, GFD + "cuda.driver-version.full") or _joined(
        labels,
        ("cuda.driver-version.major", "cuda.driver-version.minor", "cuda.driver-version.revision"),
        ("cuda.driver.major", "cuda.driver.minor", "cuda.driver.rev"),
    ) or _first(labels, GFD + "cuda.driver-version.major", GFD + "cuda.driver.major")


def cuda_of(labels: Mapping[str, str]) -> str | None:
    """The CUDA version the driver supports as GFD published it (``12.4``), or None."""
    return _first(labels, GFD + "cuda.runtime-version.full") or _joined(
        labels, ("cuda.runtime-version.major", "cuda.runtime-version.minor"), ("cuda.runtime.major", "cuda.runtime.minor"),
    )


def gpu_count_of(labels: Mapping[str, str]) -> int | None:
    value = labels.get(GFD + "gpu.count", "").strip()
    return int(value) if value.isdigit() else None


def stack_fields(labels: Mapping[str, str], node_info: Mapping[str, Any]) -> dict[str, Any]:
    """The stack fields of :class:`~runbooks.inventory.models.Node` from a node's labels and nodeInfo."""

    def info(key: str) -> str | None:
        value = str(node_info.get(key) or "").strip()
        return value or None

    return {
        "os_image": info("osImage"), "kernel": info("kernelVersion"), "runtime": info("containerRuntimeVersion"),
        "gpu_product": _first(labels, GFD + "gpu.product"), "gpu_family": _first(labels, GFD + "gpu.family"),
        "gpu_count": gpu_count_of(labels), "driver": driver_of(labels), "cuda": cuda_of(labels),
    }


def driver_branch(driver: str | None) -> str | None:
    """``550`` of ``550.127.05``."""
    return driver.split(".", 1)[0] if driver else None


def runtime_branch(runtime: str | None) -> str | None:
    """``containerd 1.7`` of ``containerd://1.7.13``; an unparsed value as it is."""
    if not runtime:
        return None
    match = _RUNTIME.match(runtime)
    return f"{match['name']} {match['major']}.{match['minor']}" if match else runtime


def class_name(product: str | None, branch: str | None, runtime: str | None) -> str:
    """``NVIDIA-A100-SXM4-80GB / driver 535 / containerd 1.7``; each part ``unknown`` when it is."""
    return f"{product or 'unknown GPU'} / driver {branch or UNKNOWN} / {runtime or 'runtime ' + UNKNOWN}"


def is_gpu_node(node: Node) -> bool:
    """A node with GPU hardware labels, GPUs in its capacity, or a product GFD published."""
    return node.gpu_hardware or any(node.capacity.values()) or node.gpu_product is not None


def class_of(node: Node) -> str | None:
    """The name of the hardware class of a GPU node; None for a node without GPUs."""
    if not is_gpu_node(node):
        return None
    return class_name(node.gpu_product, driver_branch(node.driver), runtime_branch(node.runtime))


def hardware_classes(nodes: Iterable[Node]) -> list[HardwareClass]:
    """The GPU nodes grouped into classes; known products first, then by name."""
    groups: dict[str, list[Node]] = defaultdict(list)
    for node in nodes:
        name = class_of(node)
        if name is not None:
            groups[name].append(node)

    def values(members: list[Node], attr: str) -> list[str]:
        return sorted({str(v) for v in (getattr(n, attr) for n in members) if v is not None})

    classes = [
        HardwareClass(
            name=name, gpu_product=members[0].gpu_product, driver_branch=driver_branch(members[0].driver),
            runtime=runtime_branch(members[0].runtime), drivers=values(members, "driver"),
            cuda=values(members, "cuda"), kernels=values(members, "kernel"), os_images=values(members, "os_image"),
            kubelets=values(members, "kubelet_version"),
            nodes=sorted(n.name for n in members),
        )
        for name, members in groups.items()
    ]
    return sorted(classes, key=lambda c: (c.gpu_product is None, c.driver_branch is None, c.name))
