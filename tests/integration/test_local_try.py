"""``upgradebot local start|stop`` (``make try``), as a newcomer runs them (issue 41, item 2).

Each test gives the commands a home of its own (``HOME``), so the state directory, and
everything ``start`` leaves running, is the test's; every process a test started is stopped
by ``local stop`` itself, and the test checks that it is gone.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.settings import Settings
from bot.shell.identity import resolve
from bot.storage.embedded import answers
from runbooks.cluster import Cluster
from runbooks.cluster.resources import NODES
from tests.shell_support import in_process

UPGRADEBOT = str(Path(sys.executable).parent / "upgradebot")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def home() -> Iterator[Path]:
    """A home of the test's own (short: the local Redis's unix socket path is under it); whatever
    is still running under it at the end is stopped (by ``local stop``'s ``main`` in this process:
    a clean-up, not what is tested)."""
    path = Path(tempfile.mkdtemp(prefix="try-"))
    yield path
    in_process(env_of(path), "local", "stop")
    state = path / ".local" / "state" / "upgradebot"
    for pid_file in (state / "redis.pid", state / "try" / "kubesim.pid"):  # stop refused or failed: leave nothing
        if pid_file.exists() and not gone(pid := int(pid_file.read_text())):
            os.kill(pid, signal.SIGKILL)
    shutil.rmtree(path, ignore_errors=True)


def env_of(home: Path, **extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("KUBE", "UPGRADEBOT", "REDIS", "XDG_STATE"))}
    return {**base, "HOME": str(home), **extra}


def local(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([UPGRADEBOT, "local", *args], capture_output=True, text=True, env=env_of(home),
                          cwd=ROOT, timeout=120)


def gone(pid: int) -> bool:
    """Whether process ``pid`` is no more (a zombie not yet reaped by init counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.split(") ", 1)[1].startswith("Z")


def test_start_leaves_kubesim_redis_and_a_policy_running_and_stop_leaves_nothing(home: Path) -> None:
    """issue 41, item 2: `local start` leaves kubesim, this user's Redis and a two-person policy
    under the user's own state directory and prints the three lines to paste; a second start
    starts nothing and says it is running; `local stop` stops both processes (none is left
    behind) and a second stop says nothing was running."""
    state = home / ".local" / "state" / "upgradebot"
    started = local(home, "start")
    assert started.returncode == 0, started.stderr
    lines = started.stdout.splitlines()
    paste = lines[lines.index(next(x for x in lines if x.startswith("Paste these three lines"))) + 1:][:3]
    assert paste == [
        'export PATH="$PWD/.venv/bin:$PATH"',
        'export KUBECONFIG="$HOME/.local/state/upgradebot/try/kubeconfig" '
        'UPGRADEBOT_CONFIG="$HOME/.local/state/upgradebot/try/policy.yaml"',
        'bob() { UPGRADEBOT_TOKEN="$(cat "$HOME/.local/state/upgradebot/try/bob.token")" "$@"; }',
    ]
    sim_pid = int((state / "try" / "kubesim.pid").read_text())
    redis_pid = int((state / "redis.pid").read_text())
    assert not gone(sim_pid) and not gone(redis_pid)
    assert answers(str(state / "redis.sock"))
    with Cluster.from_kubeconfig(str(state / "try" / "kubeconfig"), None) as cluster:  # kubesim answers
        assert cluster.get(NODES, "gpu-node1")["metadata"]["name"] == "gpu-node1"
    assert (state / "try" / "bob.token").stat().st_mode & 0o077 == 0  # Bob's secret is the user's alone

    # the policy is valid and maps the two people: this account to Alice, Bob's token to Bob
    policy = Settings(UPGRADEBOT_CONFIG=str(state / "try" / "policy.yaml")).policy()
    token = (state / "try" / "bob.token").read_text().strip()
    assert resolve(policy, token=None).user == "U0ALICE"
    assert resolve(policy, token=token).user == "U0BOB"
    assert policy.shell.approvals and policy.approvers.users == ["U0BOB"]

    again = local(home, "start")
    assert again.returncode == 0 and again.stdout.startswith("Already running"), again.stdout
    assert int((state / "try" / "kubesim.pid").read_text()) == sim_pid
    assert again.stdout.splitlines()[-4:-1] == paste

    stopped = local(home, "stop")
    assert stopped.returncode == 0, stopped.stderr
    assert f"Stopped kubesim (pid {sim_pid})." in stopped.stdout
    assert f"Stopped the local Redis (pid {redis_pid})." in stopped.stdout
    assert gone(sim_pid) and gone(redis_pid)
    assert not (state / "try" / "kubeconfig").exists()
    assert local(home, "stop").stdout.startswith("Nothing was running")


def test_stop_stops_the_redis_the_shell_started_and_never_a_reused_pid(home: Path) -> None:
    """issue 41, item 2: the shell's own Redis daemon (started by the first command, here `runs`)
    is stopped by `local stop`; a kubesim pid file naming a process that is not kubesim (a pid
    reused since) is not signalled."""
    runs = subprocess.run([UPGRADEBOT, "runs"], capture_output=True, text=True, env=env_of(home), timeout=120)
    assert runs.returncode == 0, runs.stderr
    state = home / ".local" / "state" / "upgradebot"
    redis_pid = int((state / "redis.pid").read_text())
    (state / "try").mkdir(mode=0o700)
    other = subprocess.Popen(["sleep", "300"])
    try:
        (state / "try" / "kubesim.pid").write_text(f"{other.pid}\n")
        stopped = local(home, "stop")
        assert stopped.stdout == f"Stopped the local Redis (pid {redis_pid}).\n", stopped.stdout
        assert gone(redis_pid)
        assert other.poll() is None  # still running: it was never signalled
    finally:
        other.kill()
        other.wait()


def test_a_kubesim_whose_kubeconfig_is_gone_is_replaced_not_left_behind(home: Path) -> None:
    """issue 41, item 2: `local start` when the kubesim it started runs but its kubeconfig was
    deleted stops that kubesim and starts another (one kubesim per user, never an orphan)."""
    assert local(home, "start").returncode == 0
    state = home / ".local" / "state" / "upgradebot" / "try"
    first = int((state / "kubesim.pid").read_text())
    (state / "kubeconfig").unlink()
    again = local(home, "start")
    assert again.returncode == 0 and again.stdout.startswith("kubesim is running"), again.stdout + again.stderr
    second = int((state / "kubesim.pid").read_text())
    assert second != first and gone(first) and not gone(second)
    assert (state / "kubeconfig").exists()

