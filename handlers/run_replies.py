"""What the run verbs answer the one who typed them, on each surface: a run requested, where a
run is now and what waits, its root message (``status``), a table of runs, its audit trail.

The presenters of :mod:`handlers.runs` (and of the other verbs that request runs); the run's
own messages (root, steps, requests) are :mod:`handlers.run_views`. Those that take
``surface`` word their answer for it (:func:`handlers.run_messages.threaded`). Pure functions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from handlers import evidence_messages as evmsg
from handlers import messages as msg
from handlers import run_messages as rmsg
from handlers.replies import Reply, Table
from handlers.run_views import STATE_TONE, phase_of, root_message
from runbooks.engine.refusals import moment_text
from runbooks.engine.runs import NODE_CHOICE, GateKind, Run, RunKind, Step
from runbooks.errors import shorten

if TYPE_CHECKING:  # the engine's commands: not loaded to show a run (`status`, issue 39)
    from runbooks.engine.commands import Outcome

MAX_AUDIT_ROWS = 40


def requested_reply(outcome: Outcome, *, surface: str = "slack") -> Reply:
    """``canary``: the run is shown by its root message (Slack); the caller gets its id, and on a
    surface without a thread the command that approves it."""
    run = outcome.run
    request = run.gate.kind.value if run.gate is not None else GateKind.CANARY.value
    text = rmsg.run_requested(run.id, threaded=rmsg.threaded(surface), request=request)
    chosen = run.shown(NODE_CHOICE)  # node=auto: which node, and why
    return Reply(text=f"{text}\n{chosen}" if chosen else text, ephemeral=True, tone="ok")


def evidence_text(run: Run) -> list[str]:
    """The run's failure evidence (:attr:`~runbooks.engine.runs.Run.evidence`), check by check: a
    heading, then the lines its step's message in the thread shows (issue 61 item 4)."""
    lines: list[str] = []
    for entry in run.evidence.values():
        lines.append(evmsg.check_heading(str(entry.get("step") or ""), str(entry.get("check") or ""),
                                         str(entry.get("scope") or ""), str(entry.get("status") or "")))
        lines += evmsg.evidence_lines(entry.get("items") or [])
    return lines


def _with_evidence(text: str, run: Run) -> str:
    return "\n".join([text, *evidence_text(run)]) if run.evidence else text


def outcome_reply(outcome: Outcome, *, surface: str = "slack") -> Reply:
    """approve, reject, promote, rollback, close: what the command did and what waits now (the
    request that is open, and how ``surface`` decides it), or where the run is; with the
    failure's evidence when a step of the run failed (:func:`evidence_text`)."""
    run = outcome.run
    note = outcome.note or run.reason
    tone = STATE_TONE.get(run.state, "info")
    if run.gate is not None and run.gate.is_open:
        aside = run.gate.kind is GateKind.ROLLBACK  # the run's own step is set aside, not waiting
        text = rmsg.run_waits(run.id, run.gate.kind.value, moment_text(run.gate.expires_at), note=note,
                              state="" if aside else run.state.value, threaded=rmsg.threaded(surface))
        return Reply(text=_with_evidence(text, run), ephemeral=True, tone=tone)
    return Reply(text=_with_evidence(rmsg.run_now(run.id, run.state.value, note), run), ephemeral=True, tone=tone)


def status_reply(found: Run | Sequence[Run], *, surface: str = "slack") -> Reply:
    """``status <run>``: its root message and its failure's evidence (:func:`evidence_text`);
    ``status``: the active runs."""
    if isinstance(found, Run):
        root = root_message(found, surface=surface)
        return Reply(**{**root.model_dump(), "text": _with_evidence(root.text, found)}, ephemeral=True)
    return runs_reply(found, title="Active runs")


def runs_reply(runs: Sequence[Run], *, title: str = "Runs", notes: Mapping[str, str] | None = None) -> Reply:
    """A table of runs, newest first; ``notes`` by run id (why ``resume`` left one waiting)."""
    rows = [[r.id, r.state.value, r.target.ref, r.image.rsplit("/", 1)[-1] if r.kind is RunKind.UPGRADE
             else r.kind.value if r.kind in (RunKind.REPAIR, RunKind.CLEANUP, RunKind.QUARANTINE, RunKind.RELEASE)
             else f"migration ({r.target.kind})",
             r.node or "-",
             r.requester, moment_text(r.updated_at)] for r in runs]
    table = Table(header=["ID", "STATE", "TARGET", "IMAGE", "NODE", "REQUESTER", "UPDATED"], rows=rows)
    text = "\n".join(f"{run}: {note}" for run, note in (notes or {}).items())
    return Reply(title=f"{title} ({len(runs)})", table=table if rows else None,
                 text=text if rows else msg.NO_RUNS, ephemeral=True)


KEPT_KINDS = frozenset({"transition", "decision", "gate", "mutation"})
"""Entries the text audit always shows, however long the trail: the request, each change of state,
each request opened or closed and each decision on it (issue 41), and each change the run made to
the cluster (``mutation``: written by :func:`runbooks.engine.recording.note` where the change is
made, issue 64); checks and steps are cut first."""


def _kept(entry: dict[str, Any]) -> bool:
    return str(entry.get("kind", "")) in KEPT_KINDS


def audit_reply(found: tuple[Run, list[dict[str, Any]]], *, whole: bool = False) -> Reply:
    """``audit <run>``: its trail, in order; beyond :data:`MAX_AUDIT_ROWS` rows the oldest checks
    and steps are left out (counted in a note), never an entry of :data:`KEPT_KINDS`.
    ``whole`` (``audit <run> --all``): every entry."""
    run, entries = found
    room = max(MAX_AUDIT_ROWS - sum(1 for e in entries if _kept(e)), 0)
    others = [i for i, e in enumerate(entries) if not _kept(e)]
    shown_others = set(others[len(others) - room:] if room else [])
    shown = entries if whole else [e for i, e in enumerate(entries) if _kept(e) or i in shown_others]
    rows = [[str(e.get("at", ""))[:19].replace("T", " "), str(e.get("actor", "")), str(e.get("kind", "")),
             str(e.get("name", "")), str(e.get("status", "")), shorten(str(e.get("detail", "")), 80)] for e in shown]
    note = rmsg.audit_cut(len(entries) - len(shown), run.id) if len(shown) < len(entries) else ""
    table = Table(header=["AT (UTC)", "ACTOR", "KIND", "NAME", "STATUS", "DETAIL"], rows=rows, note=note)
    return Reply(title=msg.audit_title(run.id, run.target.ref, run.state.value, len(entries)),
                 table=table, ephemeral=True)


def details_reply(run: Run, phase: str, entries: Sequence[dict[str, Any]]) -> Reply:
    """A Details click: every entry of that step of the run's trail (the newest when too many)."""
    mine = [e for e in entries if phase_of(run, Step.model_validate(e)) == phase]
    reply = audit_reply((run, mine))
    title = msg.phase_details_title(msg.phase_title(phase, kind=run.kind.value), run.id, len(mine))
    return reply.model_copy(update={"title": title})
