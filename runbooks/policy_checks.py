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

from collections.abc import Sequence

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
