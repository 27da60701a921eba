"""What the shell prints: a verb's result as text or JSON, and a run's progress as it happens.

A verb's result is printed once, on stdout: the same :class:`~handlers.replies.Reply`
the chat surfaces show, as text (:mod:`bot.text`), or with ``--json`` the verb's model
(``Command.to_json``), so pipelines read ``id`` and ``state`` (and everything else)
without parsing text. While a command runs steps in the shell's process,
:class:`ShellObserver` prints each transition, step and request as one line (not with
``--json``, whose stdout is the model alone).
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any, TextIO

from bot.text import render_reply
from handlers.messages import PROG
from handlers.routing import Command
from runbooks.engine.runs import Gate, GateKind, Run, RunState, Step

GATE_LABEL = {kind: f"{kind.value} request" for kind in GateKind}


def print_result(command: Command, result: Any, *, as_json: bool, out: TextIO) -> int:
    """The result on ``out`` (text, or the model with ``as_json``); the verb's exit code."""
    if as_json:
        out.write(json.dumps(command.to_json(result), indent=2) + "\n")
    else:
        out.write(render_reply(command.present(result), prefix=PROG))
    return command.exit_code(result)


def _t(moment: dt.datetime | str | None) -> str:
    if moment is None:
        return "-"
    if isinstance(moment, str):
        moment = dt.datetime.fromisoformat(moment)
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


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
            f"an approver decides in Slack, or `{prog} approve {run.id} {gate.kind.value}` / "
            f"`{prog} reject {run.id} {gate.kind.value}` where the policy allows shell approvals")


class ShellObserver:
    """Prints a run's progress as the engine reports it, one line per event."""

    def __init__(self, out: TextIO, *, prog: str = PROG) -> None:
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
