"""Every reply true on the surface that shows it (issue 41): the shell has no thread, no
buttons and no scheduled reports, so its replies name the commands that act instead;
``rollback`` and ``status`` say what happened and what waits; ``node=auto``'s reason is in
the request; text ``audit`` keeps the request and every decision; ``--help`` describes each
argument. ``upgradebot`` as a person runs it, each person a CI identity; each command (the
console's too, its lines on stdin) runs the CLI's ``main`` in this process with the command's
own environment, stdin, stdout and stderr (:func:`tests.shell_support.in_process`): what is
tested is what the replies say, and the process itself is tested in test_run_cli and
tests/e2e/test_console.py."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubesim import KubeSim
from tests.integration.test_run_cli import NEW, POLICY, TARGET, TOKENS, bot
from tests.shell_support import in_process


@pytest.fixture
def sim() -> Iterator[KubeSim]:
    """A gpu-small kubesim of its own, its clock 20 times as fast as the wall clock."""
    with KubeSim(scenario="gpu-small", k8s_version="1.31", speed=20) as served:
        yield served


@pytest.fixture
def env(sim: KubeSim, redis_url: str, tmp_path: Path) -> dict[str, str]:
    """test_run_cli's people: U0ALICE (this environment's token) requests, U0BOB and U0CAROL approve."""
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("KUBE", "UPGRADEBOT", "REDIS"))}
    return {**base, "HOME": str(tmp_path), "KUBECONFIG": str(sim.kubeconfig), "REDIS_URL": redis_url,
            "UPGRADEBOT_CONFIG": str(policy), "UPGRADEBOT_TOKEN": TOKENS["U0ALICE"]}


def _canary(env: dict[str, str], node: str = "gpu-node1") -> tuple[str, subprocess.CompletedProcess[str]]:
    proc = bot(env, "canary", TARGET, f"image={NEW}", f"node={node}")
    assert proc.returncode == 0, proc.stderr
    run_id = next(w for w in proc.stdout.replace(":", " ").split() if w.startswith("r-"))
    return run_id, proc


def test_shell_replies_name_commands_not_a_thread(env: dict[str, str]) -> None:
    """issue 41: the canary's reply and `status` name `approve <run> canary`; neither speaks of a
    root message, a thread or buttons, which the shell does not have."""
    run_id, proc = _canary(env)
    status = bot(env, "status", run_id)
    for said in (proc.stdout, status.stdout):
        assert "thread" not in said and "root message" not in said and "Approve or Reject" not in said, said
    assert f"approve {run_id} canary" in proc.stdout, proc.stdout
    assert f"approve {run_id} canary" in status.stdout and f"reject {run_id} canary" in status.stdout, status.stdout
    assert "Waiting for approval: canary request, open until" in status.stdout, status.stdout
    bot(env, "reject", run_id, "canary")


def test_rollback_and_status_say_what_happened_and_what_waits(env: dict[str, str]) -> None:
    """issue 41: `rollback <run>` at the promotion request says a rollback request opened and who
    must approve it, not "Run … is awaiting_promotion"; `status` then shows the rollback request as
    the step, beside the same request waiting for approval."""
    run_id, _ = _canary(env)
    assert bot(env, "approve", run_id, "canary", who="U0BOB").returncode == 0
    proc = bot(env, "rollback", run_id, "reason=flaky")
    assert proc.returncode == 0, proc.stderr
    said = proc.stdout.strip()
    assert not said.endswith("is awaiting_promotion"), said
    assert "rollback request" in said and f"approve {run_id} rollback" in said, said
    status = bot(env, "status", run_id).stdout
    assert "Waiting for approval: rollback request" in status, status
    progress = next(line for line in status.splitlines() if line.startswith("Progress:"))
    assert "Rollback request" in progress and "Step 4 of 7: Promotion request" not in progress, status
    assert "waiting for the promotion" not in status, status
    assert json.loads(bot(env, "status", run_id, "--json").stdout)["gate"]["kind"] == "rollback"


def console(env: dict[str, str], *lines: str) -> str:
    """``upgradebot console`` as U0ALICE, typing ``lines`` then ``/quit``: its transcript."""
    proc = in_process(env, "console", input="\n".join([*lines, "/quit"]) + "\n")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    return proc.stdout


def test_console_replies_name_commands_not_a_thread(env: dict[str, str]) -> None:
    """issue 41: in the console the canary's reply and the run's root message name the commands
    that decide (its buttons are numbers), never a root message or a thread in a channel."""
    said = console(env, f"canary {TARGET} image={NEW} node=gpu-node1")
    assert "posted run r-" in said, said
    run_id = said.split("posted run ", 1)[1].split(":", 1)[0]
    assert "root message" not in said and "in the thread" not in said and "Approve or Reject" not in said, said
    assert f"approve {run_id} canary" in said, said
    bot(env, "reject", run_id, "canary")


def test_console_rollback_and_status_agree(env: dict[str, str]) -> None:
    """issue 41: `rollback` typed in the console says the rollback request waits (and how to decide
    it), and `status` shows it as the step and the state, not the promotion request it replaced."""
    run_id, _ = _canary(env)
    assert bot(env, "approve", run_id, "canary", who="U0BOB").returncode == 0
    said = console(env, f"rollback {run_id} reason=flaky", f"status {run_id}")
    # split at the typed command: a line of the console's feed may name `status <run>` before it
    reply, status = said.split(f"> status {run_id}", 1) if f"> status {run_id}" in said else (said, said)
    assert "is awaiting_promotion" not in said and f"approve {run_id} rollback" in reply, said
    assert "Waiting for approval: rollback request, open until" in status and "in the thread" not in status, said
    progress = next(line for line in status.splitlines() if "Progress:" in line)
    assert "Rollback request" in progress and "Step 4 of 7" not in progress, said
    assert "waiting for the promotion" not in status, said


def test_shell_status_of_a_monitored_run_names_report_not_a_thread(env: dict[str, str], tmp_path: Path) -> None:
    """issue 41: a monitored run's `status` in the shell says `report <run>` reads its stability, and
    that scheduled reports need `upgradebot serve`; it does not promise reports "posted in this thread"."""
    policy = tmp_path / "monitored.yaml"
    policy.write_text(POLICY.replace("reports: {after: []}", "reports: {after: [1h]}"))
    env = {**env, "UPGRADEBOT_CONFIG": str(policy)}
    run_id, _ = _canary(env)
    assert bot(env, "approve", run_id, "canary", who="U0BOB").returncode == 0
    assert bot(env, "approve", run_id, "promotion", who="U0CAROL").returncode == 0
    status = bot(env, "status", run_id).stdout
    assert "monitoring" in status and "posted in this thread" not in status, status
    assert f"`report {run_id}`" in status and "upgradebot serve" in status, status
    bot(env, "close", run_id)


def test_text_audit_keeps_the_request_and_every_decision(env: dict[str, str]) -> None:
    """issue 41: text `audit` of a long trail still shows the request and each approval (the rows
    it cuts are checks and steps, counted in a note naming `--all`); `audit --all` shows every entry."""
    run_id, _ = _canary(env)
    assert bot(env, "approve", run_id, "canary", who="U0BOB").returncode == 0
    assert bot(env, "approve", run_id, "promotion", who="U0CAROL").returncode == 0
    entries = json.loads(bot(env, "audit", run_id, "--json").stdout)["entries"]
    assert len(entries) > 40, len(entries)  # longer than the text shows by default
    text = bot(env, "audit", run_id).stdout
    rows = [line for line in text.splitlines() if line.startswith("  20")]
    assert any(" transition " in r and " requested " in r for r in rows), text
    assert any("U0BOB" in r and " decision " in r for r in rows) and any("U0CAROL" in r and " decision " in r
                                                                         for r in rows), text
    assert f"audit {run_id} --all" in text, text
    every = bot(env, "audit", run_id, "--all")
    assert every.returncode == 0, every.stderr
    assert len([line for line in every.stdout.splitlines() if line.startswith("  20")]) == len(entries), every.stdout


def test_node_auto_says_why_in_the_shell_and_the_console(env: dict[str, str]) -> None:
    """issue 41: `canary … node=auto` says which node it chose and why in the reply (shell) and in
    the request (console), not only in `audit --json`."""
    run_id, proc = _canary(env, node="auto")
    assert "node=auto chose gpu-node3" in proc.stdout and "device in use" in proc.stdout, proc.stdout
    bot(env, "reject", run_id, "canary")
    said = console(env, f"canary {TARGET} image={NEW} node=auto")
    request = said.split("Canary request for ", 1)[1].split("[1] Approve", 1)[0]
    assert "node=auto chose gpu-node3" in request, said


def test_console_did_you_mean_and_help_of_a_verb(env: dict[str, str]) -> None:
    """issue 41: in the console an unknown verb gets "did you mean", and `help audit` says what
    each argument is (from the table the shell's --help and Slack read)."""
    said = console(env, "canery", "help audit")
    assert "unknown verb 'canery' (did you mean canary?)" in said, said
    assert "<run>: a run's id" in said and "--all: every entry of the trail" in said, said
