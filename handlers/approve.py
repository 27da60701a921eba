"""``approve <run>``: approve the open request of a run (canary, promotion or rollback).

The engine checks the policy (approvers, quorum, no self-approval, expiry) and applies
the decision once; then the run is driven up to its next gate or its end.
"""

from __future__ import annotations

from collections.abc import Sequence

from handlers.run_arguments import run_id, then_advance
from runbooks.engine.approving import Actor
from runbooks.engine.commands import Engine, Outcome

USAGE = "approve <run>"


def parse(words: Sequence[str]) -> str:
    return run_id(words, usage=USAGE)[0]


def handle(run: str, *, engine: Engine, actor: Actor, advance: bool = True) -> Outcome:
    return then_advance(engine, engine.decide(run, actor=actor, approve=True), advance=advance)
