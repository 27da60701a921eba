"""A step's unexpected error, as the shell shows it (finding 13 of the security review).

The shell printed the step's 21-line traceback (the engine logs it with ``log.exception``,
and with no logging configured Python's last-resort handler wrote it to stderr). A person
at the terminal gets one line per problem; the traceback only with ``LOG_LEVEL=DEBUG``.
The bug is a step function made to raise (as in ``test_safety_halts.py``), in a real
``upgradebot`` process against kubesim and Redis.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kubesim import KubeSim
from tests.support import shell_identities

TARGET = "kube-system/nvidia-device-plugin-daemonset"
NEW = "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"
IDENTITIES, TOKENS = shell_identities("U0ALICE", "U0BOB")
POLICY = """
approvers: {users: [U0BOB]}
shell: {approvals: true}
reports: {after: []}
steps: {observe_window: 1s, poll_interval: 0.1s, ready_timeout: 60s}
""" + IDENTITIES
BROKEN_STEP = """
import sys
from runbooks.daemonset import canarying

def broken(*args, **kwargs):
    raise AttributeError("'NoneType' object has no attribute 'decode'")

canarying.delete_pod = broken
from bot.shell.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.fixture
def env(sim: KubeSim, redis_url: str, tmp_path: Path) -> dict[str, str]:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("KUBE", "UPGRADEBOT", "REDIS", "LOG_"))}
    return {**base, "HOME": str(tmp_path), "KUBECONFIG": str(sim.kubeconfig), "REDIS_URL": redis_url,
            "UPGRADEBOT_CONFIG": str(policy), "UPGRADEBOT_TOKEN": TOKENS["U0ALICE"]}


def approve_with_a_broken_step(env: dict[str, str], **extra: str) -> subprocess.CompletedProcess[str]:
    """U0ALICE asks for a canary; U0BOB approves it in a process whose canary step raises."""
    asked = subprocess.run([sys.executable, "-m", "bot", "canary", TARGET, f"image={NEW}", "node=gpu-node1", "--json"],
                           capture_output=True, text=True, env=env, timeout=120)
    assert asked.returncode == 0, asked.stderr
    run_id = json.loads(asked.stdout)["id"]
    return subprocess.run([sys.executable, "-c", BROKEN_STEP, "approve", run_id, "canary"], capture_output=True,
                          text=True, env={**env, "UPGRADEBOT_TOKEN": TOKENS["U0BOB"], **extra}, timeout=120)


def test_finding_13_a_step_that_raises_shows_one_line_and_no_traceback(env: dict[str, str]) -> None:
    """Finding 13 of the security review: an unexpected error in a step run from the shell is one
    line on stderr (the run halted, the error's type and message), never a traceback."""
    proc = approve_with_a_broken_step(env)
    said = proc.stdout + proc.stderr
    assert "Traceback" not in said and 'File "' not in said, proc.stderr
    assert "halted" in said and "AttributeError" in said, (proc.stdout, proc.stderr)
    assert len(proc.stderr.strip().splitlines()) <= 1, proc.stderr


def test_finding_13_the_traceback_is_there_with_log_level_debug(env: dict[str, str]) -> None:
    """Finding 13 of the security review: whoever debugs asks for the traceback (LOG_LEVEL=DEBUG)."""
    proc = approve_with_a_broken_step(env, LOG_LEVEL="DEBUG")
    assert "Traceback" in proc.stderr and "AttributeError" in proc.stderr, proc.stderr
