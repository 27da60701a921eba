"""``quarantine <target> node=<n>`` and ``release <target> node=<n>``: approved runs that take one
node out of a plugin DaemonSet's reach and give it back (:mod:`runbooks.daemonset.quarantining`).

Each parses its words, asks the run engine for the run as the caller, and is presented as every
run request is (:func:`~handlers.run_replies.requested_reply`): the plan in the request an
approver decides, the steps in the run's thread.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from handlers.arguments import UsageError, split_pairs
from handlers.routing import Caller, Command, Deps
from handlers.run_replies import requested_reply
from handlers.runs import failed_unless_done, outcome_json
from handlers.verbs import entry

if TYPE_CHECKING:  # the engine's commands: not loaded to read a run (issue 39)
    from runbooks.engine.commands import Outcome


class NodeArgs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)  # built when first parsed (issue 39)

    target: str
    node: str
    cluster: str | None = None
    when: str = "now"


def _parse(verb: str) -> Callable[[Sequence[str]], NodeArgs]:
    usage = entry(verb).usage

    def parse(words: Sequence[str]) -> NodeArgs:
        from runbooks import validation  # the policy's names, for the verbs that request (issue 39)

        positional, pairs = split_pairs(words, allowed=("node", "cluster", "when"), usage=usage, max_positional=1)
        if not positional:
            raise UsageError("which DaemonSet? give <namespace>/<daemonset>", usage)
        if "node" not in pairs:
            raise UsageError(f"node= is required: the node to {verb}", usage)
        if pairs.get("when", "now") not in ("now", "next-window"):
            raise UsageError(f"when={pairs['when']} is not a choice: when=next-window queues the run until the "
                             "target's maintenance window opens", usage)
        try:
            validation.target(positional[0])
            validation.node_name(pairs["node"])
        except ValueError as exc:
            raise UsageError(str(exc), usage) from exc
        return NodeArgs(target=positional[0], **pairs)

    return parse


parse_quarantine, parse_release = _parse("quarantine"), _parse("release")


def quarantine(args: NodeArgs, deps: Deps, caller: Caller) -> Outcome:
    """A quarantine run, its plan in the request an approver decides."""
    return deps.engine.request_quarantine(actor=deps.actor(caller), target=args.target, node=args.node,
                                          cluster=args.cluster, when=args.when,
                                          origin={"surface": caller.surface, "channel": caller.channel or ""})


def release(args: NodeArgs, deps: Deps, caller: Caller) -> Outcome:
    """A release run, its plan in the request an approver decides."""
    return deps.engine.request_release(actor=deps.actor(caller), target=args.target, node=args.node,
                                       cluster=args.cluster, when=args.when,
                                       origin={"surface": caller.surface, "channel": caller.channel or ""})


COMMANDS: tuple[Command, ...] = (
    Command.of(entry("quarantine"), parse_quarantine, quarantine, requested_reply, exit_code=failed_unless_done,
               to_json=outcome_json, by_surface=True),
    Command.of(entry("release"), parse_release, release, requested_reply, exit_code=failed_unless_done,
               to_json=outcome_json, by_surface=True),
)
