"""Runs as surface-neutral messages: the root message of a run, its thread items, replies.

A chat front end shows each run as one root message (:func:`root_message`, updated in
place as the state changes) with a thread under it: one item per step and check
(:func:`step_message`) and, at each gate, a request with Approve / Reject
(:func:`gate_message`) whose buttons give way to who decided and when
(:func:`decided_message`). What the run verbs answer is
:mod:`handlers.run_replies`. The buttons the bot posts are
declared here (:data:`ACTIONS`); :mod:`handlers.clicks` decides what a click does. Pure
functions.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from handlers import evidence_messages as evmsg
from handlers import messages as msg
from handlers import run_messages as rmsg
from handlers.replies import (
    Button,
    Item,
    Message,
    Tone,
    literal,
    literal_block,
    mention,
    user_ref,
)
from runbooks.engine.actors import ENGINE_ACTOR
from runbooks.engine.refusals import moment_text
from runbooks.engine.runs import (
    NODE_CHOICE,
    STEP_OF,
    WORKING,
    Gate,
    GateKind,
    Run,
    RunKind,
    RunState,
    Step,
)
from runbooks.errors import shorten
from runbooks.templates import RESTARTED_AT

S = RunState
STATE_TONE: dict[RunState, Tone] = {
    S.DONE: "ok", S.MONITORING: "ok", S.ROLLED_BACK: "warn", S.REJECTED: "warn", S.EXPIRED: "warn",
    S.ROLLING_BACK: "warn", S.FAILED: "error", S.HALTED: "error",
}
STEP_TONE: dict[str, Tone] = {"ok": "ok", "failed": "error", "unknown": "warn", "info": "info", "skipped": "info"}


def _who(user: str) -> str:
    return user if user == ENGINE_ACTOR else user_ref(user)


# ------------------------------------------------------------------ buttons
APPROVE = "approve"
REJECT = "reject"
REQUEST_ROLLBACK = "request_rollback"
"""The button of a stability report that is not stable; its value is the run id."""
DETAILS = "details"
"""The button of a step's message; its value is the run id and the step: the step's whole trail,
for the clicker only."""
ACTIONS: tuple[str, ...] = (APPROVE, REJECT, REQUEST_ROLLBACK, DETAILS)
"""Every button the bot posts; :mod:`handlers.clicks` decides what a click on one does."""


def approval_buttons(value: str, *, approve: str = "Approve", reject: str = "Reject") -> list[Button]:
    """The two buttons of a gate; ``value`` (the gate's reference) comes back with the click."""
    return [
        Button(label=approve, action_id=APPROVE, value=value, style="primary"),
        Button(label=reject, action_id=REJECT, value=value, style="danger"),
    ]


def rollback_button(run: str) -> Button:
    """A stability report's "Request rollback": opens a rollback request that an approver decides."""
    return Button(label="Request rollback", action_id=REQUEST_ROLLBACK, value=run, style="danger")


# ------------------------------------------------------------------ gates
def gate_ref(run: Run, gate: Gate) -> str:
    """The value of a gate's buttons: the run, the kind and the moment it opened."""
    return f"{run.id}|{gate.kind.value}|{gate.opened_at.astimezone(dt.UTC):%Y%m%dT%H%M%S%f}"


def run_of_ref(value: str) -> str | None:
    """The run id in a gate reference, or None if it is not one."""
    parts = value.split("|")
    return parts[0] if len(parts) == 3 and parts[0].startswith("r-") else None


GATE_KEY = "gate|"
"""``run.origin[GATE_KEY + gate_ref]``: the ts of that gate's message, kept by the front end that posted it."""


def on_gate_message(run: Run, ref: str, *, channel: str | None, message_ts: str | None) -> bool:
    """Whether a click on the message ``message_ts`` in ``channel`` was made on the message of the
    gate ``ref`` of ``run`` (its run's channel, the ts kept with the run); a click that names no
    message (a surface without messages: the console) is not held to one."""
    if channel is None and message_ts is None:
        return True
    kept = run.origin.get(GATE_KEY + ref)
    return bool(kept) and (channel, message_ts) == (run.origin.get("channel"), kept)


def _asks(run: Run, gate: Gate) -> str:
    ref, change = run.target.ref, "" if run.edits.empty else literal(run.edits.summary())
    if gate.kind is GateKind.REPAIR:
        what = msg.asks_repair(ref, repair_summary(run))
    elif gate.kind is GateKind.CLEANUP:
        what = msg.asks_cleanup(run.target.cluster or "the current context", cleanup_plan(run))
    elif gate.kind is GateKind.MIGRATION:
        what = msg.asks_migration(run.target.kind, ref, migration_summary(run))
    elif gate.kind is GateKind.CANARY and is_restart(run):
        what = msg.asks_restart(canary_nodes_text(run), ref, run.container, literal(run.image))
    elif gate.kind is GateKind.CANARY:
        what = msg.asks_canary(literal(run.image), canary_nodes_text(run), ref, run.container, change, bool(run.target.drain))
    elif gate.kind is GateKind.PROMOTION and run.kind is RunKind.MIGRATION:
        what = msg.asks_switch(run.target.kind, ref, str((run.change.get("canary") or {}).get("name", "")))
    elif gate.kind is GateKind.PROMOTION:
        what = msg.asks_promotion(literal(run.image), ref, canary_nodes_text(run), "a restart" if is_restart(run) else change,
                                  bool(run.target.drain))
    elif run.target.clusterpolicy:
        what = rmsg.asks_rollback_through(ref, run.target.clusterpolicy, run.id)
    else:
        what = msg.asks_rollback(ref, run.id)
    return msg.gate_asks(_who(gate.requested_by), what)


def canary_nodes_text(run: Run) -> str:
    """The canary's node, or its nodes (one per hardware class) as ``gpu-node2, gpu-node4``."""
    return ", ".join(run.canary_nodes) or run.node


def is_restart(run: Run) -> bool:
    """A run whose only change is kubectl's restartedAt annotation (``restart``)."""
    return RESTARTED_AT in run.edits.annotations and run.edits.change.empty


def thread_link(origin: Mapping[str, str]) -> str:
    """The web address of a Slack run's thread (its root message), or '' for other surfaces."""
    channel, ts = origin.get("channel"), origin.get("ts")
    if origin.get("surface") != "slack" or not channel or not ts:
        return ""
    return f"https://slack.com/archives/{channel}/p{ts.replace('.', '')}"


def gate_message(run: Run, gate: Gate, *, self_approval: bool = False) -> Message:
    """A gate in the thread: who asks for what, until when, with Approve / Reject."""
    lines = [_asks(run, gate), msg.gate_expires(moment_text(gate.expires_at), self_approval)]
    if gate.kind is GateKind.CANARY and run.shown(NODE_CHOICE):  # node=auto: which node, and why
        lines.insert(1, str(run.shown(NODE_CHOICE)))
    if gate.reason:  # a rollback request's reason is typed by its requester (the engine's is its own)
        typed = gate.kind is GateKind.ROLLBACK and gate.requested_by != ENGINE_ACTOR
        lines.insert(1, literal(gate.reason) if typed else gate.reason)
    change = run.shown("template_diff") or ""
    if gate.kind is GateKind.CANARY and change:
        lines.append(msg.template_diff(literal_block(change)))
    if gate.kind is GateKind.CANARY and run.shown("owner"):
        lines.append(rmsg.owned_by(str(run.shown("owner"))))
    policy_change = run.shown("clusterpolicy") or {}
    if gate.kind is GateKind.CANARY and policy_change:
        lines.append(rmsg.clusterpolicy_diff(str(policy_change.get("name")), literal_block(str(policy_change.get("diff")))))
    warnings = run.shown("request_warnings") or []
    if gate.kind is GateKind.CANARY and warnings:
        lines.append(msg.request_warnings(warnings))
    stage = run.shown("after_stage") or {}
    link = thread_link(stage.get("origin") or {})
    if gate.kind is GateKind.CANARY and link:
        lines.insert(2, msg.stage_thread(stage.get("cluster", ""), link))
    return Message(title=msg.request_title(gate.kind.value, run.id), text="\n".join(lines),
                   buttons=approval_buttons(gate_ref(run, gate)), tone="warn")


def decided_message(run: Run, gate: Gate, *, user: str, approve: bool, at: dt.datetime) -> Message:
    """The gate message once decided: the buttons give way to who decided and when."""
    verdict = msg.decided(user_ref(user), approve, moment_text(at))
    return Message(title=msg.request_title(gate.kind.value, run.id), text=f"{_asks(run, gate)}\n{verdict}",
                   tone="ok" if approve else "error")


def closed_gate_message(run: Run, gate: Gate) -> Message:
    """A gate message once closed however it was (a click, the shell, expiry): no buttons."""
    at = moment_text(gate.decided_at or gate.expires_at)
    if gate.outcome == "approved":
        verdict = msg.decided(", ".join(user_ref(u) for u in gate.approvers), True, at)
    elif gate.outcome == "rejected":
        verdict = msg.decided(", ".join(user_ref(d.user) for d in gate.decisions if not d.approve), False, at)
    else:
        verdict = msg.closed_at(gate.outcome or "closed", at)
    return Message(title=msg.request_title(gate.kind.value, run.id), text=f"{_asks(run, gate)}\n{verdict}",
                   tone="ok" if gate.outcome == "approved" else "warn")


# ------------------------------------------------------------------ a run
def migration_summary(run: Run) -> str:
    """What a migration run changes, in one line: each container's resource and the claim replacing it."""
    change = run.change
    claims = "; ".join(f"{c.get('container')}: {c.get('resource')} {c.get('count')} -> claim {c.get('claim')} "
                       f"(ResourceClaimTemplate {c.get('template')})" for c in change.get("claims") or [])
    return (f"{claims}, {change.get('device_class')} devices, resource.k8s.io/{change.get('version')}"
            if claims else "(no change recorded)")


def cleanup_plan(run: Run) -> str:
    """The broken claims a cleanup run deletes, from its stored plan (its steps imported here, as the repair's)."""
    from runbooks.dra.claim_cleanup import plan_text

    return plan_text(run.change)


def repair_summary(run: Run) -> str:
    """What a repair run deletes, and what it only lists, from its stored plan."""
    # Imported here: the repair steps load the cluster adapter and the checks, which the
    # shell's `status` and `--help` (every run view) need only for a repair run (issue 39).
    from runbooks.daemonset.repairing import plan_lines

    return msg.repair_plan(*plan_lines(run.change))


def _what_fields(run: Run) -> list[Item]:
    if run.kind is RunKind.REPAIR:
        return [Item(label="Target", value=f"{run.target.ref} in {run.target.cluster or 'the current context'}"),
                Item(label="Stuck pods", value=repair_summary(run))]
    if run.kind is RunKind.CLEANUP:
        return [Item(label="Cluster", value=run.target.cluster or "the current context"),
                Item(label="Broken claims", value=cleanup_plan(run))]
    if run.kind is RunKind.MIGRATION:
        return [Item(label="Workload", value=f"{run.target.kind} {run.target.ref} in "
                                             f"{run.target.cluster or 'the current context'}"),
                Item(label="Change", value=migration_summary(run))]
    fields = [Item(label="Target", value=f"{run.target.ref} in {run.target.cluster or 'the current context'}"),
              Item(label="Image", value=f"{literal(run.image)} (container {run.container})"),
              Item(label="Canary node", value=canary_nodes_text(run))]
    if not run.edits.empty:
        fields.insert(2, Item(label="Change", value="a restart" if is_restart(run) else literal(run.edits.summary())))
    return fields


UPGRADE_STEPS: tuple[tuple[RunState, str], ...] = tuple(zip(
    (S.AWAITING_APPROVAL, S.CANARY_ROLLING, S.CANARY_VERIFYING, S.AWAITING_PROMOTION, S.PROMOTING, S.VERIFYING,
     S.MONITORING), msg.UPGRADE_STEP_NAMES, strict=True))
CHANGE_STEPS: tuple[tuple[RunState, str], ...] = tuple(zip((S.AWAITING_APPROVAL, S.APPLYING, S.VERIFYING),
                                                           msg.CHANGE_STEP_NAMES, strict=True))


def progress_of(run: Run) -> str:
    """``Step 3 of 7: Verify the canary``, or '' where the run is off its path (rolling back, ended)."""
    steps = UPGRADE_STEPS if run.kind is RunKind.UPGRADE else CHANGE_STEPS
    state: RunState = S.AWAITING_APPROVAL if run.state is S.REQUESTED else run.state
    if run.state is S.HALTED and run.previous_state is not None:
        state = run.previous_state
    aside = run.gate if run.gate is not None and _rollback_open(run) else None
    for number, (at, name) in enumerate(steps, start=1):
        if at is state and aside is not None:  # the request that waits is the rollback's, not this step's
            return rmsg.aside_step(msg.request_name(aside.kind.value), number, len(steps), name)
        if at is state:
            return rmsg.run_step(number, len(steps), name)
    return msg.request_name(aside.kind.value) if aside is not None else ""


def next_lines(run: Run, *, self_approval: bool = False, surface: str = "slack") -> list[str]:
    """What happens next and who can act, for the root message (nothing once the run ended), in the
    words of ``surface`` (a thread's buttons in Slack, commands in the shell and the console)."""
    threaded = rmsg.threaded(surface)
    gate = run.gate if run.gate is not None and run.gate.is_open else None
    if gate is not None:
        key = {GateKind.CANARY: "restart" if is_restart(run) else "canary", GateKind.PROMOTION: "promotion",
               GateKind.ROLLBACK: "rollback", GateKind.MIGRATION: "migration", GateKind.REPAIR: "repair",
               GateKind.CLEANUP: "cleanup"}[gate.kind]
        if run.kind is RunKind.MIGRATION and run.change.get("canary"):
            key = "switch" if gate.kind is GateKind.PROMOTION else "migration_canary" if key == "migration" else key
        return [rmsg.next_step(key, canary_nodes_text(run)),
                rmsg.approvers_act(user_ref(gate.requested_by), self_approval, threaded=threaded, run_id=run.id,
                                  request=gate.kind.value)]
    if run.state is S.HALTED:
        return [rmsg.next_step("halted", canary_nodes_text(run)), rmsg.halted_act(run.id)]
    if run.state is S.MONITORING:
        return [rmsg.next_step("monitoring", canary_nodes_text(run), threaded=threaded, run_id=run.id),
                rmsg.reports_act(run.id)]
    if run.state not in WORKING:
        return []
    key = "applying" if run.state is S.APPLYING else run.state.value
    if run.kind is not RunKind.UPGRADE and run.state is S.VERIFYING:
        key = "verifying_change"
    return [rmsg.next_step(key, canary_nodes_text(run)), rmsg.people_may_stop(run.id)]


def _rollback_open(run: Run) -> bool:
    return run.gate is not None and run.gate.is_open and run.gate.kind is GateKind.ROLLBACK


def root_message(run: Run, *, self_approval: bool = False, surface: str = "slack") -> Message:
    """The run's root message (updated in place): its state and where it is on its path (step i
    of n), what it changes where (target, image, canary node; a migration: workload and
    change), who asked, what happens next and who can act (in the words of ``surface``)."""
    fields = [
        Item(label="State", value=rmsg.ROLLBACK_WAITS if _rollback_open(run) and not run.halted
             else msg.state_label(run.state.value, halted_gate=run.halted)),
        *_what_fields(run),
        Item(label="Requested by", value=user_ref(run.requester)),
        Item(label="Updated", value=moment_text(run.updated_at)),
    ]
    step = progress_of(run)
    if step:
        fields.insert(1, Item(label="Progress", value=step))
    lines = next_lines(run, self_approval=self_approval, surface=surface)
    if run.gate is not None and run.gate.is_open:
        lines.insert(0, rmsg.waiting_for_approval(msg.request_name(run.gate.kind.value), moment_text(run.gate.expires_at),
                                                 threaded=rmsg.threaded(surface)))
    if run.pause is not None:
        reason = literal(run.pause.reason) if run.pause.reason else ""  # typed by whoever paused it
        lines.append(msg.paused_by(user_ref(run.pause.by), moment_text(run.pause.at), reason, run.id))
    if run.reason:
        lines.append(run.reason)
    if run.shown("waiting_for") and run.shown("wait_in") == run.state.value:
        lines.append(msg.waiting_for(run.shown("waiting_for")))
    lines += wave_lines(run)
    helm = run.shown("helm")
    if helm and run.state in (S.MONITORING, S.DONE):  # promoted: the release must say so too
        lines.append(rmsg.helm_values_change(str(helm.get("release")), str(helm.get("namespace")),
                                             str(helm.get("set") or ""), literal(run.image)))
    title = msg.run_title(run.kind.value, run.id, f"{run.target.kind} {run.target.ref}" if run.kind is RunKind.MIGRATION
                          else run.target.ref)
    return Message(title=title, text="\n".join(lines), fields=fields,
                   tone=STATE_TONE.get(run.state, "info"))


BAR_WIDTH = 10


def progress_bar(done: int, total: int, width: int = BAR_WIDTH) -> str:
    """``▰▰▰▱▱▱▱▱▱▱``: ``done`` of ``total`` in ``width`` cells (a started wave shows one at least)."""
    filled = 0 if total <= 0 else min(width, (done * width + total - 1) // total)
    return "▰" * filled + "▱" * (width - filled)


def wave_lines(run: Run) -> list[str]:
    """A promotion in waves, one line per wave: its bar (nodes done of its nodes) and where it is."""
    waves: list[dict[str, Any]] = run.shown("waves") or []
    if not waves:
        return []
    done: dict[str, Any] = run.shown("wave_done") or {}
    moved: dict[str, int] = run.shown("wave_moved") or {}
    checks: dict[str, list[int]] = run.shown("wave_checks") or {}
    current = int(run.shown("wave") or 0)
    stopped = run.state in (S.ROLLING_BACK, S.ROLLED_BACK, S.HALTED, S.FAILED)
    lines = [msg.waves_heading(len(waves))]
    for number, wave in enumerate(waves, start=1):
        key, size = str(number), len(wave.get("nodes") or [])
        count = size if key in done else int(moved.get(key, 0)) if number == current else 0
        if key in done:
            until = done[key].get("soak_until")
            soaking = until and number < len(waves) and run.state is S.PROMOTING and str(number + 1) not in \
                (run.shown("wave_started") or {})
            where = msg.wave_soaking(moment_text(dt.datetime.fromisoformat(until))) if soaking else msg.WAVE_VERIFIED
        elif number == current:
            where = msg.WAVE_FAILED if stopped else msg.WAVE_MOVING
        elif number == 1 or waves[number - 2].get("approve_next", True):
            where = msg.WAVE_NEEDS_APPROVAL
        else:
            where = msg.WAVE_BY_ITSELF
        if key in checks:
            where += f", {msg.wave_checks(*checks[key])}"
        lines.append(msg.wave_line(number, len(waves), progress_bar(count, size), count, size, where))
    return lines


def wave_now(run: Run) -> str:
    """The line of the wave the run is at (the first not verified; the last when all are), or ''."""
    lines = wave_lines(run)[1:]
    if not lines:
        return ""
    done = run.shown("wave_done") or {}
    waiting = [line for number, line in enumerate(lines, start=1) if str(number) not in done]
    return waiting[0] if waiting else lines[-1]


# ------------------------------------------------------------------ one message per step
PRECHECK = "precheck"
PHASES: frozenset[str] = frozenset(STEP_OF.values())
"""The steps of a run (the engine's names: its entries are ``<step>.<check>``)."""
PHASE_ALIAS = {"repair": "apply"}
"""A repair's deletions are entries of its ``apply`` step."""
RANK = {"failed": 0, "unknown": 1, "running": 2, "ok": 3, "info": 3, "skipped": 3}
"""Failures first, then what is not known; the rest in the order it happened."""
MAX_ROWS = 12
"""Rows of one step's message (with its title and a line of why: 15 lines at most)."""


def phase_of(run: Run, step: Step) -> str | None:
    """The step of the run an entry belongs to (its message in the thread), or None for
    entries shown elsewhere: transitions (the root message), requests and their decisions
    (the request's own message)."""
    if step.kind in ("transition", "gate") or (step.kind == "decision" and step.name.endswith((" approved", " rejected"))):
        return None
    head, _, rest = step.name.partition(".")
    head = head.split(" ", 1)[0]
    head = PHASE_ALIAS.get(head, head)
    if head == "canary" and rest.split(".", 1)[0] == PRECHECK:
        return PRECHECK
    if head in PHASES:
        return head
    return STEP_OF.get(run.state)


def _key(phase: str, step: Step) -> str:
    """The row an entry is shown in: its check's key (``verify_canary.events-backoff``: ``events-backoff``)."""
    name = step.name
    if " " in name and name.split(" ", 1)[0] in PHASES:  # "<step> interrupted"
        return name.split(" ", 1)[1]
    parts = name.split(".")
    return parts[-1] if len(parts) > 1 else name


def _worst(statuses: Sequence[str]) -> str:
    return min(statuses, key=lambda s: RANK.get(s, 9))


def _groups(phase: str, steps: Sequence[Step]) -> dict[str, list[Step]]:
    groups: dict[str, list[Step]] = {}
    for step in steps:
        if not (step.kind == "step" and step.name == phase):  # the step's conclusion: the title
            groups.setdefault(_key(phase, step), []).append(step)
    return groups


def _scope(group: Sequence[Step]) -> str:
    return str(group[-1].evidence.get("scope") or "") if len(group) == 1 else ""


def _common_scope(groups: Mapping[str, Sequence[Step]]) -> str:
    """Where most of the step's checks looked (``gpu-node1``, ``all nodes``): said once, in the title."""
    scopes = [s for s in (_scope(g) for g in groups.values()) if s and s != "other nodes"]
    return max(set(scopes), key=scopes.count) if scopes else ""


def _count(key: str, group: Sequence[Step]) -> int:
    """How many a row that repeats per node stands for: an entry naming ``nodes`` (a batch of
    a rollout, a wave's deletions) counts each of them; any other entry counts once."""
    if key not in msg.COUNTED:
        return len(group)
    return sum(len(nodes) if isinstance(nodes := s.evidence.get("nodes"), list) and nodes else 1 for s in group)


def phase_rows(phase: str, steps: Sequence[Step], *, scope: str = "") -> list[str]:
    """The checklist of a step: one row per check (repeated entries, as one per node, in one
    row with their count), failures first, each with its icon, label, where it looked when
    that is not ``scope`` (the title's), and its latest evidence unless the label says it all."""
    return _rows(phase, _groups(phase, steps), scope)


def _rows(phase: str, groups: Mapping[str, Sequence[Step]], scope: str) -> list[str]:
    rows: list[tuple[int, int, str]] = []
    for order, (key, group) in enumerate(groups.items()):
        status = _worst([s.status for s in group])
        last = next((s for s in reversed(group) if s.status == status), group[-1])
        label = msg.counted_label(key, _count(key, group), phase)
        place = msg.where(_scope(group)) if _scope(group) != scope else ""
        evidence = shorten(last.detail.split("\n", 1)[0], 160) if last.detail else ""
        if status == "ok" and evidence.lower().rstrip(".") == label.lower():
            evidence = ""
        if last.actor != ENGINE_ACTOR:
            evidence = " ".join(p for p in (evidence, msg.acted_by(user_ref(last.actor))) if p)
        row = f"{msg.ROW_MARK.get(status, msg.ROW_MARK['info'])} {label}{' ' + place if place else ''}"
        rows.append((RANK.get(status, 9), order, row + (f" — {evidence}" if evidence else "")))
    return [row for _, _, row in sorted(rows)]


def phase_heading(run: Run, phase: str) -> str:
    """The name of a step for people: ``Canary on gpu-node1``, ``Verify every node``."""
    title = msg.phase_title(phase, kind=run.kind.value)
    return f"{title} on {canary_nodes_text(run)}" if phase == "canary" and run.node else title


def phase_message(run: Run, phase: str, steps: Sequence[Step]) -> Message:
    """A step's message in the thread: its state in the title, the checklist below (at most
    :data:`MAX_ROWS` rows: the passed ones beyond are counted), a Details button."""
    end = next((s for s in reversed(steps) if s.kind == "step" and s.name == phase), None)
    groups = _groups(phase, steps)
    scope = _common_scope(groups)
    rows = _rows(phase, groups, scope)
    statuses = [s.status for s in steps if s is not end]
    failed, warnings = statuses.count("failed"), statuses.count("unknown")
    final = end is not None or phase == PRECHECK
    status = end.status if end is not None else "failed" if failed else "ok"
    verdict = msg.phase_verdict(status, failed=failed, warnings=warnings, passed=statuses.count("ok"), final=final)
    title = phase_heading(run, phase)
    if scope and not (phase == "canary" and scope == run.node) and not (scope == "all nodes" and phase in (
            "promote", "verify_all", "rollback")):
        title += f" {msg.where(scope)}"
    lines = [msg.phase_why(shorten(end.detail, 300))] if end is not None and end.status == "failed" and end.detail else []
    if len(rows) > MAX_ROWS:
        shown = rows[: MAX_ROWS - 1]
        lines += [*shown, msg.more_passed(len(rows) - len(shown))]
    else:
        lines += rows
    lines += _failure_evidence(steps)
    tone: Tone = ("error" if status == "failed" or failed else "warn" if warnings else "ok") if final else "info"
    mark = "" if final else f"{msg.ROW_MARK['running']} "
    return Message(title=f"{mark}{title}: {verdict}", text="\n".join(lines), tone=tone,
                   buttons=[Button(label=msg.DETAILS, action_id=DETAILS, value=f"{run.id}|{phase}")])


def _failure_evidence(steps: Sequence[Step]) -> list[str]:
    """What the failed checks carry of the failure's own words (issue 36, item 4): the
    registry's message of a pull error, the crashed container's last log lines (the latest
    entry per pod) and the known signatures they match."""
    latest: dict[str, Step] = {}
    digests: dict[str, str] = {}
    for step in steps:
        ev = step.evidence if isinstance(step.evidence, dict) else {}
        if step.status == "ok" and ev.get("image_id"):
            digests[str(ev.get("pod") or step.name)] = str(ev["image_id"])
        if step.status == "failed" and ("log_tail" in ev or ("message" in ev and step.name.endswith(
                ("image-pull", "pod-scheduled")))):
            latest[str(ev.get("pod") or step.name)] = step
    lines = [evmsg.resolved_digest(pod, digest) for pod, digest in digests.items()]
    for pod, step in latest.items():
        ev = step.evidence
        if step.name.endswith("pod-scheduled"):
            lines.append(evmsg.scheduling_failure(pod, shorten(str(ev.get("message") or ""), 600),
                                                  str(ev.get("cause") or "")))
            continue
        if step.name.endswith("image-pull"):
            lines.append(evmsg.pull_error(pod, str(ev.get("reason") or ""), shorten(str(ev.get("message") or ""), 600)))
            continue
        last = ev.get("last_state") or {}
        said = evmsg.last_state(str(last.get("reason") or ""), last.get("exit_code")) if last else ""
        tail = [_unfenced(shorten(str(line), 200)) for line in ev.get("log_tail") or []][-evmsg.SHOWN_LINES:]
        if tail:
            lines += [evmsg.previous_log(pod, str(ev.get("container") or ""), said), "```", *tail, "```"]
        elif ev.get("log_problem"):
            lines.append(evmsg.log_unread(pod, str(ev["log_problem"])))
        lines += [evmsg.signature(str(s.get("signature")), _unfenced(str(s.get("line"))), str(s.get("meaning")),
                                  str(s.get("fix")))
                  for s in ev.get("signatures") or [] if isinstance(s, dict)]
    return lines


def _unfenced(line: str) -> str:
    """A log line shown in a code span or block: its backticks cannot close it."""
    return line.replace("`", "'")


def details_of(value: str) -> tuple[str, str] | None:
    """(run id, step) of a Details button's value, or None if it is not one."""
    run, _, phase = value.partition("|")
    return (run, phase) if run.startswith("r-") and (phase in PHASES or phase == PRECHECK) else None


def step_message(run: Run, step: Step) -> Message:
    """One thread item per step, check, mutation, decision and gate event."""
    scope = step.evidence.get("scope") if isinstance(step.evidence, dict) else None
    title = step.name + (f" ({scope})" if scope else "")
    if step.kind in ("check", "step", "mutation"):
        title = f"{title}: {step.status}"
    lines = [step.detail] if step.detail else []
    if step.actor != ENGINE_ACTOR:
        lines.append(f"by {user_ref(step.actor)}")
    return Message(title=title, text=shorten("\n".join(lines), 2900) if lines else "",
                   tone=STEP_TONE.get(step.status, "info"))


def oncall_notice(run: Run, mention_of: str | None) -> tuple[str, Message] | None:
    """What on-call must hear about this run now, with a key that says it once: a run that
    halted, or one the bot rolls back by itself (halted too long, or its cluster gone too
    long). None when there is nothing to tell."""
    lead = f"{mention(mention_of)} " if mention_of else ""
    where = f"{run.target.ref} in {run.target.cluster or 'the current context'}"
    if run.state is S.HALTED:
        key = f"halted|{run.shown('halted_at') or moment_text(run.updated_at)}"
        return key, Message(title=msg.halted_title(run.id, where), text=f"{lead}{run.reason}", tone="error")
    if run.state is S.ROLLING_BACK and run.shown("auto_rollback"):
        return "auto_rollback", Message(title=msg.rolling_back_title(run.id, where),
                                        text=f"{lead}{run.shown('auto_rollback')}", tone="warn")
    return None
