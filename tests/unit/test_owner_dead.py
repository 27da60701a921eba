"""Whether a lease holder on this host is gone: a process that exited is, even before it is reaped."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

from bot.runtime import local_owner_dead
from runbooks.engine.leasing import owner_id


def test_a_process_that_exited_but_is_not_reaped_yet_is_dead() -> None:
    """Issue 35: a killed worker whose parent died too stays a zombie until something reaps it; signal
    0 still reaches a zombie, so the lease it held waited for its 30 s TTL (the restart test's 35 s).
    A zombie holds nothing: its lease is taken over at once."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])  # exits; not waited for, so a zombie
    try:
        with open(f"/proc/{child.pid}/stat") as stat:
            deadline = time.monotonic() + 60
            while stat.read().rsplit(")", 1)[1].split()[0] != "Z" and time.monotonic() < deadline:
                time.sleep(0.01)
                stat.seek(0)
        os.kill(child.pid, 0)  # still "alive" to a signal
        assert local_owner_dead(owner_id(socket.gethostname(), child.pid))
    finally:
        child.wait()


def test_a_running_process_and_another_hosts_are_not_dead() -> None:
    """A process that runs holds its lease; so does one on another host (its pid means nothing here)."""
    with subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE) as child:
        assert not local_owner_dead(owner_id(socket.gethostname(), child.pid))
        assert not local_owner_dead(owner_id("another-host", child.pid + 1_000_000))
        assert child.stdin is not None
        child.stdin.close()
