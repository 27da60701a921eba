"""The run verbs: one row each of the verb table, for the chat surfaces and the shell alike.

``canary`` opens a run at its canary request; ``approve`` and ``reject`` decide its open
request; ``promote`` posts the promotion request again; ``rollback`` requests a rollback
(or rolls back at once when the policy needs no approval for it); ``pause`` stops a run
before its next node, wave or step and ``continue`` goes on; ``close`` ends a
monitoring run; ``status``, ``runs`` and ``audit`` read; ``resume <run>`` runs a halted
run's step again (``resume`` alone, in the shell, continues every unfinished run, as a
serving bot does at start-up).

Each handler parses its words, calls the run engine as the caller (their user id and
policy groups) and returns the engine's model; the presenters of :mod:`handlers.run_views`
make the :class:`~handlers.replies.Reply`. Moving a run on after a command is the engine's
business (its ``wake``), never a handler's. ``mutating`` verbs are limited to the policy's
requesters by the router; ``approve`` and ``reject`` are checked against the approvers,
``rollback``, ``pause``, ``continue`` and ``close`` against the run's owners (its requester and the approvers), by
the engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from handlers.arguments import UsageError, run_id, split_pairs, split_words
from handlers.evidence_messages import evidence_lines
from handlers.routing import EXIT_FAILED, EXIT_OK, EXIT_USAGE, Caller, Command, Deps
from handlers.run_replies import (
    audit_reply,
    outcome_reply,
    requested_reply,
    runs_reply,
    status_reply,
)
from handlers.verbs import entry
from runbooks.engine.runs import UNSUCCESSFUL, GateKind, Run, RunState
from runbooks.templates import EDIT_KEYS, REPEATABLE, Edits, parse_edits

if TYPE_CHECKING:  # the engine's commands: not loaded to read a run (`status`, issue 39)
    from runbooks.engine.commands import Outcome

MAX_RUNS = 1000
AuditTrail = tuple[Run, list[dict[str, Any]]]


def run_json(run: Run, note: str = "") -> dict[str, Any]:
    """A run as ``--json`` prints it: the model, with the command's note if there is one, and
    each check's failure evidence with its ``text``: the lines the thread shows (issue 61)."""
    data = run.model_dump(mode="json")
    for found in data.get("evidence", {}).values():
        found["text"] = evidence_lines(found.get("items") or [])
    if note:
        data["note"] = note
    return data


def outcome_json(outcome: Outcome) -> dict[str, Any]:
    return run_json(outcome.run, outcome.note)


STOPPED = UNSUCCESSFUL | {RunState.HALTED}
"""Where the shell exits 1: the upgrade did not happen, or the run halted."""


def failed_unless_done(outcome: Outcome) -> int:
    """0 done or waiting at a gate; 1 the run failed, was rolled back, rejected or expired, or halted."""
    return EXIT_FAILED if outcome.run.state in STOPPED else EXIT_OK


def _failed_only(outcome: Outcome) -> int:
    """reject and rollback: a rejected or rolled-back run is what was asked for."""
    return EXIT_FAILED if outcome.run.state in (RunState.FAILED, RunState.HALTED) else EXIT_OK


def _approved_exit(outcome: Outcome) -> int:
    """approve: as :func:`failed_unless_done`, but an approved rollback request asked for the rollback,
    so a run rolled back by it did what was asked (0); 1 only if it halted or failed (issue 64)."""
    gate = outcome.run.gate
    if gate is not None and gate.kind is GateKind.ROLLBACK and gate.outcome == "approved":
        return _failed_only(outcome)
    return failed_unless_done(outcome)


def _one_run(usage: str) -> Any:
    return lambda words: run_id(words, usage=usage)[0]


# ------------------------------------------------------------------ canary
CANARY_USAGE = entry("canary").usage
WHEN = ("now", "next-window")


class CanaryArgs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)  # built when first parsed (issue 39)

    target: str
    image: str = ""
    node: str
    container: str | None = None
    cluster: str | None = None
    when: str = "now"
    edits: Edits = Field(default_factory=Edits)  # made when used: Edits is built when first used (issue 39)


def parse_canary(words: Sequence[str]) -> CanaryArgs:
    from runbooks import validation  # the policy's names, for the verbs that request (issue 39)

    positional, pairs, repeated = split_words(
        words, allowed=("image", "node", "container", "cluster", "when", *EDIT_KEYS), usage=CANARY_USAGE,
        max_positional=1, repeatable=REPEATABLE,
    )
    try:
        edits = parse_edits(pairs, repeated)
    except (ValueError, ValidationError) as exc:
        raise UsageError(_first_error(exc), CANARY_USAGE) from exc
    pairs = {k: v for k, v in pairs.items() if k not in EDIT_KEYS}
    if pairs.get("when", "now") not in WHEN:
        raise UsageError(f"when={pairs['when']} is not a choice: when=next-window queues the run until the "
                         "target's maintenance window opens", CANARY_USAGE)
    if not positional:
        raise UsageError("which DaemonSet? give <namespace>/<daemonset>", CANARY_USAGE)
    if "node" not in pairs:
        raise UsageError("node= is required", CANARY_USAGE)
    if "image" not in pairs and edits.empty:
        raise UsageError("image= is required (or a change of the template: env=, args=, limits=, ...)", CANARY_USAGE)
    try:
        validation.target(positional[0])
        if "image" in pairs:
            validation.image_reference(pairs["image"])
        validation.node_names(pairs["node"])
        if "container" in pairs:
            validation.container_name(pairs["container"])
    except ValueError as exc:
        raise UsageError(str(exc), CANARY_USAGE) from exc
    return CanaryArgs(target=positional[0], edits=edits, **pairs)


def _first_error(exc: Exception) -> str:
    """A pydantic error's first message without its boilerplate, else the error itself."""
    if isinstance(exc, ValidationError):
        return str(exc.errors()[0]["msg"]).removeprefix("Value error, ")
    return str(exc)


def canary(args: CanaryArgs, deps: Deps, caller: Caller) -> Outcome:
    """The new run, waiting at its canary request (``LockHeld`` if the target has one). The
    engine validates the inputs again, reads the cluster and takes the target's lock;
    nothing runs on the cluster until an approver approves."""
    return deps.engine.request_canary(
        actor=deps.actor(caller), target=args.target, image=args.image, node=args.node,
        container=args.container, cluster=args.cluster, when=args.when, edits=args.edits,
        origin={"surface": caller.surface, "channel": caller.channel or ""},
    )


# ------------------------------------------------------------------ restart
RESTART_USAGE = entry("restart").usage


class RestartArgs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)  # built when first parsed (issue 39)

    target: str
    node: str
    container: str | None = None
    cluster: str | None = None
    when: str = "now"


def parse_restart(words: Sequence[str]) -> RestartArgs:
    from runbooks import validation  # the policy's names, for the verbs that request (issue 39)

    positional, pairs = split_pairs(words, allowed=("node", "container", "cluster", "when"), usage=RESTART_USAGE,
                                    max_positional=1)
    if not positional:
        raise UsageError("which DaemonSet? give <namespace>/<daemonset>", RESTART_USAGE)
    if "node" not in pairs:
        raise UsageError("node= is required: the node restarted first (or node=auto)", RESTART_USAGE)
    if pairs.get("when", "now") not in WHEN:
        raise UsageError(f"when={pairs['when']} is not a choice: when=next-window queues the run until the "
                         "target's maintenance window opens", RESTART_USAGE)
    try:
        validation.target(positional[0])
        validation.node_name(pairs["node"])
        if "container" in pairs:
            validation.container_name(pairs["container"])
    except ValueError as exc:
        raise UsageError(str(exc), RESTART_USAGE) from exc
    return RestartArgs(target=positional[0], **pairs)


def restart(args: RestartArgs, deps: Deps, caller: Caller) -> Outcome:
    """A run that restarts the plugin's pods, one node first: its request waits for an approver."""
    return deps.engine.request_restart(
        actor=deps.actor(caller), target=args.target, node=args.node, container=args.container, cluster=args.cluster,
        when=args.when, origin={"surface": caller.surface, "channel": caller.channel or ""},
    )


# ------------------------------------------------------------------ repair
REPAIR_USAGE = entry("repair").usage


class RepairArgs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)  # built when first parsed (issue 39)

    target: str
    cluster: str | None = None


def parse_repair(words: Sequence[str]) -> RepairArgs:
    from runbooks import validation  # the policy's names, for the verbs that request (issue 39)

    positional, pairs = split_pairs(words, allowed=("cluster",), usage=REPAIR_USAGE, max_positional=1)
    if not positional:
        raise UsageError("which DaemonSet? give <namespace>/<daemonset>", REPAIR_USAGE)
    try:
        validation.target(positional[0])
    except ValueError as exc:
        raise UsageError(str(exc), REPAIR_USAGE) from exc
    return RepairArgs(target=positional[0], **pairs)


def repair(args: RepairArgs, deps: Deps, caller: Caller) -> Outcome:
    """A repair run, its stuck pods listed in the request an approver decides."""
    return deps.engine.request_repair(actor=deps.actor(caller), target=args.target, cluster=args.cluster,
                                      origin={"surface": caller.surface, "channel": caller.channel or ""})


# ------------------------------------------------------------------ decisions and requests
GATES = {kind.value: kind for kind in GateKind}
APPROVE_USAGE = entry("approve").usage
REJECT_USAGE = entry("reject").usage


class DecisionArgs(BaseModel):
    """A decision names its run and the request it decides: refused if that one is not open."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)  # built when first parsed (issue 39)

    run: str
    gate: GateKind


def _decision(usage: str) -> Any:
    def parse(words: Sequence[str]) -> DecisionArgs:
        positional, _ = split_pairs(words, allowed=(), usage=usage, max_positional=2)
        run = run_id(positional[:1], usage=usage)[0]
        if len(positional) < 2:
            raise UsageError(f"which request of {run}? name it: {usage.split(' <run> ')[0]} {run} promotion "
                             "(or canary, migration, repair, cleanup, quarantine, release, rollback), as `status` shows", usage)
        gate = GATES.get(positional[1].lower())
        if gate is None:
            raise UsageError(f"{positional[1]!r} is not a request: canary, migration, repair, cleanup, quarantine, "
                             "release, promotion or rollback", usage)
        return DecisionArgs(run=run, gate=gate)

    return parse


def approve(args: DecisionArgs, deps: Deps, caller: Caller) -> Outcome:
    return deps.engine.decide(args.run, actor=deps.actor(caller), approve=True, kind=args.gate)


def reject(args: DecisionArgs, deps: Deps, caller: Caller) -> Outcome:
    return deps.engine.decide(args.run, actor=deps.actor(caller), approve=False, kind=args.gate)


def promote(run: str, deps: Deps, caller: Caller) -> Outcome:
    return deps.engine.promote(run, actor=deps.actor(caller))


def close(run: str, deps: Deps, caller: Caller) -> Outcome:
    return deps.engine.close(run, actor=deps.actor(caller))


ROLLBACK_USAGE = entry("rollback").usage


class RollbackArgs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)  # built when first parsed (issue 39)

    run: str
    reason: str = ""


def parse_rollback(words: Sequence[str]) -> RollbackArgs:
    run, pairs = run_id(words, usage=ROLLBACK_USAGE, allowed=("reason",))
    return RollbackArgs(run=run, reason=pairs.get("reason", ""))


def rollback(args: RollbackArgs, deps: Deps, caller: Caller) -> Outcome:
    return deps.engine.rollback(args.run, actor=deps.actor(caller), reason=args.reason)


PAUSE_USAGE = entry("pause").usage


def parse_pause(words: Sequence[str]) -> RollbackArgs:
    run, pairs = run_id(words, usage=PAUSE_USAGE, allowed=("reason",))
    return RollbackArgs(run=run, reason=pairs.get("reason", ""))


def pause(args: RollbackArgs, deps: Deps, caller: Caller) -> Outcome:
    return deps.engine.pause(args.run, actor=deps.actor(caller), reason=args.reason)


def continue_run(run: str, deps: Deps, caller: Caller) -> Outcome:
    return deps.engine.continue_run(run, actor=deps.actor(caller))


# ------------------------------------------------------------------ reading
STATUS_USAGE = entry("status").usage
RUNS_USAGE = entry("runs").usage


def parse_status(words: Sequence[str]) -> str | None:
    positional, _ = split_pairs(words, allowed=(), usage=STATUS_USAGE, max_positional=1)
    return run_id(positional, usage=STATUS_USAGE)[0] if positional else None


def status(run: str | None, deps: Deps, caller: Caller) -> Run | list[Run]:
    """The run as stored (its gate, reason, progress), or every active run when no id is given;
    large progress values (a 5,000-node baseline) are shown by their size, not read."""
    return deps.runs.get(run, whole=False) if run else deps.runs.runs(active_only=True, whole=False)


def _status_json(found: Run | list[Run]) -> dict[str, Any]:
    return run_json(found) if isinstance(found, Run) else {"runs": [run_json(r) for r in found]}


def _status_exit(found: Run | list[Run]) -> int:
    return EXIT_FAILED if isinstance(found, Run) and found.state in STOPPED else EXIT_OK


def parse_runs(words: Sequence[str]) -> int:
    _, pairs = split_pairs(words, allowed=("limit",), usage=RUNS_USAGE)
    text = pairs.get("limit", "20")
    if not text.isascii() or not text.isdigit() or not 1 <= int(text) <= MAX_RUNS:
        raise UsageError(f"limit= must be a number from 1 to {MAX_RUNS}", RUNS_USAGE)
    return int(text)


def runs(limit: int, deps: Deps, caller: Caller) -> list[Run]:
    """The newest runs, active or ended (without their large progress values)."""
    return deps.runs.runs(limit=limit, whole=False)


AUDIT_USAGE = entry("audit").usage
ALL = entry("audit").flags[0]  # "--all": the table says which words of the verb are flags


def parse_audit(words: Sequence[str]) -> tuple[str, bool]:
    """``(run id, whole)``: ``--all`` asks for every entry of the trail, not the newest checks only."""
    whole = ALL in words
    return run_id([w for w in words if w != ALL], usage=AUDIT_USAGE)[0], whole


def audit(request: tuple[str, bool], deps: Deps, caller: Caller) -> tuple[Run, list[dict[str, Any]], bool]:
    """Every transition, decision, check and mutation of the run (and whether all are shown)."""
    run, whole = request
    return deps.engine.get(run), deps.engine.audit(run), whole


def _audit_reply(found: tuple[Run, list[dict[str, Any]], bool]) -> Any:
    run, entries, whole = found
    return audit_reply((run, entries), whole=whole)


def _audit_json(found: tuple[Run, list[dict[str, Any]], bool]) -> dict[str, Any]:
    run, entries, _ = found
    return {"id": run.id, "state": run.state.value, "entries": entries}


# ------------------------------------------------------------------ resume
RESUME_USAGE = entry("resume").usage


def parse_resume(words: Sequence[str]) -> str | None:
    positional, _ = split_pairs(words, allowed=(), usage=RESUME_USAGE, max_positional=1)
    return run_id(positional, usage=RESUME_USAGE)[0] if positional else None


def resume(run: str | None, deps: Deps, caller: Caller) -> list[Outcome]:
    """``resume <run>``: a halted run's step runs again. ``resume`` (the shell): continue every
    run not in a terminal state, as a serving bot does at start-up and every sweep."""
    if run is not None:
        return [deps.engine.resume_run(run, actor=deps.actor(caller))]
    if caller.surface != "shell":
        raise UsageError("name the halted run to resume: resume <run> (the bot resumes the others by itself)",
                         RESUME_USAGE)
    return deps.engine.resume()


def _resume_reply(outcomes: list[Outcome]) -> Any:
    return runs_reply([o.run for o in outcomes], title="Unfinished runs",
                      notes={o.run.id: o.note for o in outcomes if o.note})


def _resume_exit(outcomes: list[Outcome]) -> int:
    if any(o.paused for o in outcomes):
        return EXIT_USAGE  # a cluster did not answer: those runs wait for the next resume
    return EXIT_FAILED if any(o.run.state in STOPPED for o in outcomes) else EXIT_OK


# ------------------------------------------------------------------ the rows
COMMANDS: tuple[Command, ...] = (
    Command.of(entry("canary"), parse_canary, canary, requested_reply, exit_code=failed_unless_done,
               to_json=outcome_json, by_surface=True),
    Command.of(entry("restart"), parse_restart, restart, requested_reply, exit_code=failed_unless_done,
               to_json=outcome_json, by_surface=True),
    Command.of(entry("repair"), parse_repair, repair, requested_reply, exit_code=failed_unless_done,
               to_json=outcome_json, by_surface=True),
    Command.of(entry("approve"), _decision(APPROVE_USAGE), approve, outcome_reply, exit_code=_approved_exit,
               to_json=outcome_json, by_surface=True),
    Command.of(entry("reject"), _decision(REJECT_USAGE), reject, outcome_reply, exit_code=_failed_only,
               to_json=outcome_json, by_surface=True),
    Command.of(entry("promote"), _one_run(entry("promote").usage), promote, outcome_reply,
               exit_code=failed_unless_done, to_json=outcome_json, by_surface=True),
    Command.of(entry("rollback"), parse_rollback, rollback, outcome_reply, exit_code=_failed_only,
               to_json=outcome_json, by_surface=True),
    Command.of(entry("pause"), parse_pause, pause, outcome_reply, exit_code=failed_unless_done, to_json=outcome_json,
               by_surface=True),
    Command.of(entry("continue"), _one_run(entry("continue").usage), continue_run, outcome_reply,
               exit_code=failed_unless_done, to_json=outcome_json, by_surface=True),
    Command.of(entry("close"), _one_run(entry("close").usage), close, outcome_reply, exit_code=failed_unless_done,
               to_json=outcome_json, by_surface=True),
    Command.of(entry("status"), parse_status, status, status_reply, exit_code=_status_exit, to_json=_status_json,
               by_surface=True),
    Command.of(entry("runs"), parse_runs, runs, runs_reply, to_json=lambda found: {"runs": [run_json(r) for r in found]}),
    Command.of(entry("audit"), parse_audit, audit, _audit_reply, to_json=_audit_json),
    Command.of(entry("resume"), parse_resume, resume, _resume_reply, exit_code=_resume_exit,
               to_json=lambda outcomes: {"runs": [run_json(o.run, o.note) for o in outcomes]}),
)
