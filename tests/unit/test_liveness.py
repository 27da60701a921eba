"""Whether a claim's holder is provably dead (finding 10): only a process of this pid space
that is gone, a zombie, or whose pid another process now has; never one that runs or is
stopped, nor one this process cannot judge."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bot.liveness import holder, holder_dead, mark


@contextmanager
def child() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def reaches(pid: int, states: tuple[str, ...]) -> None:
    """Wait until ``pid`` is in one of ``states`` (``/proc/<pid>/stat``), polled."""
    deadline = time.monotonic() + 60
    while Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in states:
        assert time.monotonic() < deadline, f"process {pid} never reached {states}"
        time.sleep(0.01)


def test_this_process_and_a_running_or_stopped_one_are_alive() -> None:
    assert not holder_dead(holder("host/1/aa"))
    with child() as proc:
        value = f"host/{proc.pid}/bb {mark(proc.pid)}"
        assert not holder_dead(value)
        os.kill(proc.pid, signal.SIGSTOP)  # stopped, maybe in its Slack call: its claim is kept
        reaches(proc.pid, ("T", "t"))
        assert not holder_dead(value)


def test_a_killed_process_is_dead_reaped_or_not() -> None:
    with child() as proc:
        value = f"host/{proc.pid}/cc {mark(proc.pid)}"
        proc.kill()
        reaches(proc.pid, ("Z",))  # killed, not waited for yet: a zombie
        assert holder_dead(value)
        proc.wait()
        assert holder_dead(value)


def test_a_pid_now_another_process_s_is_dead() -> None:
    """The holder's pid given to another process: its start time differs."""
    with child() as proc:
        space, pid, start = mark(proc.pid).split(".")
        assert holder_dead(f"host/{pid}/dd {space}.{pid}.{int(start) - 1}")
        assert not holder_dead(f"host/{pid}/dd {space}.{pid}.{start}")


def test_a_holder_elsewhere_or_without_a_mark_is_never_called_dead() -> None:
    """Another host, container or boot (another pid space), or a claim of a version before
    the mark: its pid means nothing here, so its claim waits for its time to live."""
    with child() as proc:
        space, pid, start = mark(proc.pid).split(".")
        proc.kill()
        proc.wait()
        assert holder_dead(f"host/{pid}/ee {space}.{pid}.{start}")
        assert not holder_dead(f"host/{pid}/ee {'0' * len(space)}.{pid}.{start}")
        assert not holder_dead(f"host/{pid}/ee")
        assert not holder_dead("bot-a")
        assert not holder_dead("")
