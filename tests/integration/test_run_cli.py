"""The run verbs of ``upgradebot`` as a pipeline runs them: --json, exit codes.

Who acts is never what the command line says: each person here is a CI identity (a
token whose SHA-256 the policy maps to their Slack ID, ``UPGRADEBOT_TOKEN``), and the
policy allows approvals from the shell (``shell.approvals: true``).

Each command runs the CLI's ``main`` in this process with its own environment, stdout and
stderr (:func:`tests.shell_support.in_process`, ``bot``); what is about the process runs
``upgradebot`` as one (``bot_process``): the exit codes 1 and 2 of a command, a refusal's
one line on stderr, the Redis a shell starts without ``REDIS_URL``, a command killed mid-run
and the next process that continues its run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubesim import KubeSim
from tests.shell_support import in_process
from tests.support import shell_identities

UPGRADEBOT = str(Path(sys.executable).parent / "upgradebot")
TARGET = "kube-system/nvidia-device-plugin-daemonset"
NEW = "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"
PEOPLE = ("U0ALICE", "U0BOB", "U0CAROL", "U0DAVE")
IDENTITIES, TOKENS = shell_identities(*PEOPLE)
POLICY = """
approvers: {users: [U0BOB, U0CAROL]}
shell: {approvals: true}
reports: {after: []}
migrations: {namespaces: [ml-team]}
steps: {observe_window: 1s, poll_interval: 0.1s, ready_timeout: 60s}
""" + IDENTITIES



@pytest.fixture
def sim() -> Iterator[KubeSim]:
    """A gpu-small kubesim of its own, its clock 20 times as fast as the wall clock."""
    with KubeSim(scenario="gpu-small", k8s_version="1.31", speed=20) as served:
        yield served


@pytest.fixture
def env(sim: KubeSim, redis_url: str, tmp_path: Path) -> dict[str, str]:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("KUBE", "UPGRADEBOT", "REDIS"))}
    return {**base, "HOME": str(tmp_path), "KUBECONFIG": str(sim.kubeconfig), "REDIS_URL": redis_url,
            "UPGRADEBOT_CONFIG": str(policy), "UPGRADEBOT_TOKEN": TOKENS["U0ALICE"]}


def bot(env: dict[str, str], *args: str, who: str | None = None) -> subprocess.CompletedProcess[str]:
    """``upgradebot <args>`` as ``who`` (their token; default: U0ALICE's), run by ``main`` in this process."""
    return in_process(as_who(env, who), *args)


def bot_process(env: dict[str, str], *args: str, who: str | None = None) -> subprocess.CompletedProcess[str]:
    """``upgradebot <args>`` as ``who`` in a process of its own."""
    return subprocess.run([UPGRADEBOT, *args], capture_output=True, text=True, env=as_who(env, who), timeout=120)


def as_who(env: dict[str, str], who: str | None) -> dict[str, str]:
    return env if who is None else {**env, "UPGRADEBOT_TOKEN": TOKENS[who]}


def refused(proc: subprocess.CompletedProcess[str], text: str, *, lines: int = 1) -> None:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr and text in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == lines, proc.stderr


def test_shell_walks_a_run_through_its_gates(env: dict[str, str]) -> None:
    """canary, a refused self-approval, a second canary refused with the holder, approve, reject -> rolled back."""
    proc = bot_process(env, "canary", TARGET, f"image={NEW}", "node=gpu-node1", "--json")
    assert proc.returncode == 0, proc.stderr
    run = json.loads(proc.stdout)
    assert run["state"] == "awaiting_approval" and run["requester"] == "U0ALICE" and run["id"].startswith("r-")
    run_id = run["id"]

    refused(bot(env, "canary", TARGET, f"image={NEW}", "node=gpu-node2", who="U0CAROL"),
            f"kubesim/{TARGET} already has an active run: {run_id}")
    refused(bot(env, "approve", run_id, "canary"), "you requested this run; another approver must approve it")
    refused(bot(env, "approve", run_id, "canary", who="U0DAVE"), "you (U0DAVE) are not an approver")
    refused(bot(env, "approve", run_id, "promotion", who="U0BOB"), "the promotion request of run")

    proc = bot(env, "approve", run_id, "canary", who="U0BOB")
    assert proc.returncode == 0, proc.stderr
    assert "canary_verifying" in proc.stdout and "awaiting_promotion" in proc.stdout  # steps printed as they ran
    assert "promotion request by U0ALICE" in proc.stdout

    status = json.loads(bot(env, "status", run_id, "--json").stdout)
    assert (status["id"], status["state"], status["gate"]["kind"]) == (run_id, "awaiting_promotion", "promotion")
    assert bot(env, "promote", run_id).returncode == 0
    listed = json.loads(bot(env, "runs", "--json").stdout)["runs"]
    assert [(r["id"], r["state"]) for r in listed] == [(run_id, "awaiting_promotion")]

    refused(bot(env, "approve", run_id, "canary", who="U0CAROL"), "the canary request of run")
    proc = bot(env, "reject", run_id, "promotion", "--json", who="U0CAROL")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["state"] == "rolled_back"
    assert bot_process(env, "status", run_id).returncode == 1  # the upgrade did not happen

    trail = json.loads(bot(env, "audit", run_id, "--json").stdout)
    assert (trail["id"], trail["state"]) == (run_id, "rolled_back")
    kinds = {(e["kind"], e["actor"], e["surface"], e.get("account", "").split("@")[0]) for e in trail["entries"]}
    assert {("decision", "U0BOB", "shell", "ci:u0bob"), ("decision", "U0CAROL", "shell", "ci:u0carol"),
            ("transition", "U0ALICE", "shell", "ci:u0alice")} <= kinds
    assert all(e["surface"] == "engine" for e in trail["entries"] if e["actor"] == "upgradebot")
    text = bot(env, "audit", run_id).stdout
    assert "awaiting_promotion -> rolling_back" in text and "U0CAROL" in text


def test_close_and_rollback_verbs_and_their_refusals(env: dict[str, str]) -> None:
    """rollback of a waiting canary and close of a run not monitoring are refused; resume with nothing to do is 0."""
    run_id = json.loads(bot(env, "canary", TARGET, f"image={NEW}", "node=gpu-node1", "--json").stdout)["id"]
    refused(bot(env, "rollback", run_id), "nothing was changed yet, reject the request instead")
    refused(bot(env, "close", run_id), "only a run in monitoring can be closed")
    proc = bot(env, "reject", run_id, "canary", "--json")  # the requester withdraws it
    assert proc.returncode == 0 and json.loads(proc.stdout)["state"] == "rejected"
    proc = bot(env, "resume", "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout) == {"runs": []}


def test_an_approved_rollback_that_happened_exits_0(env: dict[str, str]) -> None:
    """issue 64: `rollback` opens a request (exit 0); its approval rolls the run back, which is what
    was asked: exit 0, as `rollback` without approval and `reject` do (1 only for a halted or failed run)."""
    run_id = json.loads(bot(env, "canary", TARGET, f"image={NEW}", "node=gpu-node1", "--json").stdout)["id"]
    assert bot(env, "approve", run_id, "canary", who="U0BOB").returncode == 0
    proc = bot(env, "rollback", run_id, "--json")
    assert proc.returncode == 0, proc.stderr
    opened = json.loads(proc.stdout)
    assert (opened["state"], opened["gate"]["kind"], opened["gate"]["outcome"]) == (
        "awaiting_promotion", "rollback", None)
    proc = bot_process(env, "approve", run_id, "rollback", who="U0CAROL")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr
    assert "rolled_back" in proc.stdout
    assert bot(env, "status", run_id).returncode == 1  # the upgrade did not happen: status still says so


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (("canary", TARGET, "image=nvcr.io/nvidia/k8s-device-plugin", "node=gpu-node1"), "has no tag or digest"),
        (("canary", TARGET, f"image={NEW}"), "node= is required"),
        (("canary", "kube-system", f"image={NEW}", "node=gpu-node1"), "is not a target"),
        (("approve", "latest", "canary"), "'latest' is not a run id"),
        (("approve", "r-3k9x0b2a"), "which request of r-3k9x0b2a? name it"),
        (("reject", "r-3k9x0b2a", "everything"), "'everything' is not a request"),
        (("status", "r-1", "r-2"), "unexpected argument"),
    ],
)
def test_bad_arguments_get_the_reason_and_the_usage_line(env: dict[str, str], args: tuple[str, ...], reason: str) -> None:
    """Bad input exits 2 with the reason and the verb's usage line, and stores nothing."""
    proc = bot(env, *args)
    refused(proc, reason, lines=2)
    assert proc.stderr.splitlines()[1].startswith("usage: upgradebot")


def test_unknown_run_and_unreachable_redis_are_one_line(env: dict[str, str]) -> None:
    """A run id nobody knows, and a Redis that does not answer, exit 2 with one line on stderr."""
    refused(bot_process(env, "status", "r-00000000"), "no run r-00000000")
    refused(bot_process({**env, "REDIS_URL": "redis://127.0.0.1:1/0"}, "runs"),
            "cannot reach Redis at redis://127.0.0.1:1/0")


def test_without_redis_url_the_shell_keeps_its_own_redis(env: dict[str, str], tmp_path: Path) -> None:
    """No REDIS_URL: the first command starts a per-user redis-server, the next ones reuse it and see its runs."""
    local = {k: v for k, v in env.items() if k != "REDIS_URL"}
    local["XDG_STATE_HOME"] = str(tmp_path / "st")
    state = tmp_path / "st" / "upgradebot"
    try:
        proc = bot_process(local, "canary", TARGET, f"image={NEW}", "node=gpu-node1", "--json")
        run_id = json.loads(proc.stdout)["id"]
        pid = int((state / "redis.pid").read_text())
        assert [r["id"] for r in json.loads(bot_process(local, "runs", "--json").stdout)["runs"]] == [run_id]
        assert int((state / "redis.pid").read_text()) == pid  # the same server
        assert (state / "redis.sock").is_socket() and (state / "appendonly.aof").exists()
    finally:
        pid_file = state / "redis.pid"
        if pid_file.exists():
            os.kill(int(pid_file.read_text()), signal.SIGTERM)


def test_a_verb_that_advances_runs_also_continues_a_crashed_run(env: dict[str, str]) -> None:
    """A run whose approve was SIGKILLed goes on with the next advancing command, as on start-up."""
    crashed = json.loads(bot(env, "canary", TARGET, f"image={NEW}", "node=gpu-node1", "--json").stdout)["id"]
    killed = bot_process({**env, "UPGRADEBOT_TEST_KILL_AT": "transition:canary_rolling"}, "approve", crashed,
                         "canary", who="U0BOB")
    assert killed.returncode == -signal.SIGKILL
    assert json.loads(bot(env, "status", crashed, "--json").stdout)["state"] == "canary_rolling"
    proc = bot(env, "canary", "dra-example-driver/dra-example-driver-kubeletplugin",
               "image=registry.k8s.io/dra-example-driver/dra-example-driver:v0.2.0",
               "node=gpu-node1", "--json")
    assert proc.returncode == 0, proc.stderr
    other = json.loads(proc.stdout)["id"]
    proc = bot_process(env, "reject", other, "canary")  # the requester withdraws their other request
    assert proc.returncode == 0, proc.stderr
    assert "continuing 1 other unfinished run(s)" in proc.stdout
    assert json.loads(bot(env, "status", crashed, "--json").stdout)["state"] == "awaiting_promotion"


def test_shell_applies_a_migration_as_an_approved_run(env: dict[str, str], sim: KubeSim) -> None:
    """``apply-migration``: the plan stored with the run, the migration request approved from the
    shell by another person, applied and verified; ``status`` shows the kind and the change."""
    from tests.integration.test_migration_run import deployment
    from tests.support import Kubectl

    kubectl = Kubectl(sim.kubeconfig)
    kubectl("apply", "-f", "-", input=json.dumps(deployment("trainer", 1)))
    kubectl("rollout", "status", "deployment/trainer", "-n", "ml-team", "--timeout=60s", timeout=90)
    refused(bot(env, "apply-migration", "kube-system/nvidia-device-plugin-daemonset"),
            "may not change workloads in namespace kube-system")
    proc = bot(env, "apply-migration", "ml-team/deployment/trainer", "class=gpu.example.com", "--json")
    assert proc.returncode == 0, proc.stderr
    run = json.loads(proc.stdout)
    assert (run["kind"], run["state"], run["gate"]["kind"]) == ("migration", "awaiting_approval", "migration")
    assert run["target"]["kind"] == "Deployment" and run["change"]["claims"][0]["claim"] == "train-gpu"
    refused(bot(env, "apply-migration", "ml-team/trainer", who="U0CAROL"),
            f"kubesim/ml-team/Deployment/trainer already has an active run: {run['id']}")
    proc = bot(env, "approve", run["id"], "migration", who="U0BOB")
    assert proc.returncode == 0, proc.stderr
    assert f"{run['id']} applying" in proc.stdout and f"{run['id']} done" in proc.stdout, proc.stdout
    status = bot(env, "status", run["id"])
    assert status.returncode == 0 and "Migration" in status.stdout and "train: nvidia.com/gpu 1 -> claim train-gpu" in \
        status.stdout, status.stdout


def test_a_promotion_in_waves_from_the_shell_with_pause_and_continue(env: dict[str, str], tmp_path: Path) -> None:
    """Two waves, the second needing its approval: the shell prints the wave the run is at (plain
    lines when not on a terminal, on stderr with --json); a paused run takes its approval but
    starts nothing until `continue`."""
    policy = Path(env["UPGRADEBOT_CONFIG"])
    policy.write_text(POLICY + """
targets:
  - namespace: kube-system
    name: nvidia-device-plugin-daemonset
    waves: [1, 100%]
""")
    run_id = json.loads(bot(env, "canary", TARGET, f"image={NEW}", "node=gpu-node1", "--json").stdout)["id"]
    proc = bot(env, "approve", run_id, "canary", who="U0BOB")
    assert proc.returncode == 0, proc.stderr
    assert "promotion request by U0ALICE" in proc.stdout and "wave 1 of 2: 1 node (gpu-node" in proc.stdout
    proc = bot(env, "approve", run_id, "promotion", "--json", who="U0CAROL")
    assert proc.returncode == 0, proc.stderr
    run = json.loads(proc.stdout)
    assert run["state"] == "awaiting_promotion" and run["gate"]["wave"] == 2
    progress = [line for line in proc.stderr.splitlines() if line.startswith(run_id)]
    assert progress[0].startswith(f"{run_id} Wave 1 of 2 ") and progress[-1] == (
        f"{run_id} Wave 2 of 2 ▱▱▱▱▱▱▱▱▱▱ 0/1 node: starts once approved"), proc.stderr

    refused(bot(env, "pause", run_id, who="U0DAVE"), f"you (U0DAVE) may not pause run {run_id}")
    proc = bot(env, "pause", run_id, "reason=maintenance in rack 4")
    assert proc.returncode == 0 and "awaiting_promotion" in proc.stdout, proc.stderr
    proc = bot(env, "approve", run_id, "promotion", who="U0BOB")
    assert proc.returncode == 0, proc.stderr
    status = json.loads(bot(env, "status", run_id, "--json").stdout)
    assert status["state"] == "promoting" and status["pause"]["by"] == "U0ALICE"
    assert "Paused by" in bot(env, "status", run_id).stdout
    proc = bot(env, "continue", run_id, who="U0CAROL")
    assert proc.returncode == 0, proc.stderr
    assert f"{run_id} Wave 2 of 2 ▰▰▰▰▰▰▰▰▰▰ 1/1 node" in proc.stdout  # plain lines: not a terminal
    assert json.loads(bot(env, "status", run_id, "--json").stdout)["state"] == "done"
    refused(bot(env, "continue", run_id), f"run {run_id} is not paused")


def test_restart_and_repair_from_the_shell(env: dict[str, str], sim: KubeSim) -> None:
    """``restart`` opens a run the approver approves from the shell; ``repair`` with nothing stuck,
    and a template change that changes nothing, exit 2 with the reason on one line (a bad word:
    the reason and the usage line); ``--help`` lists both verbs."""
    refused(bot(env, "repair", TARGET), "nothing to repair on the nodes of kube-system/nvidia-device-plugin-daemonset")
    refused(bot(env, "canary", TARGET, "node=gpu-node1", "env=FAIL_ON_INIT_ERROR=true"), "nothing to change")
    refused(bot(env, "canary", TARGET, "node=gpu-node1", "env=1BAD=x"), "'1BAD' is not an environment variable",
            lines=2)
    proc = bot(env, "restart", TARGET, "node=gpu-node2", "--json")
    assert proc.returncode == 0, proc.stderr
    run_id = json.loads(proc.stdout)["id"]
    proc = bot(env, "approve", run_id, "canary", "--json", who="U0BOB")
    assert proc.returncode == 0 and json.loads(proc.stdout)["state"] == "awaiting_promotion", proc.stdout
    proc = bot(env, "--help")
    assert "restart        restart a plugin's pods" in proc.stdout and "repair         delete the pods" in proc.stdout



def test_audit_shows_every_change_to_the_cluster_and_all_adds_the_checks(env: dict[str, str], tmp_path: Path) -> None:
    """A canary promoted on every node, then rolled back from monitoring: its trail is long, and the
    default ``audit`` still lists every mutation of the cluster (the canary's image, strategy and
    pod deleted, the promotion's strategy, the rollback's restores) beside the request, the
    transitions and the decisions, however many checks came after them; its footer says what was
    left out and that ``--all`` adds it, and ``--all`` shows every check too (issue 64)."""
    (tmp_path / "policy.yaml").write_text(POLICY.replace("reports: {after: []}", "reports: {after: [24h]}"))
    run_id = json.loads(bot(env, "canary", TARGET, f"image={NEW}", "node=gpu-node1", "--json").stdout)["id"]
    assert bot(env, "approve", run_id, "canary", who="U0BOB").returncode == 0
    assert bot(env, "approve", run_id, "promotion", who="U0CAROL").returncode == 0
    assert bot(env, "rollback", run_id, "reason=audit").returncode == 0
    proc = bot(env, "approve", run_id, "rollback", "--json", who="U0BOB")
    assert json.loads(proc.stdout)["state"] == "rolled_back", (proc.stdout, proc.stderr)
    entries = json.loads(bot(env, "audit", run_id, "--json").stdout)["entries"]
    mutations = [e["name"] for e in entries if e["kind"] == "mutation"]
    assert {"canary.image", "canary.delete-pod", "canary.strategy", "promote.strategy"} <= set(mutations), mutations
    assert "rollback.template" in mutations, mutations
    checks = [e for e in entries if e["kind"] == "check"]
    assert len(entries) > 60 and len(checks) > 20, [(e["kind"], e["name"]) for e in entries]

    text = bot(env, "audit", run_id).stdout
    rows = [line.split() for line in text.splitlines()[2:-1]]
    assert [r[4] for r in rows if r[3] == "mutation"] == mutations, text  # every change, however old
    assert "awaiting_approval -> canary_rolling" in text and "awaiting_promotion -> promoting" in text, text
    assert "canary approved" in text and "promotion approved" in text and "rollback approved" in text, text
    footer = text.strip().splitlines()[-1]
    assert "every change to the cluster" in footer and f"`audit {run_id} --all` adds them" in footer, footer
    whole = bot(env, "audit", run_id, "--all").stdout
    assert sum(line.split()[3:4] == ["check"] for line in whole.splitlines()) == len(checks), whole
    assert sum(line.split()[3:4] == ["check"] for line in text.splitlines()) < len(checks), text
    assert len(whole.strip().splitlines()) == len(entries) + 2, whole  # the title, the header, every entry
