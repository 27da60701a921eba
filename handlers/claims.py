"""``claims [cluster=<context>]``: the broken ResourceClaims, cluster-wide (read-only).

Thin: parse, connect, run the runbook (:mod:`runbooks.dra.claims`), return its model.
:func:`summarize` shows one row per broken claim: where it is, why it is broken, and the fix.
Exit 1 when one is broken, so a script can tell.

``cleanup-claims [cluster=<context>]`` opens a cleanup run (:mod:`runbooks.dra.claim_cleanup`):
the claims ``claims`` would list as deletable, stored with the run as read, waiting for an
approver; once approved each is deleted only if it is still as listed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pydantic import BaseModel, ConfigDict

from handlers.arguments import split_pairs
from handlers.replies import Item, Message, Reply, Table
from handlers.routing import EXIT_FAILED, EXIT_OK, Caller, Command, Deps
from handlers.run_replies import requested_reply
from handlers.runs import failed_unless_done, outcome_json
from handlers.verbs import entry
from runbooks.dra.claims import ClaimsReport, broken_claims
from runbooks.engine.commands import Outcome

USAGE = entry("claims").usage
CLEANUP_USAGE = entry("cleanup-claims").usage
MAX_ROWS = 40


class ClaimsRequest(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    cluster: str | None = None


def _parser(usage: str) -> Callable[[Sequence[str]], ClaimsRequest]:
    def parse(words: Sequence[str]) -> ClaimsRequest:
        _, pairs = split_pairs(words, allowed=("cluster",), usage=usage, max_positional=0)
        return ClaimsRequest(cluster=pairs.get("cluster"))

    return parse


parse = _parser(USAGE)


def handle(request: ClaimsRequest, deps: Deps, caller: Caller) -> ClaimsReport:
    with deps.connect(request.cluster) as cluster:
        return broken_claims(cluster)


def summarize(result: ClaimsReport) -> Reply:
    fields = [Item(label="Cluster", value=result.context),
              Item(label="Checked", value=f"{result.checked} ResourceClaim(s)"
                   + (f" in resource.k8s.io/{result.version}" if result.version else ""))]
    if not result.version:
        return Reply(title=f"ResourceClaims of {result.context}", fields=fields, tone="ok",
                     text="The cluster serves no ResourceClaims (resource.k8s.io is off): nothing to check.")
    if not result.broken:
        return Reply(title=f"ResourceClaims of {result.context}", fields=fields, tone="ok",
                     text="No broken ResourceClaim: each is used by a live pod, allocated where its driver runs, "
                          "or new.")
    shown = result.broken[:MAX_ROWS]
    rows = [[b.ref, b.reason, b.detail, b.fix] for b in shown]
    more = f" (the first {MAX_ROWS}; --json lists them all)" if len(result.broken) > MAX_ROWS else ""
    deletable = sum(1 for b in result.broken if b.deletable)
    text = (f"{len(result.broken)} broken ResourceClaim(s){more}; {deletable} of them `cleanup-claims` would delete "
            "(one still reserved for a live pod is kept, a terminating one left to a person: its fix says how)")
    return Reply(title=f"ResourceClaims of {result.context}", text=text, fields=fields, tone="warn",
                 thread=[Message(title="Broken claims", table=Table(header=["CLAIM", "REASON", "SEEN", "FIX"],
                                                                     rows=rows), tone="warn")])


COMMAND = Command.of(entry("claims"), parse, handle, summarize,
                     exit_code=lambda result: EXIT_FAILED if result.broken else EXIT_OK)


def cleanup(args: ClaimsRequest, deps: Deps, caller: Caller) -> Outcome:
    """A cleanup run waiting at its request; nothing is deleted before an approver approves."""
    return deps.engine.request_cleanup(actor=deps.actor(caller), cluster=args.cluster,
                                       origin={"surface": caller.surface, "channel": caller.channel or ""})


CLEANUP_COMMAND = Command.of(entry("cleanup-claims"), _parser(CLEANUP_USAGE), cleanup, requested_reply,
                             exit_code=failed_unless_done, to_json=outcome_json, by_surface=True)
