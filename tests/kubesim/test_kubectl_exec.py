"""Issue 35 item 5: ``kubectl exec`` over the WebSocket protocol kubectl 1.30+ speaks
(``v5.channel.k8s.io``), for the few commands kubesim knows, with the real kubectl on 1.27,
1.32 and 1.34: ``ls /dev``, ``nvidia-smi -L`` listing the GPUs the dcgm-exporters attribute
to the pod, and the runtime's and the shell's answers for anything else."""

from __future__ import annotations

import re
import urllib.request

import pytest

from kubesim import KubeSim
from tests.kubesim._simkit import per_release
from tests.support import Kubectl

pytestmark = pytest.mark.conformance

DEVICE_PLUGIN = "ds/nvidia-device-plugin-daemonset"

sim, kubectl = per_release()


def dcgm_uuids(sim: KubeSim, node: str, pod: str) -> list[str]:
    """The UUIDs the node's dcgm-exporter labels with ``pod``, by GPU index."""
    with urllib.request.urlopen(f"{sim.dcgm_url}/sim/v1/dcgm/{node}/metrics", timeout=10) as answer:
        page = answer.read().decode()
    found = {int(m.group(1)): m.group(2) for m in re.finditer(
        rf'DCGM_FI_DEV_GPU_TEMP{{gpu="(\d+)",UUID="([^"]+)"[^}}]*pod="{pod}"', page)}
    return [found[i] for i in sorted(found)]


def test_ls_dev_lists_the_gpus_given_to_the_container(kubectl: Kubectl) -> None:
    """issue 35 item 5: ``kubectl exec trainer-1 -- ls /dev`` answers over WebSocket with the
    runtime's /dev plus the NVIDIA nodes of the container's GPUs; a plugin pod has none."""
    trainer = kubectl("exec", "-n", "ml-team", "trainer-1", "--", "ls", "/dev").splitlines()
    assert {"null", "zero", "pts", "nvidiactl", "nvidia-uvm", "nvidia0"} <= set(trainer)
    assert trainer == sorted(trainer)
    plugin = kubectl("exec", "-n", "kube-system", DEVICE_PLUGIN, "--", "ls", "/dev").splitlines()
    assert "null" in plugin and not [d for d in plugin if d.startswith("nvidia")]
    globbed = kubectl("exec", "-n", "ml-team", "trainer-1", "--", "sh", "-c", "ls /dev/nvidia[0-9]*").splitlines()
    assert globbed == [f"/dev/{d}" for d in trainer if re.fullmatch(r"nvidia\d+", d)]


def test_nvidia_smi_lists_the_pods_gpus_with_the_exporters_uuids(sim: KubeSim, kubectl: Kubectl) -> None:
    """issue 35 item 5: ``nvidia-smi -L`` in a GPU pod (device plugin: trainer-1; a claim:
    inference-0) lists its GPUs from 0 with the model and the UUIDs dcgm-exporter reports."""
    for pod in ("trainer-1", "inference-0"):
        node = kubectl.json("get", "pod", "-n", "ml-team", pod)["spec"]["nodeName"]
        lines = kubectl("exec", "-n", "ml-team", pod, "--", "nvidia-smi", "-L").splitlines()
        uuids = dcgm_uuids(sim, node, pod)
        assert uuids and lines == [f"GPU {i}: NVIDIA A100-SXM4-80GB (UUID: {u})" for i, u in enumerate(uuids)]


def test_a_missing_path_or_program_answers_as_the_container_would(kubectl: Kubectl) -> None:
    """issue 35 item 5: ``ls /dev/dra`` (no such directory) exits 2 with ls's message; a program
    the image lacks is the runtime's "executable file not found in $PATH" (kubectl exits 1);
    under ``sh -c`` it is dash's "not found" with exit code 127."""
    missing = kubectl.run("exec", "-n", "ml-team", "trainer-1", "--", "ls", "/dev/dra", check=False)
    assert missing.returncode == 2 and missing.stdout == ""
    assert missing.stderr.splitlines() == ["ls: cannot access '/dev/dra': No such file or directory",
                                           "command terminated with exit code 2"]
    absent = kubectl.run("exec", "-n", "kube-system", DEVICE_PLUGIN, "--", "nvidia-smi", "-L", check=False)
    assert absent.returncode == 1
    assert 'exec: "nvidia-smi": executable file not found in $PATH' in absent.stderr
    shell = kubectl.run("exec", "-n", "ml-team", "trainer-1", "--", "sh", "-c", "frobnicate --now", check=False)
    assert shell.returncode == 127
    assert shell.stderr.splitlines() == ["sh: 1: frobnicate: not found", "command terminated with exit code 127"]
