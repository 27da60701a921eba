"""Driving a run: call the cluster step of each working state until a gate or the end.

The driver holds the run's lease while it works (:mod:`runbooks.engine.leasing`) and re-reads
the run before each step, so it always acts on what is stored, never on what it
remembers. What a step's result does:

==================  ======================  ===========================================
state               step ok                 step failed (or raised)
==================  ======================  ===========================================
canary_rolling      -> canary_verifying     -> rolling_back (``rollback.automatic``),
canary_verifying    -> awaiting_promotion   else -> halted, with a rollback request
promoting           -> verifying
verifying           -> monitoring
rolling_back        -> rolled_back          -> halted (``rollback <run>`` retries it)
==================  ======================  ===========================================

A step that *raises* something unexpected (not one of :mod:`runbooks.errors`: a bug, a
client failing in an odd way) halts the run where it is: ``halted``, its lock kept, its
reason listing what the run changed so far (the ``mutation`` entries of its audit). A
person decides: ``resume <run>`` runs the step again, ``rollback <run>`` undoes exactly
what the run saved. A rollback that fails halts too, so it can be retried. A run halted
longer than ``halt.rollback_after`` is rolled back by the next drive (a sweep), as soon
as the cluster answers, when ``rollback.automatic`` is on.
A :class:`~runbooks.errors.TemporaryClusterError` (cluster unreachable, overloaded) is
retried with back-off; if it persists the run is left where it is (:class:`StepPaused`)
for ``resume`` to continue, since giving up would leave the cluster half-changed on a
network blip.

A step may also end *unfinished* (``StepResult.again``, a promotion between its waves):
the run stays in its state and the step is called again once ``again.at`` has passed (a
soak: ``progress.wait_until``; the sweep wakes it), or, with ``again.approval``, after the
next wave's request is approved (promoting -> awaiting_promotion). A paused run (``pause``)
gets no new step until ``continue``; a promotion step stops starting nodes when it sees
the pause and ends unfinished.

``monitoring`` goes on to ``done`` at once when the policy asks for no stability reports;
otherwise it waits for ``close`` or the report scheduler (``bot/reports``).

The ``checkpoint`` hook is called at named points (tests kill the process there):
``before:<state>``, ``after:<state>`` (step returned, result not yet stored),
``progress:<state>:<n>`` and ``record:<state>:<n>`` (inside a step, after its n-th
``save_progress`` / ``record``), ``record:<state>:<step name>`` (after the step recorded
that name, e.g. ``record:canary_rolling:canary.image``), ``transition:<state>`` (a
transition was stored).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Mapping
from typing import Any

from runbooks import windows
from runbooks.cluster.informing import Watches
from runbooks.cluster.resources import PODS
from runbooks.engine.actors import ENGINE_ACTOR
from runbooks.engine.gating import Gates
from runbooks.engine.leasing import Lease, Leases
from runbooks.engine.refusals import Refused, moment_text
from runbooks.engine.runs import (
    CHANGE_KINDS,
    STEP_OF,
    TERMINAL,
    WORKING,
    Run,
    RunKind,
    RunState,
    Step,
)
from runbooks.engine.scoping import SMOKE_NAMESPACE, ScopedCluster, cleanup_deletions
from runbooks.engine.steps import Again, ChangeSteps, StepContext, StepResult, Steps, StepSettings
from runbooks.engine.store import LeaseLost, StoreUnavailable
from runbooks.engine.transitioning import RunMoved, Writer
from runbooks.errors import ClusterError, TemporaryClusterError, shorten
from runbooks.policy import Policy, duration_seconds

log = logging.getLogger(__name__)
S = RunState

ON_SUCCESS: dict[RunState, RunState] = {
    S.CANARY_ROLLING: S.CANARY_VERIFYING,
    S.CANARY_VERIFYING: S.AWAITING_PROMOTION,
    S.PROMOTING: S.VERIFYING,
    S.VERIFYING: S.MONITORING,
    S.ROLLING_BACK: S.ROLLED_BACK,
}
ON_SUCCESS_OF: dict[RunKind, dict[RunState, RunState]] = {
    RunKind.UPGRADE: ON_SUCCESS,
    RunKind.MIGRATION: {S.CANARY_ROLLING: S.CANARY_VERIFYING, S.APPLYING: S.VERIFYING, S.VERIFYING: S.DONE,
                        S.ROLLING_BACK: S.ROLLED_BACK},
    RunKind.REPAIR: {S.APPLYING: S.VERIFYING, S.VERIFYING: S.DONE, S.ROLLING_BACK: S.ROLLED_BACK},
    RunKind.CLEANUP: {S.APPLYING: S.VERIFYING, S.VERIFYING: S.DONE, S.ROLLING_BACK: S.ROLLED_BACK},
    RunKind.QUARANTINE: {S.APPLYING: S.VERIFYING, S.VERIFYING: S.DONE, S.ROLLING_BACK: S.ROLLED_BACK},
    RunKind.RELEASE: {S.APPLYING: S.VERIFYING, S.VERIFYING: S.DONE, S.ROLLING_BACK: S.ROLLED_BACK},
}
"""A migration is done once verified: there is nothing to promote and no plugin to monitor."""
LABEL: dict[RunState, str] = {
    S.APPLYING: "the migration",
    S.CANARY_ROLLING: "the canary", S.CANARY_VERIFYING: "the canary's verification",
    S.PROMOTING: "the promotion", S.VERIFYING: "the verification on every node",
    S.ROLLING_BACK: "the rollback",
}
KIND_LABEL: dict[RunKind, dict[RunState, str]] = {
    RunKind.MIGRATION: {S.VERIFYING: "the migration's verification", S.ROLLING_BACK: "the migration's rollback",
                        S.CANARY_ROLLING: "the migration canary", S.CANARY_VERIFYING: "the migration canary's "
                        "verification"},
    RunKind.REPAIR: {S.APPLYING: "the repair", S.VERIFYING: "the repair's verification",
                     S.ROLLING_BACK: "the repair's rollback"},
    RunKind.CLEANUP: {S.APPLYING: "the claims' cleanup", S.VERIFYING: "the cleanup's verification",
                      S.ROLLING_BACK: "the cleanup's rollback"},
    RunKind.QUARANTINE: {S.APPLYING: "the quarantine", S.VERIFYING: "the quarantine's verification",
                         S.ROLLING_BACK: "the quarantine's rollback"},
    RunKind.RELEASE: {S.APPLYING: "the release", S.VERIFYING: "the release's verification",
                      S.ROLLING_BACK: "the release's rollback"},
}


def label_of(run: Run, state: RunState | None) -> str:
    """How sentences name the step of ``state`` in ``run`` ("the canary", "the migration's verification")."""
    if state is None:
        return ""
    own = KIND_LABEL.get(run.kind, {})
    return own.get(state) or LABEL.get(state, "")


HALT_CHANGES = 10
"""Changes a halted run's reason lists (a wave's deletions are one each); the rest are counted."""
TEMPORARY_ATTEMPTS = 3
"""How many times a step is tried when the cluster does not answer, before the run pauses."""


class StepPaused(Exception):
    """The cluster stayed unreachable; the run keeps its state and ``resume`` continues it."""

    def __init__(self, run: Run, reason: str) -> None:
        super().__init__(
            f"run {run.id} paused in {run.state.value}: {reason}; nothing was lost, "
            "`upgradebot resume` continues it when the cluster answers"
        )
        self.run, self.reason = run, reason


class _Unexpected(Exception):
    """A step raised something that is not one of our errors; the run halts."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Driver:
    def __init__(
        self, *, writer: Writer, gates: Gates, steps: Steps, policy: Policy, leases: Leases,
        connect: Callable[[str | None], Any], settings: StepSettings,
        kinds: Mapping[RunKind, ChangeSteps] | None = None, watches: Watches | None = None,
    ) -> None:
        self.writer, self.gates, self.steps, self.policy = writer, gates, steps, policy
        self.leases, self.connect, self.settings, self.watches = leases, connect, settings, watches
        self.kinds: dict[RunKind, Any] = dict(kinds or {})

    def steps_for(self, run: Run) -> Any:
        """The steps of the run's kind (``steps`` for upgrades); :class:`Refused` when this engine has none."""
        steps = self.steps if run.kind is RunKind.UPGRADE else self.kinds.get(run.kind)
        if steps is None:
            raise Refused(f"run {run.id} is a {run.kind.value} run, and this bot was started without its steps")
        return steps

    def needs_work(self, run: Run) -> bool:
        """Whether the engine (not a person, not time) moves this run next."""
        if run.state is S.REQUESTED:
            return True
        if run.state is S.MONITORING:
            return not self.policy.reports.after and not (run.gate and run.gate.is_open)
        if run.state is S.HALTED:
            return self._halt_overdue(run)
        if run.pause is not None and run.state is not S.ROLLING_BACK:
            return False
        if run.state in WORKING and self._waiting(run):
            return False
        return run.state in WORKING and not run.halted

    def _waiting(self, run: Run) -> bool:
        """The run's step asked to be called again later (a soak, a window), in the state it is
        still in, and that time has not come (a rollback requested meanwhile never waits)."""
        until = run.progress.get("wait_until")
        return (isinstance(until, str) and run.progress.get("wait_in") == run.state.value
                and self.writer.clock.now() < dt.datetime.fromisoformat(until))

    def _halt_overdue(self, run: Run) -> bool:
        """Halted longer than ``halt.rollback_after``, with automatic rollback on."""
        return self._past_limit(run.progress.get("halted_at"))

    def _past_limit(self, since: str | None) -> bool:
        """``since`` (ISO time) is longer ago than ``halt.rollback_after``, with automatic rollback on."""
        if not since or not self.policy.rollback.automatic:
            return False
        waited = (self.writer.clock.now() - dt.datetime.fromisoformat(since)).total_seconds()
        return waited >= duration_seconds(self.policy.halt.rollback_after)

    def drive(self, run_id: str) -> Run:
        """Work on the run until it waits for a gate, for time, or has ended.

        Returns at once with the run as stored when another live worker holds its lease.
        """
        with self.leases.hold(run_id) as lease:
            if lease is None:
                return self.writer.get(run_id)
            dead = self.leases.took_over_from.pop(run_id, None)
            if dead:
                self.writer.record(self.writer.get(run_id), self.writer.step(
                    "lease taken over", kind="step", status="info", detail=f"from {dead}, which is gone"))
            cluster: Any = None
            try:
                while True:
                    lease.check()
                    run = self.writer.retrying(run_id, self.gates.expire_if_due)
                    if run.state in TERMINAL or not self.needs_work(run):
                        return run
                    if run.state is S.REQUESTED:
                        self.gates.open_first(run_id)
                        continue
                    if run.state is S.MONITORING:
                        self.writer.retrying(run_id, lambda r: self._finish(r, lease))
                        continue
                    if run.state is S.HALTED:
                        self.writer.retrying(run_id, lambda r: self._roll_back_overdue(r, lease))
                        continue
                    if self._paused_too_long(run):
                        self.writer.retrying(run_id, lambda r: self._roll_back_paused(r, lease))
                        continue
                    if self._window_closed(run):
                        self.writer.retrying(run_id, lambda r: self._wait_for_window(r, lease))
                        continue
                    if cluster is None:
                        cluster = self.connect(run.target.cluster or None)
                    try:
                        self._work(run, cluster, lease)
                    except RunMoved:
                        continue
            finally:
                if cluster is not None and hasattr(cluster, "close"):
                    cluster.close()

    # ------------------------------------------------------------ windows
    def _windows(self, run: Run) -> list[Any]:
        windowed = run.kind in (RunKind.UPGRADE, RunKind.QUARANTINE, RunKind.RELEASE)
        entry = self.policy.target(run.target.ref) if windowed else None
        return list(entry.windows) if entry is not None else []

    def _window_closed(self, run: Run) -> bool:
        """A change that has not begun (a canary that saved nothing yet, a promotion not in
        waves: those start each wave themselves) and its target's windows are all closed."""
        if run.state in (S.CANARY_ROLLING, S.APPLYING) and run.progress.get("saved"):
            return False  # begun: finish it rather than leave the target half-changed
        if run.state is S.PROMOTING and run.progress.get("waves"):
            return False
        if run.state not in (S.CANARY_ROLLING, S.PROMOTING, S.APPLYING):
            return False
        found = self._windows(run)
        return bool(found) and windows.span_at(found, self.writer.clock.now()) is None

    def _wait_for_window(self, run: Run, lease: Lease) -> Run:
        if not self._window_closed(run):
            return run
        found = self._windows(run)
        nxt = windows.next_span(found, self.writer.clock.now())
        if nxt is None:  # the policy's windows never open (cannot happen for a weekly window)
            return self._halt(run, run.state, "the target's maintenance windows never open", lease)
        why = (f"{label_of(run, run.state)} waits for the maintenance window ({windows.describe(found)}) "
               f"opening at {moment_text(nxt.start)}")
        line = self.writer.step(f"{STEP_OF[run.state]}.window", kind="step", status="info", detail=why)
        return self.writer.update(run, steps=[line], lease_owner=lease.owner,
                                  progress={**run.progress, "wait_until": nxt.start.isoformat(), "waiting_for": why,
                                            "wait_in": run.state.value})

    # ------------------------------------------------------------ transitions
    def _roll_back_overdue(self, run: Run, lease: Lease) -> Run:
        if run.state is not S.HALTED or not self._halt_overdue(run):
            return run
        limit = self.policy.halt.rollback_after
        reason = f"{run.reason}; halted for more than {limit}: rolling back now"
        return self.writer.transition(run, S.ROLLING_BACK, lease_owner=lease.owner, reason=reason,
                                      progress={**run.progress, "auto_rollback": reason})

    def _mark_paused(self, run: Run, lease: Lease) -> Run:
        """The first time the cluster stays unreachable in this state: remember since when."""
        if "paused_since" in run.progress:
            return run
        return self.writer.update(run, progress={**run.progress, "paused_since": self.writer.clock.now().isoformat()},
                                  lease_owner=lease.owner)

    def _paused_too_long(self, run: Run) -> bool:
        """Paused by an unreachable cluster longer than ``halt.rollback_after`` (automatic rollback on)."""
        return run.state is not S.ROLLING_BACK and self._past_limit(run.progress.get("paused_since"))

    def _roll_back_paused(self, run: Run, lease: Lease) -> Run:
        if not self._paused_too_long(run):
            return run
        limit, since = self.policy.halt.rollback_after, run.progress["paused_since"]
        reason = (f"the cluster did not answer for more than {limit} (since {since}) during {label_of(run, run.state)}: "
                  "rolling back (the rollback goes on as soon as the cluster answers)")
        progress = {**{k: v for k, v in run.progress.items() if k != "paused_since"}, "auto_rollback": reason}
        return self.writer.transition(run, S.ROLLING_BACK, lease_owner=lease.owner, progress=progress, reason=reason)

    def _halt(self, run: Run, state: RunState, why: str, lease: Lease, *, steps: list[Step] | None = None,
              gate: bool = False) -> Run:
        """``state`` -> halted: the reason says what happened, what the run changed so far, and
        what a person may do; ``gate`` opens a rollback request too (automatic rollback off)."""
        if run.state is not state:
            raise RunMoved(run.id, state, run.state)
        changed = [f"{e.get('name')} ({e.get('detail')})" for e in self.writer.store.audit(run.id)
                   if e.get("kind") == "mutation" and e.get("status") == "ok"]
        shown = changed[:HALT_CHANGES] + ([f"and {len(changed) - HALT_CHANGES} more changes (see the run's trail)"]
                                          if len(changed) > HALT_CHANGES else [])
        what = "; changed so far: " + ", ".join(shown) if changed else "; nothing was changed yet"
        retry = "retries it" if state is S.ROLLING_BACK else "runs the step again"
        reason = f"{why}{what}: `resume {run.id}` {retry}, `rollback {run.id}` rolls back what the run saved"
        halted = self.writer.transition(run, S.HALTED, steps=steps or [], lease_owner=lease.owner, reason=reason,
                                        progress={**run.progress, "halted_at": self.writer.clock.now().isoformat()})
        if gate:
            return self.gates.open_rollback(halted, requested_by=ENGINE_ACTOR, reason=why, lease_owner=lease.owner)
        return halted

    def _finish(self, run: Run, lease: Lease) -> Run:
        if run.state is not S.MONITORING or not self.needs_work(run):
            return run
        return self.writer.transition(run, S.DONE, lease_owner=lease.owner,
                                      reason="verified on every node; no stability reports are configured")

    # ------------------------------------------------------------------ steps
    def _work(self, run: Run, cluster: Any, lease: Lease) -> None:
        state, recorded = run.state, set[str]()
        self.writer.checkpoint(f"before:{state.value}")
        try:
            result = self._call_step(run, cluster, lease, recorded)
        except _Unexpected as exc:
            why = exc.reason
            self.writer.retrying(run.id, lambda current: self._halt(current, state, why, lease))
            return
        self.writer.checkpoint(f"after:{state.value}")
        self.writer.retrying(run.id, lambda current: self._conclude(current, state, result, lease, recorded))

    def _call_step(self, run: Run, cluster: Any, lease: Lease, recorded: set[str]) -> StepResult:
        name = STEP_OF[run.state]
        for attempt in range(1, TEMPORARY_ATTEMPTS + 1):
            current = self.writer.get(run.id)
            if current.state is not run.state:
                raise RunMoved(run.id, run.state, current.state)
            try:
                result: StepResult = getattr(self.steps_for(current), name)(self._context(current, cluster, lease, recorded))
                return result
            except (RunMoved, LeaseLost, StoreUnavailable, Refused):
                raise
            except TemporaryClusterError as exc:
                reason = shorten(str(exc))
                self.writer.record(current, self.writer.step(
                    f"{name} interrupted", kind="step", status="failed",
                    detail=f"attempt {attempt} of {TEMPORARY_ATTEMPTS}: {reason}"))
                if attempt == TEMPORARY_ATTEMPTS:
                    self.writer.retrying(run.id, lambda r: self._mark_paused(r, lease))
                    raise StepPaused(current, reason) from exc
                self.writer.clock.sleep(min(30.0, 2.0 ** attempt))
            except ClusterError as exc:
                return StepResult(ok=False, reason=f"{name} failed: {shorten(str(exc))}")
            except Exception as exc:  # a bug in a step: halt where it is, for a person to decide
                log.exception("step %s of run %s raised", name, run.id)
                raise _Unexpected(f"{label_of(run, run.state)} stopped on an unexpected error "
                                  f"({type(exc).__name__}: {shorten(str(exc))})") from exc
        raise AssertionError("unreachable")

    def _again(self, run: Run, state: RunState, again: Again, lines: list[Step], lease: Lease) -> Run:
        """The step did part of its work: store what it waits for, open the next wave's request."""
        line = self.writer.step(f"{STEP_OF[state]}.wait", kind="step", status="info", detail=again.why)
        if again.approval:
            return self.gates.open_promotion(run, steps=[*lines, line], lease_owner=lease.owner, wave=again.wave)
        progress = dict(run.progress)
        if again.at is not None:
            progress.update(wait_until=again.at.isoformat(), waiting_for=again.why, wait_in=state.value)
        return self.writer.update(run, steps=[*lines, line], progress=progress, lease_owner=lease.owner)

    def _context(self, run: Run, cluster: Any, lease: Lease, recorded: set[str]) -> StepContext:
        state, counts = run.state, {"progress": 0, "record": 0}
        scratch = (str(self.settings.smoke_test.get("namespace") or SMOKE_NAMESPACE)
                   if self.settings.smoke_test else None)
        templates: tuple[str, ...] = ()
        deletions: tuple[str, ...] | None = None
        own: tuple[str, ...] = ()
        if run.kind is RunKind.MIGRATION:  # the migration's approved templates; no smoke test
            scratch = None
            templates = tuple(str((o.get("metadata") or {}).get("name")) for o in run.change.get("templates") or [])
            own = (str(run.change["canary"]["name"]),) if run.change.get("canary") else ()
        if run.kind is RunKind.REPAIR:  # only the pods its approved request lists
            scratch = None
            deletions = tuple(PODS.path(p["namespace"], p["name"]) for p in run.change.get("delete") or [])
        if run.kind is RunKind.CLEANUP:  # only the claims its approved request lists
            scratch = None
            deletions = cleanup_deletions(run)
        marks: tuple[str, str] | None = None
        if run.kind in (RunKind.QUARANTINE, RunKind.RELEASE):  # the DaemonSet and its one node's marks
            scratch, marks = None, (run.node, str(run.change.get("key") or ""))
        scoped = ScopedCluster(cluster, run.target, scratch=scratch, templates=templates, own=own,
                               deletions=deletions, fence=lease.fence, marks=marks) if cluster is not None else None
        ctx = StepContext(cluster=scoped, run=run, save_progress=lambda update: run,
                          record=lambda step: None, clock=self.writer.clock, settings=self.settings,
                          paused=lambda: self.writer.get(run.id).pause is not None,
                          watches=self.watches.on(run.target.cluster or None)
                          if self.watches is not None and scoped is not None else None)

        def merge(update: dict[str, Any]) -> Callable[[Run], Run]:
            def change(current: Run) -> Run:
                if current.state is not state:
                    raise RunMoved(current.id, state, current.state)
                return self.writer.update(current, progress={**current.progress, **update}, lease_owner=lease.owner)
            return change

        def save_progress(update: dict[str, Any]) -> Run:
            lease.check()
            ctx.run = self.writer.retrying(run.id, merge(update))
            counts["progress"] += 1
            self.writer.checkpoint(f"progress:{state.value}:{counts['progress']}")
            return ctx.run

        def record(step: Step) -> None:
            lease.check()
            self.writer.record(ctx.run, step)
            recorded.add(step.name)
            counts["record"] += 1
            self.writer.checkpoint(f"record:{state.value}:{counts['record']}")
            self.writer.checkpoint(f"record:{state.value}:{step.name}")

        ctx.save_progress, ctx.record = save_progress, record
        return ctx

    def _conclude(self, run: Run, state: RunState, result: StepResult, lease: Lease, recorded: set[str]) -> Run:
        """Store what the step's result means, with its checks, in one write.

        Checks the step already recorded itself (as ``<name>`` or ``<step>.<name>``) are
        not written twice."""
        if run.state is not state:
            raise RunMoved(run.id, state, run.state)
        stale = {"paused_since", "wait_until", "waiting_for", "wait_in"} & set(run.progress)
        if stale:  # the cluster answered this time; a wait is over
            run = self.writer.update(run, progress={k: v for k, v in run.progress.items() if k not in stale},
                                     lease_owner=lease.owner)
        kept = {k: v for k, v in run.evidence.items() if v.get("step") != STEP_OF[state]}
        evidence = {**kept, **result.evidence}
        if evidence != run.evidence:  # the step's failure in its own words, for every surface (issue 61)
            run = self.writer.update(run, evidence=evidence, lease_owner=lease.owner)
        lines = [
            self.writer.step(c.name, kind="check", status=c.status.value, detail=c.detail,
                             evidence={"scope": c.scope, **c.evidence} if c.scope else dict(c.evidence))
            for c in result.checks
            if c.name not in recorded and not any(r.endswith("." + c.name) for r in recorded)
        ]
        lines.append(self.writer.step(STEP_OF[state], kind="step", status="ok" if result.ok else "failed",
                                      detail=result.reason))
        owner = lease.owner
        if result.ok and result.again is not None:
            return self._again(run, state, result.again, lines[:-1], lease)
        if result.ok:
            if state is S.CANARY_VERIFYING and run.kind in (RunKind.UPGRADE, RunKind.MIGRATION):
                return self.gates.open_promotion(run, steps=lines, lease_owner=owner)
            if state is S.ROLLING_BACK and result.reason:  # what the rollback found (e.g. nothing to undo)
                reason = f"{run.reason}; {result.reason}" if run.reason else result.reason
                return self.writer.transition(run, S.ROLLED_BACK, steps=lines, lease_owner=owner, reason=reason)
            return self.writer.transition(run, ON_SUCCESS_OF[run.kind][state], steps=lines, lease_owner=owner,
                                          reason=result.reason if state is S.VERIFYING and run.kind in CHANGE_KINDS
                                          else "")
        why = f"{label_of(run, state)} failed: {result.reason or 'see the checks'}"
        if state is S.ROLLING_BACK:
            return self._halt(run, state, why, lease, steps=lines)
        if run.kind is RunKind.REPAIR:  # what it deleted its controllers recreate: nothing to roll back
            return self.writer.transition(run, S.FAILED, steps=lines, lease_owner=owner,
                                          reason=f"{why}; a repair has nothing to roll back (`repair` again once "
                                                 "the plugin and the workloads are healthy)")
        if run.kind is RunKind.CLEANUP:  # a deleted claim cannot be put back
            return self.writer.transition(run, S.FAILED, steps=lines, lease_owner=owner,
                                          reason=f"{why}; a cleanup has nothing to roll back (`claims` shows what "
                                                 "is left)")
        if self.policy.rollback.automatic:
            return self.writer.transition(run, S.ROLLING_BACK, steps=lines, lease_owner=owner,
                                          reason=f"{why}; rolling back automatically")
        return self._halt(run, state, f"{why}; automatic rollback is off", lease, steps=lines, gate=True)
