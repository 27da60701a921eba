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
import shutil
import tempfile
from pathlib import Path

import pytest

from kubesim import KubeSim
from tests.integration.test_run_cli import NEW, TARGET, TOKENS, bot, refused
from tests.shell_support import in_process

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


def no_lock_and_no_run(env: dict[str, str], url: str) -> None:
    """Nothing a refused request leaves: no target's lock in the Redis at ``url``, no run listed."""
    import redis

    client = redis.Redis.from_url(url)
    try:
        assert [k for k in client.keys("*") if b":lock:" in k or b":run:" in k] == []
    finally:
        client.close()
    assert runs(env) == []
    assert bot(env, "status").returncode == 0


@pytest.mark.parametrize("verb", [("canary", f"image={NEW}"), ("restart",)], ids=["canary", "restart"])
def test_without_a_policy_file_a_request_nobody_could_approve_is_refused(
        shell: dict[str, str], redis_url: str, verb: tuple[str, ...]) -> None:
    """issue 64: no policy file (a line of `make try` not pasted): nobody is an approver, so a request
    is refused at once, with the reason and the fix, locking nothing; reading works without one."""
    refused(bot(shell, verb[0], TARGET, *verb[1:], "node=gpu-node1", "--as", "U0BOB"),
            f"--as U0BOB refused: you act as {ME}")
    refused(bot(shell, verb[0], TARGET, *verb[1:], "node=gpu-node1"),
            "nobody could approve this request: there is no policy file (UPGRADEBOT_CONFIG is unset)")
    no_lock_and_no_run(shell, redis_url)
    assert bot(shell, "inventory").returncode == 0


UNREACHABLE = [
    ("shell: {approvals: false}\n", "approvals from the shell are off (shell.approvals: false)"),
    ("shell: {approvals: true}\n", "no approver but you has an identity the shell acts as"),
]


@pytest.mark.parametrize(("text", "reason"), UNREACHABLE, ids=["approvals-off", "approvers-unmapped"])
def test_a_request_no_approver_can_reach_is_refused(shell: dict[str, str], tmp_path: Path, text: str,
                                                    reason: str) -> None:
    """issue 64: without REDIS_URL the shell keeps its runs in the user's own Redis, which no Slack bot
    reads: a request whose approvers could approve only in Slack (shell.approvals off), or have no
    identity of the policy, is refused with the reason, locking nothing; with REDIS_URL (a Redis a
    serving bot may share) the same request opens, for Slack's approvers."""
    shared = with_policy(shell, tmp_path, f"identities: {{accounts: {{{ME}: U0ALICE}}}}\n" + text)
    state = Path(tempfile.mkdtemp(prefix="sh-"))  # short: the local Redis's unix socket path is under it
    own = {**{k: v for k, v in shared.items() if k != "REDIS_URL"}, "XDG_STATE_HOME": str(state)}
    try:
        proc = bot(own, "canary", TARGET, f"image={NEW}", "node=gpu-node1")
        refused(proc, "nobody could approve this request: ")
        assert reason in proc.stderr and "REDIS_URL" in proc.stderr, proc.stderr
        no_lock_and_no_run(own, f"unix://{state / 'upgradebot' / 'redis.sock'}")
    finally:
        in_process(own, "local", "stop")
        shutil.rmtree(state, ignore_errors=True)
    proc = bot(shared, "canary", TARGET, f"image={NEW}", "node=gpu-node1", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["state"] == "awaiting_approval"
