"""``claims [cluster=<context>]``: the broken ResourceClaims, cluster-wide (read-only).

Thin: parse, connect, run the runbook (:mod:`runbooks.dra.claims`), return its model.
:func:`summarize` shows one row per broken claim: where it is, why it is broken, and the fix.
Exit 1 when one is broken, so a script can tell.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from handlers.arguments import split_pairs
from handlers.replies import Item, Message, Reply, Table
from handlers.routing import EXIT_FAILED, EXIT_OK, Caller, Command, Deps
from runbooks.dra.claims import ClaimsReport, broken_claims

USAGE = "claims [cluster=<context>]"
MAX_ROWS = 40


class ClaimsRequest(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    cluster: str | None = None


def parse(words: Sequence[str]) -> ClaimsRequest:
    _, pairs = split_pairs(words, allowed=("cluster",), usage=USAGE, max_positional=0)
    return ClaimsRequest(cluster=pairs.get("cluster"))


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
            "(a terminating one is left to a person: its fix says how)")
    return Reply(title=f"ResourceClaims of {result.context}", text=text, fields=fields, tone="warn",
                 thread=[Message(title="Broken claims", table=Table(header=["CLAIM", "REASON", "SEEN", "FIX"],
                                                                     rows=rows), tone="warn")])


COMMAND = Command("claims", USAGE, "broken ResourceClaims cluster-wide, each with why and the fix (read-only)", parse,
                  handle, summarize, lane="long",
                  exit_code=lambda result: EXIT_FAILED if result.broken else EXIT_OK)
