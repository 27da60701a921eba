"""The wording of a failure's evidence (issue 36 item 4, issue 61 item 4): the registry's
message for an image that cannot be pulled, the scheduler's for a pod it cannot place, a
container's log tail (its previous run's, or its
current one's: a plugin running unregistered) with its error and warning lines, and the known
failure signatures they matched, each with its meaning and fix.

:func:`evidence_lines` is the one renderer of evidence items
(:func:`runbooks.evidence_items.items`): the run's thread (its step messages), the
shell's ``approve`` and ``status`` and their ``--json`` (the ``text`` of each check's entry)
all show what it returns, so they cannot say different things. A kind it has no wording for is
shown by its generic fields (pod, reason, the cluster's message, lines). Pure."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

SHOWN_LINES = 8
"""Log lines shown in the thread; Details has the whole bounded tail."""
LINE_CHARS = 200
"""A quoted log line is cut here (its spacing kept)."""
FENCE = "```"


def pull_error(pod: str, reason: str, message: str) -> str:
    return f"{pod}: {reason}, the registry said: {message}"


def scheduling_failure(pod: str, message: str, cause: str) -> str:
    """A pod the scheduler cannot place: its ``FailedScheduling`` words and the run's change behind them."""
    return f"{pod}: FailedScheduling, the scheduler said: {message}" + (f"\n    caused by {cause}" if cause else "")


def previous_log(pod: str, container: str, last: str) -> str:
    return f"Last log lines of {pod} ({container}, previous run{', ' + last if last else ''}):"


def current_log(pod: str, container: str) -> str:
    """A container running now (a plugin that never registered)."""
    return f"Last log lines of {pod} ({container}, current run):"


def a_log(pod: str, container: str) -> str:
    return f"Last log lines of {pod}{f' ({container})' if container else ''}:"


def errors_above(count: int) -> str:
    """The error and warning lines of that log printed before the lines shown."""
    return f"Its error and warning lines before those ({count}):"


def empty_log(which: str, pod: str, container: str) -> str:
    return f"The {which + ' ' if which else ''}log of {pod}{f' ({container})' if container else ''} is empty."


def last_state(reason: str, exit_code: object) -> str:
    return f"exit code {exit_code}, {reason or 'no reason given'}"


def log_unread(which: str, pod: str, problem: str) -> str:
    return f"the {which + ' ' if which else ''}log of {pod} could not be read: {problem}"


def signature(name: str, line: str, meaning: str, fix: str) -> str:
    return f"Known failure ({name}): `{line}`\n    means {meaning}\n    fix: {fix}"


def resolved_digest(pod: str, digest: str) -> str:
    """The digest the runtime pulled for a pod that runs (its ``imageID``)."""
    return f"{pod} pulled {digest} (the digest its image resolved to)"


def check_heading(step: str, check: str, scope: str, status: str) -> str:
    """Above a check's evidence where no step message frames it (the shell's ``status``, ``approve``)."""
    return f"Evidence of {step}.{check}{f' ({scope})' if scope else ''}, {status}:"


# ------------------------------------------------------------------ rendering
Item = Mapping[str, Any]


def _cut(line: object, limit: int = LINE_CHARS) -> str:
    """A line quoted in a code span or block: cut at ``limit``, its backticks unable to close it."""
    text = str(line).replace("`", "'")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _one_line(text: object, limit: int = 600) -> str:
    """The cluster's message (a registry's, a scheduler's) on one line, cut at ``limit``."""
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _fenced(lines: Sequence[str]) -> list[str]:
    return [FENCE, *lines, FENCE] if lines else []


def _pull_error(item: Item) -> list[str]:
    return [pull_error(str(item.get("pod") or ""), str(item.get("reason") or ""), _one_line(item.get("message") or ""))]


def _scheduling(item: Item) -> list[str]:
    return scheduling_failure(str(item.get("pod") or ""), _one_line(item.get("message") or ""),
                              str(item.get("cause") or "")).split("\n")


def _log(item: Item) -> list[str]:
    pod, container, which = str(item.get("pod") or ""), str(item.get("container") or ""), str(item.get("log") or "")
    shown = [_cut(line) for line in item.get("lines") or []][-SHOWN_LINES:]
    if not shown:
        if item.get("problem"):
            return [log_unread(which, pod, str(item["problem"]))]
        return [empty_log(which, pod, container)]
    if which == "previous":
        said = last_state(str(item.get("reason") or ""), item.get("exit_code")) if "exit_code" in item else ""
        head = previous_log(pod, container, said)
    elif which == "current":
        head = current_log(pod, container)
    else:
        head = a_log(pod, container)
    seen = set(shown)
    earlier = [cut for line in item.get("errors") or [] if (cut := _cut(line)) not in seen]
    return [head, *_fenced(shown), *([errors_above(len(earlier)), *_fenced(earlier)] if earlier else [])]


def _signature(item: Item) -> list[str]:
    return [signature(str(item.get("signature") or ""), _cut(item.get("line") or "", 300),
                      str(item.get("meaning") or ""), str(item.get("fix") or ""))]


def _generic(item: Item) -> list[str]:
    """A kind without wording of its own: where, what, and the cluster's words."""
    where = str(item.get("pod") or item.get("container") or "")
    what = str(item.get("reason") or item.get("kind") or "evidence")
    head = ": ".join(p for p in (where, what, _one_line(item.get("message") or "")) if p)
    return [head, *_fenced([_cut(line) for line in item.get("lines") or []][-SHOWN_LINES:])]


RENDERERS: dict[str, Callable[[Item], list[str]]] = {
    "pull-error": _pull_error, "scheduling": _scheduling, "log": _log, "signature": _signature,
}
"""The wording of each kind of evidence item; any other kind is shown by :func:`_generic`."""


def evidence_lines(items: Sequence[Item]) -> list[str]:
    """The lines that show ``items``, in order, the same on every surface."""
    return [line for item in items for line in RENDERERS.get(str(item.get("kind")), _generic)(item)]
