"""Leases: only one worker (process or replica) works on a run at a time.

A lease is a key in the store holding the worker's owner id with a time to live. The
worker renews it from a background thread every third of the TTL while it works, and
passes its owner id with every write (the store refuses the write once the lease is
someone else's: :class:`runbooks.engine.store.LeaseLost`). Each cluster mutation of a step is
fenced the same way (:meth:`Lease.fence`, called by the step's scoped cluster right before
it sends the write): a worker whose lease was lost stops before its next effect. A worker that dies stops renewing;
another takes the run over when the lease expires — or at once when ``owner_dead`` can
tell the holder is gone (the shell checks whether a process id on this host still
lives, so ``upgradebot resume`` right after a crash does not wait for the TTL).

Owner ids are ``<host>/<pid>/<random>``, see :func:`owner_id`.
"""

from __future__ import annotations

import datetime as dt
import logging
import secrets
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from runbooks.engine.store import LeaseLost, RunStore

log = logging.getLogger(__name__)


def owner_id(host: str, pid: int) -> str:
    return f"{host}/{pid}/{secrets.token_hex(4)}"


def parse_owner(owner: str) -> tuple[str, int] | None:
    """``(host, pid)`` of an owner id, or None if it is not one of ours."""
    host, _, rest = owner.partition("/")
    pid, _, _ = rest.partition("/")
    return (host, int(pid)) if host and pid.isdigit() else None


class Lease:
    """A held lease; :attr:`lost` is set when renewing it failed."""

    def __init__(self, store: RunStore, run_id: str, owner: str, ttl: dt.timedelta) -> None:
        self.store, self.run_id, self.owner, self.ttl = store, run_id, owner, ttl
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew, name=f"lease-{run_id}", daemon=True)

    def start(self) -> Lease:
        self._thread.start()
        return self

    def check(self) -> None:
        """``LeaseLost`` if renewing failed: the worker must stop touching the run."""
        if self.lost.is_set():
            raise LeaseLost(self.run_id, self.owner, self.store.lease_owner(self.run_id))

    def fence(self) -> None:
        """Right before a cluster mutation: ``LeaseLost`` unless the lease is still this worker's.

        The store checks the holder and renews the lease in one atomic step (a take-over from
        this owner to itself; the owner id, random per process, is the fencing token), so a
        process stopped past its lease — whose renewing thread has not yet noticed — sends
        nothing once another worker holds the run, or once the lease ran out."""
        self.check()
        if not self.store.take_over_lease(self.run_id, self.owner, self.owner, self.ttl):
            self.lost.set()
            raise LeaseLost(self.run_id, self.owner, self.store.lease_owner(self.run_id))

    def _renew(self) -> None:
        interval = max(0.05, self.ttl.total_seconds() / 3)
        while not self._stop.wait(interval):
            try:  # renewed only while still ours: a lease that ran out is lost, never taken again here
                if not self.store.take_over_lease(self.run_id, self.owner, self.owner, self.ttl):
                    self.lost.set()
                    return
            except Exception:  # a store hiccup: try again next interval, the TTL covers it
                log.warning("renewing the lease on %s failed", self.run_id, exc_info=True)

    def release(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        if not self.lost.is_set():
            self.store.release_lease(self.run_id, self.owner)


class Leases:
    """Takes leases for one worker identity."""

    def __init__(
        self, store: RunStore, *, owner: str, ttl: dt.timedelta = dt.timedelta(seconds=30),
        owner_dead: Callable[[str], bool] = lambda owner: False,
    ) -> None:
        self.store, self.owner, self.ttl, self.owner_dead = store, owner, ttl, owner_dead
        self.took_over_from: dict[str, str] = {}

    def try_acquire(self, run_id: str) -> Lease | None:
        """The lease on ``run_id`` for this worker, or None while a live worker holds it."""
        if self.store.acquire_lease(run_id, self.owner, self.ttl):
            return Lease(self.store, run_id, self.owner, self.ttl).start()
        holder = self.store.lease_owner(run_id)
        if holder and self.owner_dead(holder) and self.store.take_over_lease(run_id, holder, self.owner, self.ttl):
            self.took_over_from[run_id] = holder
            return Lease(self.store, run_id, self.owner, self.ttl).start()
        return None

    @contextmanager
    def hold(self, run_id: str) -> Iterator[Lease | None]:
        lease = self.try_acquire(run_id)
        try:
            yield lease
        finally:
            if lease is not None:
                lease.release()
