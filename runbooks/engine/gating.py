"""Gates: opening approval requests, and what a decided or expired one does to the run.

======================  ===========================  ==========================================
gate                    approved                     rejected / expired
======================  ===========================  ==========================================
canary                  -> canary_rolling            -> rejected / expired (nothing changed)
migration               -> applying                  -> rejected / expired (nothing changed)
promotion               -> promoting                 -> rolling_back (no half-upgraded cluster)
  (a wave's request: the same; the approved wave is kept in ``progress.approved_wave``)
rollback                -> rolling_back              request closed, run goes on (a promotion
                                                     request re-opens); a halted run stays halted
======================  ===========================  ==========================================

Each function takes the run as just read and writes through the :class:`Writer`, so a
lost compare-and-set is retried by the caller with the fresh run.
"""

from __future__ import annotations

from collections.abc import Sequence

from runbooks.engine.actors import ENGINE_ACTOR
from runbooks.engine.approving import Actor, Verdict, is_expired, open_gate
from runbooks.engine.refusals import moment_text, request_not_opened
from runbooks.engine.runs import Gate, GateKind, Run, RunKind, RunState, Step
from runbooks.engine.store import StoreUnavailable
from runbooks.engine.transitioning import Writer
from runbooks.errors import shorten
from runbooks.policy import Policy

S = RunState


def wave_text(run: Run, wave: int) -> str:
    """``wave 2 of 4: 9 nodes (gpu-node4, gpu-node7, …)`` from the waves the run planned; '' without."""
    waves = run.progress.get("waves") or []
    if not wave or wave > len(waves):
        return ""
    nodes = list(waves[wave - 1].get("nodes") or [])
    shown = ", ".join(nodes[:5]) + (f" and {len(nodes) - 5} more" if len(nodes) > 5 else "")
    return f"wave {wave} of {len(waves)}: {len(nodes)} node{'' if len(nodes) == 1 else 's'} ({shown})"


class Gates:
    def __init__(self, writer: Writer, policy: Policy) -> None:
        self.writer, self.policy = writer, policy

    def new(self, kind: GateKind, *, requested_by: str, reason: str = "", wave: int = 0) -> Gate:
        gate = open_gate(kind, requested_by=requested_by, now=self.writer.clock.now(), policy=self.policy, reason=reason)
        return gate.model_copy(update={"wave": wave}) if wave else gate

    def _opened(self, gate: Gate, by: Actor | None = None) -> list[Step]:
        return [self.writer.step(
            f"{gate.kind.value} request opened", kind="gate", status="info", actor=by or gate.requested_by,
            detail=f"expires at {moment_text(gate.expires_at)}" + (f"; {gate.reason}" if gate.reason else ""),
        )]

    def open_canary(self, run: Run, by: Actor | None = None) -> Run:
        """requested -> awaiting_approval, with the canary request (a migration or a repair: its
        own request; ``by``: who asked for it)."""
        kind = {RunKind.MIGRATION: GateKind.MIGRATION, RunKind.REPAIR: GateKind.REPAIR,
                RunKind.CLEANUP: GateKind.CLEANUP, RunKind.QUARANTINE: GateKind.QUARANTINE,
                RunKind.RELEASE: GateKind.RELEASE}.get(run.kind, GateKind.CANARY)
        gate = self.new(kind, requested_by=run.requester, reason=(run.progress.get("after_stage") or {}).get("text", ""))
        return self.writer.transition(run, S.AWAITING_APPROVAL, gate=gate, steps=self._opened(gate, by))

    def open_first(self, run_id: str, by: Actor | None = None) -> Run:
        """A ``requested`` run with its first request opened (:meth:`open_canary`); unchanged in any
        other state. Any error but the store's (a run left ``requested`` is opened on the next
        resume) fails the run, which releases its target's lock, and is raised: a run whose
        request cannot be opened never holds its target (finding 8 of the security review)."""
        try:
            return self.writer.retrying(run_id, lambda run: self.open_canary(run, by) if run.state is S.REQUESTED
                                        else run)
        except StoreUnavailable:
            raise
        except Exception as exc:
            detail = f"{type(exc).__name__}: {shorten(str(exc))}" if str(exc) else type(exc).__name__
            self.writer.retrying(run_id, lambda run: self._unopened(run, detail))
            raise

    def _unopened(self, run: Run, detail: str) -> Run:
        if run.state is not S.REQUESTED:
            return run
        kind = "canary" if run.kind is RunKind.UPGRADE else run.kind.value
        return self.writer.transition(run, S.FAILED, reason=request_not_opened(kind, detail))

    def open_promotion(self, run: Run, *, steps: Sequence[Step] = (), lease_owner: str | None = None,
                       wave: int = 0, reason: str = "") -> Run:
        """canary_verifying -> awaiting_promotion, with the promotion request; promoting ->
        awaiting_promotion with the request for ``wave`` of a promotion in waves. A run whose
        steps planned waves (``progress.waves``) asks for its first wave after the canary."""
        if not wave and run.progress.get("waves"):
            wave = 1
        gate = self.new(GateKind.PROMOTION, requested_by=run.requester, wave=wave, reason=reason or wave_text(run, wave))
        return self.writer.transition(run, S.AWAITING_PROMOTION, gate=gate, lease_owner=lease_owner,
                                      steps=[*steps, *self._opened(gate)])

    def open_rollback(
        self, run: Run, *, requested_by: str | Actor, reason: str, halted: bool = False,
        steps: Sequence[Step] = (), lease_owner: str | None = None,
    ) -> Run:
        """A rollback request on a run that keeps its state meanwhile (a halted run waits on it)."""
        by = requested_by if isinstance(requested_by, Actor) else None
        gate = self.new(GateKind.ROLLBACK, requested_by=by.user if by else str(requested_by), reason=reason)
        lines = [*steps, *self._opened(gate, by)]
        if run.gate is not None and run.gate.is_open:
            lines.insert(0, self.writer.step(f"{run.gate.kind.value} request superseded", kind="gate",
                                             status="info", actor=requested_by, detail="a rollback was requested"))
        if halted:
            return self.writer.update(run, steps=lines, lease_owner=lease_owner, gate=gate, halted=True, reason=reason)
        return self.writer.update(run, steps=lines, lease_owner=lease_owner, gate=gate)

    def apply(self, run: Run, verdict: Verdict, actor: Actor, *, approve: bool, comment: str = "") -> Run:
        """Store a counted decision; a decided gate moves the run on."""
        gate = verdict.gate
        detail = "; ".join(x for x in (verdict.note, comment) if x) or f"request {gate.outcome}"
        line = self.writer.step(f"{gate.kind.value} {'approved' if approve else 'rejected'}",
                                kind="decision", actor=actor, detail=detail)
        if gate.is_open:
            return self.writer.update(run, gate=gate, steps=[line])
        return self._close(run, gate, actor=actor, steps=[line])

    def expire_if_due(self, run: Run) -> Run:
        """The run after its open gate expired (if it did); unchanged otherwise."""
        gate = run.gate
        if gate is None or not is_expired(gate, self.writer.clock.now()):
            return run
        closed = gate.model_copy(update={"outcome": "expired", "decided_at": self.writer.clock.now()})
        line = self.writer.step(f"{gate.kind.value} request expired", kind="gate", status="failed",
                                detail=f"nobody decided by {moment_text(gate.expires_at)}")
        return self._close(run, closed, actor=ENGINE_ACTOR, steps=[line])

    def _close(self, run: Run, gate: Gate, *, actor: str | Actor, steps: list[Step]) -> Run:
        who = ", ".join(gate.approvers if gate.outcome == "approved" else [d.user for d in gate.decisions if not d.approve])
        how = f"{gate.outcome} by {who}" if who else f"{gate.outcome} at {moment_text(gate.expires_at)}"
        was = how if gate.outcome == "expired" else f"was {how}"  # "expired at 10:30 UTC", "was rejected by U1"
        w = self.writer
        if gate.kind in (GateKind.CANARY, GateKind.MIGRATION, GateKind.REPAIR, GateKind.CLEANUP, GateKind.QUARANTINE,
                         GateKind.RELEASE):
            if gate.outcome == "approved":
                first = S.CANARY_ROLLING if gate.kind is GateKind.CANARY or run.change.get("canary") else S.APPLYING
                return w.transition(run, first, actor=actor, gate=gate, steps=steps)
            end = S.EXPIRED if gate.outcome == "expired" else S.REJECTED
            return w.transition(run, end, actor=actor, gate=gate, steps=steps,
                                reason=f"the {gate.kind.value} request {was}; nothing was changed")
        if gate.kind is GateKind.PROMOTION:
            if gate.outcome == "approved":
                progress = {**run.progress, "approved_wave": gate.wave} if gate.wave else None
                switch = S.APPLYING if run.kind is RunKind.MIGRATION else S.PROMOTING  # a migration canary's switch
                return w.transition(run, switch, actor=actor, gate=gate, steps=steps, progress=progress)
            if gate.wave > 1:
                return w.transition(run, S.ROLLING_BACK, actor=actor, gate=gate, steps=steps,
                                    reason=f"the request for wave {gate.wave} {was}: rolling back every node "
                                    "the run moved")
            return w.transition(run, S.ROLLING_BACK, actor=actor, gate=gate, steps=steps,
                                reason=f"the promotion request {was}: rolling the canary back")
        if gate.outcome == "approved":
            why = f" ({gate.reason})" if gate.reason else ""
            return w.transition(run, S.ROLLING_BACK, actor=actor, gate=gate, steps=steps,
                                reason=f"rollback requested by {gate.requested_by}{why}, {how}")
        if run.state is S.HALTED or run.halted:
            return w.update(run, gate=gate, steps=steps,
                            reason=f"{run.reason}; the rollback request {was}: the run stays halted "
                            f"(`resume {run.id}` or `rollback {run.id}`)")
        if run.state is S.AWAITING_PROMOTION:
            again = self.new(GateKind.PROMOTION, requested_by=run.requester)
            return w.update(run, gate=again, steps=[*steps, *self._opened(again)])
        return w.update(run, gate=gate, steps=steps)
