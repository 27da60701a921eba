"""``rollback <run> [reason=<text>]``: request a rollback (or roll back at once when the
policy needs no approval for it, then drive the rollback to its end)."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from handlers.run_arguments import run_id, then_advance
from runbooks.engine.approving import Actor
from runbooks.engine.commands import Engine, Outcome

USAGE = "rollback <run> [reason=<text>]"


class RollbackArgs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    run: str
    reason: str = ""


def parse(words: Sequence[str]) -> RollbackArgs:
    run, pairs = run_id(words, usage=USAGE, allowed=("reason",))
    return RollbackArgs(run=run, reason=pairs.get("reason", ""))


def handle(args: RollbackArgs, *, engine: Engine, actor: Actor, advance: bool = True) -> Outcome:
    return then_advance(engine, engine.rollback(args.run, actor=actor, reason=args.reason), advance=advance)
