"""``verify <run>|<namespace>/<daemonset> [node=<node>] [cluster=<context>] [window=<duration>]``.

The checks of a run's verify step, outside a run: on every node of the DaemonSet, or on
one (``verify <run>``: the run's target in the run's cluster). With no baseline, GPU
allocatable must equal capacity; events count from the moment the command starts;
``window=`` overrides the policy's observation window (CI pipelines use a short one).
Thin: parse, connect, call the runbook, return the result; :func:`verification_reply`
presents it (the verdict, then one row per check, failures first). Exit 1 when a check
failed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from pydantic import BaseModel, ConfigDict

from handlers import messages as msg
from handlers.arguments import UsageError, run_id, split_pairs
from handlers.evidence_messages import evidence_lines
from handlers.replies import Reply, Table
from handlers.routing import EXIT_FAILED, EXIT_OK, Caller, Command, Deps
from handlers.verbs import entry
from runbooks import validation
from runbooks.cluster import Cluster
from runbooks.daemonset.verifying import verify
from runbooks.engine.commands import step_settings_of
from runbooks.engine.runs import is_run_id
from runbooks.engine.steps import CheckStatus, Clock, StepResult
from runbooks.errors import shorten
from runbooks.evidence_items import items
from runbooks.policy import Policy, duration_seconds

USAGE = entry("verify").usage
MAX_CHECK_ROWS = 60
CHECK_LABEL = {CheckStatus.FAIL: "FAIL", CheckStatus.UNKNOWN: "UNKNOWN", CheckStatus.WARN: "WARN",
               CheckStatus.SKIP: "SKIP", CheckStatus.PASS: "ok"}
CHECK_ORDER = {CheckStatus.FAIL: 0, CheckStatus.UNKNOWN: 1, CheckStatus.WARN: 2, CheckStatus.SKIP: 3,
               CheckStatus.PASS: 4}


class VerifyRequest(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    target: str
    """``namespace/daemonset``."""
    node: str | None = None
    """Verify on this node only (and check that the others did not change)."""
    cluster: str | None = None
    window: float | None = None
    """Seconds to watch for restarts and capacity dips; None: the policy's."""


class VerifyRun(BaseModel):
    """``verify <run>``: the run's target in the run's cluster."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    run: str
    node: str | None = None
    window: float | None = None


def _window(pairs: dict[str, str]) -> float | None:
    """``window=``'s seconds; how long it may be is the policy's (``limits.longest_wait``, checked
    when handled)."""
    if "window" not in pairs:
        return None
    try:
        seconds = duration_seconds(pairs["window"])
    except ValueError as exc:
        raise UsageError(f"window=: {exc}", USAGE) from exc
    if seconds <= 0:
        raise UsageError("window= must be longer than 0s", USAGE)
    return seconds


def parse(words: Sequence[str]) -> VerifyRequest | VerifyRun:
    if words and is_run_id(words[0]):
        run, pairs = run_id(words, usage=USAGE, allowed=("node", "cluster", "window"))
        try:
            return VerifyRun(run=run, node=pairs.get("node"), window=_window(pairs))
        except ValueError as exc:
            raise UsageError(str(exc), USAGE) from exc
    positional, pairs = split_pairs(words, allowed=("node", "cluster", "window"), usage=USAGE, max_positional=1)
    if not positional:
        raise UsageError("verify needs a target: <namespace>/<daemonset>", USAGE)
    try:
        target = str(validation.target(positional[0]))
        node = validation.node_name(pairs["node"]) if "node" in pairs else None
        window = _window(pairs)
    except ValueError as exc:
        raise UsageError(str(exc), USAGE) from exc
    return VerifyRequest(target=target, node=node, cluster=pairs.get("cluster"), window=window)


def handle(request: VerifyRequest, *, connect: Callable[[str | None], Cluster], policy: Policy,
           clock: Clock | None = None) -> StepResult:
    """The verify checks on the requested cluster, with the policy's GPU resources and timings
    (``clock``: the run engine's, so a simulated cluster's minutes pass as fast as its runs' do)."""
    settings = step_settings_of(policy)
    if request.window is not None:
        settings = replace(settings, observe_window=request.window)
    with connect(request.cluster) as cluster:
        return verify(cluster, request.target, nodes=[request.node] if request.node else None, settings=settings,
                      clock=clock)


class Verified(BaseModel):
    """What ``verify`` found, and where it looked."""

    target: str
    scope: str
    result: StepResult


def _handle(request: VerifyRequest | VerifyRun, deps: Deps, caller: Caller) -> Verified:
    longest = deps.policy.limits.longest_wait
    if request.window is not None and request.window > duration_seconds(longest):
        raise UsageError(msg.window_too_long(request.window, longest), USAGE)
    if isinstance(request, VerifyRun):
        run = deps.engine.get(request.run)
        request = VerifyRequest(target=run.target.ref, cluster=run.target.cluster or None, node=request.node,
                                window=request.window)
    asked = request
    key = ("verify", asked.cluster, asked.target, asked.node, asked.window)  # the same observation: made once
    result = deps.in_flight.do(key, lambda: handle(asked, connect=deps.connect, policy=deps.policy, clock=deps.clock))
    return Verified(target=asked.target, scope=asked.node or "all nodes", result=result)


def verification_reply(found: Verified) -> Reply:
    """The verdict, the failed checks' evidence as the run's thread shows it (issue 61), then one
    row per check, failures first."""
    result = found.result
    failed, unknown = len(result.failed), len(result.unknown)
    parts = [f"{failed} of {len(result.checks)} checks failed"] if failed else []
    parts += [f"{unknown} could not be made"] if unknown else []
    warned = sum(1 for c in result.checks if c.status == "warn")
    verdict = "; ".join(parts) if not result.ok or unknown else (
        f"passed, with {warned} warning{'' if warned == 1 else 's'}" if warned else "all checks passed")
    if result.ok and unknown:
        verdict = f"passed, but {verdict} (verify.unknown: warn)"
    checks = sorted(result.checks, key=lambda c: CHECK_ORDER[c.status])
    rows = [[CHECK_LABEL[c.status], c.name, c.scope or "-", shorten(c.detail, 100)] for c in checks[:MAX_CHECK_ROWS]]
    note = msg.checks_cut(len(checks) - len(rows)) if len(rows) < len(checks) else ""
    shown = [line for c in checks if c.status in ("fail", "unknown") for line in evidence_lines(items(c.evidence))]
    return Reply(title=f"Verify of {found.target} on {found.scope}: {verdict}",
                 text="\n".join([result.reason, *shown]) if shown else result.reason,
                 table=Table(header=["", "CHECK", "SCOPE", "DETAIL"], rows=rows, note=note),
                 tone="ok" if result.ok else "error")


COMMAND = Command.of(entry("verify"), parse, _handle, verification_reply,
                     exit_code=lambda found: EXIT_OK if found.result.ok else EXIT_FAILED,
                     to_json=lambda found: found.result.model_dump(mode="json"))
