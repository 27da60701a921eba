"""The store interface the run engine is written against (``bot/`` supplies Redis).

Every write that changes a run is a compare-and-set on the run's ``version``: a double
click, a Slack retry or a second bot replica that raced the first loses and re-reads.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Protocol

from runbooks.runs import Run


class LockHeld(Exception):
    """The target already has an active run; ``holder`` is its id."""

    def __init__(self, target_key: str, holder: str) -> None:
        super().__init__(f"{target_key} already has an active run: {holder}")
        self.target_key, self.holder = target_key, holder


class StaleRun(Exception):
    """A compare-and-set lost: the run changed since it was read."""

    def __init__(self, run_id: str, expected: int, actual: int | None) -> None:
        super().__init__(f"run {run_id} changed (version {expected} expected, {actual} found)")
        self.run_id, self.expected, self.actual = run_id, expected, actual


class StoreUnavailable(Exception):
    """The store cannot be reached; nothing was changed. A retry may help."""


class RunStore(Protocol):
    def create(self, run: Run) -> Run:
        """Store a new run and take its target's lock atomically; ``LockHeld`` if taken."""
        ...

    def get(self, run_id: str) -> Run | None: ...

    def save(self, run: Run) -> Run:
        """Compare-and-set: store ``run`` with ``version + 1`` if the stored version is
        ``run.version``, else ``StaleRun``. Releases the target lock when the run ends."""
        ...

    def list_runs(self, *, active_only: bool = False, limit: int = 100) -> list[Run]: ...

    def lock_holder(self, target_key: str) -> str | None: ...

    def append_audit(self, run_id: str, entry: dict[str, Any]) -> str:
        """Append to the run's audit stream and the global one; returns the entry id."""
        ...

    def audit(self, run_id: str) -> list[dict[str, Any]]: ...

    def acquire_lease(self, run_id: str, owner: str, ttl: dt.timedelta) -> bool:
        """Take (or renew, for the same owner) the right to work on a run."""
        ...

    def release_lease(self, run_id: str, owner: str) -> None: ...

    def claim_once(self, key: str, ttl: dt.timedelta) -> bool:
        """Idempotency: ``True`` the first time ``key`` is claimed within ``ttl``."""
        ...
