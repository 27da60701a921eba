"""What the shell prints: a verb's result as text or JSON, and a run's progress as it happens.

A verb's result is printed once, on stdout: the same :class:`~handlers.replies.Reply`
the chat surfaces show, as text (:mod:`bot.text`), or with ``--json`` the verb's model
(``Command.to_json``), so pipelines read ``id`` and ``state`` (and everything else)
without parsing text. While a command runs steps in the shell's process,
:class:`ShellObserver` prints each transition, step and request as one line (not with
``--json``, whose stdout is the model alone). A promotion in waves also shows the wave it is
at: one live line redrawn in place on a terminal, plain lines otherwise (on stderr with
``--json``). A line says what a step found (an event's message, a container's): its control,
bidi and zero-width characters are written as escapes (:func:`runbooks.characters.escaped`), as
:mod:`bot.text` writes a reply's.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any, TextIO

from pydantic import BaseModel

from bot.text import render_reply
from handlers.messages import PROG
from handlers.routing import Command, model_json
from handlers.run_views import wave_now
from runbooks.characters import escaped
from runbooks.engine.runs import Gate, GateKind, Run, RunState, Step

GATE_LABEL = {kind: f"{kind.value} request" for kind in GateKind}


def print_result(command: Command, result: Any, *, as_json: bool, out: TextIO, surface: str = "shell") -> int:
    """The result on ``out`` (text, or the model with ``as_json``); the verb's exit code."""
    if as_json:
        if command.to_json is model_json and isinstance(result, BaseModel):
            # the model's own serializer: the same JSON as json.dumps(model_dump()) with indent=2,
            # without the intermediate dicts and json's pure-Python indenting encoder (a
            # 5,000-node inventory is 7 MB of JSON: a tenth of the time, a third of the memory),
            # written as it is made (its long lists item by item: issue 39)
            write_model_json(result, out)
            out.write("\n")
        else:
            out.write(json.dumps(command.to_json(result), indent=2) + "\n")
    else:
        out.write(render_reply(command.reply(result, surface), prefix=PROG))
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

    def __init__(self, out: TextIO, *, prog: str = PROG, events: bool = True) -> None:
        """``events`` False: the wave progress lines only (``--json`` prints them on stderr)."""
        self.out, self.prog, self.events = out, prog, events
        self.live = bool(getattr(out, "isatty", lambda: False)())
        self._progress = ""
        self._drawn = False

    def _line(self, text: str) -> None:
        if not self.events:
            return
        self._end_live()
        self.out.write(escaped(text) + "\n")
        self.out.flush()

    def _end_live(self) -> None:
        if self._drawn:
            self.out.write("\n")
            self._drawn = False

    def on_progress(self, run: Run) -> None:
        """A promotion in waves: the wave the run is at, as one live line on a terminal (redrawn
        in place), else as a plain line each time it changes."""
        now = wave_now(run)
        if run.pause is not None:
            now = f"{now} (paused by {run.pause.by})" if now else f"paused by {run.pause.by}"
        now = escaped(now)
        if not now or now == self._progress:
            return
        self._progress = now
        if self.live:
            self.out.write(f"\r\x1b[K{run.id} {now}")
            self._drawn = True
        else:
            self.out.write(f"{run.id} {now}\n")
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


LONG = 64
"""Lists of more models than this are written item by item by :func:`write_model_json`."""


def write_model_json(model: BaseModel, out: TextIO) -> None:
    """``model.model_dump_json(indent=2)``, character for character, written as it is made: a model
    holding a list of more than :data:`LONG` models is written field by field and that list item
    by item, so a 5,000-node inventory is never whole in memory as JSON (issue 39: 20 MiB at the
    end of ``inventory --json``)."""
    if _long_lists(model):
        _write(model, out, 0)
    else:
        out.write(model.model_dump_json(indent=2))


def _long_lists(model: BaseModel) -> bool:
    """``model`` holds (itself or in a field's model) a list of more than :data:`LONG` models, and
    is written field by field as its serializer writes it (no computed, aliased or excluded field)."""
    fields = type(model).model_fields
    if type(model).model_computed_fields or any(f.alias or f.serialization_alias or f.exclude for f in fields.values()):
        return False
    for name in fields:
        value = getattr(model, name)
        if isinstance(value, list) and len(value) > LONG and isinstance(value[0], BaseModel):
            return True
        if isinstance(value, BaseModel) and _long_lists(value):
            return True
    return False


def _write(model: BaseModel, out: TextIO, level: int) -> None:
    """``model`` as JSON with ``indent=2``, its first line where ``out`` is, the others ``level`` deeper."""
    pad, item_pad = "  " * (level + 1), "  " * (level + 2)
    out.write("{\n")
    for n, name in enumerate(type(model).model_fields):
        value = getattr(model, name)
        if n:
            out.write(",\n")
        if isinstance(value, list) and value and all(isinstance(v, BaseModel) for v in value):
            out.write(f"{pad}{json.dumps(name)}: [\n")
            for i, item in enumerate(value):
                out.write(",\n" + item_pad if i else item_pad)
                if _long_lists(item):
                    _write(item, out, level + 2)
                else:
                    out.write(item.model_dump_json(indent=2).replace("\n", "\n" + item_pad))
            out.write(f"\n{pad}]")
        elif isinstance(value, BaseModel) and _long_lists(value):
            out.write(f"{pad}{json.dumps(name)}: ")
            _write(value, out, level + 1)
        else:  # the field alone, as the model's serializer writes it: '{\n  "name": value\n}'
            alone = model.model_dump_json(indent=2, include={name})[2:-2]
            out.write("  " * level + alone.replace("\n", "\n" + "  " * level))
    out.write("\n" + "  " * level + "}")
