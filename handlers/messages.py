"""Every sentence the command router says, for all surfaces alike.

Surface framing (``Usage:``, ``… more in the thread``, who clicked what) lives in each
surface's own messages module (``bot/slack_messages.py``, ``bot/shell_messages.py``);
the run engine's refusals in ``runbooks/engine/refusals.py``. Each sentence says what was
refused, why, and what to do instead.
"""

from __future__ import annotations

from collections.abc import Iterable

from handlers.replies import channel_ref


def help_title() -> str:
    return "What I can do"


def help_text() -> str:
    return "Commands, with their arguments (key=value words may come in any order):"


def unknown_verb(verb: str) -> str:
    return f"unknown verb {verb!r}: here is what I understand"


def channel_not_allowed(channel: str, allowed: Iterable[str]) -> str:
    where = ", ".join(channel_ref(c) for c in sorted(allowed))
    return f"commands are not accepted in {channel_ref(channel)}: use {where}"


def not_a_requester(verb: str) -> str:
    return f"you may not run {verb!r}: ask someone listed under requesters in the policy, or ask to be added"


def directory_unavailable(verb: str, reason: str) -> str:
    return f"cannot check who may run {verb!r} right now ({reason}); nothing was started, try again in a minute"


def cluster_failed(reason: str) -> str:
    return f"{reason}; nothing was started"


def store_unavailable(reason: str) -> str:
    return f"the run store is unreachable ({reason}); nothing was started, try again in a minute"


def refused(reason: str) -> str:
    return reason


def internal_error(verb: str, reference: str) -> str:
    return f"{verb!r} failed on our side (reference {reference}); nothing was started, please tell the bot's owners"


# ------------------------------------------------------------------ runs in a chat
def run_requested(run_id: str) -> str:
    return f"Run {run_id} requested: its root message and thread are in the channel; another approver must approve"


def run_now(run_id: str, state: str, note: str = "") -> str:
    return f"Run {run_id} is {state}" + (f": {note}" if note else "")


def decided(user_ref: str, approve: bool, at: str) -> str:
    return f"{'Approved' if approve else 'Rejected'} by {user_ref} at {at}"


def request_closed(run_id: str, state: str) -> str:
    return f"this request is closed: run {run_id} is now {state}; nothing was decided (`status {run_id}` shows the open request, if any)"


def not_a_request(value: str) -> str:
    return f"this button does not belong to a request I know ({value!r}); nothing was decided"


def cannot_check_approver(reason: str) -> str:
    return f"cannot check whether you may decide right now ({reason}); nothing was decided, try again in a minute"


def store_unavailable_click(reason: str) -> str:
    return f"the run store is unreachable ({reason}); nothing was decided, try again in a minute"


def gate_asks(requester_ref: str, what: str) -> str:
    return f"{requester_ref} asks to {what}"


def gate_expires(at: str, self_approval: bool) -> str:
    tail = "" if self_approval else "; the requester cannot approve it, another approver must"
    return f"Open until {at}{tail}."
