"""The node stack in the inventory (issue 36, item 1): per node the OS image, kernel, runtime,
kubelet, GPU product and count, driver and CUDA (from GPU Feature Discovery's labels; unknown
said plainly when a GPU node has none), grouped into hardware classes (product x driver branch x
runtime); shown as text by the shell, in Slack's blocks and in ``--json``, and recorded in a
run's baseline. On kubesim's ``gpu-mixed`` scenario, refereed by the real kubectl, on 1.27,
1.32 and 1.34."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from slack_sdk.models.blocks import Block

from bot.slack.blocks import MAX_BLOCKS, MAX_SECTION, all_blocks, render_reply
from handlers.inventory import summarize
from kubesim import KubeSim
from runbooks.daemonset.baselines import Baseline, baseline_from
from runbooks.inventory import Inventory

A100 = "NVIDIA-A100-SXM4-80GB / driver 535 / containerd 1.7"
H100 = "NVIDIA-H100-80GB-HBM3 / driver 550 / containerd 2.0"
UNKNOWN = "unknown GPU / driver unknown / containerd 1.7"
CLASSES = {  # name: (drivers, CUDA, kernels, runtime, nodes)
    A100: (["535.183.01"], ["12.2"], ["5.15.0-105-generic"], "containerd 1.7", ["gpu-node1", "gpu-node2"]),
    H100: (["550.127.05"], ["12.4"], ["6.8.0-45-generic"], "containerd 2.0", ["gpu-node3", "gpu-node4"]),
    UNKNOWN: ([], [], ["5.14.0-427.13.1.el9_4.x86_64"], "containerd 1.7", ["gpu-node5"]),
}
PLUGIN = "kube-system/nvidia-device-plugin-daemonset"
UPGRADEBOT = str(Path(sys.executable).parent / "upgradebot")


@pytest.fixture(scope="module", params=("1.27", "1.32", "1.34"))
def mixed(request: pytest.FixtureRequest) -> Iterator[KubeSim]:
    """kubesim's gpu-mixed scenario on each release (read-only: shared by the module)."""
    with KubeSim(scenario="gpu-mixed", k8s_version=request.param) as sim:
        yield sim


@pytest.fixture(scope="module")
def inv(mixed: KubeSim, inventory_of: Callable[..., Inventory]) -> Inventory:
    return inventory_of(mixed)


def shell(kubeconfig: Path, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``upgradebot inventory ARGS`` as a pipeline runs it (KUBECONFIG, no policy)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBE", "UPGRADEBOT"))}
    env.update(HOME=str(home), KUBECONFIG=str(kubeconfig))
    return subprocess.run([UPGRADEBOT, "inventory", *args], capture_output=True, text=True, env=env, timeout=60)


def test_node_stack_is_what_kubectl_shows(mixed: KubeSim, inv: Inventory, kubectl_for) -> None:
    """Each node's OS image, kernel, runtime and kubelet are its nodeInfo as kubectl prints it; its
    GPU product, count, driver and CUDA are GFD's labels; gpu-node5 (no GFD label) has them None."""
    for raw in kubectl_for(mixed).json("get", "nodes")["items"]:
        info, labels = raw["status"]["nodeInfo"], raw["metadata"]["labels"]
        node = inv.node(raw["metadata"]["name"])
        assert node is not None
        assert (node.os_image, node.kernel, node.runtime, node.kubelet_version) == (
            info["osImage"], info["kernelVersion"], info["containerRuntimeVersion"], info["kubeletVersion"])
        count = labels.get("nvidia.com/gpu.count")
        assert (node.gpu_product, node.gpu_count, node.driver, node.cuda) == (
            labels.get("nvidia.com/gpu.product"), int(count) if count else None,
            labels.get("nvidia.com/cuda.driver-version.full"), labels.get("nvidia.com/cuda.runtime-version.full"))
    unknown = inv.node("gpu-node5")
    assert unknown is not None and unknown.gpu_hardware
    assert (unknown.gpu_product, unknown.driver, unknown.cuda) == (None, None, None)


def test_hardware_classes_group_product_driver_branch_and_runtime(inv: Inventory) -> None:
    """Three classes: the A100s on 535 with containerd 1.7, the H100s on 550 with containerd 2.0,
    and the unlabelled GPU node on its own; the CPU node is in none."""
    got = {c.name: (c.drivers, c.cuda, c.kernels, c.runtime, c.nodes) for c in inv.classes}
    assert got == CLASSES
    assert [c.name for c in inv.classes] == [A100, H100, UNKNOWN]
    assert all(c.kubelets == [inv.kubernetes.version] for c in inv.classes)
    assert inv.findings == []


def test_json_carries_the_node_stack_and_classes(mixed: KubeSim, tmp_path: Path) -> None:
    """``inventory --json`` gains per node os_image, kernel, runtime, driver, cuda, gpu_product
    (null when unknown) and the hardware classes with their nodes."""
    proc = shell(mixed.kubeconfig, tmp_path, "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    nodes = {n["name"]: n for n in data["nodes"]}
    assert {k: nodes["gpu-node3"][k] for k in ("os_image", "kernel", "runtime", "driver", "cuda", "gpu_product")} == {
        "os_image": "Ubuntu 24.04.1 LTS", "kernel": "6.8.0-45-generic", "runtime": "containerd://2.0.0",
        "driver": "550.127.05", "cuda": "12.4", "gpu_product": "NVIDIA-H100-80GB-HBM3"}
    assert (nodes["gpu-node5"]["driver"], nodes["gpu-node5"]["cuda"], nodes["gpu-node5"]["gpu_product"]) == (None, None, None)
    assert nodes["gpu-node5"]["os_image"] == "Rocky Linux 9.4 (Blue Onyx)"
    classes = {c["name"]: (c["drivers"], c["cuda"], c["kernels"], c["runtime"], c["nodes"]) for c in data["classes"]}
    assert classes == CLASSES
    assert Inventory.model_validate_json(proc.stdout).classes  # lossless


def test_text_lists_driver_cuda_kernel_runtime_per_class(mixed: KubeSim, tmp_path: Path) -> None:
    """The shell's text shows one row per class with its driver, CUDA, runtime, kernel and nodes,
    each node's stack, and says plainly that gpu-node5's stack is unknown."""
    proc = shell(mixed.kubeconfig, tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = [" ".join(line.split()) for line in proc.stdout.splitlines()]
    assert "GPU stack: 3 hardware class(es), 1 GPU node(s) with no GPU Feature Discovery labels" in lines
    rows = [line for line in lines if line.startswith("| NVIDIA-") or line.startswith("| unknown (")]
    assert rows == [
        "| NVIDIA-A100-SXM4-80GB 535.183.01 12.2 containerd 1.7 5.15.0-105-generic Ubuntu 22.04.4 LTS 2: gpu-node1, gpu-node2",
        "| NVIDIA-H100-80GB-HBM3 550.127.05 12.4 containerd 2.0 6.8.0-45-generic Ubuntu 24.04.1 LTS 2: gpu-node3, gpu-node4",
        "| unknown (no GPU Feature Discovery labels) unknown unknown containerd 1.7 5.14.0-427.13.1.el9_4.x86_64 "
        "Rocky Linux 9.4 (Blue Onyx) 1: gpu-node5",
    ], proc.stdout
    assert any(line.startswith("| Stack unknown on gpu-node5: no GPU Feature Discovery labels, so the GPU product, "
                               "driver and CUDA versions are unknown.") for line in lines), proc.stdout
    node5 = next(line for line in lines if line.startswith("| gpu-node5 unknown"))
    assert node5.startswith("| gpu-node5 unknown 8 unknown unknown Rocky Linux 9.4 (Blue Onyx)"), node5
    assert any(line.startswith("| gpu-node3 NVIDIA-H100-80GB-HBM3 8 550.127.05 12.4 Ubuntu 24.04.1 LTS 6.8.0-45-generic "
                               "containerd://2.0.0 v1.") for line in lines), proc.stdout


def _texts(blocks: list[dict[str, Any]]) -> str:
    return "\n".join(b.get("text", {}).get("text", "") + "".join(e.get("text", "") for e in b.get("elements", []))
                     for b in blocks)


def test_slack_blocks_show_the_classes_within_slack_limits(inv: Inventory) -> None:
    """In Slack, the summary names the classes and the unknown node, the thread has the class table;
    every block is one slack_sdk accepts, within Slack's limits."""
    rendered = render_reply(summarize(inv), prefix="/upgrade")
    payloads = [rendered.main, *rendered.thread]
    for payload in payloads:
        assert len(payload["blocks"]) <= MAX_BLOCKS
        for block in payload["blocks"]:
            Block.parse(block).validate_json()  # type: ignore[union-attr]
            if block["type"] == "section" and "text" in block:
                assert len(block["text"]["text"]) <= MAX_SECTION
    main = json.dumps(rendered.main)
    assert "3 hardware class(es), 1 GPU node(s) with no GPU Feature Discovery labels" in main
    thread = _texts(all_blocks(rendered.thread))
    assert "Hardware classes (3: GPU product / driver branch / runtime)" in thread
    for piece in ("NVIDIA-A100-SXM4-80GB", "535.183.01", "12.2", "containerd 2.0", "6.8.0-45-generic",
                  "Stack unknown on gpu-node5", "2: gpu-node3, gpu-node4"):
        assert piece in thread, piece


def test_baseline_records_the_classes_of_the_plugin_nodes(inv: Inventory) -> None:
    """A run's baseline records the hardware classes of the plugin's nodes (short: names, versions,
    node names), survives a JSON round trip, and says which class a node was in."""
    baseline = baseline_from(inv, PLUGIN)
    assert {c.name: c.nodes for c in baseline.hardware_classes} == {k: v[-1] for k, v in CLASSES.items()}
    assert baseline.class_of("gpu-node3") is not None and baseline.class_of("gpu-node3").drivers == ["550.127.05"]  # type: ignore[union-attr]
    assert baseline.class_of("cpu-node1") is None
    assert Baseline.model_validate_json(baseline.model_dump_json()) == baseline
    stack = json.dumps([c.model_dump(mode="json") for c in baseline.hardware_classes])
    assert len(stack) < 1500, len(stack)


def test_kubesim_serve_gpu_mixed_then_inventory_json(tmp_path: Path) -> None:
    """From a shell: ``python -m kubesim serve --scenario gpu-mixed --k8s-version 1.27``, then
    ``upgradebot inventory --json`` on its kubeconfig lists the three classes."""
    kubeconfig = tmp_path / "kubeconfig"
    served = subprocess.Popen(
        [sys.executable, "-m", "kubesim", "serve", "--port", "0", "--scenario", "gpu-mixed", "--k8s-version", "1.27",
         "--kubeconfig", str(kubeconfig)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert served.stdout is not None and served.stdout.readline().startswith("https://127.0.0.1:")
        proc = shell(kubeconfig, tmp_path, "--json")
    finally:
        served.terminate()
        assert served.wait(timeout=30) == 0
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["kubernetes"]["version"].startswith("v1.27.")
    assert {c["name"]: c["nodes"] for c in data["classes"]} == {k: v[-1] for k, v in CLASSES.items()}


def test_the_canary_run_records_the_classes_in_its_baseline() -> None:
    """A canary run on gpu-mixed saves, in its progress (as the store keeps it), a baseline with
    the hardware classes of the plugin's nodes: drivers, CUDA and node names per class."""
    from runbooks.daemonset.steps import DaemonSetSteps
    from tests.integration.stepkit import SPEED, harness

    with KubeSim(scenario="gpu-mixed", k8s_version="1.32", speed=SPEED) as sim:
        h = harness(sim, node="gpu-node3")
        result = DaemonSetSteps().canary(h.ctx)
    assert result.ok, result.reason
    saved = h.run.progress["baseline"]["hardware_classes"]
    assert {c["name"]: (c["drivers"], c["cuda"], c["nodes"]) for c in saved} == {
        name: (drivers, cuda, nodes) for name, (drivers, cuda, _k, _r, nodes) in CLASSES.items()}
