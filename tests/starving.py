"""Starving a chosen process, for the starvation tests (issue 40, item 2).

A process that the machine does not schedule for longer than its lease is, to every other
process, gone: its lease runs out and another replica takes its work over. Then it runs
again, unaware, in the middle of what it was doing. :class:`Starvation` makes that happen
on purpose with SIGSTOP and SIGCONT: the test (or the process itself, at a named point)
stops a process, the test waits until the others have acted on its lost lease, then
resumes it. Every process it stopped is resumed when the test ends, whatever its outcome.

The ``starvation`` fixture (``tests/conftest.py``) hands one to a test.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path


def stopped(pid: int) -> bool:
    """Whether ``pid`` is stopped (state ``T`` in ``/proc/<pid>/stat``); False once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] in ("T", "t")


class Starvation:
    """SIGSTOP and SIGCONT for the processes of one test; :meth:`release` resumes them all."""

    def __init__(self) -> None:
        self.pids: set[int] = set()

    def stop(self, pid: int) -> None:
        """Stop ``pid`` now (it runs nothing until :meth:`resume`)."""
        self.pids.add(pid)
        os.kill(pid, signal.SIGSTOP)

    def wait_stopped(self, pid: int, *, timeout: float = 120.0) -> None:
        """Wait until ``pid`` is stopped: by :meth:`stop`, or by itself at a point it was told."""
        self.pids.add(pid)
        deadline = time.monotonic() + timeout
        while not stopped(pid):
            assert time.monotonic() < deadline, f"process {pid} was never stopped"
            time.sleep(0.05)

    def resume_when(self, pid: int, condition: Callable[[], object], *, timeout: float = 120.0) -> None:
        """Keep ``pid`` stopped until ``condition()`` holds (the others acted on its lost
        lease: longer than its lease, by construction), then resume it."""
        deadline = time.monotonic() + timeout
        try:
            while not condition():
                assert time.monotonic() < deadline, f"the condition to resume {pid} never held"
                assert stopped(pid), f"process {pid} runs again before the test resumed it"
                time.sleep(0.05)
        finally:
            self.resume(pid)

    def resume(self, pid: int) -> None:
        self.pids.discard(pid)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)

    def release(self) -> None:
        """Resume every process still stopped (a failing test leaves none behind)."""
        for pid in sorted(self.pids):
            self.resume(pid)


def end_replicas(procs: list[subprocess.Popen[str]], logs: Path, *, timeout: float = 60.0) -> None:
    """Resume and terminate a test's replica processes, wait for them, then echo the tail of
    each ``*.log`` under ``logs`` to stderr (pytest shows it when the test failed)."""
    for proc in procs:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGCONT)
            proc.terminate()
    for proc in procs:
        proc.wait(timeout=timeout)
    for path in sorted(logs.glob("*.log")):
        sys.stderr.write(f"--- {path.name}\n{path.read_text()[-3000:]}")


def stop_self_at(point: str | None) -> Callable[[str], None]:
    """An engine checkpoint hook for a replica process: it stops itself (SIGSTOP) when it
    reaches ``point``, to be resumed by the test's :class:`Starvation`."""

    def checkpoint(reached: str) -> None:
        if point and reached == point:
            os.kill(os.getpid(), signal.SIGSTOP)

    return checkpoint
