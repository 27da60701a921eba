"""kubesim's dcgm-exporters (issue 37, item 2), read in-process: what each GPU node's exporter
page says as the simulation moves, in dcgm-exporter's names, types and labels."""

from __future__ import annotations

import re
from typing import Any

import pytest

from kubesim.dcgm import XID_EVERY, DcgmExporters, gpu_uuid
from kubesim.dcgmprofiles import XID_COUNT, ExporterConfig
from kubesim.simulation import Simulation
from tests.kubesim._simkit import DAEMONSETS, NODES, PODS, small

NS, DS = "kube-system", "nvidia-device-plugin-daemonset"
XID_IMAGE = "nvcr.io/nvidia/k8s-device-plugin:v0.15.0-xid"
SAMPLE = re.compile(r'^(?P<name>[A-Z_]+)\{(?P<labels>[^}]*)\} (?P<value>\S+)$')


ECC = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"
DEFAULT_FAMILIES = [
    ("DCGM_FI_DEV_SM_CLOCK", "gauge"), ("DCGM_FI_DEV_MEM_CLOCK", "gauge"), ("DCGM_FI_DEV_MEMORY_TEMP", "gauge"),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge"), ("DCGM_FI_DEV_POWER_USAGE", "gauge"),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter"), ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter"),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge"), ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge"), ("DCGM_FI_DEV_ENC_UTIL", "gauge"),
    ("DCGM_FI_DEV_DEC_UTIL", "gauge"), ("DCGM_FI_DEV_XID_ERRORS", "gauge"), ("DCGM_FI_DEV_FB_FREE", "gauge"),
    ("DCGM_FI_DEV_FB_USED", "gauge"), ("DCGM_FI_DEV_FB_RESERVED", "gauge"),
    ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter"), ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge"),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter"), ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter"),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge"), ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge"),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge"), ("DCGM_FI_PROF_DRAM_ACTIVE", "gauge"),
    ("DCGM_FI_PROF_PCIE_TX_BYTES", "gauge"), ("DCGM_FI_PROF_PCIE_RX_BYTES", "gauge"),
]
"""The uncommented lines of dcgm-exporter 4.5.3-4.8.2's etc/default-counters.csv, read there."""


def with_exporters(**config: object) -> tuple[Simulation, DcgmExporters]:
    sim = small()
    exporters = DcgmExporters()
    exporters.config = ExporterConfig.of(dict(config))
    sim.add_controller("dcgm", exporters)
    return sim, exporters


def samples(exporters: DcgmExporters, node: str) -> list[tuple[str, dict[str, str], float]]:
    text = exporters.metrics_text(node)
    assert text is not None
    out = []
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        found = SAMPLE.match(line)
        assert found, line
        labels = dict(re.findall(r'(\w+)="([^"]*)"', found["labels"]))
        out.append((found["name"], labels, float(found["value"])))
    return out


def values(exporters: DcgmExporters, node: str, name: str, **match: str) -> list[float]:
    return [
        v for n, labels, v in samples(exporters, node)
        if n == name and all(labels.get(k) == want for k, want in match.items())
    ]


def roll_onto(sim: Simulation, node: str, image: str) -> None:
    """The plugin DaemonSet on OnDelete with ``image``, and its pod on ``node`` deleted: the canary."""

    def apply(obj: dict[str, Any]) -> None:
        obj["spec"]["updateStrategy"] = {"type": "OnDelete"}
        obj["spec"]["template"]["spec"]["containers"][0]["image"] = image

    sim.store.mutate(DAEMONSETS, NS, DS, apply)
    sim.settle()
    pod = next(p for p in sim.store.list(PODS, NS)
               if p["spec"].get("nodeName") == node and p["metadata"]["name"].startswith(DS))
    sim.store.delete(PODS, NS, pod["metadata"]["name"])
    sim.advance(60)


def test_each_gpu_node_exports_its_gpus_with_dcgm_exporter_labels() -> None:
    """Issue 37 item 2, issue 56: a GPU node's page has exactly the fields of the default
    counters CSV (no ECC field, no XID count: both are commented out there) for each of its 8
    GPUs, with gpu, UUID, pci_bus_id, device, modelName, Hostname and DCGM_FI_DRIVER_VERSION in
    dcgm-exporter's order, and pod/namespace/container on a pod's GPUs."""
    _, exporters = with_exporters()
    page = exporters.metrics_text("gpu-node1")
    assert page is not None
    assert re.findall(r"^# TYPE (\S+) (\S+)$", page, re.M) == DEFAULT_FAMILIES
    assert "# HELP DCGM_FI_DEV_XID_ERRORS Value of the last XID error encountered.\n" in page
    assert ECC not in page and XID_COUNT not in page
    first = next(line for line in page.splitlines() if line.startswith("DCGM_FI_DEV_GPU_UTIL{"))
    assert re.findall(r'(\w+)="', first) == ["gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname",
                                            "DCGM_FI_DRIVER_VERSION", "container", "namespace", "pod"]
    for name, kind in (("DCGM_FI_DEV_XID_ERRORS", "gauge"), ("DCGM_FI_DEV_GPU_UTIL", "gauge"),
                       ("DCGM_FI_DEV_GPU_TEMP", "gauge")):
        assert f"# TYPE {name} {kind}\n" in page
        rows = [labels for n, labels, _ in samples(exporters, "gpu-node1") if n == name]
        assert [r["gpu"] for r in rows] == [str(i) for i in range(8)]
        assert {r["Hostname"] for r in rows} == {"gpu-node1"}
        assert rows[3]["UUID"] == gpu_uuid("gpu-node1", 3) and rows[3]["device"] == "nvidia3"
        assert rows[0]["modelName"] == "NVIDIA A100-SXM4-80GB"
        trainer = [r for r in rows if r.get("pod") == "trainer-0"]
        assert len(trainer) == 4 and {r["namespace"] for r in trainer} == {"ml-team"}
        assert all("pod" not in r for r in rows if r not in trainer)
    assert exporters.metrics_text("cpu-node1") is None
    assert [t["labels"]["node"] for t in exporters.targets()] == ["gpu-node1", "gpu-node2", "gpu-node3"]


def test_a_workloads_gpus_are_busy_at_a_seeded_level_and_idle_ones_at_zero() -> None:
    """Issue 37 item 2: a running pod's GPUs read a nonzero utilisation that two simulations
    agree on (seeded by the pod, not by chance) and that moves a few points at most; free GPUs read 0."""
    first, one = with_exporters()
    _, two = with_exporters()
    busy = values(one, "gpu-node1", "DCGM_FI_DEV_GPU_UTIL", pod="trainer-0")
    assert len(busy) == 4 and all(50 <= v <= 95 for v in busy), busy
    assert busy == values(one, "gpu-node1", "DCGM_FI_DEV_GPU_UTIL", pod="trainer-0")
    other = values(two, "gpu-node1", "DCGM_FI_DEV_GPU_UTIL", pod="trainer-0")
    assert all(abs(a - b) <= 6 for a, b in zip(busy, other, strict=True)), (busy, other)
    first.advance(3600)
    later = values(one, "gpu-node1", "DCGM_FI_DEV_GPU_UTIL", pod="trainer-0")
    assert all(abs(a - b) <= 6 for a, b in zip(busy, later, strict=True)), (busy, later)
    assert values(one, "gpu-node1", "DCGM_FI_DEV_GPU_UTIL")[4:] == [0.0] * 4


def test_a_pod_using_a_dra_claim_is_busy_on_its_allocated_device_even_once_the_driver_goes() -> None:
    """Issue 37 item 2: inference-0's ResourceClaim was allocated device gpu-0 on gpu-node3: GPU 0
    there carries the pod's labels and a nonzero utilisation, the other seven are idle; once the
    DRA driver's kubelet plugin is gone from the node, the running pod keeps its device and stays
    busy (issue 56: the kubelet takes no device back from a running container)."""
    sim, exporters = with_exporters()
    rows = [(labels, v) for n, labels, v in samples(exporters, "gpu-node3") if n == "DCGM_FI_DEV_GPU_UTIL"]
    first = rows[0][0]
    assert (first.get("pod"), first.get("namespace"), first.get("container")) == ("inference-0", "ml-team", "inference")
    assert rows[0][1] > 0 and [v for _, v in rows[1:]] == [0.0] * 7
    sim.store.delete(DAEMONSETS, "dra-example-driver", "dra-example-driver-kubeletplugin")
    sim.advance(60)
    [busy] = values(exporters, "gpu-node3", "DCGM_FI_DEV_GPU_UTIL", pod="inference-0")
    assert busy > 0


def test_running_workloads_keep_their_gpus_busy_when_the_device_plugin_goes() -> None:
    """Issue 56: once the device plugin is gone and the node's nvidia.com/gpu allocatable drops to
    0, the pods still running there keep the GPUs they were given and stay busy: the kubelet takes
    no device back from a running container (kubernetes#118635); only new pods cannot get one."""
    sim, exporters = with_exporters()
    assert all(v > 0 for v in values(exporters, "gpu-node1", "DCGM_FI_DEV_GPU_UTIL", pod="trainer-0"))
    sim.store.delete(DAEMONSETS, NS, DS)
    sim.advance(60)
    assert sim.store.get(NODES, "", "gpu-node1")["status"]["allocatable"]["nvidia.com/gpu"] == "0"
    assert all(v > 0 for v in values(exporters, "gpu-node1", "DCGM_FI_DEV_GPU_UTIL", pod="trainer-0"))


def test_the_dcp_profile_and_the_newer_release_export_as_upstream() -> None:
    """Issue 56: the dcp profile (the GPU operator's dcp-metrics-included.csv) exports its own
    uncommented lines; release main-d5e5f51 names the node ``hostname``; a field the CSV
    comments out is exported only once enabled, with its commented line's type and help."""
    _, exporters = with_exporters(profile="dcp", release="main-d5e5f51", enable=[ECC])
    page = exporters.metrics_text("gpu-node1")
    assert page is not None
    assert "# HELP DCGM_FI_DEV_ECC_DBE_VOL_TOTAL Total number of double-bit volatile ECC errors.\n" in page
    assert "# TYPE DCGM_FI_DEV_ECC_DBE_VOL_TOTAL counter\n" in page
    rows = [labels for n, labels, _ in samples(exporters, "gpu-node1") if n == "DCGM_FI_DEV_GPU_UTIL"]
    assert {r["hostname"] for r in rows} == {"gpu-node1"} and all("Hostname" not in r for r in rows)
    with pytest.raises(ValueError, match=r"not a field of dcgm-exporter's dcp-metrics-included\.csv"):
        ExporterConfig(profile="dcp", enabled=("DCGM_EXP_XID_ERRORS_TOTAL",))
    with pytest.raises(ValueError, match="unknown dcgm-exporter release"):
        ExporterConfig(release="4.9.9")


def test_an_xid_plugin_raises_xid_79_on_its_node_only_while_it_runs() -> None:
    """Issue 37 item 2, issue 56: a ``-xid`` plugin image passes as running, but its node's GPU 0
    shows XID 79 as its last XID from its start; with DCGM_EXP_XID_ERRORS_COUNT enabled, the XIDs
    of the last 5 minutes are counted per code (one more every XID_EVERY simulated seconds, each
    counted for the window); other nodes stay at 0; once the pod is replaced by a healthy image
    no more come, and the last XID's code stays."""
    sim, exporters = with_exporters(enable=[XID_COUNT])
    roll_onto(sim, "gpu-node2", XID_IMAGE)
    pod = next(p for p in sim.store.list(PODS, NS) if p["spec"].get("nodeName") == "gpu-node2"
               and p["metadata"]["name"].startswith(DS))
    assert pod["status"]["phase"] == "Running" and pod["spec"]["containers"][0]["image"] == XID_IMAGE
    assert values(exporters, "gpu-node2", "DCGM_FI_DEV_XID_ERRORS", gpu="0") == [79.0]
    assert values(exporters, "gpu-node2", XID_COUNT, gpu="0", xid="79", window_size_in_ms="300000") == [1.0]
    sim.advance(XID_EVERY / 2)  # the first XID is out of the 5-minute window, the next not yet raised
    assert values(exporters, "gpu-node2", XID_COUNT, gpu="0") == [0.0]
    sim.advance(XID_EVERY / 2)
    assert values(exporters, "gpu-node2", XID_COUNT, gpu="0", xid="79") == [1.0]
    assert values(exporters, "gpu-node1", "DCGM_FI_DEV_XID_ERRORS") == [0.0] * 8
    assert values(exporters, "gpu-node1", XID_COUNT) == [0.0] * 8
    assert all("xid" not in labels for n, labels, _ in samples(exporters, "gpu-node1") if n == XID_COUNT)
    roll_onto(sim, "gpu-node2", "nvcr.io/nvidia/k8s-device-plugin:v0.15.0")
    sim.advance(5 * XID_EVERY)
    assert values(exporters, "gpu-node2", XID_COUNT, gpu="0") == [0.0]
    assert values(exporters, "gpu-node2", "DCGM_FI_DEV_XID_ERRORS", gpu="0") == [79.0]


def test_xid_and_ecc_faults_land_on_the_gpu_named() -> None:
    """Issue 37 item 2: the ``xid`` and ``ecc`` faults raise the XID code / double-bit ECC count
    on that node's GPU; bad faults are refused with a one-line reason and change nothing."""
    from kubesim.control import apply_fault

    sim, exporters = with_exporters(enable=[XID_COUNT, ECC])
    assert apply_fault(sim, {"kind": "xid", "node": "gpu-node3", "code": 48, "gpu": 5}) is None
    assert apply_fault(sim, {"kind": "ecc", "node": "gpu-node3", "gpu": 5, "count": 3}) is None
    assert apply_fault(sim, {"kind": "ecc", "node": "gpu-node3", "gpu": 5}) is None
    assert values(exporters, "gpu-node3", "DCGM_FI_DEV_XID_ERRORS", gpu="5") == [48.0]
    assert values(exporters, "gpu-node3", XID_COUNT, gpu="5", xid="48") == [1.0]
    assert values(exporters, "gpu-node3", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", gpu="5") == [4.0]
    assert values(exporters, "gpu-node3", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", gpu="4") == [0.0]
    def page() -> list[str]:  # the energy counter follows the clock
        return [line for line in str(exporters.metrics_text("gpu-node3")).splitlines() if "ENERGY" not in line]

    before = page()
    for bad, reason in (
        ({"kind": "xid", "node": "cpu-node1"}, "node 'cpu-node1' has no GPUs"),
        ({"kind": "xid", "node": "nope"}, "unknown node 'nope'"),
        ({"kind": "xid", "node": "gpu-node3", "gpu": 8}, "gpu must be an index from 0 to 7"),
        ({"kind": "xid", "node": "gpu-node3", "code": "79"}, "code must be an XID number from 1 to 999"),
        ({"kind": "ecc", "node": "gpu-node3", "count": 0}, "count must be a number from 1 to 1000000"),
    ):
        assert apply_fault(sim, bad) == reason
    assert page() == before


@pytest.mark.parametrize("node", ["gpu-node1", "gpu-node2", "gpu-node3"])
def test_every_sample_line_is_one_of_the_declared_metrics(node: str) -> None:
    """Issue 37 item 2, issue 56: the page holds only the default CSV's families, each after its HELP and TYPE."""
    _, exporters = with_exporters()
    names = {n for n, _, _ in samples(exporters, node)}
    assert names == {name for name, _ in DEFAULT_FAMILIES}
    assert all(30 <= v <= 80 for v in values(exporters, node, "DCGM_FI_DEV_GPU_TEMP"))
