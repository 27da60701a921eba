"""The compatibility matrix at request time on kubesim ``gpu-mixed`` (issue 36, items 2 and 6),
with the real engine, the shell and kubectl.

gpu-node1/2 are A100 nodes on driver 535, gpu-node3/4 H100 nodes on driver 550, gpu-node5 a
GPU node without GFD labels. A device plugin built for driver 550 (``-driver550``) is refused
before any approver is asked, naming the matrix row and gpu-node1, gpu-node2; the release
itself is requested, its request showing the unknown stack of gpu-node5 as a warning; the
policy's per-target override moves the minimum or turns the check off. On kubesim the
``-driver550`` image crash-loops on gpu-node1 with NVIDIA's NVML error and runs on gpu-node3."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from handlers.run_views import gate_message
from kubesim import KubeSim
from runbooks.engine.approving import Actor
from runbooks.engine.refusals import Refused
from runbooks.engine.runs import RunState
from runbooks.policy import Policy
from tests.engine_support import kubesim_engine
from tests.support import TEST_BUILDS, Kubectl, shell_identities

NS, DS = "kube-system", "nvidia-device-plugin-daemonset"
TARGET = f"{NS}/{DS}"
PLUGIN = "nvcr.io/nvidia/k8s-device-plugin"
NEEDS_550 = f"{PLUGIN}:v0.17.0-driver550"
RELEASE = f"{PLUGIN}:v0.17.0"
ALICE, BOB = Actor("U0ALICE"), Actor("U0BOB")
UPGRADEBOT = str(Path(sys.executable).parent / "upgradebot")


def policy(compatibility: dict[str, Any] | None = None) -> Policy:
    target: Any = {"namespace": NS, "name": DS, "compatibility": compatibility} if compatibility else TARGET
    return Policy.model_validate({"approvers": {"users": ["U0BOB"]}, "reports": {"after": []},
                                  "steps": {"observe_window": "1s", "poll_interval": "0.1s"}, "targets": [target]})


@pytest.fixture(scope="module")
def mixed() -> Iterator[KubeSim]:
    with KubeSim(pushed=TEST_BUILDS, scenario="gpu-mixed", k8s_version="1.32", speed=4) as sim:
        yield sim


@pytest.mark.parametrize("k8s", ["1.27", "1.32", "1.34"])
def test_a_plugin_needing_a_newer_driver_is_refused_naming_the_row_and_the_nodes(k8s: str, redis_url: str) -> None:
    """issue 36, item 2: a canary of the -driver550 build on gpu-node3 (itself on 550) is refused
    before any approver is asked: the row (device plugin v0.17.x, its README), the A100 class and
    gpu-node1, gpu-node2 are named; the H100 nodes are not; no run is stored (Kubernetes 1.27,
    1.32 and 1.34)."""
    with KubeSim(pushed=TEST_BUILDS, scenario="gpu-mixed", k8s_version=k8s, speed=4) as sim:
        _refused_naming_the_a100_nodes(sim, redis_url)


def _refused_naming_the_a100_nodes(mixed: KubeSim, redis_url: str) -> None:
    engine = kubesim_engine(mixed, redis_url, policy())
    with pytest.raises(Refused) as refused:
        engine.request_canary(actor=ALICE, target=TARGET, image=NEEDS_550, node="gpu-node3")
    said = str(refused.value)
    assert said.startswith(f"canary of {NEEDS_550} on gpu-node3 refused before any approver was asked"), said
    assert "compatibility: " in said and "needs NVIDIA driver branch 550 or newer" in said
    assert "NVIDIA device plugin v0.17.x" in said and "README.md#prerequisites" in said
    assert "NVIDIA-A100-SXM4-80GB / driver 535 / containerd 1.7 has gpu-node1, gpu-node2 on driver 535.183.01" in said
    assert "gpu-node3," not in said and "gpu-node4" not in said and len(said.splitlines()) == 1
    assert engine.runs(limit=5) == []


DIGEST = "sha256:" + "ab" * 32
SPELLINGS = [
    "nvcr.io:443/nvidia/k8s-device-plugin:v0.17.0-driver550",  # the https default port
    "NVCR.IO/nvidia/k8s-device-plugin:v0.17.0-driver550",  # the host's case
    f"{PLUGIN}:v0.17.0-ubi9-driver550",  # v0.17's one published distribution suffix (its Makefile)
    f"{PLUGIN}:v0.17.0-driver550-ubi9",
    f"{NEEDS_550}@{DIGEST}",  # tag and digest: judged by its tag
    f"nvcr.io:443/nvidia/k8s-device-plugin:v0.17.0-ubi9-driver550@{DIGEST}",
]


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_every_spelling_of_the_image_is_refused_as_the_canonical_one(mixed: KubeSim, redis_url: str,
                                                                       spelling: str) -> None:
    """Attack finding 5: the registry's default port, the host's case, the release's distribution
    suffix and a digest beside the tag do not take the -driver550 build out of its row: each is
    refused before any approver is asked, in the same words as the canonical spelling (but for
    the image as written), naming the row and gpu-node1, gpu-node2; no run is stored."""
    engine = kubesim_engine(mixed, redis_url, policy())
    with pytest.raises(Refused) as canonical:
        engine.request_canary(actor=ALICE, target=TARGET, image=NEEDS_550, node="gpu-node3")
    with pytest.raises(Refused) as refused:
        engine.request_canary(actor=ALICE, target=TARGET, image=spelling, node="gpu-node3")
    said = str(refused.value)
    assert "NVIDIA device plugin v0.17.x" in said and "gpu-node1, gpu-node2" in said, said
    assert said.replace(spelling, NEEDS_550) == str(canonical.value)
    assert engine.runs(limit=5) == []


def test_the_release_is_requested_with_the_unknown_stack_as_a_warning(mixed: KubeSim, redis_url: str) -> None:
    """issue 36, item 2: v0.17.0 (driver 384 or newer per its README) is requested; the request
    the approvers see warns that gpu-node5's driver is unknown, and is not refused for it."""
    engine = kubesim_engine(mixed, redis_url, policy())
    run = engine.request_canary(actor=ALICE, target=TARGET, image=RELEASE, node="gpu-node3").run
    try:
        assert run.state is RunState.AWAITING_APPROVAL and run.gate is not None
        [warning] = run.progress["request_warnings"]
        assert warning.startswith("compatibility: the driver of gpu-node5 is unknown"), warning
        shown = gate_message(run, run.gate).text
        assert "Warnings (not refused" in shown and "gpu-node5" in shown, shown
    finally:
        engine.reject(run.id, actor=BOB)


def test_the_policy_override_moves_the_minimum_or_turns_the_check_off(mixed: KubeSim, redis_url: str) -> None:
    """issue 36, item 2: compatibility.min_driver: "550" refuses the release itself on the A100
    nodes, naming the policy; ignore: true lets the -driver550 build be requested."""
    engine = kubesim_engine(mixed, redis_url, policy({"min_driver": "550"}))
    with pytest.raises(Refused, match=r"compatibility\.min_driver of this target in the policy.*gpu-node1, gpu-node2"):
        engine.request_canary(actor=ALICE, target=TARGET, image=RELEASE, node="gpu-node3")
    engine = kubesim_engine(mixed, redis_url, policy({"ignore": True}))
    run = engine.request_canary(actor=ALICE, target=TARGET, image=NEEDS_550, node="gpu-node3").run
    assert run.gate is not None and run.gate.is_open and "request_warnings" not in run.progress
    engine.reject(run.id, actor=BOB)


def test_with_the_check_off_the_canary_on_the_older_driver_crash_loops_and_is_rolled_back(
        mixed: KubeSim, redis_url: str) -> None:
    """issue 36, items 2 and 6: what the refusal prevents. With compatibility.ignore the
    -driver550 build is approved for a canary on gpu-node1 (driver 535): kubesim's plugin
    crash-loops there, the canary fails naming gpu-node1 and the run is rolled back."""
    from runbooks.cluster import Cluster
    from runbooks.engine.clocks import ClusterClock

    clock = ClusterClock(Cluster.from_kubeconfig(mixed.kubeconfig).server_time)
    engine = kubesim_engine(mixed, redis_url, policy({"ignore": True}), clock=clock)
    run = engine.request_canary(actor=ALICE, target=TARGET, image=NEEDS_550, node="gpu-node1").run
    engine.approve(run.id, actor=BOB)
    run = engine.advance(run.id)
    assert run.state in (RunState.ROLLED_BACK, RunState.FAILED), (run.state, run.reason)
    crash = [e for e in engine.audit(run.id) if e["name"] == "canary.no-crashloop"]
    assert crash and crash[0]["status"] == "failed" and "on gpu-node1 is crash-looping" in crash[0]["detail"], crash
    image = Kubectl(mixed.kubeconfig).json("get", "daemonset", DS, "-n", NS)["spec"]["template"]["spec"]["containers"][0]
    assert image["image"] != NEEDS_550


def test_the_shell_refuses_it_with_exit_2(mixed: KubeSim, redis_url: str, tmp_path: Path) -> None:
    """issue 36, item 2: ``upgradebot canary … image=<-driver550 build>`` exits 2 with the refusal
    naming gpu-node1 and gpu-node2, no traceback, and no run."""
    identities, tokens = shell_identities("U0ALICE", "U0BOB")
    config = tmp_path / "policy.yaml"
    config.write_text(f"approvers: {{users: [U0BOB]}}\nshell: {{approvals: true}}\ntargets: [{TARGET}]\n{identities}")
    base = {k: v for k, v in os.environ.items() if not k.startswith(("KUBE", "UPGRADEBOT", "REDIS"))}
    env = {**base, "HOME": str(tmp_path), "KUBECONFIG": str(mixed.kubeconfig), "REDIS_URL": redis_url,
           "UPGRADEBOT_CONFIG": str(config), "UPGRADEBOT_TOKEN": tokens["U0ALICE"]}
    proc = subprocess.run([UPGRADEBOT, "canary", TARGET, f"image={NEEDS_550}", "node=gpu-node4"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr and "gpu-node1, gpu-node2" in proc.stderr, proc.stderr
    assert "refused before any approver was asked" in proc.stderr
    runs = subprocess.run([UPGRADEBOT, "runs"], capture_output=True, text=True, env=env, timeout=120)
    assert runs.returncode == 0 and "r-" not in runs.stdout, runs.stdout


def _pod(node: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"needs-550-{node}", "namespace": "default"},
            "spec": {"nodeName": node, "containers": [{"name": "plugin", "image": NEEDS_550}],
                     "tolerations": [{"operator": "Exists"}]}}


def test_kubesim_crash_loops_the_driver550_build_on_the_older_driver(mixed: KubeSim, tmp_path: Path) -> None:
    """issue 36, item 6: the -driver550 build on gpu-node1 (driver 535) restarts with NVIDIA's
    own lines in ``kubectl logs`` (NVML's "Driver/library version mismatch"); on gpu-node3
    (driver 550) it registers with the kubelet and stays up."""
    import json

    kubectl = Kubectl(mixed.kubeconfig)
    for node in ("gpu-node1", "gpu-node3"):
        kubectl.run("apply", "-f", "-", input=json.dumps(_pod(node)))
    deadline = time.monotonic() + 120
    old: dict[str, Any] = {}
    while time.monotonic() < deadline:
        old = kubectl.json("get", "pod", "needs-550-gpu-node1", "-n", "default")
        if any(int(s.get("restartCount") or 0) >= 1 for s in (old.get("status") or {}).get("containerStatuses") or []):
            break
        time.sleep(0.2)
    [status] = old["status"]["containerStatuses"]
    assert status["restartCount"] >= 1 and not status["ready"], status
    logs = kubectl("logs", "needs-550-gpu-node1", "-n", "default")
    assert "factory.go:93] Failed to initialize NVML: Driver/library version mismatch." in logs, logs
    assert ("main.go:173] error starting plugins: error getting plugins: failed to construct resource managers: "
            "nvml init failed: Driver/library version mismatch") in logs, logs
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        newer = kubectl("logs", "needs-550-gpu-node3", "-n", "default", check=False)
        if "Registered device plugin for 'nvidia.com/gpu' with Kubelet" in newer:
            break
        time.sleep(0.2)
    assert "Registered device plugin for 'nvidia.com/gpu' with Kubelet" in newer and "mismatch" not in newer, newer
    [up] = kubectl.json("get", "pod", "needs-550-gpu-node3", "-n", "default")["status"]["containerStatuses"]
    assert up["ready"] and up["restartCount"] == 0, up
