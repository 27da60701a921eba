"""Issue 61, deliverable 6: a wrong device-plugin mount fixed through a canary
(``volume=<name>:<hostPath>``), on kubesim ``gpu-small`` with the real steps, verified and
promoted like any template change; a wrong path fails its verification and is rolled back to
the exact template saved before.

The kubelet serves device-plugin registration at ``/var/lib/kubelet/device-plugins`` whatever its
``--root-dir`` (``pluginapi.KubeletSocket``; k0s's kubelet runs with ``/var/lib/k0s/kubelet`` and
keeps that directory): a plugin mounting ``/var/lib/k0s/kubelet/device-plugins`` never registers.
So here the broken mount is k0s's root dir and the fix is the kubelet's directory."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from handlers.arguments import UsageError
from handlers.run_views import gate_message
from handlers.runs import parse_canary
from kubesim import KubeSim
from runbooks.cluster import Cluster
from runbooks.engine.approving import Actor
from runbooks.engine.clocks import ClusterClock
from runbooks.engine.commands import Engine
from runbooks.engine.refusals import Refused
from runbooks.engine.runs import RunState
from runbooks.inventory import take_inventory
from runbooks.policy import Policy
from tests.engine_support import kubesim_engine
from tests.integration.test_cli import assert_one_line_reason, run
from tests.support import Kubectl

S = RunState
NS, DS = "kube-system", "nvidia-device-plugin-daemonset"
TARGET = f"{NS}/{DS}"
KUBELET_DIR = "/var/lib/kubelet/device-plugins"
K0S_DIR = "/var/lib/k0s/kubelet/device-plugins"
GPU_NODES = ("gpu-node1", "gpu-node2", "gpu-node3")
ALICE, BOB, CAROL = Actor("U0ALICE"), Actor("U0BOB"), Actor("U0CAROL")
POLICY = Policy.model_validate({
    "approvers": {"users": ["U0BOB", "U0CAROL"]},
    "reports": {"after": []},
    "steps": {"observe_window": "1s", "poll_interval": "0.1s", "ready_timeout": "60s", "settle_window": "1s"},
    "targets": [TARGET],
})


@pytest.fixture
def sim() -> Iterator[KubeSim]:
    with KubeSim(scenario="gpu-small", k8s_version="1.31", speed=4) as served:
        yield served


def engine_on(sim: KubeSim, redis_url: str) -> Engine:
    return kubesim_engine(sim, redis_url, POLICY, clock=ClusterClock(Cluster.from_kubeconfig(sim.kubeconfig).server_time))


def template(kubectl: Kubectl) -> dict[str, Any]:
    return dict(kubectl.json("get", "daemonset", DS, "-n", NS)["spec"]["template"])


def mounted(kubectl: Kubectl) -> dict[str, str]:
    """The device-plugin hostPath of each node's live plugin pod."""
    pods = kubectl.json("get", "pods", "-n", NS, "-l", "name=nvidia-device-plugin-ds")["items"]
    return {p["spec"]["nodeName"]: next(v["hostPath"]["path"] for v in p["spec"]["volumes"] if v["name"] == "device-plugin")
            for p in pods if not p["metadata"].get("deletionTimestamp")}


def allocatable(kubectl: Kubectl) -> dict[str, str]:
    return {n["metadata"]["name"]: n["status"]["allocatable"].get("nvidia.com/gpu", "0")
            for n in kubectl.json("get", "nodes")["items"] if n["metadata"]["name"] in GPU_NODES}


def request(engine: Engine, words: str) -> Any:
    """A canary as the chat and the shell parse it."""
    args = parse_canary([TARGET, *words.split()])
    return engine.request_canary(actor=ALICE, target=args.target, image=args.image, node=args.node,
                                 edits=args.edits).run


def test_a_plugin_mounted_from_the_wrong_directory_is_fixed_one_node_first_then_the_fleet(
        sim: KubeSim, redis_url: str) -> None:
    """Someone moved the plugin's socket directory to k0s's kubelet root dir: no plugin registers,
    every GPU node offers 0 GPUs. The canary moving the volume back is not refused for the failing
    findings it is meant to fix; it shows the path before and after, fixes gpu-node1 first and the
    rest once promoted."""
    kubectl = Kubectl(sim.kubeconfig)
    kubectl("patch", "daemonset", DS, "-n", NS, "--type=json", "-p",
            f'[{{"op": "replace", "path": "/spec/template/spec/volumes/0/hostPath/path", "value": "{K0S_DIR}"}}]')
    kubectl("rollout", "status", f"daemonset/{DS}", "-n", NS, "--timeout=120s", timeout=150)
    sim.advance("60s")
    assert set(mounted(kubectl).values()) == {K0S_DIR} and set(allocatable(kubectl).values()) == {"0"}
    found = {f.code: f for f in take_inventory(Cluster.from_kubeconfig(sim.kubeconfig)).findings}
    assert found["device-plugin-hostpath"].severity == "fail" and f"{KUBELET_DIR} <- {K0S_DIR}" in found["device-plugin-hostpath"].message
    fix = re.search(r"`canary (\S+) (.+) node=auto`", found["device-plugin-hostpath"].next_step)
    assert fix is not None and fix.groups() == (TARGET, f"volume=device-plugin:{KUBELET_DIR}")

    engine = engine_on(sim, redis_url)
    run = request(engine, f"node=gpu-node1 {fix.group(2)}")
    assert run.gate is not None and run.image == "nvcr.io/nvidia/k8s-device-plugin:v0.14.2"
    text = gate_message(run, run.gate).text
    assert f"`volume device-plugin hostPath {KUBELET_DIR}`" in text, text
    assert f"-      path: {K0S_DIR}\n+      path: {KUBELET_DIR}" in text, text
    engine.approve(run.id, actor=BOB)
    run = engine.advance(run.id)
    assert run.state is S.AWAITING_PROMOTION, run.reason
    seen = mounted(kubectl)
    assert seen["gpu-node1"] == KUBELET_DIR and {seen["gpu-node2"], seen["gpu-node3"]} == {K0S_DIR}
    assert allocatable(kubectl)["gpu-node1"] == "8"
    engine.approve(run.id, actor=CAROL)
    run = engine.advance(run.id)
    assert run.state is S.DONE, run.reason
    assert set(mounted(kubectl).values()) == {KUBELET_DIR}
    assert allocatable(kubectl) == dict.fromkeys(GPU_NODES, "8")
    assert template(kubectl)["spec"]["volumes"] == [
        {"name": "device-plugin", "hostPath": {"path": KUBELET_DIR, "type": ""}}]


def test_a_wrong_path_fails_its_verification_and_the_exact_template_comes_back(sim: KubeSim, redis_url: str) -> None:
    kubectl = Kubectl(sim.kubeconfig)
    before = template(kubectl)
    engine = engine_on(sim, redis_url)
    run = request(engine, f"node=gpu-node2 volume=device-plugin:{K0S_DIR}")
    engine.approve(run.id, actor=BOB)
    run = engine.advance(run.id)
    assert run.state is S.ROLLED_BACK, run.reason
    assert "gpu-node2" in run.reason and "did not register" in run.reason, run.reason
    assert template(kubectl) == before
    sim.advance("60s")
    assert set(mounted(kubectl).values()) == {KUBELET_DIR}
    assert allocatable(kubectl) == dict.fromkeys(GPU_NODES, "8")


def test_a_volume_that_cannot_be_moved_is_refused_before_anyone_is_asked(sim: KubeSim, redis_url: str) -> None:
    engine = engine_on(sim, redis_url)
    with pytest.raises(Refused, match=r"has no volume sockets \(its volumes: device-plugin\)"):
        request(engine, f"node=gpu-node1 volume=sockets:{KUBELET_DIR}")
    with pytest.raises(Refused, match=rf"already has volume device-plugin hostPath {KUBELET_DIR}.*nothing to change"):
        request(engine, f"node=gpu-node1 volume=device-plugin:{KUBELET_DIR}")
    with pytest.raises(UsageError, match="is not an absolute path"):
        request(engine, "node=gpu-node1 volume=device-plugin:var/lib/kubelet/device-plugins")
    assert sim.mutations() == []


@pytest.mark.parametrize(("word", "reason"), [
    ("volume=device-plugin", "volume=device-plugin: use volume=<name>:<hostPath>"),
    ("volume=device-plugin:var/lib/kubelet/device-plugins", "is not an absolute path"),
    ("volume=device-plugin:/var/lib/../kubelet/device-plugins", "is not a clean path"),
])
def test_the_shell_refuses_a_bad_volume_word_in_one_line_and_exit_2(tmp_path: Path, word: str, reason: str) -> None:
    """Before any cluster or policy is read: the reason on one line, then the canary's usage line."""
    proc = run("canary", TARGET, "node=gpu-node1", word, home=tmp_path)
    assert_one_line_reason(proc, lines=2)
    first, second = proc.stderr.splitlines()
    assert reason in first and "volume=<name>:<hostPath>" in second
