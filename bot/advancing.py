"""Moving runs on in the background: after a click or a command, at start-up, periodically.

:class:`Advancer` runs ``engine.advance`` for a run in its own bounded pool of workers
(cluster steps take minutes; commands and clicks keep their own pool). One process never
drives a run from two threads: a run already being advanced here is marked to be looked
at again when the current drive ends (the run's lease keeps other processes out).
:meth:`Advancer.sweep` is ``engine.resume`` for a serving bot: it closes overdue gates
(``expire_due``) and advances every unfinished run that waits for work, not for people;
:meth:`Advancer.start` sweeps at once and then every ``interval`` seconds, so runs left
by a restart or a dead replica go on, and requests nobody decided expire.
"""

from __future__ import annotations

import logging
import threading

from bot.workers import Workers
from runbooks.engine.commands import Engine
from runbooks.engine.driving import StepPaused

log = logging.getLogger("upgradebot.runs")


class Advancer:
    def __init__(self, engine: Engine, *, workers: int = 4, interval: float = 30.0) -> None:
        self.engine = engine
        self.interval = interval
        self.workers = Workers(workers, name="upgradebot-run")
        self._busy: set[str] = set()
        self._again: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def submit(self, run_id: str) -> None:
        """Advance ``run_id`` in the background (once more after the drive in progress, if any)."""
        with self._lock:
            if run_id in self._busy:
                self._again.add(run_id)
                return
            self._busy.add(run_id)
        if not self.workers.submit(self._drive, run_id):
            with self._lock:
                self._busy.discard(run_id)
            log.warning("no worker free for run %s: the next sweep advances it", run_id)

    def _drive(self, run_id: str) -> None:
        while True:
            try:
                run = self.engine.advance(run_id)
                log.info("run %s is %s", run_id, run.state.value)
            except StepPaused as exc:
                log.warning("%s", exc)
            except Exception:  # logged; the run keeps its state and the next sweep tries again
                log.exception("advancing run %s failed", run_id)
            with self._lock:
                if run_id not in self._again:
                    self._busy.discard(run_id)
                    return
                self._again.discard(run_id)

    def sweep(self) -> int:
        """Close overdue gates, advance every unfinished run that needs work; how many were queued."""
        self.engine.expire_due()
        queued = 0
        for run in self.engine.runs(active_only=True, limit=10_000):
            if self.engine.needs_work(run):
                self.submit(run.id)
                queued += 1
        return queued

    def _sweeping(self) -> None:
        while True:
            try:
                count = self.sweep()
                if count:
                    log.info("resumed %d unfinished run(s)", count)
            except Exception:  # the store may be down for a while; the next sweep retries
                log.exception("sweeping the unfinished runs failed")
            if self._stop.wait(self.interval):
                return

    def start(self) -> Advancer:
        """Sweep now (``resume`` at start-up), then every ``interval`` seconds."""
        self._thread = threading.Thread(target=self._sweeping, name="upgradebot-sweep", daemon=True)
        self._thread.start()
        return self

    def wait_idle(self, timeout: float) -> bool:
        return self.workers.wait_idle(timeout)

    def stop(self, timeout: float = 30.0) -> bool:
        """No more sweeps; wait up to ``timeout`` for the drives in progress (leases cover the rest)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        return self.workers.shutdown(timeout=timeout)
