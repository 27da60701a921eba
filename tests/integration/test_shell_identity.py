"""The shell's identity is derived, never told: its OS account (or a CI job's token)
through the policy's ``identities``; ``--as`` may only name that identity, and approving
from the shell is off unless the policy enables it.

Found on main before: anyone with the shell, REDIS_URL and the kubeconfig requested as
one name and approved as another (``--as``), and the audit recorded the false approver.

The commands run test_run_cli's ``bot``: ``main`` in this process with each command's own
environment (the identity is read from the effective uid and that environment, as in a
process); test_run_cli runs the CI token's identity in real processes.
"""

from __future__ import annotations

import json
import os
import pwd
from pathlib import Path

import pytest

from kubesim import KubeSim
from tests.integration.test_run_cli import NEW, TARGET, TOKENS, bot, refused

ME = pwd.getpwuid(os.geteuid()).pw_name
BASE = "approvers: {users: [U0BOB, U0CAROL]}\nreports: {after: []}\n"


@pytest.fixture
def shell(sim: KubeSim, redis_url: str, tmp_path: Path) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("KUBE", "UPGRADEBOT", "REDIS"))}
    return {**base, "HOME": str(tmp_path), "KUBECONFIG": str(sim.kubeconfig), "REDIS_URL": redis_url}


def with_policy(env: dict[str, str], tmp_path: Path, text: str) -> dict[str, str]:
    path = tmp_path / "identity-policy.yaml"
    path.write_text(BASE + text)
    return {**env, "UPGRADEBOT_CONFIG": str(path)}


def runs(env: dict[str, str]) -> list[dict[str, object]]:
    proc = bot(env, "runs", "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["runs"]  # type: ignore[no-any-return]


def test_the_os_account_is_mapped_and_as_may_not_name_anyone_else(shell: dict[str, str], tmp_path: Path) -> None:
    env = with_policy(shell, tmp_path, f"identities: {{accounts: {{{ME}: U0ALICE}}}}\n")
    refused(bot({**env, "USER": "U0BOB"}, "canary", TARGET, f"image={NEW}", "node=gpu-node1", "--as", "U0BOB"),
            "--as U0BOB refused: you act as U0ALICE")
    assert runs(env) == []  # nothing was stored
    proc = bot({**env, "USER": "U0BOB", "UPGRADEBOT_USER": "U0BOB"}, "canary", TARGET, f"image={NEW}",
               "node=gpu-node1", "--json")
    assert proc.returncode == 0, proc.stderr
    run = json.loads(proc.stdout)
    assert run["requester"] == "U0ALICE"  # $USER is not asked
    trail = json.loads(bot(env, "audit", run["id"], "--json").stdout)["entries"]
    requested = next(e for e in trail if e["name"] == "requested")
    assert (requested["actor"], requested["surface"], requested["account"]) == (
        "U0ALICE", "shell", ME)  # no host: a host name is not verified (finding 2 of the security review)


def test_an_unmapped_account_may_read_but_not_act(shell: dict[str, str], tmp_path: Path) -> None:
    env = with_policy(shell, tmp_path, "identities: {accounts: {someone-else: U0ALICE}}\n")
    refused(bot(env, "canary", TARGET, f"image={NEW}", "node=gpu-node1"),
            f"the OS account {ME} has no identity in the policy")
    assert runs(env) == []
    only_here = with_policy(shell, tmp_path, f"identities: {{accounts: {{{ME}@another-host: U0ALICE}}}}\n")
    refused(bot(only_here, "canary", TARGET, f"image={NEW}", "node=gpu-node1"), "names a host")


def test_an_unknown_ci_token_is_refused(shell: dict[str, str], tmp_path: Path) -> None:
    from tests.integration.test_run_cli import IDENTITIES

    env = with_policy(shell, tmp_path, IDENTITIES)
    refused(bot({**env, "UPGRADEBOT_TOKEN": "guessed"}, "canary", TARGET, f"image={NEW}", "node=gpu-node1"),
            "UPGRADEBOT_TOKEN matches no identities.tokens entry")
    assert runs(env) == []


def test_approving_from_the_shell_is_off_unless_the_policy_enables_it(shell: dict[str, str], tmp_path: Path) -> None:
    from tests.integration.test_run_cli import IDENTITIES

    env = with_policy(shell, tmp_path, IDENTITIES)
    run_id = json.loads(bot(env, "canary", TARGET, f"image={NEW}", "node=gpu-node1", "--json",
                            who="U0ALICE").stdout)["id"]
    refused(bot(env, "approve", run_id, "canary", who="U0BOB"), "approvals from the shell are off")
    status = json.loads(bot(env, "status", run_id, "--json").stdout)
    assert status["state"] == "awaiting_approval" and status["gate"]["decisions"] == []
    assert TOKENS  # the tokens of test_run_cli: one per person


def test_without_a_policy_file_the_shell_is_its_os_account_and_cannot_approve(shell: dict[str, str]) -> None:
    refused(bot(shell, "canary", TARGET, f"image={NEW}", "node=gpu-node1", "--as", "U0BOB"),
            f"--as U0BOB refused: you act as {ME}")
    proc = bot(shell, "canary", TARGET, f"image={NEW}", "node=gpu-node1", "--json")
    assert proc.returncode == 0, proc.stderr
    run = json.loads(proc.stdout)
    assert run["requester"] == ME
    refused(bot(shell, "approve", run["id"], "canary"), "approvals from the shell are off")
