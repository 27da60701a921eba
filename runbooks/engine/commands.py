"""The run engine: what every front end (Slack, the console, the shell) calls.

Commands (``request_canary``, ``approve``, ``reject``, ``promote``, ``rollback``,
``close``) check the policy and change the run with a compare-and-set; they return an
:class:`Outcome` at once and never run cluster steps. Work (``advance``, ``resume``)
runs the cluster steps of a run up to its next gate or its end, under the run's lease.
When a command leaves a run with work to do, the engine itself hands the run to
:attr:`Engine.wake`: the shell passes ``engine.advance`` (the steps run in its process),
``serve`` its pool of run workers, the console its chat (which moves the run on after the
reply is printed). Without a ``wake`` nobody is woken and the caller advances.

Refusals raise :class:`runbooks.engine.refusals.Refused`
(:class:`~runbooks.engine.store.LockHeld` and :class:`~runbooks.engine.requesting.InvalidRequest` are
ones) with the sentence to show; :class:`runbooks.engine.store.StoreUnavailable` when the store
cannot be reached; :class:`runbooks.engine.driving.StepPaused` when the cluster stays unreachable.
"""

from __future__ import annotations

import datetime as dt
import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from runbooks import digests, windows
from runbooks.cluster.informing import Watches
from runbooks.engine import refusals
from runbooks.engine.actors import ENGINE_ACTOR
from runbooks.engine.approving import Actor, check_may_open, check_owner, check_requester, decide
from runbooks.engine.change_requests import ChangeRequests
from runbooks.engine.clocks import SystemClock
from runbooks.engine.driving import Driver, StepPaused, label_of
from runbooks.engine.gating import Gates
from runbooks.engine.leasing import Leases, owner_id
from runbooks.engine.node_requests import NodeRequests
from runbooks.engine.owned import judge_owner, through_owner
from runbooks.engine.refusals import Refused
from runbooks.engine.requesting import (
    AUTO_NODE,
    NODE_CHOICE,
    InvalidRequest,
    check_request,
    planned_change,
    resolve,
)
from runbooks.engine.runs import (
    REOPENABLE,
    TERMINAL,
    WORKING,
    GateKind,
    Part,
    Pause,
    Run,
    RunKind,
    RunState,
    Step,
    Target,
    new_run_id,
)
from runbooks.engine.steps import ChangeSteps, CheckStatus, Clock, Steps, StepSettings
from runbooks.engine.store import LeaseLost, LockHeld, RunStore
from runbooks.engine.transitioning import Observer, SilentObserver, Writer, audit_entry
from runbooks.errors import ClusterError, shorten
from runbooks.image_names import same_image
from runbooks.metrics.spec import DEFAULT_CHECKS
from runbooks.policy import Policy, duration_seconds
from runbooks.templates import RESTARTED_AT, Edits

S = RunState
ROLLBACK_FROM = frozenset({S.CANARY_ROLLING, S.CANARY_VERIFYING, S.AWAITING_PROMOTION, S.PROMOTING,
                           S.VERIFYING, S.MONITORING, S.HALTED, S.FAILED})
"""States a rollback may be requested in: the cluster may have changed, the run is not rolling back."""
PAUSABLE = frozenset({S.CANARY_ROLLING, S.CANARY_VERIFYING, S.AWAITING_PROMOTION, S.PROMOTING, S.VERIFYING})
"""States ``pause`` applies to: a step may start or is running (a rollback is never paused)."""


@dataclass(frozen=True)
class Outcome:
    """A command's result: the run as stored, and a note for people (may be empty)."""

    run: Run
    note: str = ""
    paused: bool = False
    """``resume`` only: the run's cluster stayed unreachable; it keeps its state."""
    counted: bool = True
    """``decide`` only: False when the decision was already recorded (a double click): nothing changed."""


Wake = Callable[[str], Run | None]
"""Moves a run on after a command: returns the run it reached (in process) or None (queued)."""


def _nobody(run_id: str) -> None:
    return None


def step_settings_of(policy: Policy) -> StepSettings:
    """The steps' timeouts and options from the policy file's ``steps`` section."""
    timings = policy.steps
    return StepSettings(
        ready_timeout=duration_seconds(timings.ready_timeout),
        observe_window=duration_seconds(timings.observe_window),
        poll_interval=duration_seconds(timings.poll_interval),
        settle_window=duration_seconds(timings.settle_window),
        claim_grace=duration_seconds(timings.claim_grace),
        gpu_resources=tuple(policy.gpu_resources),
        smoke_test=timings.smoke_test.model_dump(exclude_none=True)
        if timings.smoke_test and timings.smoke_test.model_fields_set else None,  # `smoke_test: {}` runs none
        unknown_blocks=policy.verify.unknown == "fail",
        registration=policy.registration,
        targets={str(t): t for t in policy.targets},
        canary_per_class=policy.canary.per_class,
        metric_checks=tuple(DEFAULT_CHECKS if policy.verify.metrics is None else policy.verify.metrics),
        prometheus=policy.prometheus,
        pin_digest=policy.images.pin_digest,
        mirrors=digests.mirrors_of(policy.images),
    )


class Engine(ChangeRequests, NodeRequests):
    def __init__(
        self,
        *,
        store: RunStore,
        steps: Steps,
        policy: Policy,
        connect: Callable[[str | None], Any] | None = None,
        clock: Clock | None = None,
        observer: Observer | None = None,
        owner: str | None = None,
        lease_ttl: dt.timedelta = dt.timedelta(seconds=30),
        owner_dead: Callable[[str], bool] = lambda owner: False,
        step_settings: StepSettings | None = None,
        checkpoint: Callable[[str], None] = lambda point: None,
        wake: Wake | None = None,
        kinds: Mapping[RunKind, ChangeSteps] | None = None,
        watches: Watches | None = None,
        slack_sees_runs: bool = True,
    ) -> None:
        """``connect(context)`` opens a cluster (None: no cluster reads at request time,
        steps get ``None``); ``owner`` is this worker's lease id (default host/pid/random);
        ``owner_dead(owner)`` may say a lease holder is gone so its lease is taken over at
        once; ``checkpoint(point)`` is called at named points (see :mod:`runbooks.engine.driving`);
        ``wake(run_id)`` moves a run on when a command left it with work (settable later);
        ``kinds`` the steps of other kinds of runs than upgrades (``migration``); ``watches``
        the process's watch cache the steps share (None: each step keeps its own); ``slack_sees_runs``
        False: no bot serving Slack reads this store (the shell's own Redis), so a request from the
        shell or the console must be approvable there (:func:`~runbooks.engine.approving.check_approvable`)."""
        self.store, self.policy, self.connect, self.watches = store, policy, connect, watches
        self.slack_sees_runs = slack_sees_runs
        self.wake: Wake = wake or _nobody
        self.clock: Clock = clock or SystemClock()
        self.writer = Writer(store=store, clock=self.clock, observer=observer or SilentObserver(), checkpoint=checkpoint)
        self.gates = Gates(self.writer, policy)
        self.leases = Leases(store, owner=owner or owner_id(socket.gethostname(), os.getpid()),
                             ttl=lease_ttl, owner_dead=owner_dead)
        self.driver = Driver(writer=self.writer, gates=self.gates, steps=steps, policy=policy, leases=self.leases,
                             connect=connect or (lambda context: None),
                             settings=step_settings or step_settings_of(policy), kinds=kinds, watches=watches)

    # ---------------------------------------------------------------- queries
    def get(self, run_id: str, *, whole: bool = True) -> Run:
        """``whole=False``: for a view (the store's ``whole``), never to be saved."""
        return self.writer.get(run_id, whole=whole)

    def runs(self, *, active_only: bool = False, limit: int = 100, whole: bool = True) -> list[Run]:
        return self.store.list_runs(active_only=active_only, limit=limit, whole=whole)

    def audit(self, run_id: str) -> list[dict[str, Any]]:
        self.get(run_id)
        return self.store.audit(run_id)

    def needs_work(self, run: Run) -> bool:
        """Whether ``advance`` would move the run (rather than it waiting for people or time)."""
        return self.driver.needs_work(run)

    # --------------------------------------------------------------- commands
    def request_canary(
        self, *, actor: Actor, target: str, image: str, node: str, container: str | None = None,
        cluster: str | None = None, origin: dict[str, str] | None = None, when: str = "now",
        edits: Edits | None = None,
    ) -> Outcome:
        """A new run waiting at its canary request.

        Refused before anything is stored or any approver asked: bad arguments, a target
        that has an active run (``LockHeld``), and every failing check the steps can make
        now (``check_request``: the image already running, a node that is NotReady,
        cordoned or GPU-less, a failing inventory finding on the target...), and a request
        outside the target's maintenance windows unless ``when`` is ``next-window`` (the
        run is stored and its request opened; its canary waits for the window).

        ``edits`` change the pod template besides the image (``image`` may then be "": the
        container keeps its own); the template diff is planned now and shown in the request."""
        check_may_open(self.policy, actor, slack_sees_runs=self.slack_sees_runs)
        edits = edits or Edits()
        if not image and edits.empty:
            raise InvalidRequest("image= is required (or a change of the template: env=, args=, limits=, ...)")
        request = check_request(self.policy, target=target, image=image, node=node, container=container, cluster=cluster)
        now = self.clock.now()
        queued = self._outside_window(request.ref, now, when)
        entry = self.policy.target(request.ref)
        if entry is not None and entry.stages and request.cluster and request.cluster not in entry.stages:
            raise Refused(refusals.not_a_stage(request.ref, request.cluster, entry.stages))

        parts = [Part(kind=kind, name=name, container=container, before=before)
                 for kind, name, container, before in self.policy.parts_of(request.ref)]

        drain = entry is not None and entry.drain is not None

        def new_run(context: str, container: str) -> Run:
            return Run(id=new_run_id(), target=Target(cluster=context, namespace=request.namespace, name=request.name,
                                                      parts=parts, drain=drain),
                       image=request.image, container=container, node=request.node, requester=actor.user,
                       created_at=now, updated_at=now, origin=origin or {}, edits=edits)

        run = new_run(request.cluster or "", request.container or "")
        chosen = ""
        if request.node == AUTO_NODE and self.connect is None:
            raise Refused("node=auto reads the cluster to choose the node, and this engine has none: name the node")
        if self.connect is not None:
            with self.connect(request.cluster) as handle:
                run = new_run(*resolve(handle, request))
                image, change, planned_from = planned_change(handle, run, edits)
                owned = judge_owner(handle, namespace=request.namespace, name=request.name, image=image,
                                    allowed=entry.owner if entry is not None else None, edits=edits)
                run, change = through_owner(run, owned, change)
                progress = {**owned, **({"template_diff": change, "planned_from": planned_from} if change else {})}
                run = run.model_copy(update={"image": image, "progress": progress})
                if run.node == AUTO_NODE:
                    node, chosen = self.driver.steps.pick_node(handle, run, self.driver.settings)
                    run = run.model_copy(update={"node": node, "progress": {**run.progress, NODE_CHOICE: chosen}})
                self._refuse_if_locked(run)
                kept: dict[str, Any] = {}  # what the steps after approval reuse of the request's reads
                checks = self.driver.steps.check_request(
                    handle, run, self.driver.settings, keep=kept.update,
                    watches=self.watches.on(run.target.cluster or None) if self.watches is not None else None)
                failing = [c for c in checks if c.status == CheckStatus.FAIL]
                if failing:
                    raise Refused(refusals.request_checks_failed(run, [(c.name, c.detail) for c in failing]))
                # a warning, and a check that will be blind (issue 56: said before anyone approves)
                warnings = [f"{c.name}: {c.detail}" for c in checks if c.status in (CheckStatus.WARN, CheckStatus.UNKNOWN)]
                warnings = [*run.progress.get("request_warnings", []), *warnings]
                if warnings:
                    kept["request_warnings"] = warnings
                if kept:
                    run = run.model_copy(update={"progress": {**run.progress, **kept}})
        if not run.container:
            raise Refused(f"name the container of {request.ref} to change: container=<name>")
        if not run.image:
            raise Refused("image= is required: this engine reads no cluster to keep the container's own")
        stage = self._after_stage(run)
        if stage:
            run = run.model_copy(update={"progress": {**run.progress, "after_stage": stage}})
        line = self.writer.step("requested", kind="transition", actor=actor,
                                detail=f"canary of {run.image} ({run.container})"
                                       + (f" with {edits.summary()}" if not edits.empty else "") + f" on {run.node} in "
                                       f"{run.target.cluster or 'the current context'}" + (f"; {chosen}" if chosen else "")
                                + (f"; {queued}" if queued else ""))
        self._create(run, line)
        return Outcome(self.gates.open_first(run.id, actor))

    def request_restart(
        self, *, actor: Actor, target: str, node: str, container: str | None = None, cluster: str | None = None,
        origin: dict[str, str] | None = None, when: str = "now",
    ) -> Outcome:
        """A run that restarts a plugin's pods, as an upgrade of nothing but the template's
        ``kubectl.kubernetes.io/restartedAt`` annotation (what ``kubectl rollout restart``
        writes): the request, the canary on one node, its verification, the promotion request,
        the rest of the nodes (in waves, drained, inside windows, as the policy says), and a
        rollback that puts the saved template back, all as for an image."""
        stamp = self.clock.now().astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return self.request_canary(actor=actor, target=target, image="", node=node, container=container,
                                   cluster=cluster, origin=origin, when=when, edits=Edits(annotations={RESTARTED_AT: stamp}))

    def _outside_window(self, ref: str, now: dt.datetime, when: str) -> str:
        """'' inside the target's maintenance windows (or it has none); with ``when=next-window``
        the sentence saying when the run's canary may start; else :class:`Refused`, naming it."""
        entry = self.policy.target(ref)
        if entry is None or not entry.windows or windows.span_at(entry.windows, now) is not None:
            return ""
        nxt = windows.next_span(entry.windows, now)
        opens = refusals.moment_text(nxt.start) if nxt else "never"
        if when != "next-window":
            raise Refused(refusals.outside_window(ref, windows.describe(entry.windows), opens))
        return f"queued for the maintenance window opening at {opens}"

    def _after_stage(self, run: Run) -> dict[str, Any]:
        """A target with ``stages``: the run on the stage before that lets this one be requested
        (its id, where its thread and last stability report are, a sentence); {} on the first
        stage or without stages; :class:`Refused` naming what is missing."""
        entry = self.policy.target(run.target.ref)
        if entry is None or not entry.stages:
            return {}
        stages, here = entry.stages, run.target.cluster
        if here not in stages:
            raise Refused(refusals.not_a_stage(run.target.ref, here, stages))
        index = stages.index(here)
        if index == 0:
            return {}
        before = stages[index - 1]
        earlier = sorted((r for r in self.store.list_runs(limit=10_000)
                          if r.kind is RunKind.UPGRADE and r.target.ref == run.target.ref
                          and r.target.cluster == before and same_image(r.image, run.image) and r.edits.change == run.edits.change),
                         key=lambda r: (r.created_at, r.updated_at), reverse=True)
        if not earlier:
            raise Refused(refusals.stage_not_reached(run, here, before, index, len(stages)))
        last = earlier[0]
        report = last.progress.get("last_report") or {}
        if last.state is not S.DONE or report.get("verdict") != "stable":
            raise Refused(refusals.stage_not_stable(run, here, before, last, report))
        text = (f"stage {index + 1} of {len(stages)} ({here}), after {before}: run {last.id} there ended with its "
                f"{report.get('after')} stability report stable (posted {report.get('posted_at', '?')[:16]} UTC)")
        return {"run": last.id, "cluster": before, "report": report, "origin": dict(last.origin), "text": text}

    def _create(self, run: Run, line: Step) -> None:
        """Store a new run with its first audit line (taking its target's lock)."""
        try:
            self.store.create(run, audit=[audit_entry(run, line)])
        except LockHeld as held:
            if not self._expired_holder(held.holder):
                raise
            self.store.create(run, audit=[audit_entry(run, line)])
        self.writer.observer.on_state(run)

    def approve(self, run_id: str, *, actor: Actor, comment: str = "") -> Outcome:
        return self.decide(run_id, actor=actor, approve=True, comment=comment)

    def reject(self, run_id: str, *, actor: Actor, comment: str = "") -> Outcome:
        return self.decide(run_id, actor=actor, approve=False, comment=comment)

    def decide(self, run_id: str, *, actor: Actor, approve: bool, comment: str = "",
               kind: GateKind | None = None) -> Outcome:
        """``actor``'s decision on the run's open gate (``kind``: only if it is that gate), applied
        once (compare-and-set)."""
        notes: list[str] = []
        counted: list[bool] = []
        if approve:
            self._digest_now(self.writer.get(run_id))

        def change(run: Run) -> Run:
            run = self.gates.expire_if_due(run)
            verdict = decide(run, actor, approve=approve, now=self.clock.now(), policy=self.policy, comment=comment,
                             kind=kind)
            notes[:], counted[:] = [verdict.note], [verdict.counted]
            if not verdict.counted:
                return run
            first = run.gate is not None and run.gate.kind is GateKind.PROMOTION and run.gate.wave <= 1
            moved = digests.mismatch(run.progress) if first else None  # a later wave's: the fleet is pinned already
            if approve and moved:  # the tag names other bytes than the canary verified: no promotion
                raise Refused(moved)
            return self.gates.apply(run, verdict, actor, approve=approve, comment=comment)

        run = self.writer.retrying(run_id, change)
        return self._woken(Outcome(run, notes[0] if notes else "", counted=all(counted)))

    def promote(self, run_id: str, *, actor: Actor) -> Outcome:
        """Post the open promotion request again (it opens by itself when the canary passes)."""
        check_requester(self.policy, actor)
        run = self.writer.retrying(run_id, self.gates.expire_if_due)
        gate = run.gate
        if run.state is not S.AWAITING_PROMOTION or gate is None or not gate.is_open:
            raise Refused(refusals.not_awaiting_promotion(run))
        run = self._digest_now(run)
        self.writer.safely(self.writer.observer.on_gate, run, gate)
        return Outcome(run, f"the promotion request is open until {gate.expires_at:%Y-%m-%d %H:%M:%S %Z}")

    def _digest_now(self, run: Run) -> Run:
        """An open promotion request of a run that pins digests: what its tag resolves to now asked
        of the registry (:mod:`runbooks.digests`) and kept with the run, for the request to show and
        the approval to judge; any other run as it is."""
        gate = run.gate
        if (run.state is not S.AWAITING_PROMOTION or gate is None or gate.kind is not GateKind.PROMOTION
                or gate.wave > 1 or not gate.is_open or not digests.of(run.progress).get("verified")):
            return run
        now = digests.look_now(run.image, digests.mirrors_of(self.policy.images), at=self.clock.now().isoformat())

        def change(fresh: Run) -> Run:
            if fresh.state is not S.AWAITING_PROMOTION:
                return fresh
            return self.writer.update(fresh, progress={**fresh.progress,
                                                       digests.KEY: {**digests.of(fresh.progress), **now}})
        return self.writer.retrying(run.id, change)

    def rollback(self, run_id: str, *, actor: Actor, reason: str = "") -> Outcome:
        """Open a rollback request (or roll back at once when the policy needs no approval); the
        run's requester and the approvers may (:func:`~runbooks.engine.approving.check_owner`)."""
        notes: list[str] = []

        def change(run: Run) -> Run:
            run = self.gates.expire_if_due(run)
            check_owner(self.policy, run, actor, "roll back")
            if run.state in TERMINAL and run.state not in REOPENABLE:
                raise Refused(refusals.run_ended(run))
            if run.state is S.ROLLING_BACK:
                raise Refused(refusals.rollback_running(run))
            if run.state not in ROLLBACK_FROM:
                raise Refused(refusals.rollback_too_early(run))
            if run.gate is not None and run.gate.is_open and run.gate.kind is GateKind.ROLLBACK:
                notes[:] = [f"a rollback request is already open (by {run.gate.requested_by})"]
                return run
            if run.state in (S.HALTED, *REOPENABLE) and run.previous_state is S.ROLLING_BACK:
                # the rollback itself halted: it was approved (or automatic) already, so run it again
                return self.writer.transition(run, S.ROLLING_BACK, actor=actor,
                                              reason=f"rollback retried by {actor.user}")
            why = reason or f"requested by {actor.user}"
            if not self.policy.rollback.requires_approval:
                return self.writer.transition(run, S.ROLLING_BACK, actor=actor, reason=f"rollback {why}")
            return self.gates.open_rollback(run, requested_by=actor, reason=reason)

        return self._woken(Outcome(self.writer.retrying(run_id, change), notes[0] if notes else ""))

    def resume_run(self, run_id: str, *, actor: Actor) -> Outcome:
        """halted -> the state it halted in: the step runs again (``wake`` drives it)."""
        check_requester(self.policy, actor)

        def change(run: Run) -> Run:
            if run.state not in (S.HALTED, *REOPENABLE) or run.previous_state not in WORKING:
                raise Refused(refusals.not_halted(run))
            return self.writer.transition(run, run.previous_state, actor=actor,
                                          reason=f"resumed by {actor.user}: {label_of(run, run.previous_state)}"
                                          " runs again")

        return self._woken(Outcome(self.writer.retrying(run_id, change)))

    def pause(self, run_id: str, *, actor: Actor, reason: str = "") -> Outcome:
        """No new node, wave or step starts until ``continue`` (what is in flight finishes); the
        run's requester and the approvers may. An approval given meanwhile is kept, and acted on
        once the run continues."""
        notes: list[str] = []

        def change(run: Run) -> Run:
            check_owner(self.policy, run, actor, "pause")
            if run.pause is not None:
                notes[:] = [refusals.already_paused(run)]
                return run
            if run.state not in PAUSABLE:
                raise Refused(refusals.not_pausable(run))
            line = self.writer.step("paused", kind="decision", actor=actor,
                                    detail=reason or "no new node or wave starts until `continue`")
            return self.writer.update(run, steps=[line], pause=Pause(by=actor.user, at=self.clock.now(), reason=reason))

        return Outcome(self.writer.retrying(run_id, change), notes[0] if notes else "")

    def continue_run(self, run_id: str, *, actor: Actor) -> Outcome:
        """A paused run goes on where it stopped (the requester and the approvers may)."""

        def change(run: Run) -> Run:
            check_owner(self.policy, run, actor, "continue")
            if run.pause is None:
                raise Refused(refusals.not_paused(run))
            line = self.writer.step("continued", kind="decision", actor=actor,
                                    detail=f"paused by {run.pause.by} since {refusals.moment_text(run.pause.at)}")
            return self.writer.update(run, steps=[line], pause=None)

        return self._woken(Outcome(self.writer.retrying(run_id, change)))

    def close(self, run_id: str, *, actor: Actor) -> Outcome:
        """monitoring -> done, before (or instead of) the stability reports (the run's requester
        and the approvers may)."""

        def change(run: Run) -> Run:
            check_owner(self.policy, run, actor, "close")
            if run.state is not S.MONITORING:
                raise Refused(refusals.not_monitoring(run))
            return self.writer.transition(run, S.DONE, actor=actor, reason=f"closed by {actor.user}")

        return Outcome(self.writer.retrying(run_id, change))

    def finish_monitoring(self, run_id: str, *, reason: str, actor: str = ENGINE_ACTOR,
                          report: dict[str, Any] | None = None) -> Run:
        """monitoring -> done by the bot itself (its last stability report is posted); the
        target is free. A run no longer monitoring, or with an open request, is left as it is.
        ``report`` (``after``, ``verdict``, ``posted_at``, ``thread``): the last stability report,
        kept with the run (the next stage of a staged target is requested on its word)."""

        def change(run: Run) -> Run:
            if run.state is not S.MONITORING or (run.gate is not None and run.gate.is_open):
                return run
            progress = {**run.progress, "last_report": report} if report else None
            return self.writer.transition(run, S.DONE, actor=actor, reason=reason, progress=progress)

        return self.writer.retrying(run_id, change)

    def set_origin(self, run_id: str, **refs: str) -> Run:
        """Record where the run is shown (``ts`` of its root message...) with a compare-and-set.

        The first value of a key wins: a key already set to another value is kept, so two
        front ends racing to post the run's root message agree on one. Not audited, no
        observer call; the run's state and ``updated_at`` are untouched."""

        def change(run: Run) -> Run:
            missing = {k: v for k, v in refs.items() if k not in run.origin}
            if not missing:
                return run
            return self.store.save(run.model_copy(update={"origin": {**run.origin, **missing}}))

        return self.writer.retrying(run_id, change)

    # ------------------------------------------------------------------- work
    def advance(self, run_id: str) -> Run:
        """Run the cluster steps of ``run_id`` up to its next gate or its end (under its lease).

        Returns the run as stored; when another live worker holds its lease, at once.
        ``StepPaused`` when the cluster stays unreachable (the run keeps its state).
        """
        try:
            return self.driver.drive(run_id)
        except LeaseLost:
            return self.get(run_id)

    def expire_due(self) -> list[Run]:
        """Close every gate whose time is up (and move its run on); the runs that changed."""
        changed = []
        for run in self.store.list_runs(active_only=True, limit=10_000):
            after = self.writer.retrying(run.id, self.gates.expire_if_due)
            if after.version != run.version:
                changed.append(after)
        return changed

    def resume(self) -> list[Outcome]:
        """Continue every run not in a terminal state, oldest first (on start-up)."""
        self.expire_due()
        outcomes = []
        for run in sorted(self.store.list_runs(active_only=True, limit=10_000), key=lambda r: r.created_at):
            try:
                outcomes.append(Outcome(self.advance(run.id)))
            except StepPaused as exc:
                outcomes.append(Outcome(self.get(run.id), str(exc), paused=True))
            except ClusterError as exc:  # e.g. a context this process's kubeconfig lacks
                note = f"run {run.id} waits: cannot open its cluster here ({shorten(str(exc))})"
                outcomes.append(Outcome(self.get(run.id), note, paused=True))
        return outcomes

    def _woken(self, outcome: Outcome) -> Outcome:
        """The outcome of a command, after :attr:`wake` was handed the run if it has work."""
        if not self.needs_work(outcome.run):
            return outcome
        moved = self.wake(outcome.run.id)
        if moved is None:
            return outcome
        return Outcome(moved, outcome.note, paused=outcome.paused, counted=outcome.counted)

    def _refuse_if_locked(self, run: Run) -> None:
        """``LockHeld`` now, before the request's checks read the cluster, when another run holds the target."""
        holder = self.store.lock_holder(run.target.key)
        if holder is not None and not self._expired_holder(holder):
            raise LockHeld(run.target.key, holder)

    def _expired_holder(self, holder: str) -> bool:
        """Whether the run holding a lock ended once its overdue gate was closed."""
        if self.store.get(holder) is None:
            return False
        return self.writer.retrying(holder, self.gates.expire_if_due).state in TERMINAL

