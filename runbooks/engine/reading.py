"""Runs read as the store keeps them, without the engine: what ``status`` and ``runs`` need.

The engine (:class:`~runbooks.engine.commands.Engine`) reads runs the same way, through
:func:`read_run`; a front end that only shows runs (the shell's ``status``) reads them
with a :class:`RunReader` on the store and never builds the engine, its steps or its
cluster factory (issue 39).
"""

from __future__ import annotations

from typing import Protocol

from runbooks.engine import refusals
from runbooks.engine.refusals import RunNotFound
from runbooks.engine.runs import Run
from runbooks.engine.store import RunStore


def read_run(store: RunStore, run_id: str, *, whole: bool = True) -> Run:
    """The run as stored (``whole=False``: for a view, never to be saved); :class:`RunNotFound` when there is none."""
    run = store.get(run_id, whole=whole)
    if run is None:
        raise RunNotFound(refusals.no_such_run(run_id))
    return run


class Runs(Protocol):
    """What reads runs: the engine, or a :class:`RunReader`."""

    def get(self, run_id: str, *, whole: bool = True) -> Run: ...

    def runs(self, *, active_only: bool = False, limit: int = 100, whole: bool = True) -> list[Run]: ...


class RunReader:
    """The runs of ``store``, read as the engine reads them."""

    def __init__(self, store: RunStore) -> None:
        self.store = store

    def get(self, run_id: str, *, whole: bool = True) -> Run:
        return read_run(self.store, run_id, whole=whole)

    def runs(self, *, active_only: bool = False, limit: int = 100, whole: bool = True) -> list[Run]:
        return self.store.list_runs(active_only=active_only, limit=limit, whole=whole)
