"""``upgradebot inventory`` as a pipeline runs it: a subprocess, KUBECONFIG, exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kubesim import KubeSim
from tests.support import unreachable_kubeconfig

UPGRADEBOT = str(Path(sys.executable).parent / "upgradebot")


def run(*args: str, env: dict[str, str] | None = None, home: Path, module: bool = False) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("KUBE", "UPGRADEBOT"))}
    base["HOME"] = str(home)
    command = [sys.executable, "-m", "bot", *args] if module else [UPGRADEBOT, *args]
    return subprocess.run(command, capture_output=True, text=True, env={**base, **(env or {})}, timeout=60)


def assert_one_line_reason(proc: subprocess.CompletedProcess[str], *, lines: int = 1) -> None:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == lines, proc.stderr
    assert proc.stdout == ""


def test_json_inventory_of_a_healthy_cluster_exits_0(cluster: KubeSim, tmp_path: Path, kubectl_for) -> None:
    """--json prints the keys pipelines read, and exit code 0 on a healthy cluster."""
    proc = run("inventory", "--json", env={"KUBECONFIG": str(cluster.kubeconfig)}, home=tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["kubernetes"]["version"] == "v1.31.13"
    assert (data["dra"]["feature_gate"], data["dra"]["served_versions"]) == ("enabled", ["v1alpha3"])
    nodes = {n["name"]: (n["capacity"], n["allocatable"]) for n in data["nodes"]}
    assert nodes["gpu-node1"] == ({"nvidia.com/gpu": 8}, {"nvidia.com/gpu": 8})
    ds = {(d["namespace"], d["name"]): d["images"] for d in data["daemonsets"]}
    assert ds[("kube-system", "nvidia-device-plugin-daemonset")] == {
        "nvidia-device-plugin-ctr": "nvcr.io/nvidia/k8s-device-plugin:v0.14.2"}
    assert {(c["namespace"], c["name"], c["state"]) for c in data["claims"]} == {
        ("ml-team", "shared-gpu", "allocated,reserved"), ("ml-team", "pending-gpu", "pending")}
    assert data["findings"] == []


def test_text_inventory_for_people(cluster: KubeSim, tmp_path: Path) -> None:
    """Without --json the inventory is a readable report (here with --kubeconfig and cluster=)."""
    proc = run("inventory", "cluster=kubesim", "--kubeconfig", str(cluster.kubeconfig), home=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = [" ".join(line.split()) for line in proc.stdout.splitlines()]
    assert "Kubernetes: v1.31.13" in lines and "DynamicResourceAllocation: enabled (ALPHA)" in lines
    assert "kube-system/nvidia-device-plugin-daemonset" in proc.stdout
    assert "No findings: the cluster looks ready for an upgrade." in proc.stdout


def test_fail_finding_exits_1(fresh_cluster: KubeSim, tmp_path: Path) -> None:
    """A finding of severity fail (here: the DRA gate off with DRA objects) makes the exit code 1."""
    fresh_cluster.fault(kind="feature-gate", name="DynamicResourceAllocation", enabled=False)
    proc = run("inventory", "--json", env={"KUBECONFIG": str(fresh_cluster.kubeconfig)}, home=tmp_path, module=True)
    assert proc.returncode == 1, proc.stderr
    assert [f["severity"] for f in json.loads(proc.stdout)["findings"]] == ["fail"]


def test_unreachable_cluster_exits_2_with_one_line(cluster: KubeSim, tmp_path: Path) -> None:
    """A kubeconfig pointing at a closed port: exit 2 and one line on stderr, no traceback."""
    path, port = unreachable_kubeconfig(cluster.kubeconfig, tmp_path)
    proc = run("inventory", "--json", env={"KUBECONFIG": str(path)}, home=tmp_path)
    assert_one_line_reason(proc)
    assert f"cannot reach the API server of kubesim at https://127.0.0.1:{port}" in proc.stderr
    assert cluster.token not in proc.stderr


@pytest.mark.parametrize(
    ("args", "reason"),
    [(["invent"], "unknown verb 'invent' (did you mean inventory?)"),
     ([], "the following arguments are required"),
     (["inventory", "colour=blue"], "unknown argument colour="),
     (["inventory", "--jsn"], "unrecognized arguments: --jsn")],
)
def test_bad_usage_exits_2_with_reason_and_usage(tmp_path: Path, args: list[str], reason: str) -> None:
    """Bad usage: exit 2, the reason on one line, then the usage line; nothing on stdout."""
    proc = run(*args, home=tmp_path)
    assert_one_line_reason(proc, lines=2)
    first, second = proc.stderr.splitlines()
    assert reason in first and second.startswith("usage: upgradebot")


def test_unknown_context_and_bad_policy_exit_2(cluster: KubeSim, tmp_path: Path) -> None:
    """cluster=<unknown context> and an invalid UPGRADEBOT_CONFIG are each one line and exit 2."""
    env = {"KUBECONFIG": str(cluster.kubeconfig)}
    proc = run("inventory", "cluster=prod", env=env, home=tmp_path)
    assert_one_line_reason(proc)
    assert "no context 'prod'" in proc.stderr and "contexts: kubesim" in proc.stderr
    policy = tmp_path / "policy.yaml"
    policy.write_text("targets: [not-a-target]\n")
    proc = run("inventory", env={**env, "UPGRADEBOT_CONFIG": str(policy)}, home=tmp_path)
    assert_one_line_reason(proc)
    assert "is not a target" in proc.stderr


def test_policy_targets_choose_the_daemonsets(cluster: KubeSim, tmp_path: Path) -> None:
    """Targets from UPGRADEBOT_CONFIG decide which DaemonSets are inventoried."""
    policy = tmp_path / "policy.yaml"
    policy.write_text("approvers: {users: [U0BOB]}\ntargets:\n  - dra-example-driver/dra-example-driver-kubeletplugin\n")
    env = {"KUBECONFIG": str(cluster.kubeconfig), "UPGRADEBOT_CONFIG": str(policy)}
    proc = run("inventory", "--json", env=env, home=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert [d["name"] for d in json.loads(proc.stdout)["daemonsets"]] == ["dra-example-driver-kubeletplugin"]


def test_a_bug_is_one_line_and_exit_2_never_a_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    """An exception nobody expected (a bug) still gets one line on stderr, no traceback."""
    import io

    from bot.shell import cli

    def broken(*args: object, **kwargs: object) -> None:
        raise KeyError("upgradebot")

    monkeypatch.setattr(cli, "run_command", broken)
    err = io.StringIO()
    assert cli.main(["runs"], out=io.StringIO(), err=err) == 2
    assert err.getvalue().count("\n") == 1 and "Traceback" not in err.getvalue()
    assert "internal error (KeyError: 'upgradebot')" in err.getvalue()
