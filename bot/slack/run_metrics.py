"""What the run engine tells the metrics: step durations (an observer) and runs by state.

:class:`StepTimer` notes when a run enters a working state and, when the step's result
line arrives (``canary``, ``verify_canary``, ``promote``, ``verify_all``, ``rollback``),
observes the time between the two in ``upgradebot_step_duration_seconds``. A step whose
start this process did not see (it resumed the run after a restart) is not observed.
:func:`runs_by_state` counts the store's active runs for the ``upgradebot_runs`` gauge.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Mapping

from bot.slack.metrics import Metrics
from runbooks.engine.driving import STEP_OF
from runbooks.engine.runs import Gate, Run, RunState, Step
from runbooks.engine.store import RunStore


class StepTimer:
    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self._started: dict[str, tuple[RunState, float]] = {}
        self._lock = threading.Lock()

    def on_state(self, run: Run) -> None:
        with self._lock:
            if run.state in STEP_OF:
                self._started[run.id] = (run.state, run.updated_at.timestamp())
            else:
                self._started.pop(run.id, None)

    def on_step(self, run: Run, step: Step) -> None:
        if step.kind != "step" or step.name not in STEP_OF.values():
            return
        with self._lock:
            started = self._started.get(run.id)
        if started is None or STEP_OF[started[0]] != step.name:
            return
        seconds = max(0.0, step.at.timestamp() - started[1])
        self.metrics.observe_step(step.name, seconds, result="ok" if step.status == "ok" else "failed")

    def on_gate(self, run: Run, gate: Gate) -> None:
        pass


def runs_by_state(store: RunStore) -> Callable[[], Mapping[str, int]]:
    """``{state: count}`` of the runs not yet ended, read from the store at each scrape."""

    def count() -> Mapping[str, int]:
        return Counter(run.state.value for run in store.list_runs(active_only=True, limit=100_000))

    return count
