"""The one writer of runs: every state change goes through :meth:`Writer.transition`.

``transition`` asks :func:`runbooks.engine.runs.check_transition` first, then stores the run
with the store's compare-and-set, with its audit line in the same atomic write, and only
then tells the observer. Writes that keep the state (a gate decision, a step's progress)
go through :meth:`Writer.update`, which refuses to change the state. A lost
compare-and-set raises :class:`runbooks.engine.store.StaleRun`; :meth:`Writer.retrying` re-reads
the run and applies the change again, so concurrent writers serialize and none is lost.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from runbooks.engine.actors import ENGINE_ACTOR, ENGINE_SURFACE, Actor, as_actor
from runbooks.engine.reading import read_run
from runbooks.engine.runs import TERMINAL, Gate, Run, RunState, Step, check_transition
from runbooks.engine.store import RunStore, StaleRun

if TYPE_CHECKING:  # the protocol only: the steps' settings models are not loaded by reading runs (issue 39)
    from runbooks.engine.steps import Clock

log = logging.getLogger(__name__)
CAS_ATTEMPTS = 50


class Observer(Protocol):
    """What a front end hears about a run: the Slack thread, the shell's output."""

    def on_state(self, run: Run) -> None:
        """The run changed state (its root message is updated)."""
        ...

    def on_step(self, run: Run, step: Step) -> None:
        """A step, check, mutation or decision was recorded (one thread message)."""
        ...

    def on_gate(self, run: Run, gate: Gate) -> None:
        """A gate opened (or was posted again): show Approve / Reject."""
        ...

    def on_progress(self, run: Run) -> None:
        """A step stored progress (a wave's nodes moved, a soak began): the root message's
        progress is redrawn in place (front ends coalesce these)."""
        ...


class SilentObserver:
    def on_state(self, run: Run) -> None:
        pass

    def on_step(self, run: Run, step: Step) -> None:
        pass

    def on_gate(self, run: Run, gate: Gate) -> None:
        pass

    def on_progress(self, run: Run) -> None:
        pass


class RunMoved(Exception):
    """The run is no longer in the state a worker expected; the worker re-reads it."""

    def __init__(self, run_id: str, expected: RunState, found: RunState) -> None:
        super().__init__(f"run {run_id} moved from {expected.value} to {found.value}")
        self.run_id, self.expected, self.found = run_id, expected, found


def audit_entry(run: Run, step: Step) -> dict[str, Any]:
    """A step as the store's audit streams keep it: what, when, by whom, from which surface
    (and from a shell, which OS account or CI identity)."""
    return {
        "run": run.id,
        "at": step.at.isoformat(),
        "actor": step.actor,
        "surface": step.surface or ENGINE_SURFACE,
        "account": step.account or None,
        "kind": step.kind,
        "name": step.name,
        "status": step.status,
        "detail": step.detail,
        "state": run.state.value,
        "evidence": step.evidence or None,
    }


_KEEP: Any = object()


class Writer:
    """Stores runs for the engine; the observer and the checkpoint hook hear of each write."""

    def __init__(
        self, *, store: RunStore, clock: Clock, observer: Observer,
        checkpoint: Callable[[str], None] = lambda point: None,
    ) -> None:
        self.store, self.clock, self.observer, self.checkpoint = store, clock, observer, checkpoint

    def get(self, run_id: str, *, whole: bool = True) -> Run:
        return read_run(self.store, run_id, whole=whole)

    def retrying(self, run_id: str, change: Callable[[Run], Run]) -> Run:
        """``change(fresh run)`` until its compare-and-set wins."""
        for _ in range(CAS_ATTEMPTS):
            try:
                return change(self.get(run_id))
            except StaleRun:
                continue
        raise StaleRun(run_id, -1, None)

    def transition(
        self,
        run: Run,
        wanted: RunState,
        *,
        actor: str | Actor = ENGINE_ACTOR,
        reason: str = "",
        gate: Gate | None = _KEEP,
        halted: bool = False,
        steps: Sequence[Step] = (),
        lease_owner: str | None = None,
        progress: dict[str, Any] | None = None,
    ) -> Run:
        """The only way a run changes state: the table allows it, the CAS wins, it is audited
        (``progress``, when given, is written in the same compare-and-set)."""
        check_transition(run.id, run.state, wanted, run.kind)
        now = self.clock.now()
        update: dict[str, Any] = {
            "state": wanted, "previous_state": run.state, "updated_at": now, "halted": halted,
        }
        if reason:
            update["reason"] = reason
        if progress is not None:
            update["progress"] = progress
        if gate is not _KEEP:
            update["gate"] = gate
        elif run.gate is not None and run.gate.is_open and (wanted in TERMINAL or wanted is RunState.ROLLING_BACK):
            # a request does not outlive the run it would change
            update["gate"] = run.gate.model_copy(update={"outcome": "superseded", "decided_at": now})
        new = run.model_copy(update=update)
        line = self.step(f"{run.state.value} -> {wanted.value}", kind="transition", detail=reason, actor=actor)
        entries = [audit_entry(run, s) for s in steps] + [audit_entry(new, line)]
        saved = self.store.save(new, audit=entries, lease_owner=lease_owner)
        self._tell(saved, steps)
        self.safely(self.observer.on_state, saved)
        opened = saved.gate if gate is not _KEEP and saved.gate is not None and saved.gate.is_open else None
        if opened is not None:
            self.safely(self.observer.on_gate, saved, opened)
        self.checkpoint(f"transition:{wanted.value}")
        return saved

    def update(
        self, run: Run, *, steps: Sequence[Step] = (), lease_owner: str | None = None, **changes: Any
    ) -> Run:
        """A write that keeps the state: a gate, a decision, progress, a halt."""
        if "state" in changes:
            raise ValueError("state changes go through Writer.transition")
        new = run.model_copy(update={**changes, "updated_at": self.clock.now()})
        saved = self.store.save(new, audit=[audit_entry(run, s) for s in steps], lease_owner=lease_owner)
        self._tell(saved, steps)
        gate = changes.get("gate")
        if isinstance(gate, Gate) and gate.is_open and gate != run.gate:
            self.safely(self.observer.on_gate, saved, gate)
        if "progress" in changes or "pause" in changes:
            self.safely(self.observer.on_progress, saved)
        return saved

    def record(self, run: Run, step: Step) -> None:
        """Append one step to the audit trail (no run write)."""
        self.store.append_audit(run.id, audit_entry(run, step))
        self._tell(run, [step])

    def step(self, name: str, *, kind: str, status: str = "ok", detail: str = "",
             actor: str | Actor = ENGINE_ACTOR, evidence: dict[str, Any] | None = None) -> Step:
        """A line of the run's story; ``actor`` an :class:`Actor` stamps its surface and account."""
        who = as_actor(actor)
        surface = "" if who.surface == ENGINE_SURFACE else who.surface
        return Step(name=name, kind=kind, status=status, detail=detail, actor=who.user, surface=surface,
                    account=who.account, evidence=evidence or {}, at=self.clock.now())

    def _tell(self, run: Run, steps: Sequence[Step]) -> None:
        for s in steps:
            self.safely(self.observer.on_step, run, s)

    @staticmethod
    def safely(fn: Callable[..., None], *args: Any) -> None:
        """An observer (a chat thread) failing must not stop a run."""
        try:
            fn(*args)
        except Exception:  # the observer is a front end's; its failure is logged, not fatal
            log.exception("observer %s failed", getattr(fn, "__qualname__", fn))
