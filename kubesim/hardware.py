"""The hardware stack of a simulated GPU node: the labels NVIDIA GPU Feature Discovery (GFD)
publishes on it and the ``status.nodeInfo`` its kubelet reports.

GFD's labels are those of its README's "Generated Labels" table (the deprecated
``cuda.driver.*`` and ``cuda.runtime.*`` beside their ``*-version.*`` successors, as GFD
still publishes both), plus ``mig.capable``/``mig.strategy`` and the sharing labels the
device plugin adds. A node given no stack keeps NFD's PCI label only: no GFD ran there.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Stack:
    """One kind of GPU node: its GPUs, the NVIDIA driver and CUDA it runs, and its OS."""

    product: str
    family: str
    memory_mib: int
    compute: tuple[int, int]
    machine: str
    driver: str
    cuda: str
    os_image: str
    kernel: str
    runtime: str


A100_535 = Stack(
    product="NVIDIA-A100-SXM4-80GB", family="ampere", memory_mib=81920, compute=(8, 0), machine="DGX-A100",
    driver="535.183.01", cuda="12.2", os_image="Ubuntu 22.04.4 LTS", kernel="5.15.0-105-generic",
    runtime="containerd://1.7.13",
)
"""An A100 node on the 535 driver branch (CUDA 12.2), Ubuntu 22.04 with containerd 1.7."""
H100_550 = Stack(
    product="NVIDIA-H100-80GB-HBM3", family="hopper", memory_mib=81559, compute=(9, 0), machine="DGX-H100",
    driver="550.127.05", cuda="12.4", os_image="Ubuntu 24.04.1 LTS", kernel="6.8.0-45-generic",
    runtime="containerd://2.0.0",
)
"""An H100 node on the 550 driver branch (CUDA 12.4), Ubuntu 24.04 with containerd 2.0."""
UNLABELLED_OS = {"osImage": "Rocky Linux 9.4 (Blue Onyx)", "kernelVersion": "5.14.0-427.13.1.el9_4.x86_64",
                 "containerRuntimeVersion": "containerd://1.7.20"}
"""The nodeInfo of a GPU node GFD never labelled (``gpu-mixed``'s ``gpu-node5``)."""


def gfd_labels(stack: Stack, *, gpus: int, labelled_at: dt.datetime) -> dict[str, str]:
    """The labels GFD publishes on a node of ``stack`` with ``gpus`` GPUs, at ``labelled_at``."""
    major, minor, rev = stack.driver.split(".")
    cuda_major, cuda_minor = stack.cuda.split(".")
    return {
        "nvidia.com/cuda.driver.major": major, "nvidia.com/cuda.driver.minor": minor, "nvidia.com/cuda.driver.rev": rev,
        "nvidia.com/cuda.driver-version.major": major, "nvidia.com/cuda.driver-version.minor": minor,
        "nvidia.com/cuda.driver-version.revision": rev, "nvidia.com/cuda.driver-version.full": stack.driver,
        "nvidia.com/cuda.runtime.major": cuda_major, "nvidia.com/cuda.runtime.minor": cuda_minor,
        "nvidia.com/cuda.runtime-version.major": cuda_major, "nvidia.com/cuda.runtime-version.minor": cuda_minor,
        "nvidia.com/cuda.runtime-version.full": stack.cuda,
        "nvidia.com/gfd.timestamp": str(int(labelled_at.timestamp())),
        "nvidia.com/gpu.compute.major": str(stack.compute[0]), "nvidia.com/gpu.compute.minor": str(stack.compute[1]),
        "nvidia.com/gpu.count": str(gpus), "nvidia.com/gpu.family": stack.family,
        "nvidia.com/gpu.machine": stack.machine, "nvidia.com/gpu.memory": str(stack.memory_mib),
        "nvidia.com/gpu.mode": "compute", "nvidia.com/gpu.product": stack.product, "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none", "nvidia.com/mig.capable": "true", "nvidia.com/mig.strategy": "single",
    }


def equip(node: dict[str, Any], stack: Stack | None, *, gpus: int, labelled_at: dt.datetime) -> None:
    """Give a node built by :func:`kubesim.fixtures.make_node` the stack ``stack``: GFD's labels
    and the OS, kernel and runtime in its nodeInfo; ``None``: no GFD labels, another OS."""
    info = node["status"]["nodeInfo"]
    if stack is None:
        info.update(UNLABELLED_OS)
        return
    node["metadata"]["labels"].update(gfd_labels(stack, gpus=gpus, labelled_at=labelled_at))
    info.update(osImage=stack.os_image, kernelVersion=stack.kernel, containerRuntimeVersion=stack.runtime)
