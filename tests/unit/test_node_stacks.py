"""Reading a node's stack from GPU Feature Discovery's labels and nodeInfo, and grouping GPU
nodes into hardware classes (issue 36, item 1): pure functions, every label family GFD has
published, and unknown said as None, never guessed."""

from __future__ import annotations

from typing import Any

import pytest

from runbooks.inventory.reading import node_from
from runbooks.inventory.stacks import class_of, cuda_of, driver_of, hardware_classes, runtime_branch

NFD = {"feature.node.kubernetes.io/pci-10de.present": "true"}


def node(name: str, labels: dict[str, str], info: dict[str, Any] | None = None, gpus: int = 8) -> Any:
    status: dict[str, Any] = {"nodeInfo": info if info is not None else {
        "osImage": "Ubuntu 22.04.4 LTS", "kernelVersion": "5.15.0-105-generic",
        "containerRuntimeVersion": "containerd://1.7.13", "kubeletVersion": "v1.32.9"}}
    if gpus:
        status["capacity"] = status["allocatable"] = {"nvidia.com/gpu": str(gpus)}
    return node_from({"metadata": {"name": name, "labels": labels}, "status": status}, ("nvidia.com/gpu",))


@pytest.mark.parametrize(("labels", "driver", "cuda"), [
    ({"nvidia.com/cuda.driver-version.full": "550.127.05", "nvidia.com/cuda.runtime-version.full": "12.4"},
     "550.127.05", "12.4"),
    ({"nvidia.com/cuda.driver-version.major": "550", "nvidia.com/cuda.driver-version.minor": "107",
      "nvidia.com/cuda.driver-version.revision": "02", "nvidia.com/cuda.runtime-version.major": "12",
      "nvidia.com/cuda.runtime-version.minor": "5"}, "550.107.02", "12.5"),
    ({"nvidia.com/cuda.driver.major": "535", "nvidia.com/cuda.driver.minor": "183", "nvidia.com/cuda.driver.rev": "01",
      "nvidia.com/cuda.runtime.major": "12", "nvidia.com/cuda.runtime.minor": "2"}, "535.183.01", "12.2"),
    ({"nvidia.com/cuda.driver.major": "470"}, "470", None),
    ({"nvidia.com/cuda.runtime.major": "12"}, None, None),
    ({"nvidia.com/cuda.driver-version.full": "  "}, None, None),
    ({}, None, None),
])
def test_driver_and_cuda_from_every_gfd_label_family(labels: dict[str, str], driver: str | None, cuda: str | None) -> None:
    """The full version label first, then the major/minor/revision labels, then the deprecated
    cuda.driver.*/cuda.runtime.* ones; a lone major is the branch; nothing else is invented."""
    assert (driver_of(labels), cuda_of(labels)) == (driver, cuda)


@pytest.mark.parametrize(("runtime", "branch"), [
    ("containerd://1.7.13", "containerd 1.7"), ("containerd://2.0.0", "containerd 2.0"),
    ("cri-o://1.30.4", "cri-o 1.30"), ("docker://v24.0.7", "docker 24.0"), ("weird", "weird"), (None, None), ("", None),
])
def test_runtime_branch(runtime: str | None, branch: str | None) -> None:
    """A runtime's branch is its name and minor version; an unparsed value is kept as it is."""
    assert runtime_branch(runtime) == branch


def test_node_without_gfd_or_node_info_is_unknown_not_guessed() -> None:
    """A GPU node without GFD labels and with an empty nodeInfo has every stack field None, and a
    class of its own whose name says unknown; a CPU node has no class."""
    bare = node("gpu-x", dict(NFD), info={})
    assert (bare.os_image, bare.kernel, bare.runtime, bare.gpu_product, bare.gpu_count, bare.driver, bare.cuda) == (
        None, None, None, None, None, None, None)
    assert class_of(bare) == "unknown GPU / driver unknown / runtime unknown"
    assert class_of(node("cpu", {}, gpus=0)) is None


def test_classes_split_on_product_driver_branch_and_runtime_only() -> None:
    """Two driver patch releases of one branch share a class (both versions listed); another
    branch, product or runtime minor is another class; known products come before unknown."""
    a100 = {**NFD, "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.count": "8"}
    nodes = [
        node("n1", {**a100, "nvidia.com/cuda.driver-version.full": "535.183.01"}),
        node("n2", {**a100, "nvidia.com/cuda.driver-version.full": "535.161.08"}),
        node("n3", {**a100, "nvidia.com/cuda.driver-version.full": "550.127.05"}),
        node("n4", {**a100, "nvidia.com/cuda.driver-version.full": "535.183.01"},
             info={"containerRuntimeVersion": "containerd://2.0.0"}),
        node("n0", dict(NFD)),
        node("cpu", {}, gpus=0),
    ]
    classes = hardware_classes(nodes)
    assert [(c.name, c.nodes, c.drivers) for c in classes] == [
        ("NVIDIA-A100-SXM4-80GB / driver 535 / containerd 1.7", ["n1", "n2"], ["535.161.08", "535.183.01"]),
        ("NVIDIA-A100-SXM4-80GB / driver 535 / containerd 2.0", ["n4"], ["535.183.01"]),
        ("NVIDIA-A100-SXM4-80GB / driver 550 / containerd 1.7", ["n3"], ["550.127.05"]),
        ("unknown GPU / driver unknown / containerd 1.7", ["n0"], []),
    ]
    assert nodes[0].gpu_count == 8 and nodes[4].gpu_count is None
