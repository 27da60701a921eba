"""Errors that say what to do (issue 41): a typo in a policy key or a verb gets "did you mean",
and a kubeconfig file that does not exist is "not found" with its path, not "Invalid
kube-config file". The shell as a person runs it: one line, exit 2, no traceback."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kubesim import KubeSim
from tests.integration.test_cli import assert_one_line_reason, run


@pytest.mark.parametrize(("policy", "typo", "meant"), [
    ("approvers: {users: [U0BOB]}\nidentites: {accounts: {}}\n", "identites", "identities"),
    ("approvers: {user: [U0BOB]}\n", "approvers.user", "users"),
    ("approvers: {users: [U0BOB]}\nshell: {aprovals: true}\n", "shell.aprovals", "approvals"),
])
def test_an_unknown_policy_key_gets_did_you_mean(tmp_path: Path, policy: str, typo: str, meant: str) -> None:
    """issue 41: `identites:` is not "Extra inputs are not permitted" alone: the line names the key
    and the key it most looks like, at any depth of the policy."""
    path = tmp_path / "policy.yaml"
    path.write_text(policy)
    proc = run("status", env={"UPGRADEBOT_CONFIG": str(path)}, home=tmp_path)
    assert_one_line_reason(proc)
    assert str(path) in proc.stderr and typo in proc.stderr, proc.stderr
    assert f"did you mean {meant}?" in proc.stderr, proc.stderr


def test_an_unknown_verb_gets_did_you_mean(tmp_path: Path) -> None:
    """issue 41: `upgradebot canery` says "did you mean canary?" instead of listing 27 choices."""
    proc = run("canery", home=tmp_path)
    assert_one_line_reason(proc, lines=2)  # the reason, then the usage line
    assert "unknown verb 'canery'" in proc.stderr and "did you mean canary?" in proc.stderr, proc.stderr
    assert "invalid choice" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("how", ["KUBECONFIG", "--kubeconfig"])
def test_a_missing_kubeconfig_is_not_found(tmp_path: Path, how: str) -> None:
    """issue 41: a kubeconfig path that names no file is "not found" with the path and what to do,
    whether KUBECONFIG or --kubeconfig named it."""
    missing = tmp_path / "nope" / "kubeconfig"
    args, env = (("inventory",), {"KUBECONFIG": str(missing)}) if how == "KUBECONFIG" else \
        (("inventory", "--kubeconfig", str(missing)), {})
    proc = run(*args, env=env, home=tmp_path)
    assert_one_line_reason(proc)
    assert f"{missing} not found" in proc.stderr and "Invalid kube-config" not in proc.stderr, proc.stderr
    assert "KUBECONFIG" in proc.stderr, proc.stderr


def test_a_kubeconfig_list_with_one_missing_file_still_loads(cluster: KubeSim, tmp_path: Path) -> None:
    """issue 41: KUBECONFIG may list several files, as kubectl reads it; one that does not exist
    among them is skipped, as kubectl skips it, not refused as "not found"."""
    missing = tmp_path / "absent"
    proc = run("inventory", "--json", env={"KUBECONFIG": f"{missing}:{cluster.kubeconfig}"}, home=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert isinstance(proc, subprocess.CompletedProcess)
