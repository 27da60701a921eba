"""``upgradebot local start|stop`` (``make try``): a place to try the bot from the shell, left running.

``start`` leaves three things in the background, all under this user's state directory
(``$XDG_STATE_HOME/upgradebot``, else ``~/.local/state/upgradebot``; never a path shared by
the users of a machine such as ``/tmp/kubesim.kubeconfig``):

- kubesim (``gpu-small``, Kubernetes 1.31) as its own process, its kubeconfig, pid and log
  in ``try/``;
- this user's local Redis, the very server the shell starts on its first command
  (:mod:`bot.storage.local`), unless ``REDIS_URL`` names another;
- a policy for two people in one terminal (``try/policy.yaml``): the OS account running
  it is Alice (``U0ALICE``), who requests; Bob (``U0BOB``), the approver, acts with a CI
  token (``UPGRADEBOT_TOKEN``) whose secret is in ``try/bob.token`` and whose SHA-256 is in
  the policy. Self-approval stays refused; shell approvals are on.

Every directory it uses is this user's alone (:mod:`bot.storage.private`): made with mode
0700, or refused, exit 2, when another user owns it, others (or the group) can write it, or it
is a symbolic link; so is a policy or token it would reuse. The policy and the token are
written afresh with mode 0600.

It prints three lines to paste: ``.venv/bin`` on ``PATH``, ``KUBECONFIG`` and
``UPGRADEBOT_CONFIG``, and a ``bob`` shell function that runs a command as Bob. A second
``start`` while kubesim runs starts nothing and prints the same lines.

``stop`` stops kubesim and the local Redis (whoever started it: ``start`` or any shell
command), each with SIGTERM (Redis writes its append-only file and exits), SIGKILL after
:data:`STOP_TIMEOUT`, and they stay stopped: until the next ``start``, a shell command that
would start the local Redis again refuses, saying so (:func:`bot.storage.local.mark_stopped`;
with ``REDIS_URL`` set the local Redis is not used, and nothing is refused); a pid file is believed only when its process is still the one it
names (its command line), so a reused pid is never signalled. The policy and Bob's token
stay for the next ``start``; the runs stay in Redis's append-only file.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import secrets
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from bot.shell import local_messages as msg
from bot.shell.identity import os_account
from bot.storage.local import clear_stopped, local_redis_url, mark_stopped
from bot.storage.private import existing_dir, private_dir, private_file, write_private
from handlers.messages import PROG, shell_error

if TYPE_CHECKING:  # the type only: `upgradebot --help` loads no settings (issue 39)
    from bot.settings import Settings

START_TIMEOUT = 60.0
"""Seconds kubesim may take to write its kubeconfig (its first start imports the release schemas)."""
STOP_TIMEOUT = 10.0
ALICE, BOB = "U0ALICE", "U0BOB"
SAFE_PATH = re.compile(r"[A-Za-z0-9_@%+=:,./-]+")


class LocalError(Exception):
    """kubesim did not start, or a process did not stop."""


@dataclass(frozen=True)
class Paths:
    """Where ``local`` keeps what it started: under the user's state directory."""

    state: Path

    @property
    def dir(self) -> Path:
        return self.state / "try"

    @property
    def kubeconfig(self) -> Path:
        return self.dir / "kubeconfig"

    @property
    def policy(self) -> Path:
        return self.dir / "policy.yaml"

    @property
    def token(self) -> Path:
        return self.dir / "bob.token"

    @property
    def kubesim_pid(self) -> Path:
        return self.dir / "kubesim.pid"

    @property
    def kubesim_log(self) -> Path:
        return self.dir / "kubesim.log"

    @property
    def redis_pid(self) -> Path:
        return self.state / "redis.pid"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=("start", "stop"), help=msg.LOCAL_ACTION_HELP)


def run(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    paths = Paths(settings.state_dir)
    try:
        if args.action == "stop":
            return stop(paths, out)
        return start(paths, settings, out)
    except LocalError as exc:
        sys.stderr.write(shell_error(str(exc)) + "\n")
        return 2


def start(paths: Paths, settings: Settings, out: TextIO) -> int:
    private_dir(paths.state)  # this user's alone, or refused (bot.storage.private), before anything is used
    private_dir(paths.dir)
    have_policy, have_token = private_file(paths.policy), private_file(paths.token)  # each this user's, or refused
    clear_stopped(paths.state)  # the shell may start its Redis again
    if settings.redis_url is None:  # first: when it cannot start, nothing else is left running
        local_redis_url(paths.state)
    running = _running(paths.kubesim_pid, "kubesim")
    url = _server_url(paths.kubesim_log)
    if running is not None and paths.kubeconfig.exists():
        out.write(msg.local_already_running(running, url) + "\n")
    else:
        if running is not None:  # its kubeconfig is gone: nobody can reach it, start afresh
            _terminate("kubesim", running)
        running, url = _start_kubesim(paths)
        out.write(msg.local_started(running, url) + "\n")
    if not (have_policy and have_token):
        _write_policy(paths)
    out.write(msg.local_paste(paste_lines(paths, home=settings.home)) + "\n")
    out.write(msg.local_stop_hint(PROG) + "\n")
    return 0


def stop(paths: Paths, out: TextIO) -> int:
    if existing_dir(paths.state):  # its pid files are believed only where no one else could have written them
        existing_dir(paths.dir)
    mark_stopped(paths.state)  # first: no command starts the local Redis again meanwhile, nor after
    stopped = False
    for what, pid_file, marker in (("kubesim", paths.kubesim_pid, "kubesim"),
                                   ("the local Redis", paths.redis_pid, "redis-server")):
        pid = _running(pid_file, marker)
        if pid is not None:
            _terminate(what, pid)
            out.write(msg.local_stopped(what, pid) + "\n")
            stopped = True
        pid_file.unlink(missing_ok=True)
    paths.kubeconfig.unlink(missing_ok=True)  # it names a server that is gone
    if not stopped:
        out.write(msg.LOCAL_NOTHING_RUNNING + "\n")
    return 0


def paste_lines(paths: Paths, *, home: Path) -> list[str]:
    """``PATH``, ``KUBECONFIG`` and ``UPGRADEBOT_CONFIG``, and Bob: paths under ``$PWD`` and
    ``$HOME`` written so, so the lines read the same on every machine (as the README shows them)."""
    program = Path(sys.argv[0]).absolute()  # the upgradebot being run (.venv/bin/upgradebot under make try)
    bin_dir = program.parent if program.name == PROG and program.exists() else Path(sys.executable).parent

    def shown(path: Path, *, base: Path, name: str) -> str:
        try:
            rest = path.relative_to(base)
        except ValueError:
            return shlex.quote(str(path))
        return f'"${name}/{rest}"' if SAFE_PATH.fullmatch(str(rest)) else shlex.quote(str(path))

    here = bin_dir == Path.cwd() / ".venv" / "bin"  # make try, in the clone
    return [
        'export PATH="$PWD/.venv/bin:$PATH"' if here else f'export PATH={shlex.quote(str(bin_dir))}:"$PATH"',
        f"export KUBECONFIG={shown(paths.kubeconfig, base=home, name='HOME')} "
        f"UPGRADEBOT_CONFIG={shown(paths.policy, base=home, name='HOME')}",
        f'bob() {{ UPGRADEBOT_TOKEN="$(cat {shown(paths.token, base=home, name="HOME")})" "$@"; }}',
    ]


def policy_text(*, account: str, token_sha256: str) -> str:
    """The two-person policy ``start`` writes (the README's Quickstart shows it)."""
    return (
        "# written by `upgradebot local start` (make try): two people in one terminal, on kubesim\n"
        f"requesters: {{users: [{ALICE}]}}\n"
        f"approvers: {{users: [{BOB}]}}                  # Alice may not approve her own request\n"
        "identities:\n"
        f"  accounts: {{{account}: {ALICE}}}                 # you, the OS account running the shell, are Alice\n"
        "  tokens:                                    # Bob acts with UPGRADEBOT_TOKEN (the bob function)\n"
        f"    - {{name: bob, user: {BOB}, sha256: {token_sha256}}}\n"
        "shell: {approvals: true}                     # approvals from the shell (default: in Slack only)\n"
        "steps: {observe_window: 5s, settle_window: 5s}   # short, for trying (default: 30s each)\n"
    )


def _write_policy(paths: Paths) -> None:
    token = secrets.token_urlsafe(24)
    write_private(paths.token, token + "\n")
    digest = hashlib.sha256(token.encode()).hexdigest()
    write_private(paths.policy, policy_text(account=os_account(), token_sha256=digest))


def _start_kubesim(paths: Paths) -> tuple[int, str]:
    paths.kubeconfig.unlink(missing_ok=True)
    with open(paths.kubesim_log, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "kubesim", "serve", "--port", "0", "--scenario", "gpu-small",
             "--k8s-version", "1.31", "--kubeconfig", str(paths.kubeconfig)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        url = _server_url(paths.kubesim_log)
        if url and paths.kubeconfig.exists():
            paths.kubesim_pid.write_text(f"{proc.pid}\n")
            return proc.pid, url
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    tail = " ".join(paths.kubesim_log.read_text(errors="replace")[-300:].split())
    raise LocalError(msg.local_did_not_start(str(paths.kubesim_log), tail))


def _server_url(log: Path) -> str:
    """The URL kubesim printed first, or '' before it did."""
    try:
        first = log.read_text(errors="replace").split("\n", 1)
    except OSError:
        return ""
    return first[0] if len(first) > 1 and first[0].startswith("https://") else ""


def _running(pid_file: Path, marker: str) -> int | None:
    """The pid in ``pid_file`` if that process lives and its command line names ``marker``."""
    try:
        pid = int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return None
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except FileNotFoundError:
        return None
    except OSError:  # no /proc (macOS): is it alive at all
        try:
            os.kill(pid, 0)
        except OSError:
            return None
        return pid
    return pid if marker in cmdline else None


def _terminate(what: str, pid: int) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + STOP_TIMEOUT
        while time.monotonic() < deadline:
            if not _alive(pid):
                return
            time.sleep(0.05)
    raise LocalError(msg.local_did_not_stop(what, pid))


def _alive(pid: int) -> bool:
    try:
        waited, _ = os.waitpid(pid, os.WNOHANG)  # our own child (a test's): reap it
        if waited == pid:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie waiting for a parent that is not us has stopped all the same
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][:1] != "Z"
    except (OSError, IndexError):
        return True
