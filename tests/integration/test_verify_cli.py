"""``upgradebot verify`` as a CI pipeline runs it: a subprocess, KUBECONFIG, exit codes, JSON.

The exit codes 0, 1 and 2 are each a process's (``run``); the text table and the refusals of
bad arguments are what ``main`` prints, run in this process (``here``: the same environment,
stdout and stderr of its own, :func:`tests.shell_support.in_process`)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubesim import KubeSim
from runbooks.daemonset.steps import DaemonSetSteps
from tests.integration.stepkit import NEW, SPEED, harness
from tests.integration.test_cli import assert_one_line_reason, run
from tests.shell_support import in_process
from tests.support import TEST_BUILDS, unreachable_kubeconfig

TARGET = "kube-system/nvidia-device-plugin-daemonset"


@pytest.fixture(scope="module")
def broken() -> Iterator[KubeSim]:
    """A cluster whose gpu-node1 runs a canary that never registers (-silent)."""
    with KubeSim(pushed=TEST_BUILDS, scenario="gpu-small", speed=SPEED) as sim:
        assert DaemonSetSteps().canary(harness(sim, image=NEW + "-silent").ctx).ok
        yield sim


def _env(sim: KubeSim) -> dict[str, str]:
    return {"KUBECONFIG": str(sim.kubeconfig)}


def here(*args: str, env: dict[str, str] | None = None, home: Path) -> subprocess.CompletedProcess[str]:
    """``upgradebot <args>`` in the environment ``run`` gives its process, run by ``main`` in this one."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("KUBE", "UPGRADEBOT"))}
    return in_process({**base, "HOME": str(home), **(env or {})}, *args)


def test_healthy_plugin_exits_0_with_every_check_in_json(cluster: KubeSim, tmp_path: Path) -> None:
    """On a healthy cluster --json lists every check as passed and the exit code is 0."""
    proc = run("verify", TARGET, "window=0.2s", "--json", env=_env(cluster), home=tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["ok"] is True and data["reason"] == ""
    assert {c["name"]: c["status"] for c in data["checks"]} == {
        name: "pass" for name in ("rollout", "pods-ready", "no-crashloop", "restarts-stable", "plugin-registered",
                                  "gpu-capacity", "events-failed-scheduling", "events-backoff", "events-admission",
                                  "kubelet-restarts")}
    assert {c["scope"] for c in data["checks"]} == {"all nodes"}


def test_failed_check_exits_1_naming_the_check_and_node(broken: KubeSim, tmp_path: Path) -> None:
    """A plugin that never registered on gpu-node1: exit 1, the failing checks named with their node."""
    proc = run("verify", TARGET, "node=gpu-node1", "window=0.2s", "--json", env=_env(broken), home=tmp_path)
    assert proc.returncode == 1, proc.stderr
    data = json.loads(proc.stdout)
    failed = {c["name"]: c["scope"] for c in data["checks"] if c["status"] == "fail"}
    assert failed == {"plugin-registered": "gpu-node1", "gpu-capacity": "gpu-node1"}
    assert "plugin-registered (gpu-node1)" in data["reason"]
    # issue 58: the running, unregistered plugin's log is matched: kubesim's -silent finds NVML and
    # no device, and its release says so ("No devices found. Waiting indefinitely.", main.go)
    registered = next(c for c in data["checks"] if c["name"] == "plugin-registered")
    assert "no GPU visible to the container" in registered["detail"], registered
    assert [s["signature"] for s in registered["evidence"]["signatures"]] == ["no-devices"]
    others = next(c for c in data["checks"] if c["name"] == "other-nodes-unchanged")
    assert others["status"] == "skip"  # no baseline outside a run


def test_text_output_puts_failures_first(broken: KubeSim, tmp_path: Path) -> None:
    """Without --json: a verdict line, the failure's evidence, then one row per check with the failures first."""
    proc = here("verify", TARGET, "window=0.2s", env=_env(broken), home=tmp_path)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].endswith(f"Verify of {TARGET} on all nodes: 2 of 10 checks failed")
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["CHECK", "SCOPE"])
    rows = lines[header + 1:]
    assert rows[0].split()[:2] == ["FAIL", "plugin-registered"] and rows[1].split()[:2] == ["FAIL", "gpu-capacity"]
    # issue 61: the unregistered plugin's current log and its signature, as the run's thread shows them
    assert "(nvidia-device-plugin-ctr, current run):" in proc.stdout, proc.stdout
    assert "main.go:381] No devices found. Waiting indefinitely." in proc.stdout
    assert "Known failure (no-devices)" in proc.stdout


@pytest.mark.parametrize(
    ("args", "reason"),
    [(["verify"], "verify needs a target"),
     (["verify", "kube-system"], "is not a target"),
     (["verify", TARGET, "node=GPU_1"], "node 'GPU_1' is not a valid Kubernetes name"),
     (["verify", TARGET, "window=soon"], "is not a duration"),
     (["verify", TARGET, "window=99999999d"], "window= may be at most 30m (limits.longest_wait"),
     (["verify", TARGET, "window=31m"], "window= may be at most 30m"),
     (["verify", TARGET, "window=0s"], "window= must be longer than 0s"),
     (["verify", TARGET, "colour=blue"], "unknown argument colour=")],
)
def test_bad_usage_exits_2_with_reason_and_usage(tmp_path: Path, args: list[str], reason: str) -> None:
    """Bad arguments: exit 2, the reason on one line and the verify usage line, nothing on stdout."""
    proc = here(*args, home=tmp_path)
    assert_one_line_reason(proc, lines=2)
    first, second = proc.stderr.splitlines()
    assert reason in first and second.startswith("usage: upgradebot verify <run>|<namespace>/<daemonset>")


def test_unreachable_cluster_exits_2(cluster: KubeSim, tmp_path: Path) -> None:
    """A kubeconfig pointing at a closed port: exit 2 with one line on stderr."""
    path, _ = unreachable_kubeconfig(cluster.kubeconfig, tmp_path)
    proc = run("verify", TARGET, "--json", env={"KUBECONFIG": str(path)}, home=tmp_path)
    assert_one_line_reason(proc)
    assert "cannot reach the API server of kubesim" in proc.stderr
