"""Checks the policy's models share (``runbooks/policy.py``), no I/O: each returns the value it
was given or raises ``ValueError`` with the sentence pydantic reports under the key.

They hold what a policy may not say even when every value has the right shape: a person
or group listed twice (a quorum counts distinct people, so ``[U0A1, U0A1]`` with quorum 2
could never be approved), a duration past :data:`LONGEST` (a request expiring in 2.7
million years overflows the clock and leaves its run holding the target's lock), and an
OS account tied to a host name (which a user sets at will in a namespace of their own:
``unshare -Ur -u hostname bastion-1``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from pydantic import BaseModel, ConfigDict

LONGEST = "365d"
"""The ceiling of every duration in the policy: a year is longer than any wait, soak,
expiry or report schedule that makes sense, and far below what the clock can add."""
LONGEST_SECONDS = 365 * 86400.0


def within_ceiling(value: str, seconds: float) -> str:
    """``value`` (``seconds`` long) unless it is longer than :data:`LONGEST` (an infinity included)."""
    if not seconds <= LONGEST_SECONDS:
        raise ValueError(f"{value!r} is too long: a policy's durations are at most {LONGEST}")
    return value


def distinct(values: Sequence[str]) -> list[str]:
    """``values`` unless one is listed twice (a quorum counts people, not entries)."""
    seen: set[str] = set()
    for value in values:
        if value in seen:
            raise ValueError(f"{value} is listed twice: list each person or group once (a quorum counts "
                             "distinct approvers)")
        seen.add(value)
    return list(values)


def account_without_host(account: str) -> str:
    """An ``identities.accounts`` key naming no host: the host name is not an identity."""
    if "@" in account:
        name = account.split("@", 1)[0]
        raise ValueError(f"{account!r} names a host, and a host name is not an identity (any user can set it in "
                         f"a namespace of their own): map the account alone ({name!r}), and give this policy only "
                         "to the machines where that account may act")
    return account


DURATION = re.compile(r"^(\d+(?:\.\d+)?)(s|m|h|d)$")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def duration_seconds(text: str) -> float:
    """``30m`` -> 1800.0; ``ValueError`` for anything but ``<number><s|m|h|d>``."""
    match = DURATION.fullmatch(text.strip())
    if not match:
        raise ValueError(f"{text!r} is not a duration: use e.g. 90s, 30m, 24h or 2d")
    return float(match.group(1)) * _SECONDS[match.group(2)]


def duration(value: str) -> str:
    """A policy's duration: ``<number><s|m|h|d>``, at most a year (``policy_checks.LONGEST``)."""
    return within_ceiling(value, duration_seconds(value))


def at_least(minimum: str) -> Callable[[str], str]:
    """A validator: a duration no shorter than ``minimum`` (shorter ones are never what was meant)."""

    def check(value: str) -> str:
        if duration_seconds(duration(value)) < duration_seconds(minimum):
            raise ValueError(f"{value!r} is too short: use at least {minimum}")
        return value

    return check


class Strict(BaseModel):
    """A policy section: unknown keys refused (a typo is an error), values frozen, and no value
    coerced to its field's type: a boolean is ``true`` or ``false`` (never ``'yes'`` nor ``1``), an
    integer a whole number (never ``true``), a number of seconds a number (never ``'30'``). A field
    that parses a string (a duration, a wave size) says so with a validator of its own.
    ``bot/settings.py`` validates the file with ``strict=True`` as well, for the sections whose
    models are not these (``verify.metrics``, ``prometheus``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


USER_ID = re.compile(r"^[UW][A-Z0-9]{2,}$")


def slack_ids(values: list[str], pattern: re.Pattern[str], what: str) -> list[str]:
    """``values`` when each is a Slack ID of ``pattern`` (a user, group or channel), else ValueError naming it."""
    for value in values:
        if not pattern.fullmatch(value):
            raise ValueError(f"{value!r} is not a Slack {what} ID (e.g. {pattern.pattern[2]}0123ABCD; no spaces)")
    return values
