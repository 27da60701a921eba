"""The DRA drivers kubesim knows, told by what a container runs, and the devices each publishes.

- ``dra-example-kubeletplugin`` (kubernetes-sigs/dra-example-driver; any container of its image that
  runs nothing else): driver ``gpu.example.com``. Its devices are simulated by the driver itself
  (``NUM_DEVICES``, 8 by default, on any node: ``cmd/dra-example-kubeletplugin/discovery.go``,
  attributes ``index``, ``uuid``, ``model``, ``driverVersion``, capacity ``memory`` 80Gi); a
  container that does not set ``NUM_DEVICES`` (gpu-small's hand-made DaemonSet) publishes as many as
  the node has GPUs, as kubesim always modelled it.
- ``gpu-kubelet-plugin`` (NVIDIA/k8s-dra-driver-gpu, container ``gpus``): driver ``gpu.nvidia.com``,
  one device ``gpu-<minor>`` per GPU with the attributes of ``cmd/gpu-kubelet-plugin/deviceinfo.go``
  (``GpuInfo.GetDevice``, tag v25.8.1), valued as NVML reports them for the node's GPUs (read from
  GFD's labels of the node: product, family, compute capability, driver and CUDA versions, memory).
- ``compute-domain-kubelet-plugin`` (container ``compute-domains``): driver
  ``compute-domain.nvidia.com``, the devices ``channel-0`` and ``daemon-0``
  (``cmd/compute-domain-kubelet-plugin/deviceinfo.go`` and ``driver.go``: channels other than 0 are
  not published by the node).

The chart's ``compute-domain-controller`` and the ``kubelet-plugin-prestart.sh`` init container run
no kubelet plugin. A container's klog verbosity is its ``-v``/``--v`` argument, ``$(VAR)`` expanded
from its env as the kubelet does, else klog's default 0.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from kubesim import dra

EXAMPLE = dra.DRIVER
NVIDIA_GPU, NVIDIA_COMPUTE_DOMAIN = "gpu.nvidia.com", "compute-domain.nvidia.com"
EXAMPLE_IMAGE = "dra-example-driver"
PROGRAMS = (
    ("compute-domain-kubelet-plugin", NVIDIA_COMPUTE_DOMAIN),
    ("gpu-kubelet-plugin", NVIDIA_GPU),
    ("dra-example-kubeletplugin", EXAMPLE),
)
"""What a kubelet plugin's container runs, and the driver it registers (longest names first)."""
OTHER_PROGRAMS = ("dra-example-webhook", "compute-domain-controller", "compute-domain-daemon", "kubelet-plugin-prestart")

Device = tuple[str, dict[str, dict[str, Any]], dict[str, str]]
"""(name, attributes as the v1alpha3+ API spells them, capacity quantities)."""

NVML_NAMES = {"NVIDIA-A100-SXM4-80GB": "NVIDIA A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3": "NVIDIA H100 80GB HBM3"}
"""GFD's ``nvidia.com/gpu.product`` (NVML's name with spaces turned to dashes) -> NVML's own name."""
PCI_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)
"""Simulated PCI bus numbers of a node's eight GPUs (``pcieBusID``), each under its own root bus."""
_VAR = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
_VERBOSITY = re.compile(r"(?:^|\s)--?v(?:=|\s+)(\d+)(?:\s|$)")


def runs(container: Mapping[str, Any]) -> str:
    """The container's command and args, one string."""
    return " ".join(str(word) for word in [*(container.get("command") or []), *(container.get("args") or [])])


def driver_for(image: str, command: str) -> str | None:
    """The DRA driver a container of ``image`` running ``command`` registers, if any."""
    for program, driver in PROGRAMS:
        if program in command:
            return driver
    if EXAMPLE_IMAGE in image and not any(program in command for program in OTHER_PROGRAMS):
        return EXAMPLE
    return None


def driver_of(container: Mapping[str, Any]) -> str | None:
    """:func:`driver_for` of a container of a pod spec."""
    return driver_for(str(container.get("image", "")), runs(container))


def env_value(container: Mapping[str, Any], name: str) -> str | None:
    for env in container.get("env") or []:
        if env.get("name") == name and "value" in env:
            return str(env["value"])
    return None


def verbosity(container: Mapping[str, Any]) -> int:
    """The klog verbosity the container's program runs at (``-v N``, ``--v=N``; default 0)."""
    command = _VAR.sub(lambda m: env_value(container, m.group(1)) or m.group(0), runs(container))
    found = _VERBOSITY.findall(command)
    return int(found[-1]) if found else 0


# ------------------------------------------------------------------ devices
def _semver(text: str) -> str:
    """Masterminds/semver's ``MustParse(text).String()``: missing parts 0, leading zeros gone."""
    parts = [int(p) for p in text.split(".")[:3]]
    return ".".join(str(p) for p in parts + [0] * (3 - len(parts)))


def _binary_si(mib: int) -> str:
    """``resource.NewQuantity(bytes, BinarySI)`` of ``mib`` MiB, as the API prints it."""
    if mib % 1024 == 0:
        return f"{mib // 1024}Gi"
    return f"{mib}Mi"


def gpu_uuid(node: str, index: int) -> str:
    """An NVML UUID (``GPU-…``) for GPU ``index`` of ``node``, stable per node."""
    return "GPU-" + dra.device_uuid(node, index).removeprefix("gpu-")


def nvidia_gpus(node: str, labels: Mapping[str, str], count: int) -> list[Device]:
    """``GpuInfo.GetDevice()`` of each of the node's GPUs (``cmd/gpu-kubelet-plugin/deviceinfo.go``
    and ``nvlib.go`` at v25.8.1): what NVML reports, read back from GFD's labels of the node."""
    product = labels.get("nvidia.com/gpu.product", "")
    family = labels.get("nvidia.com/gpu.family", "")
    compute = f"{labels.get('nvidia.com/gpu.compute.major', '0')}.{labels.get('nvidia.com/gpu.compute.minor', '0')}"
    memory = int(labels.get("nvidia.com/gpu.memory") or 0)
    out: list[Device] = []
    for i in range(count):
        bus = PCI_BUSES[i % len(PCI_BUSES)]
        attributes: dict[str, dict[str, Any]] = {
            "type": {"string": "gpu"},
            "uuid": {"string": gpu_uuid(node, i)},
            "productName": {"string": NVML_NAMES.get(product, product.replace("-", " "))},
            "brand": {"string": "Nvidia"},
            "architecture": {"string": family.capitalize()},
            "cudaComputeCapability": {"version": _semver(compute)},
            "driverVersion": {"version": _semver(labels.get("nvidia.com/cuda.driver-version.full") or "0")},
            "cudaDriverVersion": {"version": _semver(labels.get("nvidia.com/cuda.runtime-version.full") or "0")},
            "pcieBusID": {"string": f"0000:{bus:02x}:00.0"},
            "resource.kubernetes.io/pcieRoot": {"string": f"pci0000:{bus - 1:02x}"},
        }
        out.append((f"gpu-{i}", attributes, {"memory": _binary_si(memory)}))
    return out


def compute_domain_devices() -> list[Device]:
    """What the compute-domain kubelet plugin publishes for its node: channel 0 and daemon 0."""
    return [(f"{kind}-0", {"type": {"string": kind}, "id": {"int": 0}}, {}) for kind in ("channel", "daemon")]


def example_devices(node: str, count: int) -> list[Device]:
    """The example driver's simulated GPUs (``enumerateAllPossibleDevices`` in discovery.go)."""
    return [(f"gpu-{i}", {"index": {"int": i}, "uuid": {"string": dra.device_uuid(node, i)},
                          "model": {"string": "LATEST-GPU-MODEL"}, "driverVersion": {"version": "1.0.0"}},
             {"memory": "80Gi"}) for i in range(count)]


def devices(driver: str, container: Mapping[str, Any], node: str, labels: Mapping[str, str], gpus: int) -> list[Device] | None:
    """The devices ``driver``'s plugin in ``container`` publishes on ``node``; None: as many of
    kubesim's generic GPUs as the node has (:func:`kubesim.dra.resource_slice`'s own)."""
    if driver == NVIDIA_GPU:
        return nvidia_gpus(node, labels, gpus)
    if driver == NVIDIA_COMPUTE_DOMAIN:
        return compute_domain_devices()
    wanted = env_value(container, "NUM_DEVICES")
    if driver == EXAMPLE and wanted is not None and wanted.isdigit():
        return example_devices(node, int(wanted))
    return None
