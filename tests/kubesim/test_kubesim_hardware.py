"""kubesim's node hardware (issue 36, item 6): the labels NVIDIA GPU Feature Discovery publishes
and the kubelet's ``nodeInfo`` per GPU node, and the ``gpu-mixed`` scenario (two GPU products
on two driver branches and two runtimes, and a GPU node GFD never labelled), refereed by the
real kubectl."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from _simkit import NODES, get

from kubesim import KubeSim
from kubesim.scenarios import SCENARIOS, build
from tests.support import Kubectl

PRODUCT, DRIVER, CUDA = "nvidia.com/gpu.product", "nvidia.com/cuda.driver-version.full", "nvidia.com/cuda.runtime-version.full"
EXPECTED = {  # node: (product, driver, CUDA, OS image, kernel, runtime)
    "gpu-node1": ("NVIDIA-A100-SXM4-80GB", "535.183.01", "12.2", "Ubuntu 22.04.4 LTS", "5.15.0-105-generic",
                  "containerd://1.7.13"),
    "gpu-node2": ("NVIDIA-A100-SXM4-80GB", "535.183.01", "12.2", "Ubuntu 22.04.4 LTS", "5.15.0-105-generic",
                  "containerd://1.7.13"),
    "gpu-node3": ("NVIDIA-H100-80GB-HBM3", "550.127.05", "12.4", "Ubuntu 24.04.1 LTS", "6.8.0-45-generic",
                  "containerd://2.0.0"),
    "gpu-node4": ("NVIDIA-H100-80GB-HBM3", "550.127.05", "12.4", "Ubuntu 24.04.1 LTS", "6.8.0-45-generic",
                  "containerd://2.0.0"),
    "gpu-node5": (None, None, None, "Rocky Linux 9.4 (Blue Onyx)", "5.14.0-427.13.1.el9_4.x86_64",
                  "containerd://1.7.20"),
}


@pytest.mark.parametrize("minor", [27, 32, 34])
def test_gpu_mixed_nodes_carry_gfd_labels_and_node_info(minor: int) -> None:
    """gpu-mixed: A100 nodes on driver 535, H100 nodes on 550, each with every GFD label (the
    deprecated cuda.driver.* beside cuda.driver-version.*) and its nodeInfo; gpu-node5 has GPUs
    and NFD's label but no GFD label; the scenario is settled (nothing churns)."""
    assert "gpu-mixed" in SCENARIOS
    sim = build(scenario="gpu-mixed", minor=minor)
    names = sorted(n["metadata"]["name"] for n in sim.store.list(NODES))
    assert names == ["cpu-node1", *EXPECTED]
    for name, (product, driver, cuda, os_image, kernel, runtime) in EXPECTED.items():
        node = get(sim, NODES, "", name)
        assert node is not None
        labels, info = node["metadata"]["labels"], node["status"]["nodeInfo"]
        assert (labels.get(PRODUCT), labels.get(DRIVER), labels.get(CUDA)) == (product, driver, cuda), name
        assert (info["osImage"], info["kernelVersion"], info["containerRuntimeVersion"]) == (os_image, kernel, runtime)
        assert info["kubeletVersion"].startswith(f"v1.{minor}.")
        assert labels["feature.node.kubernetes.io/pci-10de.present"] == "true"
        assert node["status"]["capacity"]["nvidia.com/gpu"] == "8"
        if driver is None:
            assert not any(k.startswith(("nvidia.com/cuda.", "nvidia.com/gfd.", "nvidia.com/gpu.product")) for k in labels)
            continue
        major, minor_, rev = driver.split(".")
        assert {k: labels[k] for k in labels if k.startswith("nvidia.com/cuda.driver")} == {
            "nvidia.com/cuda.driver.major": major, "nvidia.com/cuda.driver.minor": minor_,
            "nvidia.com/cuda.driver.rev": rev, "nvidia.com/cuda.driver-version.major": major,
            "nvidia.com/cuda.driver-version.minor": minor_, "nvidia.com/cuda.driver-version.revision": rev,
            DRIVER: driver}
        assert labels["nvidia.com/cuda.runtime.major"] + "." + labels["nvidia.com/cuda.runtime.minor"] == cuda
        assert labels["nvidia.com/gpu.count"] == "8"
        assert labels["nvidia.com/gpu.family"] == ("ampere" if "A100" in product else "hopper")
        assert labels["nvidia.com/gfd.timestamp"].isdigit()
    before = sim.store.rv
    sim.advance(5)
    assert sim.store.rv == before


def test_gpu_small_gpu_nodes_are_labelled_as_a100_on_535() -> None:
    """gpu-small's GPU nodes carry GFD's labels of an A100 on driver 535; its CPU node has none."""
    sim = build(scenario="gpu-small", minor=31)
    for name in ("gpu-node1", "gpu-node2", "gpu-node3"):
        labels = get(sim, NODES, "", name)["metadata"]["labels"]  # type: ignore[index]
        assert (labels[PRODUCT], labels[DRIVER], labels[CUDA]) == ("NVIDIA-A100-SXM4-80GB", "535.183.01", "12.2")
    cpu = get(sim, NODES, "", "cpu-node1")["metadata"]["labels"]  # type: ignore[index]
    assert not any(k.startswith("nvidia.com/") for k in cpu)


@pytest.fixture(scope="module")
def kubectl() -> Iterator[Kubectl]:
    with KubeSim(scenario="gpu-mixed", k8s_version="1.32") as sim:
        yield Kubectl(sim.kubeconfig)


@pytest.mark.conformance
def test_kubectl_get_nodes_shows_gfd_label_columns(kubectl: Kubectl) -> None:
    """``kubectl get nodes -L nvidia.com/gpu.product -L nvidia.com/cuda.driver-version.full``
    prints each node's product and driver (empty for the unlabelled GPU node and the CPU node),
    and ``-o wide`` its OS image, kernel and runtime."""
    out = kubectl("get", "nodes", "-L", PRODUCT, "-L", DRIVER)
    header, *rows = out.splitlines()
    assert header.split()[-2:] == ["GPU.PRODUCT", "CUDA.DRIVER-VERSION.FULL"]
    cells = {r.split()[0]: r.split()[5:] for r in rows}
    for name, (product, driver, *_rest) in EXPECTED.items():
        assert cells[name] == ([product, driver] if product else []), name
    assert cells["cpu-node1"] == []
    wide = kubectl("get", "nodes", "-o", "wide")
    head, *lines = wide.splitlines()
    assert "OS-IMAGE" in head and "KERNEL-VERSION" in head and "CONTAINER-RUNTIME" in head
    for name, (*_gpu, os_image, kernel, runtime) in EXPECTED.items():
        line = next(ln for ln in lines if ln.split()[0] == name)
        assert [c.strip() for c in re.split(r"\s{2,}", line)][-3:] == [os_image, kernel, runtime], line


@pytest.mark.conformance
def test_kubectl_describe_node_shows_system_info_and_labels(kubectl: Kubectl) -> None:
    """``kubectl describe node`` lists GFD's labels under Labels and the stack under System Info."""
    text = kubectl("describe", "node", "gpu-node3")
    labels = text.split("Labels:")[1].split("Annotations:")[0]
    assert f"{PRODUCT}=NVIDIA-H100-80GB-HBM3" in labels and "nvidia.com/cuda.driver.major=550" in labels
    assert "nvidia.com/gpu.family=hopper" in labels and f"{CUDA}=12.4" in labels
    system = {k.strip(): v.strip() for k, _, v in
              (ln.partition(":") for ln in text.split("System Info:")[1].split("\n\n")[0].splitlines() if ":" in ln)}
    assert system["OS Image"] == "Ubuntu 24.04.1 LTS"
    assert system["Kernel Version"] == "6.8.0-45-generic"
    assert system["Container Runtime Version"] == "containerd://2.0.0"
    assert system["Kubelet Version"].startswith("v1.32.")
    unlabelled = kubectl("describe", "node", "gpu-node5")
    assert "nvidia.com/cuda" not in unlabelled and "Rocky Linux 9.4 (Blue Onyx)" in unlabelled
