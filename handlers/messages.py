"""Every sentence the bot says of its own, one function each, for every surface.

As bolt-python keeps ``error_token_required()`` and friends in one module, wording is
changed here only: the router's and the handlers' answers, then each surface's framing
(Slack's mrkdwn, the shell's one-line errors on stderr); ``serve``'s start-up errors are in
:mod:`handlers.startup_messages`. The run engine's refusals live with the engine (``runbooks/engine/refusals.py``), the findings
and check details with the runbooks that make them. Each sentence says what was refused or
failed, why, and what to do instead.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from runbooks.errors import plural

HELP_TITLE = "What I can do"
HELP_TEXT = "Commands, with their arguments (key=value words may come in any order):"


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """``did you mean canary?`` for the choice ``word`` most looks like (difflib's ratio), or ''."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"did you mean {close[0]}?" if close else ""


def unknown_verb(verb: str, verbs: Iterable[str] = ()) -> str:
    hint = did_you_mean(verb.lower(), verbs)
    return f"unknown verb {verb!r}{f' ({hint})' if hint else ''}: here is what I understand"


def channel_not_allowed(channel: str, allowed: Iterable[str]) -> str:
    from handlers.replies import (
        channel_ref,  # the replies' models: not loaded by the shell's `--help` (issue 39)
    )

    where = ", ".join(channel_ref(c) for c in sorted(allowed))
    return f"commands are not accepted in {channel_ref(channel)}: use {where}"


def _try_again(what: str, nothing: str) -> str:
    return f"{what}; nothing was {nothing}, try again in a minute"


def directory_unavailable(verb: str, reason: str) -> str:
    return _try_again(f"cannot check who may run {verb!r} right now ({reason})", "started")


def cluster_failed(reason: str) -> str:
    return f"{reason}; nothing was started"


def store_unavailable(reason: str, *, nothing: str = "started") -> str:
    """The run store did not answer: ``nothing`` was started (a command) or decided (a click)."""
    return _try_again(f"the run store is unreachable ({reason})", nothing)


def internal_error(verb: str, reference: str) -> str:
    return f"{verb!r} failed on our side (reference {reference}); nothing was started, please tell the bot's owners"


# ------------------------------------------------------------------ runs in a chat
NO_RUNS = "none"


def checks_cut(more: int) -> str:
    return f"… {more} more checks: `upgradebot verify … --json` lists them all"


def rollback_from_report(user: str) -> str:
    return f"requested from a stability report by {user}"


def rollback_requested_by(user_ref: str, note: str, run_id: str, state: str) -> str:
    return f"{user_ref}: {note} (run {run_id} is {state})"


def decided(user_ref: str, approve: bool, at: str) -> str:
    return f"{'Approved' if approve else 'Rejected'} by {user_ref} at {at}"


def request_closed(run_id: str, state: str) -> str:
    return f"this request is closed: run {run_id} is now {state}; nothing was decided (`status {run_id}` shows the open request, if any)"


def not_a_request(value: str) -> str:
    return f"this button does not belong to a request I know ({value!r}); nothing was decided"


def cannot_check_approver(reason: str) -> str:
    return _try_again(f"cannot check whether you may decide right now ({reason})", "decided")


def gate_asks(requester_ref: str, what: str) -> str:
    return f"{requester_ref} asks to {what}"


def gate_expires(at: str, self_approval: bool) -> str:
    tail = "" if self_approval else "; the requester cannot approve it, another approver must"
    return f"Open until {at}{tail}."


# ------------------------------------------------------------------ Slack's framing (mrkdwn)
TONE_MARK = {"info": "", "ok": ":white_check_mark: ", "warn": ":warning: ", "error": ":x: "}
CUT_SHORT = "_… cut short: the full text did not fit in one message_"


def tone_mark(tone: str) -> str:
    return TONE_MARK.get(tone, "")


def usage_heading(count: int) -> str:
    return "*Usage:*" if count == 1 else "*Commands:*"


def continued_in_thread(count: int) -> str:
    return f"_… {count} more block(s) in the thread_"


SERVE_READ_ONLY = ("read-only: no policy file (UPGRADEBOT_CONFIG is unset), so nobody is trusted to request or approve; "
                   "serving help and inventory only, every other verb and button is refused. Set UPGRADEBOT_CONFIG "
                   "to a policy naming requesters and approvers (docs/policy.md) and restart.")
READ_ONLY_VERB = ("this bot is read-only (it was started without a policy file): only help and inventory; "
                  "ask its operator to set UPGRADEBOT_CONFIG")
BUSY = "I am busy with other commands right now; nothing was started, try again in a minute."


def too_many_long(who: str, limit: int, verbs: str) -> str:
    return (f"{who} already has {limit} long command(s) running ({verbs}): nothing was started; "
            "try again when one has answered")


def cancelled(verb: str) -> str:
    return f"{verb} was cancelled: the bot is shutting down (nothing was changed); run it again in a minute"


def window_too_long(seconds: float, longest: str) -> str:
    return f"window= may be at most {longest} (limits.longest_wait in the policy); {seconds:g}s asks for more"
STORE_DOWN = "State store unavailable, nothing was done: Redis does not answer. Try again in a minute."
NO_DECISIONS = "Approvals are not enabled on this bot; nothing was decided."


def requested_by(user_ref: str, command: str) -> str:
    return f"{user_ref} ran `{command}`"


def not_in_channel(channel_ref: str) -> str:
    return (f"I cannot post in {channel_ref}: invite me first (`/invite @upgradebot`), "
            "then run the command again. Nothing was started.")


def delivery_failed(reason: str) -> str:
    return f"I could not post the answer ({reason}); nothing was started twice, try again in a minute."


def foreign_team(team: str) -> str:
    return (f"This bot takes commands and clicks from its own workspace only (yours is {team}); nothing was done. "
            "Its owners can list more under slack.teams in the policy.")


def click_failed(reference: str) -> str:
    return (f"Your click could not be handled (reference {reference}); nothing was decided, "
            "try again or tell the bot's owners.")


# ------------------------------------------------------------------ the shell (one line each, on stderr)
PROG = "upgradebot"
SHELL_INTERRUPTED = f"{PROG}: interrupted"
NO_KUBECONFIG = "no kubeconfig: set KUBECONFIG or pass --kubeconfig (or run in a pod with a ServiceAccount)"
CONSOLE_HELP = ("console: type a command (`help` lists them; `/upgrade <verb> …` works too), a number to click "
                "that button, `/quit` to leave")
CONSOLE_NO_SWITCH = ("you act as {user}, as the policy's identities map your account: /as works in the demo only "
                     "(its cluster is simulated); to act as someone else, they start a console of their own "
                     "(their account, or their UPGRADEBOT_TOKEN): docs/shell.md#two-people-two-consoles")


def console_request_gone(kind: str, run: str) -> str:
    """A console's buttons of a request closed since (elsewhere, or superseded), the run moved on since."""
    return f"the buttons of the {kind} request of {run} are gone: that request is closed (`status {run}` says where the run is)"


def shell_internal_error(kind: str, detail: str) -> str:
    return f"internal error ({kind}: {detail}): nothing more was done; please report it with the command you ran"


def shell_error(reason: str) -> str:
    """A failed command's one line: bad usage, a refusal, an unreachable dependency."""
    return f"{PROG}: {' '.join(reason.split())}"


def shell_usage(usage: str) -> str:
    return usage if usage.startswith("usage:") else f"usage: {PROG} {usage}"


SHELL_ARGS_HELP = "the arguments of the usage line, each described below"
SHELL_ARGS_HEADING = "arguments (key=value words may come in any order):"


def argument_line(name: str, meaning: str) -> str:
    """One argument of ``help <verb>`` in a chat: ``<run>: a run's id…``."""
    return f"{name}: {meaning}"


def shell_unknown_verb(verb: str, verbs: Iterable[str]) -> str:
    hint = did_you_mean(verb.lower(), verbs)
    return f"unknown verb {verb!r}{f' ({hint})' if hint else ''}: `{PROG} --help` lists the verbs"


def shell_continuing(count: int) -> str:
    return f"continuing {count} other unfinished run(s)"


def upload_failed(filename: str, code: str) -> str:
    return (f"The file {filename} could not be uploaded ({code}): the bot needs the files:write scope; "
            "the same command in the shell prints it")


def nodes_count(count: int) -> str:
    return f"{count} node{'' if count == 1 else 's'}"


def waves_heading(total: int) -> str:
    return f"Promotion in {total} wave{'' if total == 1 else 's'} after the canary:"


def wave_line(number: int, total: int, bar: str, done: int, size: int, where: str) -> str:
    return f"Wave {number} of {total} {bar} {done}/{nodes_count(size)}: {where}"


WAVE_VERIFIED = "verified"
WAVE_MOVING = "replacing pods"
WAVE_FAILED = "failed"
WAVE_NEEDS_APPROVAL = "starts once approved"
WAVE_BY_ITSELF = "starts by itself once the wave before passed"


def wave_soaking(until: str) -> str:
    return f"verified, soaking until {until}"


def wave_checks(passed: int, total: int) -> str:
    return f"checks: {passed} of {total} passed"


def paused_by(user_ref: str, at: str, reason: str, run_id: str) -> str:
    why = f" ({reason})" if reason else ""
    return f"Paused by {user_ref} at {at}{why}: no new node or wave starts until `continue {run_id}`"


def waiting_for(what: str) -> str:
    return f"Waiting: {what[0].upper()}{what[1:]}" if what else ""


def stage_thread(cluster: str, link: str) -> str:
    return f"The {cluster} run and its stability reports: {link}"


def template_diff(diff: str) -> str:
    """The pod template change a canary request asks for, as a diff (``-`` now, ``+`` after)."""
    return f"The pod template changes (- now, + after):\n```\n{diff}\n```"


def repair_plan(deleted: list[str], listed: list[str], limit: int = 8) -> str:
    """``delete 2 stuck pods (ml-team/a (ReplicaSet r), ...) so their controllers recreate them; listed only: ...``."""
    def some(names: list[str]) -> str:
        return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")
    text = (f"delete {len(deleted)} stuck pod{'' if len(deleted) == 1 else 's'} ({some(deleted)}) so their "
            "controllers recreate them")
    if listed:
        text += f"; listed only, left as they are: {some(listed)}"
    return text


def identity_in_user_namespace(account: str) -> str:
    return (f"the OS account {account} is seen from inside a user namespace, where any user may take any uid: "
            "it is no identity; run upgradebot outside the namespace, or use a CI token (UPGRADEBOT_TOKEN); "
            "nothing was done")


def identity_named_like_slack(account: str) -> str:
    return (f"the OS account {account} looks like a Slack ID, and the policy maps no identities: an account's "
            "name is never taken as a Slack user; ask an operator to map it in identities.accounts; nothing was done")


def identity_unmapped(account: str) -> str:
    return (f"the OS account {account} has no identity in the policy (identities.accounts): ask an operator to "
            "map it to your Slack user ID; nothing was done")


# ------------------------------------------------------------------ a run's thread: one checklist per step
PHASE_TITLES = {
    "precheck": "Pre-checks",
    "apply": "Apply",
    "canary": "Canary",
    "verify_canary": "Verify the canary",
    "promote": "Promotion",
    "verify_all": "Verify every node",
    "rollback": "Rollback",
}
"""The message of each step of a run (``apply`` and ``verify_all`` of a migration or repair: see
:func:`phase_title`)."""
ROW_MARK = {"ok": "✅", "failed": "❌", "unknown": "❔", "info": "🔹", "skipped": "⏭️", "running": "⏳"}
"""The icon of a checklist row by its result (plain emoji: every surface shows them)."""
CHECK_LABELS = {
    # pre-checks
    "image-valid": "Image reference is valid",
    "container-exists": "Container is in the template",
    "daemonset-exists": "DaemonSet exists",
    "daemonset-healthy": "DaemonSet is healthy",
    "node-exists": "Canary node exists",
    "node-ready": "Canary node is Ready and schedulable",
    "node-has-gpu": "Canary node has GPUs and a ready plugin pod",
    "no-fail-finding": "No failing inventory finding",
    "baseline": "Baseline recorded",
    "drain-possible": "Node can be drained",
    "drain-allowed": "Draining is allowed",
    "drain-budgets": "Disruption budgets allow the drain",
    "template-as-requested": "Template is as requested",
    "clusterpolicy-as-requested": "ClusterPolicy is as requested",
    # canary and promotion
    "saved": "Saved what a rollback puts back",
    "strategy": "Update strategy",
    "image": "Image changed",
    "template": "Template changed",
    "clusterpolicy": "ClusterPolicy changed (the operator renders the DaemonSet)",
    "rendered": "GPU operator rendered the change",
    "drift": "Template unchanged since the request",
    "resume": "Resumed",
    "delete-pod": "Plugin pod replaced",
    "cordon": "Node cordoned",
    "evict": "Workloads evicted",
    "drain": "Node drained",
    "uncordon": "Node uncordoned",
    "pod-scheduled": "New plugin pod scheduled on its node",
    "canary-pod-ready": "New plugin pod is Running and Ready",
    "canary-digest": "Digest the canary verified",
    "digests": "Digests the pods run",
    "pin": "Image pinned to the verified digest",
    "canary-pin": "Canary's node on the pinned digest",
    "node": "Plugin updated node by node",
    "wave": "Wave",
    "waves": "Waves planned",
    "paused": "Paused",
    "promotion": "Every node on the new revision",
    "window": "Maintenance window",
    "wait": "Waiting",
    "done": "Done",
    "error": "Error",
    # verify
    "rollout": "New revision rolled out",
    "pods-ready": "Plugin pods are Running and Ready",
    "no-crashloop": "No plugin container in CrashLoopBackOff",
    "restarts-stable": "No plugin restarts",
    "plugin-registered": "Plugin registered with the kubelet",
    "gpu-capacity": "GPU capacity not below the baseline",
    "other-nodes-unchanged": "The other nodes unchanged",
    "events": "Cluster events",
    "events-failed-scheduling": "No FailedScheduling for lack of GPUs",
    "events-backoff": "No new BackOff events",
    "events-admission": "No new admission errors",
    "kubelet-restarts": "No kubelet restart since the step began",
    "smoke-test": "Smoke test on a GPU",
    "dra-slices": "DRA ResourceSlices published",
    "dra-claims": "DRA claims still allocated",
    "dra-new-claims": "New DRA claims get allocated",
    # rollback, migration, repair
    "node-rolled-back": "Node rolled back",
    "pods": "Plugin pods back on the saved template",
    "rollback-images": "Images back as saved",
    "rollback-uncordon": "Nodes uncordoned",
    "rollback-capacity": "GPU capacity back to the baseline",
    "repair": "Repaired workloads",
    "workload": "Workload template",
    "workload-exists": "Workload exists",
    "workload-container": "Workload container",
    "workload-unchanged": "Workload unchanged since the request",
    "workload-rolled-out": "Workload rolled out",
    "workload-restored": "Workload template restored",
    "workloads-running": "Workloads running",
    "claim-template-free": "Claim template name is free",
    "claim-templates-deleted": "Claim templates deleted",
    "claims-allocated": "Claims allocated",
    "old-pods-gone": "Old pods gone",
    "repair-allowed": "Repair is allowed",
    "stuck-pods-deleted": "Stuck pods deleted",
    "quarantine-allowed": "Quarantine is allowed",
    "release-allowed": "Release is allowed",
    "daemonset": "DaemonSet template and strategy",
    "node-marks": "Node's quarantine label, annotation and cordon",
    "node-pod-gone": "Plugin pod gone from the node",
    "node-pod-back": "Plugin pod Running and Ready on the node again",
    "renewed-ready": "Pods made while quarantined replaced and Ready",
    "others-untouched": "Other nodes' plugin pods not restarted",
    "gpus-unchanged": "Other nodes' GPUs unchanged",
    "workloads-told": "Pods using the node's GPUs",
    "interrupted": "Interrupted",
    "lease taken over": "Taken over by another bot process",
    "continued": "Continued",
}
PHASE_LABELS = {
    "rollback": {"template": "Template restored as saved", "strategy": "Update strategy restored",
                 "node": "Plugin rolled back node by node", "delete-pod": "Plugin pod replaced with the saved one",
                 "workload": "Workload template restored", "repair": "Nothing to put back",
                 "clusterpolicy": "ClusterPolicy fields restored as saved", "digest": "Digest restored",
                 "rendered": "GPU operator rendered the saved fields"},
    "promote": {"clusterpolicy": "ClusterPolicy update strategy restored"},
}
"""Labels that read differently in one step (a rollback puts back what the canary changed)."""
COUNTED = {"node": "update", "delete-pod": "pod", "evict": "eviction", "cordon": "node", "uncordon": "node",
           "wave": "update"}
"""Rows that repeat once per node (pod, wave) and say how many."""


def phase_title(phase: str, *, kind: str = "upgrade") -> str:
    if kind != "upgrade" and phase == "verify_all":
        return "Verify"
    if kind in ("repair", "quarantine", "release") and phase == "apply":
        return kind.capitalize()
    if kind == "migration" and phase == "apply":
        return "Apply the migration"
    return PHASE_TITLES.get(phase, phase.replace("_", " ").capitalize())


def check_label(key: str, phase: str = "") -> str:
    """A check's or step's label for people (``plugin-registered``: "Plugin registered with the kubelet")."""
    return (PHASE_LABELS.get(phase, {}).get(key) or CHECK_LABELS.get(key)
            or key.replace("-", " ").replace("_", " ").capitalize())


def counted_label(key: str, count: int, phase: str = "") -> str:
    label = check_label(key, phase)
    if count <= 1:
        return label
    return f"{label} ({plural(count, COUNTED.get(key, 'time'))})"


def where(scope: str) -> str:
    """A check's scope for people: ``on gpu-node1``, ``on every node``, ``on the other nodes``."""
    if not scope:
        return ""
    return {"all nodes": "on every node", "other nodes": ""}.get(scope, f"on {scope}")


def phase_verdict(status: str, *, failed: int, warnings: int, passed: int, final: bool) -> str:
    """The state of a step's message: running, passed, passed with warnings, failed."""
    if not final:
        return "running" + (f" ({plural(passed, 'check')} passed so far)" if passed else "")
    if status == "failed" or failed:
        return "failed" + (f" ({plural(failed, 'check')})" if failed else "")
    if warnings:
        return f"passed, with {plural(warnings, 'warning')}"
    return "passed"


def more_passed(count: int) -> str:
    return f"{ROW_MARK['ok']} {plural(count, 'more check')} passed (Details lists every entry)"


def acted_by(user_ref: str) -> str:
    return f"by {user_ref}"


def phase_why(reason: str) -> str:
    return f"Why: {reason}"


DETAILS = "Details"


def phase_details_title(title: str, run_id: str, count: int) -> str:
    return f"{title} of {run_id}: {plural(count, 'entry', 'entries')}"


# ------------------------------------------------------------------ stability reports
CHART_FAILED = "The chart could not be drawn; the report above is complete without it."


def chart_title(run_id: str) -> str:
    return f"Events per hour and allocatable GPUs over the window of {run_id}"


STATE_LABELS = {
    "requested": "requested", "awaiting_approval": "waiting for approval", "applying": "applying the change",
    "canary_rolling": "canary rolling out", "canary_verifying": "verifying the canary",
    "awaiting_promotion": "waiting for the promotion's approval", "promoting": "promoting to every node",
    "verifying": "verifying", "monitoring": "monitoring (stability reports due)", "done": "done",
    "rolling_back": "rolling back", "halted": "halted: waiting for a person", "rolled_back": "rolled back",
    "rejected": "rejected", "expired": "expired (nobody decided in time)", "failed": "failed",
}
"""A run's state for people (the root message); ``runs``, ``status`` tables and ``--json`` keep the state's name."""


def state_label(state: str, *, halted_gate: bool = False) -> str:
    label = STATE_LABELS.get(state, state.replace("_", " "))
    return label + (" (halted: a rollback request is open)" if halted_gate else "")


# ------------------------------------------------------------------ what a request asks, and a run's titles
def asks_repair(ref: str, summary: str) -> str:
    return f"repair the workloads on the nodes of {ref}: {summary}"


def asks_cleanup(cluster: str, summary: str) -> str:
    return f"clean up the broken ResourceClaims of {cluster}: {summary}"


def asks_switch(kind: str, ref: str, canary: str) -> str:
    return (f"switch {kind} {ref} to DRA: its canary {canary} runs the plan with allocated claims; once approved the "
            "workload is migrated as planned")


def asks_migration(kind: str, ref: str, summary: str) -> str:
    return f"apply the migration of {kind} {ref} to DRA: {summary}"


def asks_restart(node: str, ref: str, container: str, image: str) -> str:
    return f"restart the plugin on {node} first ({ref}, container {container}, {image} kept), then on every node once verified"


def asks_canary(image: str, node: str, ref: str, container: str, change: str, drain: bool) -> str:
    what = f"put {image} on {node} (canary of {ref}, container {container})"
    if change:
        what += f" with {change}"
    return what + (f", cordoning and draining {node} first" if drain else "")


def asks_promotion(image: str, ref: str, node: str, change: str, drain: bool) -> str:
    what = (f"roll {change} ({image}) out to every node of {ref}: the canary on {node} passed" if change
            else f"roll {image} out to every node of {ref}: the canary on {node} passed")
    return what + ("; each node is cordoned and drained first" if drain else "")


def asks_rollback(ref: str, run_id: str) -> str:
    return f"roll {ref} back to the template it had before run {run_id}"


def request_name(kind: str) -> str:
    """``Canary request``: what a gate of ``kind`` is called."""
    return f"{kind.capitalize()} request"


def request_title(kind: str, run_id: str) -> str:
    return f"{request_name(kind)} for {run_id}"


def closed_at(outcome: str, at: str) -> str:
    return f"Closed ({outcome}) at {at}"


def run_title(kind: str, run_id: str, what: str) -> str:
    names = {'migration': 'Migration', 'repair': 'Repair', 'quarantine': 'Quarantine', 'release': 'Release'}
    return f"{names.get(kind, 'Upgrade')} {run_id}: {what}"


def halted_title(run_id: str, where: str) -> str:
    return f"Run {run_id} halted: {where}"


def rolling_back_title(run_id: str, where: str) -> str:
    return f"Run {run_id} is rolling back by itself: {where}"


def audit_title(run_id: str, ref: str, state: str, count: int) -> str:
    return f"Audit of {run_id} ({ref}, now {state}): {count} entries"


UPGRADE_STEP_NAMES = ("Canary request", "Canary", "Verify the canary", "Promotion request", "Promotion",
                      "Verify every node", "Monitoring")
CHANGE_STEP_NAMES = ("Request", "Apply", "Verify")
"""The names of a run's path for the root message's "Step i of n" (an upgrade; a migration or repair)."""


def not_this_message(run_id: str) -> str:
    """A click whose button names run ``run_id``'s request, made on a message that is not that request's."""
    return f"this button names run {run_id}, whose request is not this message; nothing was decided"


def too_many_long_reads(running: int, verbs: str) -> str:
    return (f"I am busy: {running} long read(s) ({verbs}) are running, as many as run at once so that "
            "short commands and requests stay answered; nothing was started, try again in a minute")


def unsafe_character(argument: str, character: str) -> str:
    """A word of a command holds a control, line-separator or bidi character (``U+202E``)."""
    return (f"{argument} holds {character}, a control, line-separator or bidi character: "
            "type every value on one line, as plain text")


def request_warnings(warnings: list[str]) -> str:
    """What the request's checks could not vouch for (an unknown compatibility combination): shown, not refused."""
    return "Warnings (not refused; judge before approving):\n" + "\n".join(f"- {w}" for w in warnings)

CHART_NOT_INSTALLED = "No chart: this installation has no matplotlib (the `upgradebot[charts]` extra); the report above is complete without it."


def long_read_expired(verb: str, minutes: int) -> str:
    """A long read that waited for a free slot longer than Slack keeps its answer open (issue 39)."""
    return (f"{verb} was not started: it waited {minutes} minutes behind other long reads, longer than "
            "Slack keeps a command's answer open; nothing was read, run it again")
