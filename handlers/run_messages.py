"""What a run says of itself where it is read: its root message's step, next and who-acts lines,
and the replies to the run verbs.

Slack shows a run as a root message with a thread and buttons; the shell, the console and the
demo have neither, so their words name the command that acts instead (issue 41). A function
whose wording differs takes ``threaded`` (:func:`threaded` of the caller's surface). The rest
of the bot's sentences are in :mod:`handlers.messages`.
"""

from __future__ import annotations

THREADED_SURFACES = frozenset({"slack"})
"""The surfaces that show a run as a root message with a thread and buttons; the shell, the console
and the demo have none: their replies name the command that acts instead (issue 41)."""


def threaded(surface: str) -> bool:
    """Whether ``surface`` shows a run's thread (Slack), rather than commands only (shell, console)."""
    return surface in THREADED_SURFACES


def run_requested(run_id: str, *, threaded: bool = True, request: str = "canary") -> str:
    if threaded:
        return f"Run {run_id} requested: its root message and thread are in the channel; another approver must approve"
    return (f"Run {run_id} requested: another approver must approve its {request} request, in Slack or with "
            f"`approve {run_id} {request}` where the policy allows approvals outside Slack (shell.approvals)")


def rollback_requested(run_id: str, *, threaded: bool = True) -> str:
    """A report's "Request rollback", clicked: how the rollback request it opened is decided."""
    if threaded:
        return "rollback requested: an approver must approve it in the run's thread"
    return f"rollback requested: an approver must approve it with `approve {run_id} rollback`"


def run_now(run_id: str, state: str, note: str = "") -> str:
    return f"Run {run_id} is {state}" + (f": {note}" if note else "")


def audit_cut(older: int, run_id: str) -> str:
    return (f"… {older} older checks and steps left out (shown: the request, every transition, request "
            f"and decision, every change to the cluster, the newest checks and steps): "
            f"`audit {run_id} --all` adds them")


# ------------------------------------------------------------------ the root message: where it is, what next, who acts
def run_step(number: int, total: int, name: str) -> str:
    return f"Step {number} of {total}: {name}"


def approvers_act(requester_ref: str, self_approval: bool, *, threaded: bool = True, run_id: str = "",
                  request: str = "") -> str:
    who = "any approver" if self_approval else f"an approver other than {requester_ref}"
    if not threaded:
        return f"Who can act: {who}, with `approve {run_id} {request}` or `reject {run_id} {request}`"
    return f"Who can act: {who}, with Approve or Reject in the thread"


def people_may_stop(run_id: str) -> str:
    return (f"Who can act: nobody needs to; the requester or an approver can `pause {run_id}` or "
            f"`rollback {run_id}`")


def halted_act(run_id: str) -> str:
    return f"Who can act: the requester or an approver, with `resume {run_id}` (the step again) or `rollback {run_id}`"


def reports_act(run_id: str) -> str:
    return f"Who can act: anyone can ask `report {run_id}`; the requester or an approver can `rollback {run_id}`"


NEXT = {
    "canary": "Next: once approved, the change goes on the canary node {node} first",
    "restart": "Next: once approved, the plugin restarts on the canary node {node} first",
    "migration": "Next: once approved, the migration is applied and the workload rolled out",
    "repair": "Next: once approved, the stuck pods are deleted so their controllers recreate them",
    "cleanup": "Next: once approved, each listed claim is deleted if it is still as listed",
    "quarantine": "Next: once approved, {node} is cordoned and labelled and the plugin kept off it; the other nodes "
                  "are verified untouched",
    "release": "Next: once approved, {node} is given back to the plugin and its plugin pod verified Ready",
    "migration_canary": "Next: once approved, a duplicate of the workload runs the plan first; the switch waits for "
                        "its own approval",
    "switch": "Next: once approved, the workload itself is migrated, verified, and the canary deleted",
    "rollback": "Next: once approved, the saved template is put back on every node",
    "canary_rolling": "Next: the canary on {node} is verified, then a promotion request opens",
    "canary_verifying": "Next: if every check passes a promotion request opens; if one fails the canary is rolled back",
    "promotion": "Next: once approved, every node gets the change (each verified as it goes)",
    "promoting": "Next: once every node runs the new revision, every node is verified",
    "verifying": "Next: if every check passes the run is monitored; if one fails it is rolled back",
    "applying": "Next: the change is verified",
    "verifying_change": "Next: if every check passes the run is done; if one fails it is rolled back",
    "monitoring": "Next: the scheduled stability reports, posted in this thread",
    "rolling_back": "Next: the saved template is back on every node, then the run ends rolled back",
    "halted": "Next: nothing moves until someone decides",
}
NEXT_WITHOUT_THREAD = {
    "monitoring": "Next: `report {run}` says whether it stays stable; the scheduled stability reports are posted "
                  "in Slack's thread of the run by `upgradebot serve`",
}
"""What differs where a run has no thread (the shell, the console): see :func:`threaded`."""


def next_step(key: str, node: str, *, threaded: bool = True, run_id: str = "") -> str:
    text = NEXT[key] if threaded else NEXT_WITHOUT_THREAD.get(key, NEXT[key])
    return text.format(node=node, run=run_id)


ROLLBACK_WAITS = "rollback requested: waiting for its approval"
"""The state of a run whose open request is a rollback's (its own step's request gave way to it)."""


def waiting_for_approval(request: str, until: str, *, threaded: bool = True) -> str:
    return f"Waiting for approval: {request.lower()}{' in the thread' if threaded else ''}, open until {until}"


def aside_step(request: str, number: int, total: int, name: str) -> str:
    """The progress of a run whose open request is off its path (a rollback request): ``Rollback
    request (asked at step 4 of 7, Promotion request)``."""
    return f"{request} (asked at step {number} of {total}, {name})"


def run_waits(run_id: str, request: str, until: str, *, state: str = "", note: str = "", threaded: bool = True) -> str:
    """What a command on a run did, and the request that waits now (``rollback``: the rollback
    request); ``state`` is left out where it would name the step the request set aside."""
    how = "Approve or Reject in the run's thread" if threaded else \
        f"`approve {run_id} {request}` or `reject {run_id} {request}`"
    head = f"Run {run_id} is {state}" if state else f"Run {run_id}"
    done = f": {note}" if note else ""
    return f"{head}{done}; its {request} request is open until {until}, waiting for an approver ({how})"


def owned_by(owner: str) -> str:
    """A canary request on a target someone owns (policy ``owner: helm``): whose it is."""
    return f"Owner: {owner}"


def helm_values_change(release: str, namespace: str, values: str, image: str) -> str:
    """After promotion: the values change that makes a Helm release render what the run promoted."""
    if values:
        return (f"Make Helm release {namespace}/{release} match, or its next upgrade puts the old image back: "
                f"`helm upgrade {release} <chart> -n {namespace} --reuse-values {values}`")
    return (f"Make Helm release {namespace}/{release} match, or its next upgrade puts the old image back: "
            f"set its image values to {image} (its chart's values are not known to the bot)")


def clusterpolicy_diff(name: str, diff: str) -> str:
    """What an operator-native canary writes, and what its rollback puts back: the ClusterPolicy's fields."""
    return (f"The run changes ClusterPolicy/{name}, never the DaemonSet; its fields (- now, saved for the rollback; "
            f"+ after):\n```\n{diff}\n```")


def asks_rollback_through(ref: str, name: str, run_id: str) -> str:
    """The rollback request of an operator-native run: it puts back the ClusterPolicy's fields, never the DaemonSet."""
    return (f"roll {ref} back by putting ClusterPolicy/{name}'s fields back as they were before run {run_id} "
            "(the GPU operator renders the rest)")


def promotion_digests(tag: str, verified: str, pinned: str, now: str, unknown: str) -> str:
    """A promotion request of a run that pins digests (``images.pin_digest``): the tag, the digest the
    canary verified (what the promotion writes) and what the tag resolves to now."""
    head = f"Image: {tag}; the canary verified {verified}, and the promotion writes {pinned}"
    if unknown:
        return f"{head}. What the tag resolves to now is unknown ({unknown})"
    if now != verified:
        return (f"{head}. The tag now resolves to {now}: it was pushed again since the canary, so this promotion "
                "is refused; reject it (the canary is rolled back) and request the canary again")
    return f"{head}. The tag resolves to {now} now, the same"
