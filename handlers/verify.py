"""``verify <namespace>/<daemonset> [node=<node>] [cluster=<context>] [window=<duration>]``.

The checks of a run's verify step, outside a run: on every node of the DaemonSet, or on
one. With no baseline, GPU allocatable must equal capacity; events count from the
moment the command starts; ``window=`` overrides the policy's observation window (CI
pipelines use a short one). Thin: parse, connect, call the runbook, return the result.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from pydantic import BaseModel, ConfigDict

from handlers.arguments import UsageError, split_pairs
from runbooks import validation
from runbooks.cluster import Cluster
from runbooks.daemonset.verifying import verify
from runbooks.engine.commands import step_settings_of
from runbooks.engine.steps import Clock, StepResult
from runbooks.policy import Policy, duration_seconds

USAGE = "verify <namespace>/<daemonset> [node=<node>] [cluster=<context>] [window=<duration>]"


class VerifyRequest(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    target: str
    """``namespace/daemonset``."""
    node: str | None = None
    """Verify on this node only (and check that the others did not change)."""
    cluster: str | None = None
    window: float | None = None
    """Seconds to watch for restarts and capacity dips; None: the policy's."""


def parse(words: Sequence[str]) -> VerifyRequest:
    positional, pairs = split_pairs(words, allowed=("node", "cluster", "window"), usage=USAGE, max_positional=1)
    if not positional:
        raise UsageError("verify needs a target: <namespace>/<daemonset>", USAGE)
    try:
        target = str(validation.target(positional[0]))
        node = validation.node_name(pairs["node"]) if "node" in pairs else None
        window = duration_seconds(pairs["window"]) if "window" in pairs else None
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
