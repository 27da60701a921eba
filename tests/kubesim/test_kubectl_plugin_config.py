"""The NVIDIA device plugin's configuration, refereed by the real kubectl: a MIG or device-list
strategy the plugin does not know stops it at start-up (its config does not load, whatever
FAIL_ON_INIT_ERROR says), so ``kubectl set env`` of one crash-loops the new pods and
``kubectl rollout status`` never completes; a known value runs and registers."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kubesim import KubeSim
from tests.kubesim.test_kubectl import wait_for
from tests.support import Kubectl

pytestmark = pytest.mark.conformance
DS = "daemonset/nvidia-device-plugin-daemonset"


@pytest.fixture
def kubectl() -> Iterator[Kubectl]:
    with KubeSim(scenario="gpu-small", k8s_version="1.31", speed=10.0) as sim:
        yield Kubectl(sim.kubeconfig)


def _pods(kubectl: Kubectl) -> list[dict]:  # type: ignore[type-arg]
    return [p for p in kubectl.json("get", "pods", "-n", "kube-system", "-l", "name=nvidia-device-plugin-ds")["items"]
            if not p["metadata"].get("deletionTimestamp")]


def _waiting(pod: dict) -> str:  # type: ignore[type-arg]
    state = ((pod.get("status") or {}).get("containerStatuses") or [{}])[0].get("state") or {}
    return str((state.get("waiting") or {}).get("reason") or "")


@pytest.mark.parametrize("setting", ["MIG_STRATEGY=bogus", "DEVICE_LIST_STRATEGY=envvar,smoke-signals"])
def test_an_unknown_strategy_crash_loops_the_plugin_with_its_config_error(kubectl: Kubectl, setting: str) -> None:
    kubectl("set", "env", DS, "-n", "kube-system", setting)
    looping = wait_for(lambda: next((p for p in _pods(kubectl) if _waiting(p) == "CrashLoopBackOff"), None), timeout=30)
    status = kubectl.run("rollout", "status", DS, "-n", "kube-system", "--timeout=3s", check=False)
    assert status.returncode == 1 and "timed out waiting for the condition" in status.stderr
    log = kubectl("logs", looping["metadata"]["name"], "-n", "kube-system", "--previous")
    # the scenario's plugin is v0.14.2: its own errors (cmd/nvidia-device-plugin/main.go:123, issue 58)
    said = {"MIG_STRATEGY=bogus": "error starting plugins: error creating plugin manager: unknown strategy: bogus",
            "DEVICE_LIST_STRATEGY=envvar,smoke-signals": "error starting plugins: unable to load config: unable to "
            "validate flags: invalid --device-list-strategy option: invalid strategy: smoke-signals"}[setting]
    assert log.rstrip().splitlines()[-1].endswith(f"main.go:123] {said}"), log


def test_a_known_strategy_given_as_a_flag_runs_and_registers(kubectl: Kubectl) -> None:
    kubectl("patch", DS, "-n", "kube-system", "--type=json", "-p",
            '[{"op": "add", "path": "/spec/template/spec/containers/0/args", "value": ["--mig-strategy=single"]}]')
    status = kubectl.run("rollout", "status", DS, "-n", "kube-system", "--timeout=60s", check=False, timeout=90)
    assert status.returncode == 0, status.stderr
    pod = _pods(kubectl)[0]
    assert "Registered device plugin for 'nvidia.com/gpu' with Kubelet" in kubectl(
        "logs", pod["metadata"]["name"], "-n", "kube-system")
