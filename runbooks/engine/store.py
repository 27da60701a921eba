"""The store interface the run engine is written against (``bot/`` supplies Redis).

Every write that changes a run is a compare-and-set on the run's ``version``: a double
click, a Slack retry or a second bot replica that raced the first loses and re-reads.
A write may carry audit entries; they are appended in the same atomic step, so a stored
transition always has its line in the audit trail. A worker that holds a run's lease
passes its owner id with each write (a fencing token): once its lease is gone, the write
is refused with :class:`LeaseLost` and it stops.

Audit entries are flat dicts of the fields below (values are strings except
``evidence``, a dict); :meth:`RunStore.audit` returns them oldest first with the
stream entry ``id`` added::

    run, at (ISO 8601), actor, kind (transition | decision | gate | check | mutation |
    step), name, status, detail, evidence
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any, Protocol

from runbooks.engine.refusals import Refused
from runbooks.engine.runs import Run


class LockHeld(Refused):
    """The target already has an active run; ``holder`` is its id."""

    def __init__(self, target_key: str, holder: str) -> None:
        super().__init__(
            f"{target_key} already has an active run: {holder} "
            f"(see `status {holder}`; a new canary can start when it ends)"
        )
        self.target_key, self.holder = target_key, holder


class StaleRun(Exception):
    """A compare-and-set lost: the run changed since it was read."""

    def __init__(self, run_id: str, expected: int, actual: int | None) -> None:
        super().__init__(f"run {run_id} changed (version {expected} expected, {actual} found)")
        self.run_id, self.expected, self.actual = run_id, expected, actual


class LeaseLost(Exception):
    """The worker's lease on a run is gone (expired, taken over); nothing was written."""

    def __init__(self, run_id: str, owner: str, holder: str | None) -> None:
        super().__init__(f"lost the lease on run {run_id} ({owner}); now held by {holder or 'nobody'}")
        self.run_id, self.owner, self.holder = run_id, owner, holder


class StoreUnavailable(Exception):
    """The store cannot be reached; nothing was changed. A retry may help."""


class RunStore(Protocol):
    def create(self, run: Run, *, audit: Sequence[dict[str, Any]] = ()) -> Run:
        """Store a new run and take its target's lock atomically; ``LockHeld`` if taken."""
        ...

    def get(self, run_id: str, *, whole: bool = True) -> Run | None:
        """The run; ``whole=False``: its large progress values may be markers (:meth:`Run.shown`),
        so reading it costs the same at any cluster size; such a run cannot be saved."""
        ...

    def save(
        self, run: Run, *, audit: Sequence[dict[str, Any]] = (), lease_owner: str | None = None
    ) -> Run:
        """Compare-and-set: store ``run`` with ``version + 1`` if the stored version is
        ``run.version``, else ``StaleRun``; with ``lease_owner``, only while that owner
        holds the run's lease, else ``LeaseLost``. Appends ``audit`` in the same step and
        releases the target lock when the run ends. Returns the run as stored."""
        ...

    def list_runs(self, *, active_only: bool = False, limit: int = 100, whole: bool = True) -> list[Run]:
        """Newest first; ``active_only``: every run not yet in a terminal state; ``whole`` as in :meth:`get`."""
        ...

    def lock_holder(self, target_key: str) -> str | None: ...

    def append_audit(self, run_id: str, entry: dict[str, Any]) -> str:
        """Append to the run's audit stream and the global one; returns the entry id."""
        ...

    def audit(self, run_id: str) -> list[dict[str, Any]]: ...

    def acquire_lease(self, run_id: str, owner: str, ttl: dt.timedelta) -> bool:
        """Take (or renew, for the same owner) the right to work on a run."""
        ...

    def lease_owner(self, run_id: str) -> str | None: ...

    def take_over_lease(self, run_id: str, old_owner: str, new_owner: str, ttl: dt.timedelta) -> bool:
        """Replace ``old_owner``'s lease (known dead) with ours, if it is still theirs."""
        ...

    def release_lease(self, run_id: str, owner: str) -> None: ...

    def claim_once(self, key: str, ttl: dt.timedelta) -> bool:
        """Idempotency: ``True`` the first time ``key`` is claimed within ``ttl``."""
        ...
