"""Findings 2 and 7 of the security review (issue 42): the shell's identity is not a name the
caller can choose.

Finding 2: a process in a user namespace of its own (``unshare -Ur``) can name its host
(``hostname bastion-1``) and its account (``--map-user=<uid>``, any uid it likes) as it
pleases: an account mapped to an approver approved a canary from such a namespace, and the
audit recorded ``lead@bastion-1`` as if it were verified. A host named in
``identities.accounts`` is now refused when the policy is read, the shell refuses an OS
account seen from inside a user namespace, and the audit records no host.

Finding 7: ``shell.approvals: true`` without ``identities`` was accepted, and an OS account
named like a Slack ID (``U0LEAD``) then acted as that Slack ID.

The attacker is a real ``upgradebot`` process in namespaces of its own; the other commands
run test_run_cli's ``bot`` (``main`` in this process, with the command's own environment).
"""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import shutil
import subprocess
from pathlib import Path

import pytest

from bot.shell.identity import IdentityRefused, resolve
from kubesim import KubeSim
from runbooks.policy import Policy
from tests.integration.test_run_cli import NEW, TARGET, UPGRADEBOT, bot, refused

ME = pwd.getpwuid(os.geteuid()).pw_name
LEAD = next(p for p in pwd.getpwall() if p.pw_uid != os.geteuid())  # not us: it plays the approver's account
ALICE_TOKEN = "test-token-alice-spoofing"


def _can_unshare() -> bool:
    if shutil.which("unshare") is None or os.geteuid() == LEAD.pw_uid:
        return False
    probe = subprocess.run(["unshare", "-Ur", "-u", "sh", "-c", f"hostname bastion-1 && exec unshare --map-user={LEAD.pw_uid} true"],
                           capture_output=True, timeout=30)
    return probe.returncode == 0


@pytest.fixture
def shell(sim: KubeSim, redis_url: str, tmp_path: Path) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("KUBE", "UPGRADEBOT", "REDIS"))}
    return {**base, "HOME": str(tmp_path), "KUBECONFIG": str(sim.kubeconfig), "REDIS_URL": redis_url}


def with_policy(env: dict[str, str], tmp_path: Path, text: str) -> dict[str, str]:
    path = tmp_path / "spoof-policy.yaml"
    path.write_text("approvers: {users: [U0LEAD, U0BOB]}\nreports: {after: []}\n" + text)
    return {**env, "UPGRADEBOT_CONFIG": str(path)}


def test_finding2_a_host_in_identities_accounts_is_refused_when_the_policy_is_read(
    shell: dict[str, str], tmp_path: Path,
) -> None:
    """``lead@bastion-1`` would trust the host name, which any user can set in a namespace of
    their own: the policy is refused in one line (exit 2) before anything is done."""
    env = with_policy(shell, tmp_path, f"identities: {{accounts: {{{LEAD.pw_name}@bastion-1: U0LEAD}}}}\n"
                                        "shell: {approvals: true}\n")
    refused(bot(env, "runs"), "names a host")


@pytest.mark.skipif(not _can_unshare(), reason="user namespaces are not available here")
def test_finding2_an_approval_from_a_user_namespace_is_refused(shell: dict[str, str], tmp_path: Path) -> None:
    """The review's reproduction: ``hostname bastion-1`` in a UTS namespace, then the CLI run as
    the approver's uid mapped in a user namespace. The approval is refused in one line and the
    gate keeps no decision; the requester's own audit line names no host."""
    digest = hashlib.sha256(ALICE_TOKEN.encode()).hexdigest()
    env = with_policy(shell, tmp_path, f"identities: {{accounts: {{{LEAD.pw_name}: U0LEAD}}, "
                                       f"tokens: [{{name: u0alice, sha256: {digest}, user: U0ALICE}}]}}\n"
                                       "shell: {approvals: true}\n")
    proc = bot({**env, "UPGRADEBOT_TOKEN": ALICE_TOKEN}, "canary", TARGET, f"image={NEW}", "node=gpu-node1",
               "--json")
    assert proc.returncode == 0, proc.stderr
    run_id = json.loads(proc.stdout)["id"]
    spoof = (f"hostname bastion-1 && exec unshare --map-user={LEAD.pw_uid} --map-group={LEAD.pw_gid} "
             f"{UPGRADEBOT} approve {run_id} canary")
    attacker = subprocess.run(["unshare", "-Ur", "-u", "sh", "-c", spoof], capture_output=True, text=True,
                              env=env, timeout=120)
    refused(attacker, "user namespace")
    status = json.loads(bot(env, "status", run_id, "--json").stdout)
    assert status["state"] == "awaiting_approval" and status["gate"]["decisions"] == []
    trail = json.loads(bot(env, "audit", run_id, "--json").stdout)["entries"]
    assert all(e["actor"] != "U0LEAD" for e in trail)
    requested = next(e for e in trail if e["name"] == "requested")
    assert requested["account"] == "ci:u0alice"  # the token's name; no host claimed


def test_finding2_the_audit_records_the_account_without_a_host(shell: dict[str, str], tmp_path: Path) -> None:
    """The host name is not verified, so the audit's ``account`` is the OS account alone."""
    env = with_policy(shell, tmp_path, f"identities: {{accounts: {{{ME}: U0ALICE}}}}\n")
    proc = bot(env, "canary", TARGET, f"image={NEW}", "node=gpu-node1", "--json")
    assert proc.returncode == 0, proc.stderr
    run_id = json.loads(proc.stdout)["id"]
    trail = json.loads(bot(env, "audit", run_id, "--json").stdout)["entries"]
    requested = next(e for e in trail if e["name"] == "requested")
    assert (requested["actor"], requested["account"]) == ("U0ALICE", ME)


def test_finding7_shell_approvals_without_identities_is_refused(shell: dict[str, str], tmp_path: Path) -> None:
    """Approving from the shell with no ``identities`` would let an account's name be its
    identity: the policy is refused in one line, exit 2."""
    refused(bot(with_policy(shell, tmp_path, "shell: {approvals: true}\n"), "runs"), "shell.approvals")


def test_finding7_an_os_account_named_like_a_slack_id_is_never_that_slack_id() -> None:
    """Without ``identities`` the shell acts as its OS account's name; an account named
    ``U0LEAD`` (or any Slack-ID-shaped name) is refused rather than taken as U0LEAD."""
    bare = Policy.model_validate({"approvers": {"users": ["U0LEAD"]}})
    for name in ("U0LEAD", "W0LEAD", "S0LEADS"):
        with pytest.raises(IdentityRefused, match="looks like a Slack ID"):
            resolve(bare, token=None, account=name)
    assert resolve(bare, token=None, account="alice").user == "alice"  # an ordinary name still requests
    mapped = Policy.model_validate({"approvers": {"users": ["U0LEAD"]}, "identities": {"accounts": {"U0X": "U0BOB"}}})
    assert resolve(mapped, token=None, account="U0X").user == "U0BOB"  # mapped on purpose: the policy says so
