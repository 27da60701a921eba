"""The worker processes ``upgradebot serve`` runs beside itself, kept alive while it runs.

``serve`` only acks and queues (:mod:`bot.jobs`); by default it starts one
``upgradebot worker`` for the ``decisions`` lane and one for ``commands`` and ``runs``
(``UPGRADEBOT_WORKER_PROCESSES=0``: none, the workers run elsewhere). A worker that
exits is started again after a pause that doubles up to 30 s; readiness says so until it
is back. A child dies with ``serve`` (``PR_SET_PDEATHSIG``, and it watches its parent):
``kill -9`` of ``serve`` takes its workers with it, as the crash of one pod would. On
SIGTERM each worker stops taking messages, finishes what it runs (up to the drain) and
exits; one still running after the drain is killed (its runs resume from their
checkpoints, as after a crash). The workers run at a lower priority (``nice``,
``UPGRADEBOT_WORKER_NICE``, 10): on a busy node the process that acks Slack gets the CPU
first, and the work waits, not the acks.

The workers' metrics are written to a directory of ``serve``'s (prometheus_client's
multiprocess mode, ``PROMETHEUS_MULTIPROC_DIR``) and served with its own on ``/metrics``.
"""

from __future__ import annotations

import gc
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence

log = logging.getLogger("upgradebot.processes")

DEFAULT_GROUPS: tuple[tuple[str, ...], ...] = (("decisions",), ("commands", "runs"))
RESTART_MAX = 30.0


class WorkerDown(Exception):
    """A worker process is not running (readiness)."""


class _Child:
    def __init__(self, lanes: Sequence[str]) -> None:
        self.lanes = tuple(lanes)
        self.proc: subprocess.Popen[bytes] | None = None
        self.pause = 1.0
        self.next_start = 0.0

    @property
    def name(self) -> str:
        return "+".join(self.lanes)


class WorkerProcesses:
    def __init__(self, groups: Sequence[Sequence[str]] = DEFAULT_GROUPS, *, env: Mapping[str, str] | None = None,
                 drain: float = 30.0, read_only: bool = False) -> None:
        """``read_only``: the workers of a ``serve`` without a policy file (``upgradebot worker --read-only``)."""
        self.read_only = read_only
        self.metrics_dir = tempfile.mkdtemp(prefix="upgradebot-metrics-")
        self.drain = drain
        self._env = {**(env if env is not None else os.environ), "PROMETHEUS_MULTIPROC_DIR": self.metrics_dir,
                     "UPGRADEBOT_WORKER_OF": str(os.getpid())}
        self._children = [_Child(lanes) for lanes in groups]
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._watcher: threading.Thread | None = None

    def _spawn(self, child: _Child) -> None:
        command = [sys.executable, "-m", "bot", "worker", "--lanes", ",".join(child.lanes), "--drain", str(self.drain),
                   *(["--read-only"] if self.read_only else [])]
        child.proc = subprocess.Popen(command, env=self._env, stdin=subprocess.DEVNULL)
        log.info("started the %s worker (pid %d)", child.name, child.proc.pid)

    def start(self) -> WorkerProcesses:
        with self._lock:
            for child in self._children:
                self._spawn(child)
        self._watcher = threading.Thread(target=self._watch, name="upgradebot-children", daemon=True)
        self._watcher.start()
        return self

    def _watch(self) -> None:
        while not self._stop.wait(0.5):
            with self._lock:
                for child in self._children:
                    self._look_after(child)

    def _look_after(self, child: _Child) -> None:
        if self._stop.is_set():
            return
        if child.proc is not None:
            code = child.proc.poll()
            if code is None:
                if time.monotonic() > child.next_start + 60:  # up a minute: the next failure waits 1 s again
                    child.pause = 1.0
                return
            log.warning("the %s worker (pid %d) exited with %s: starting another in %.0f s", child.name, child.proc.pid,
                        code, child.pause)
            _forget_metrics_of(child.proc.pid)
            child.proc = None
            child.next_start = time.monotonic() + child.pause
            child.pause = min(RESTART_MAX, child.pause * 2)
        if time.monotonic() >= child.next_start:
            self._spawn(child)
            child.next_start = time.monotonic()

    def check(self) -> None:
        """Readiness: every worker is running (``WorkerDown`` says which is not)."""
        with self._lock:
            down = [c.name for c in self._children if c.proc is None or c.proc.poll() is not None]
        if down:
            raise WorkerDown(f"worker process not running: {', '.join(down)}")

    def stop(self, timeout: float | None = None) -> bool:
        """SIGTERM to every worker, wait up to ``timeout`` (the drain) for them, kill the rest;
        True if all ended by themselves."""
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join(timeout=5)
        deadline = time.monotonic() + (self.drain if timeout is None else timeout)
        with self._lock:
            procs = [c.proc for c in self._children if c.proc is not None]
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        clean = True
        for proc in procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("the worker pid %d did not stop within the drain: killed", proc.pid)
                proc.kill()
                proc.wait()
                clean = False
        shutil.rmtree(self.metrics_dir, ignore_errors=True)
        return clean


def _forget_metrics_of(pid: int) -> None:
    try:
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid)
    except Exception:  # nothing of a dead worker's gauges to clear
        pass


def lower_priority(nice: int) -> None:
    """In a worker: yield the CPU to ``serve``'s acks (``nice`` added to this process's niceness)."""
    if nice > 0:
        try:
            os.nice(nice)
        except OSError as exc:  # not allowed here: the worker runs at serve's priority
            log.warning("cannot lower the worker's priority: %s", exc)


def freeze_heap() -> None:
    """Once a process has started (modules imported, policy and clients built): what it built is
    left out of the cyclic collector's full passes from now on (``gc.freeze``), so a full pass
    scans what was made since, not the whole heap. ``serve``'s front end holds ~110,000 objects
    after start-up, and a full pass over them stopped every HTTP thread for 9-33 ms, an ack's
    whole budget in a burst (issue 39); what start-up built lives as long as the process, and
    what it frees is still freed by its reference count."""
    gc.collect()
    gc.freeze()


WORKER_GC_THRESHOLDS = (50_000, 20, 100)


def keep_cache() -> None:
    """In a process that keeps a watch cache (a worker, ``serve`` without a policy file): young
    collections every 50,000 objects instead of 700, full passes at most every 100 middle ones
    instead of 10. A worker holds a watch cache of whole clusters (over a
    million objects at 5,000 nodes) and each inventory builds some 200,000 objects that live a
    fraction of a second: with the default thresholds those alive at a young collection were
    promoted to the oldest generation, and a full pass over the cache (130 ms) ran every 0.65 s
    through an inventory flood (issue 39). Cycles are still collected, young ones sooner."""
    gc.set_threshold(*WORKER_GC_THRESHOLDS)


def die_with_parent(parent: int) -> None:
    """In a worker: be killed when ``parent`` (``serve``) dies; Linux's ``PR_SET_PDEATHSIG``,
    and a thread that checks the parent each second where that is not available."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # it died before the call above
        os.kill(os.getpid(), signal.SIGKILL)

    def watch() -> None:
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="upgradebot-parent", daemon=True).start()
