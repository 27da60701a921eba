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



def redis_servers_on(socket: Path) -> list[int]:
    """The pids of the redis-servers whose command line names ``socket`` (this home's local Redis)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if proc.name.isdigit() and "redis-server" in cmdline and str(socket) in cmdline and not gone(int(proc.name)):
            found.append(int(proc.name))
    return found


def test_after_stop_the_shell_starts_no_redis_until_start(home: Path, redis_url: str) -> None:
    """issue 64, item 5: after `local stop`, a command that would start the local Redis again
    (status, runs, audit) says it is stopped and how to start it, exits 2 and starts nothing;
    with REDIS_URL (a Redis of the team's) nothing is refused; after `local start` it works again."""
    state = home / ".local" / "state" / "upgradebot"
    socket = state / "redis.sock"
    assert in_process(env_of(home), "runs").returncode == 0  # the shell's Redis, started on demand
    assert redis_servers_on(socket)
    stopped = in_process(env_of(home), "local", "stop")
    assert stopped.returncode == 0 and "Stopped the local Redis" in stopped.stdout, stopped.stdout + stopped.stderr
    assert not redis_servers_on(socket)

    for verb in ("status", "runs", "audit r-00000000", "status --json"):
        proc = in_process(env_of(home), *verb.split())
        assert proc.returncode == 2 and proc.stdout == "", (verb, proc.stdout, proc.stderr)
        assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
        said = proc.stderr
        assert "the local Redis is stopped" in said and "`upgradebot local start`" in said and "make try" in said, said
        assert not socket.exists() and not (state / "redis.pid").exists(), verb
        assert not redis_servers_on(socket), verb
    assert in_process(env_of(home, REDIS_URL=redis_url), "runs").returncode == 0  # not the local Redis: no refusal
    assert not redis_servers_on(socket)

    started = local(home, "start")
    assert started.returncode == 0, started.stderr
    proc = in_process(env_of(home), "status")
    assert proc.returncode == 0, proc.stderr
    assert answers(str(socket)) and redis_servers_on(socket)


OTHER_UID = 12345
"""Another user of the machine (the tests run as root, who may give a directory away)."""


def _refused(home: Path, state_home: Path) -> subprocess.CompletedProcess[str]:
    """``local start`` with ``XDG_STATE_HOME=state_home``, which must refuse: exit 2, one line naming
    what it refused, and nothing started (no Redis) nor written (no policy)."""
    proc = in_process(env_of(home, XDG_STATE_HOME=str(state_home)), "local", "start")
    state = state_home / "upgradebot"
    try:
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert proc.stdout == "" and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert proc.stderr.startswith("upgradebot: ") and str(state_home) in proc.stderr, proc.stderr
        assert not (state / "redis.pid").exists() and not (state / "redis.sock").exists()
        assert not (state / "try" / "kubesim.pid").exists()
    finally:  # the code before the fix started both: stop them (by their pid files), whatever the state
        for pid_file in (state / "redis.pid", state / "try" / "kubesim.pid"):
            if pid_file.is_file() and not gone(pid := int(pid_file.read_text())):
                os.kill(pid, signal.SIGKILL)
    return proc


def _shared(home: Path) -> Path:
    """A directory every user may write, sticky as /tmp is (each may replace only their own entries)."""
    shared = home / "xs"
    shared.mkdir()
    shared.chmod(0o1777)
    return shared


@pytest.mark.parametrize("how", ["another user's", "writable by others", "writable by the group", "a symlink"])
def test_start_refuses_a_state_directory_it_does_not_own(home: Path, how: str) -> None:
    """finding 8: on a world-writable XDG_STATE_HOME another user pre-created ``upgradebot/`` (or a
    symlink by that name to a directory of theirs): `local start` used it as it was, and that user
    could replace the policy it wrote. It refuses it, exit 2, in one line naming it, starting nothing."""
    shared = _shared(home)
    state = shared / "upgradebot"
    if how == "a symlink":
        elsewhere = home / "elsewhere"
        elsewhere.mkdir(mode=0o700)
        state.symlink_to(elsewhere)
    else:
        state.mkdir()
        state.chmod({"another user's": 0o700, "writable by others": 0o777, "writable by the group": 0o770}[how])
        if how == "another user's":
            os.chown(state, OTHER_UID, OTHER_UID)
    proc = _refused(home, shared)
    assert str(state) in proc.stderr
    assert not (home / "elsewhere" / "try").exists()  # nothing was made through the link


@pytest.mark.parametrize("how", ["another user's", "writable by others", "a symlink"])
def test_start_refuses_a_try_directory_it_does_not_own(home: Path, how: str) -> None:
    """finding 8: ``upgradebot/try/`` (kubesim's kubeconfig, the policy, Bob's token) is held to the same."""
    shared = _shared(home)
    state = shared / "upgradebot"
    state.mkdir(mode=0o700)
    if how == "a symlink":
        (home / "elsewhere").mkdir(mode=0o700)
        (state / "try").symlink_to(home / "elsewhere")
    else:
        (state / "try").mkdir(mode=0o700)
        if how == "another user's":
            os.chown(state / "try", OTHER_UID, OTHER_UID)
        else:
            (state / "try").chmod(0o777)
    proc = _refused(home, shared)
    assert str(state / "try") in proc.stderr
    assert not (home / "elsewhere" / "policy.yaml").exists()


def test_start_refuses_a_state_home_others_can_write_without_the_sticky_bit(home: Path) -> None:
    """finding 8: in a directory anyone may write and that is not sticky (as /tmp is), another
    user can rename this user's ``upgradebot/`` away and put one of theirs in its place."""
    open_to_all = home / "xs"
    open_to_all.mkdir()
    open_to_all.chmod(0o777)
    _refused(home, open_to_all)
    assert not (open_to_all / "upgradebot" / "try").exists()


def test_start_refuses_a_state_home_under_a_directory_of_another_user(home: Path) -> None:
    """A second attack run (N7): only the state home's own parent was checked, so a state home
    below a directory another user owns was used, and that user could rename our directories
    away and put theirs in their place. Every directory on the way must be ours or root's."""
    theirs = home / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, OTHER_UID, OTHER_UID)
    ours = theirs / "ours"
    ours.mkdir(mode=0o700)
    proc = _refused(home, ours / "state")
    assert f"{theirs} (above {ours / 'state'}) belongs to another user (uid {OTHER_UID})" in proc.stderr, proc.stderr


@pytest.mark.parametrize("how", ["another user's", "a symlink"])
def test_start_refuses_a_policy_it_did_not_write(home: Path, how: str) -> None:
    """finding 8: a policy or token in ``try/`` that is not this user's own regular file (left by
    another user while the directory was open to them, or a link to elsewhere) is not reused."""
    shared = _shared(home)
    try_dir = shared / "upgradebot" / "try"
    try_dir.mkdir(parents=True, mode=0o700)
    (shared / "upgradebot").chmod(0o700)
    (try_dir / "bob.token").write_text("theirs\n")
    if how == "a symlink":
        (home / "their-policy.yaml").write_text("approvers: {users: [U0MALLORY]}\n")
        (try_dir / "policy.yaml").symlink_to(home / "their-policy.yaml")
    else:
        (try_dir / "policy.yaml").write_text("approvers: {users: [U0MALLORY]}\n")
        os.chown(try_dir / "policy.yaml", OTHER_UID, OTHER_UID)
    proc = _refused(home, shared)
    assert str(try_dir / "policy.yaml") in proc.stderr


def test_start_makes_its_directories_and_files_private(home: Path) -> None:
    """finding 8: in a shared sticky XDG_STATE_HOME, what `local start` makes is the user's alone:
    its directories 0700, the policy and Bob's token 0600 (whatever the umask)."""
    shared = _shared(home)
    env = env_of(home, XDG_STATE_HOME=str(shared))
    started = subprocess.run([UPGRADEBOT, "local", "start"], capture_output=True, text=True, env=env, cwd=ROOT,
                             timeout=120)
    try:
        assert started.returncode == 0, started.stderr
        state = shared / "upgradebot"
        for directory in (state, state / "try"):
            assert directory.stat().st_mode & 0o777 == 0o700, directory
        for private in (state / "try" / "policy.yaml", state / "try" / "bob.token", state / "try" / "kubeconfig"):
            assert private.stat().st_mode & 0o777 == 0o600, private
    finally:
        assert in_process(env, "local", "stop").returncode == 0


def test_the_shells_redis_and_stop_refuse_a_state_directory_of_another_user(home: Path) -> None:
    """finding 8, the same directory: a shell command (its Redis, whose socket would be there) and
    `local stop` (its pid files) refuse it too; neither starts nor signals anything."""
    shared = _shared(home)
    state = shared / "upgradebot"
    state.mkdir(mode=0o700)
    os.chown(state, OTHER_UID, OTHER_UID)
    env = env_of(home, XDG_STATE_HOME=str(shared))
    try:
        for verb in ("runs", "local stop"):
            proc = in_process(env, *verb.split())
            assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stdout + proc.stderr
            assert f"{state} belongs to another user (uid {OTHER_UID})" in proc.stderr
        assert not (state / "redis.sock").exists() and not (state / "redis.pid").exists()
    finally:  # the code before the fix started the Redis there
        if (state / "redis.pid").is_file() and not gone(pid := int((state / "redis.pid").read_text())):
            os.kill(pid, signal.SIGKILL)
