"""``canary <namespace>/<daemonset> image=<ref> node=<node> [container=<name>] [cluster=<context>]``.

Opens a run at its canary request: the inputs are validated here (with the usage line)
and again by the engine, which also reads the cluster (the DaemonSet, its container, the
node) and takes the target's lock. Nothing runs on the cluster until an approver approves.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from handlers.arguments import UsageError, split_pairs
from runbooks import validation
from runbooks.engine.approving import Actor
from runbooks.engine.commands import Engine, Outcome

USAGE = "canary <namespace>/<daemonset> image=<ref> node=<node> [container=<name>] [cluster=<context>]"


class CanaryArgs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    target: str
    image: str
    node: str
    container: str | None = None
    cluster: str | None = None


def parse(words: Sequence[str]) -> CanaryArgs:
    positional, pairs = split_pairs(
        words, allowed=("image", "node", "container", "cluster"), usage=USAGE, max_positional=1
    )
    if not positional:
        raise UsageError("which DaemonSet? give <namespace>/<daemonset>", USAGE)
    for key in ("image", "node"):
        if key not in pairs:
            raise UsageError(f"{key}= is required", USAGE)
    try:
        validation.target(positional[0])
        validation.image_reference(pairs["image"])
        validation.node_name(pairs["node"])
        if "container" in pairs:
            validation.container_name(pairs["container"])
    except ValueError as exc:
        raise UsageError(str(exc), USAGE) from exc
    return CanaryArgs(target=positional[0], **pairs)


def handle(args: CanaryArgs, *, engine: Engine, actor: Actor, origin: dict[str, str] | None = None) -> Outcome:
    """The new run, waiting at its canary request (``LockHeld`` if the target has one)."""
    return engine.request_canary(
        actor=actor, target=args.target, image=args.image, node=args.node,
        container=args.container, cluster=args.cluster, origin=origin,
    )
