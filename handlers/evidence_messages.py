"""The wording of a failure's evidence in a run's thread (issue 36, item 4): the registry's
message for an image that cannot be pulled, the scheduler's for a pod it cannot place, the crashed container's ``--previous`` log tail
and the known failure signatures it matched, each with its meaning and fix."""

from __future__ import annotations

SHOWN_LINES = 8
"""Log lines shown in the thread; Details has the whole bounded tail."""


def pull_error(pod: str, reason: str, message: str) -> str:
    return f"{pod}: {reason}, the registry said: {message}"


def scheduling_failure(pod: str, message: str, cause: str) -> str:
    """A pod the scheduler cannot place: its ``FailedScheduling`` words and the run's change behind them."""
    return f"{pod}: FailedScheduling, the scheduler said: {message}" + (f"\n    caused by {cause}" if cause else "")


def previous_log(pod: str, container: str, last: str) -> str:
    return f"Last log lines of {pod} ({container}, previous run{', ' + last if last else ''}):"


def last_state(reason: str, exit_code: object) -> str:
    return f"exit code {exit_code}, {reason or 'no reason given'}"


def log_unread(pod: str, problem: str) -> str:
    return f"the previous log of {pod} could not be read: {problem}"


def signature(name: str, line: str, meaning: str, fix: str) -> str:
    return f"Known failure ({name}): `{line}`\n    means {meaning}\n    fix: {fix}"


def resolved_digest(pod: str, digest: str) -> str:
    """The digest the runtime pulled for a pod that runs (its ``imageID``)."""
    return f"{pod} pulled {digest} (the digest its image resolved to)"
