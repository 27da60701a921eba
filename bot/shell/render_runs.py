"""Runs, run lists and audit trails as text for people at a terminal, and the shell's observer.

The JSON surface prints the models themselves (:func:`run_json`), so pipelines read
``id`` and ``state`` (and everything else) without parsing text.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any, TextIO

from bot.shell.output import table
from runbooks.engine.runs import Gate, GateKind, Run, RunState, Step

GATE_LABEL = {GateKind.CANARY: "canary request", GateKind.PROMOTION: "promotion request",
              GateKind.ROLLBACK: "rollback request"}


def _t(moment: dt.datetime | str | None) -> str:
    if moment is None:
        return "-"
    if isinstance(moment, str):
        moment = dt.datetime.fromisoformat(moment)
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def run_json(run: Run, note: str = "") -> dict[str, Any]:
    data = run.model_dump(mode="json")
    if note:
        data["note"] = note
    return data


def gate_line(run: Run, gate: Gate, prog: str) -> str:
    label = GATE_LABEL[gate.kind]
    if not gate.is_open:
        who = ", ".join(d.user for d in gate.decisions) or "nobody"
        return f"{label} {gate.outcome} ({who}) at {_t(gate.decided_at)} UTC"
    approvals = ", ".join(gate.approvers) or "none yet"
    if gate.expires_at <= dt.datetime.now(dt.UTC):
        return (f"{label} by {gate.requested_by} expired at {_t(gate.expires_at)} UTC "
                f"(`{prog} resume` applies it)")
    return (f"{label} by {gate.requested_by}, open until {_t(gate.expires_at)} UTC (approvals: {approvals}): "
            f"`{prog} approve {run.id} --as <approver>` or `{prog} reject {run.id} --as <approver>`")


def render_run(run: Run, *, prog: str = "upgradebot", note: str = "") -> str:
    where = run.target.cluster or "current context"
    lines = [
        f"{run.id}  {run.state.value}{'  (halted)' if run.halted else ''}  {run.target.ref} in {where}",
        f"  image      {run.image} (container {run.container}) canary node {run.node}",
        f"  requested  by {run.requester} at {_t(run.created_at)} UTC, updated {_t(run.updated_at)} UTC",
    ]
    if run.gate is not None:
        lines.append(f"  gate       {gate_line(run, run.gate, prog)}")
    if run.reason:
        lines.append(f"  reason     {run.reason}")
    if note:
        lines.append(f"  note       {note}")
    if run.state is RunState.MONITORING:
        lines.append(f"  next       stability reports as configured; `{prog} close {run.id}` ends it now")
    return "\n".join(lines) + "\n"


def render_runs(runs: Sequence[Run], *, empty: str = "no runs") -> str:
    if not runs:
        return empty + "\n"
    rows = [[r.id, r.state.value, f"{r.target.cluster}/{r.target.ref}", r.image.rsplit("/", 1)[-1], r.node,
             r.requester, _t(r.updated_at)] for r in runs]
    return "\n".join(table(["ID", "STATE", "TARGET", "IMAGE", "NODE", "REQUESTER", "UPDATED (UTC)"], rows, "")) + "\n"


def render_audit(run: Run, entries: Sequence[dict[str, Any]]) -> str:
    rows = [[_t(e.get("at")), e.get("actor", ""), e.get("kind", ""), e.get("name", ""), e.get("status", ""),
             " ".join(str(e.get("detail", "")).split())] for e in entries]
    head = f"audit of {run.id} ({run.target.ref}, now {run.state.value}): {len(entries)} entries"
    return "\n".join([head, *table(["AT (UTC)", "ACTOR", "KIND", "NAME", "STATUS", "DETAIL"], rows, "  ")]) + "\n"


class ShellObserver:
    """Prints a run's progress as the engine reports it, one line per event."""

    def __init__(self, out: TextIO, *, prog: str = "upgradebot") -> None:
        self.out, self.prog = out, prog

    def _line(self, text: str) -> None:
        self.out.write(text + "\n")
        self.out.flush()

    def on_state(self, run: Run) -> None:
        self._line(f"[{_t(run.updated_at)[11:]}] {run.id} {run.state.value}"
                   + (f": {run.reason}" if run.reason and run.state is not RunState.REQUESTED else ""))

    def on_step(self, run: Run, step: Step) -> None:
        detail = " ".join(step.detail.split())
        self._line(f"[{_t(step.at)[11:]}]   {step.status:<7} {step.kind:<10} {step.name}"
                   + (f" ({step.actor})" if step.actor != "upgradebot" else "")
                   + (f": {detail}" if detail else ""))

    def on_gate(self, run: Run, gate: Gate) -> None:
        self._line(f"[{_t(gate.opened_at)[11:]}]   {gate_line(run, gate, self.prog)}")
