"""Issue 61: the kubelet serves its device-plugin registration socket at
``/var/lib/kubelet/device-plugins/kubelet.sock`` whatever its ``--root-dir`` (``pluginapi.KubeletSocket``;
k0s's root dir ``/var/lib/k0s/kubelet`` does not move it). NVIDIA's plugin dials kubelet.sock in
the directory mounted at that path in its container: a pod whose device-plugin hostPath is
another host directory serves its own socket, finds no kubelet there, logs its release's
registration failure 5 s later (the dial's timeout) and runs on unregistered: Ready, its node
without allocatable GPUs, and a kubelet restart does not bring it back."""

from __future__ import annotations

from typing import Any

import pytest
from _simkit import DAEMONSETS, NODES, PODS, create, get, small

from kubesim.control import apply_fault
from kubesim.simulation import Simulation

REPO = "nvcr.io/nvidia/k8s-device-plugin"
DIR = "/var/lib/kubelet/device-plugins"
K0S = "/var/lib/k0s/kubelet/device-plugins"


def plugin(sim: Simulation, tag: str, host: str, node: str = "gpu-node1") -> dict[str, Any]:
    ctr = {"name": "main", "image": f"{REPO}:{tag}", "volumeMounts": [{"name": "device-plugin", "mountPath": DIR}]}
    return create(sim, PODS, {"metadata": {"name": "dp", "namespace": "default"},
                              "spec": {"nodeName": node, "containers": [ctr],
                                       "volumes": [{"name": "device-plugin", "hostPath": {"path": host}}]}})


def log(sim: Simulation) -> str:
    return sim.logs.read("default", "dp", "main") or ""


@pytest.mark.parametrize(("tag", "failed"), [
    ("v0.14.2", ["I{} server.go:121] Could not register device plugin: context deadline exceeded",
                      "I{} server.go:142] Stopping to serve 'nvidia.com/gpu' on /var/lib/kubelet/device-plugins/nvidia-gpu.sock",
                      "E{} main.go:278] Could not contact Kubelet. Did you enable the device plugin feature gate?",
                      "E{} main.go:279] You can check the prerequisites at: https://github.com/NVIDIA/k8s-device-plugin#prerequisites",
                      "E{} main.go:280] You can learn how to set the runtime at: https://github.com/NVIDIA/k8s-device-plugin#quick-start",
                      "I{} main.go:183] Failed to start one or more plugins. Retrying in 30s..."]),
    ("v0.15.1", ["I{} server.go:151] Could not register device plugin: context deadline exceeded",
                      "I{} server.go:185] Stopping to serve 'nvidia.com/gpu' on /var/lib/kubelet/device-plugins/nvidia-gpu.sock",
                      "E{} main.go:301] Failed to start plugin: context deadline exceeded",
                      "I{} main.go:208] Failed to start one or more plugins. Retrying in 30s..."]),
    ("v0.17.0", ["E{} server.go:143] Could not register device plugin: context deadline exceeded",
                      "I{} server.go:164] Stopping to serve 'nvidia.com/gpu' on /var/lib/kubelet/device-plugins/nvidia-gpu.sock",
                      "E{} main.go:374] Failed to start plugin: context deadline exceeded",
                      "I{} main.go:268] Failed to start one or more plugins. Retrying in 30s..."]),
    ("v0.20.0", ["E{} server.go:146] Could not register device plugin: context deadline exceeded",
                      "I{} server.go:167] Stopping to serve 'nvidia.com/gpu' on /var/lib/kubelet/device-plugins/nvidia-gpu.sock",
                      "E{} main.go:409] Failed to start plugin: context deadline exceeded",
                      "I{} main.go:302] Failed to start one or more plugins. Retrying in 30s..."]),
])
def test_a_plugin_mounting_another_directory_logs_its_releases_registration_failure_after_the_dial_timeout(
        tag: str, failed: list[str]) -> None:
    sim = small()
    plugin(sim, tag, K0S)
    for _ in range(120):  # the image is pulled first: step the simulated clock until the plugin serves
        if "Starting to serve" in log(sim):
            break
        sim.advance(0.5)
    text = log(sim)
    assert "Starting to serve 'nvidia.com/gpu' on /var/lib/kubelet/device-plugins/nvidia-gpu.sock" in text, text
    assert "Could not register" not in text  # the dial waits 5 s before it gives up
    sim.advance(5)
    text = log(sim)
    lines = [ln.split(" ", 1)[0][:1] + "{} " + ln.split("] ", 1)[0].rsplit(" ", 1)[-1] + "] " + ln.split("] ", 1)[1]
             for ln in text.splitlines() if "] " in ln]
    at = lines.index(failed[0])
    assert lines[at:at + len(failed)] == failed, text
    assert "Registered device plugin" not in text
    assert get(sim, PODS, "default", "dp")["status"]["containerStatuses"][0]["ready"]  # it runs on, unregistered


def allocatable(sim: Simulation) -> dict[str, str | None]:
    return {n: (get(sim, NODES, "", n) or {})["status"]["allocatable"].get("nvidia.com/gpu")
            for n in ("gpu-node1", "gpu-node2", "gpu-node3")}


def move(sim: Simulation, path: str) -> None:
    def edit(ds: dict[str, Any]) -> None:
        ds["spec"]["template"]["spec"]["volumes"][0]["hostPath"]["path"] = path
    sim.store.mutate(DAEMONSETS, "kube-system", "nvidia-device-plugin-daemonset", edit)
    sim.settle()
    sim.advance(300)


def test_the_fleets_gpus_go_when_the_plugin_mounts_k0s_root_dir_and_come_back_with_the_kubelets_directory() -> None:
    sim = small()
    assert allocatable(sim) == dict.fromkeys(allocatable(sim), "8")
    move(sim, K0S)
    assert allocatable(sim) == dict.fromkeys(allocatable(sim), "0")
    assert apply_fault(sim, {"kind": "kubelet-restart", "node": "gpu-node1"}) is None
    sim.advance(10)
    assert allocatable(sim)["gpu-node1"] == "0"  # kubelet.sock is made again in the kubelet's directory, not in K0S
    move(sim, DIR)
    assert allocatable(sim) == dict.fromkeys(allocatable(sim), "8")
