"""The run verbs for the chat surfaces (Slack, the console): each handler with its presenter.

One :class:`RunVerbDeps` is bound once by the front end's wiring; :func:`run_verbs` gives
the verbs to register after ``help`` and ``inventory``. The handler modules stay thin
(parse, call the engine); this module adds what a chat needs around them: who the
caller is to the engine (:func:`handlers.access.actor`, with their Slack user groups),
where the run was requested (``origin``: the surface and channel its root message goes
to), and continuing the run after a command that let it move (``advance``: a background
worker in Slack, after the reply in the console). Replies come from
:mod:`handlers.run_views`.

``mutating`` verbs (canary, promote, rollback, close) are limited to the policy's
requesters by the router; approve and reject are checked against the approvers by the
engine; status, runs, audit and verify only read.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict

from handlers import approve, audit, canary, close, promote, reject, rollback, status, verify
from handlers import runs as runs_handler
from handlers.access import Directory, actor
from handlers.arguments import UsageError
from handlers.routing import Caller, Verb, presented
from handlers.run_arguments import run_id
from handlers.run_views import (
    audit_reply,
    outcome_reply,
    requested_reply,
    runs_reply,
    status_reply,
    verification_reply,
)
from runbooks.cluster import Cluster
from runbooks.engine.approving import Actor
from runbooks.engine.commands import Engine, Outcome
from runbooks.engine.runs import is_run_id
from runbooks.engine.steps import StepResult
from runbooks.policy import Policy, duration_seconds

VERIFY_USAGE = "verify <run>|<namespace>/<daemonset> [node=<node>] [cluster=<context>] [window=<duration>]"


@dataclass(frozen=True)
class RunVerbDeps:
    engine: Engine
    policy: Policy
    directory: Directory
    connect: Callable[[str | None], Cluster]
    advance: Callable[[str], None]
    """Continue a run up to its next gate or its end (Slack: in a background worker)."""


class VerifyRun(BaseModel):
    """``verify <run>``: the run's target in the run's cluster."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    run: str
    node: str | None = None
    window: float | None = None


def parse_verify(words: Sequence[str]) -> verify.VerifyRequest | VerifyRun:
    if not words or not is_run_id(words[0]):
        try:
            return verify.parse(words)
        except UsageError as exc:
            raise UsageError(exc.reason, VERIFY_USAGE) from exc
    run, pairs = run_id(words, usage=VERIFY_USAGE, allowed=("node", "cluster", "window"))
    try:
        window = duration_seconds(pairs["window"]) if "window" in pairs else None
    except ValueError as exc:
        raise UsageError(str(exc), VERIFY_USAGE) from exc
    return VerifyRun(run=run, node=pairs.get("node"), window=window)


def run_verbs(deps: RunVerbDeps) -> list[Verb]:
    """canary, approve, reject, promote, rollback, close, status, runs, audit, verify."""
    engine = deps.engine

    def who(caller: Caller) -> Actor:
        return actor(caller.user, deps.policy, deps.directory)

    def moving(outcome: Outcome) -> Outcome:
        if engine.needs_work(outcome.run):
            deps.advance(outcome.run.id)
        return outcome

    def request(args: canary.CanaryArgs, caller: Caller) -> Outcome:
        origin = {"surface": caller.surface, "channel": caller.channel or ""}
        return moving(canary.handle(args, engine=engine, actor=who(caller), origin=origin))

    def checks(request: verify.VerifyRequest | VerifyRun, caller: Caller) -> tuple[StepResult, str, str]:
        if isinstance(request, VerifyRun):
            run = engine.get(request.run)
            request = verify.VerifyRequest(target=run.target.ref, cluster=run.target.cluster or None,
                                           node=request.node, window=request.window)
        result = verify.handle(request, connect=deps.connect, policy=deps.policy, clock=engine.writer.clock)
        return result, request.target, request.node or "all nodes"

    acts: dict[str, Callable[[str, Actor], Outcome]] = {
        "approve": lambda run, who: approve.handle(run, engine=engine, actor=who, advance=False),
        "reject": lambda run, who: reject.handle(run, engine=engine, actor=who, advance=False),
        "promote": lambda run, who: promote.handle(run, engine=engine, actor=who),
        "close": lambda run, who: close.handle(run, engine=engine, actor=who),
    }

    def acting(name: str) -> Callable[[str, Caller], Outcome]:
        return lambda run, caller: moving(acts[name](run, who(caller)))

    def rolling(args: rollback.RollbackArgs, caller: Caller) -> Outcome:
        return moving(rollback.handle(args, engine=engine, actor=who(caller), advance=False))

    def run_verb(name: str, usage: str, summary: str, *, mutating: bool) -> Verb:
        module = {"approve": approve, "reject": reject, "promote": promote, "close": close}[name]
        return presented(name, usage=usage, summary=summary, parse=module.parse, handle=acting(name),
                         present=outcome_reply, mutating=mutating, takes_cluster=False)

    return [
        presented("canary", usage=canary.USAGE, summary="request a canary of a new image on one node",
                  parse=canary.parse, handle=request, present=requested_reply, mutating=True),
        run_verb("approve", approve.USAGE, "approve a run's open request (or click Approve)", mutating=False),
        run_verb("reject", reject.USAGE, "reject a run's open request (or click Reject)", mutating=False),
        run_verb("promote", promote.USAGE, "post a run's promotion request again", mutating=True),
        presented("rollback", usage=rollback.USAGE, summary="request a rollback of a run", parse=rollback.parse,
                  handle=rolling, present=outcome_reply, mutating=True, takes_cluster=False),
        run_verb("close", close.USAGE, "end a monitoring run", mutating=True),
        presented("status", usage=status.USAGE, summary="one run, or every active run", parse=status.parse,
                  handle=lambda run, caller: status.handle(run, engine=engine), present=status_reply,
                  takes_cluster=False),
        presented("runs", usage=runs_handler.USAGE, summary="the newest runs", parse=runs_handler.parse,
                  handle=lambda limit, caller: runs_handler.handle(limit, engine=engine), present=runs_reply,
                  takes_cluster=False),
        presented("audit", usage=audit.USAGE, summary="a run's audit trail", parse=audit.parse,
                  handle=lambda run, caller: audit.handle(run, engine=engine), present=audit_reply,
                  takes_cluster=False),
        presented("verify", usage=VERIFY_USAGE, summary="check that a plugin works: pods, registration, GPUs, events",
                  parse=parse_verify, handle=checks,
                  present=lambda found: verification_reply(found[0], target=found[1], scope=found[2])),
    ]
