"""``inventory [cluster=<context>]``: take an inventory of one cluster.

Thin, as every handler: parse the words into :class:`InventoryRequest`, connect with the
factory the front end passes, run the runbook, return the model; each surface renders it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pydantic import BaseModel, ConfigDict

from handlers.arguments import split_pairs
from runbooks.cluster import Cluster
from runbooks.inventory import Inventory, take_inventory
from runbooks.policy import Policy

USAGE = "inventory [cluster=<context>]"


class InventoryRequest(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    cluster: str | None = None
    """kubeconfig context; None: the current context."""


def parse(words: Sequence[str]) -> InventoryRequest:
    _, pairs = split_pairs(words, allowed=("cluster",), usage=USAGE)
    return InventoryRequest(cluster=pairs.get("cluster"))


def handle(request: InventoryRequest, *, connect: Callable[[str | None], Cluster], policy: Policy) -> Inventory:
    """The inventory of the requested cluster, with the policy's targets and GPU resources."""
    with connect(request.cluster) as cluster:
        return take_inventory(cluster, targets=policy.target_refs, gpu_resources=policy.gpu_resources)
