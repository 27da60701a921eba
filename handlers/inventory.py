"""``inventory [cluster=<context>]``: take an inventory of one cluster.

Thin, as every handler: parse the words into :class:`InventoryRequest`, connect with the
factory the front end passes, run the runbook, return the model. Every surface shows
:func:`summarize`: a summary message with the details (findings, nodes, DaemonSets, DRA)
as thread items; the shell prints it as text, or the model with ``--json`` (exit 1 when a
finding fails).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from handlers import node_stack
from handlers.arguments import split_pairs
from handlers.replies import Item, Message, Reply, Table
from handlers.routing import EXIT_FAILED, EXIT_OK, Caller, Command, Deps
from handlers.verbs import entry
from runbooks.cluster import Cluster
from runbooks.inventory import DaemonSet, Inventory, Node, take_inventory
from runbooks.policy import Policy

if TYPE_CHECKING:
    from runbooks.cluster.informing import Watches

USAGE = entry("inventory").usage


class InventoryRequest(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    cluster: str | None = None
    """kubeconfig context; None: the current context."""


def parse(words: Sequence[str]) -> InventoryRequest:
    _, pairs = split_pairs(words, allowed=("cluster",), usage=USAGE)
    return InventoryRequest(cluster=pairs.get("cluster"))


def handle(request: InventoryRequest, *, connect: Callable[[str | None], Cluster], policy: Policy,
           watches: Watches | None = None) -> Inventory:
    """The inventory of the requested cluster, with the policy's targets and GPU resources; with
    ``watches`` (a worker's), its nodes, ResourceSlices and unfinished pods come from the watch cache
    and the rest is read through the connection it keeps to the cluster."""
    kept = watches.on(request.cluster) if watches is not None else None
    with (kept.connection() if kept is not None else connect(request.cluster)) as cluster:
        inv = take_inventory(cluster, targets=policy.target_refs, gpu_resources=policy.gpu_resources,
                             registration=policy.registration, max_unavailable=policy.inventory.max_unavailable,
                             watches=kept)
    if policy.prometheus is None:
        return inv
    from runbooks.daemonset.metric_checks import (
        coverage,  # the metric checks' modules only with a Prometheus
    )

    metrics = coverage(policy.prometheus, policy.verify.metrics, [n.name for n in inv.nodes if n.gpu_hardware])
    return inv.model_copy(update={"metrics": metrics})


# ------------------------------------------------------------------ chat surfaces
MAX_ROWS = 30
"""Beyond this many nodes or pods, only the ones with something to say are listed."""
TOP_FINDINGS = 5
SEVERITY = {"fail": "FAIL", "warn": "WARN", "info": "INFO"}


def _yes(flag: bool | None) -> str:
    return "-" if flag is None else ("yes" if flag else "no")


def _node_healthy(node: Node) -> bool:
    full = all(node.allocatable.get(r, 0) == c for r, c in node.capacity.items())
    return node.ready and not node.unschedulable and full and (bool(node.capacity) or not node.gpu_hardware)


def nodes_table(inv: Inventory) -> Table:
    """The node table every surface shows; past ``MAX_ROWS`` only nodes with a problem."""
    nodes, res = inv.nodes, inv.gpu_resources
    shown = nodes if len(nodes) <= MAX_ROWS else [n for n in nodes if not _node_healthy(n)][:MAX_ROWS]
    rows = [
        [n.name, _yes(n.ready), "cordoned" if n.unschedulable else "-",
         *(f"{n.capacity.get(r, 0)}/{n.allocatable.get(r, 0)}" for r in res), in_use(n), _yes(n.gpu_hardware),
         ",".join(f"{t.key}:{t.effect}" for t in n.taints) or "-"]
        for n in shown
    ]
    note = f"… {len(nodes) - len(shown)} more nodes, all Ready with every GPU allocatable" if len(shown) < len(nodes) else ""
    header = ["NAME", "READY", "SCHED", *(f"{r} CAP/ALLOC" for r in res), "IN USE", "GPU-HW", "TAINTS"]
    return Table(header=header, rows=rows, note=note)


def in_use(node: Node) -> str:
    """Devices in use on a node: GPUs requested by its unfinished pods, DRA devices allocated there."""
    gpus = sum(node.in_use.values())
    if node.devices_in_use:
        return f"{gpus} + {node.devices_in_use} DRA"
    return str(gpus)


def nodes_title(inv: Inventory) -> str:
    return f"Nodes ({len(inv.nodes)}, {sum(n.gpu_hardware for n in inv.nodes)} with GPU hardware)"


def pods_table(ds: DaemonSet) -> Table:
    """A DaemonSet's pods; past ``MAX_ROWS`` only the troubled ones, the rest counted in ``note``."""
    pods = ds.pods
    troubled = [p for p in pods if p.crashloop or not p.ready or p.restarts or p.registered is False]
    shown = pods if len(pods) <= MAX_ROWS else troubled[:MAX_ROWS]
    rows = [
        [p.node, p.name, p.phase, _yes(p.ready), str(p.restarts), p.waiting_reason or "-", _yes(p.registered),
         ",".join(i.rsplit(":", 1)[-1] for i in p.images.values())]
        for p in shown
    ]
    note = f"… {len(pods) - len(shown)} more pods, all Ready" if len(shown) < len(pods) else ""
    return Table(header=["NODE", "POD", "PHASE", "READY", "RESTARTS", "WAITING", "REGISTERED", "TAG"], rows=rows, note=note)


def owner_text(ds: DaemonSet) -> str:
    """The OWNER column: ``ClusterPolicy/cluster-policy``, ``Helm release nvidia-device-plugin/nvdp``, or ``-``."""
    return ds.owner.ref if ds.owner is not None else "-"


def plugins_table(inv: Inventory) -> Table:
    """The plugin DaemonSets, one row each, with who owns them (a direct change of an owned one does not last)."""
    rows = [[ds.ref, ds.kind, ",".join(i.rsplit(":", 1)[-1] for i in ds.images.values()) or "-",
             ds.update_strategy, f"{ds.ready}/{ds.desired}", owner_text(ds)] for ds in inv.daemonsets]
    return Table(header=["DAEMONSET", "KIND", "TAG", "STRATEGY", "READY", "OWNER"], rows=rows)


def _plugins(inv: Inventory) -> Message | None:
    return Message(title=f"Plugin DaemonSets ({len(inv.daemonsets)})", table=plugins_table(inv)) if inv.daemonsets else None


def _nodes(inv: Inventory) -> Message:
    return Message(title=nodes_title(inv), table=nodes_table(inv))


def _daemonset(ds: DaemonSet) -> Message:
    table = pods_table(ds)
    revision = ds.current_revision if ds.current_revision is not None else "?"
    fields = [
        Item(label="Kind", value=ds.kind + (f" (driver {', '.join(ds.drivers)})" if ds.drivers else "")),
        Item(label="Images", value=", ".join(f"{c}={i}" for c, i in ds.images.items()) or "-"),
        Item(label="Owner", value=owner_text(ds) + (f" (read from {ds.owner.read_from})" if ds.owner else "")),
        Item(label="Strategy", value=ds.update_strategy + (f", maxUnavailable {ds.max_unavailable}" if ds.max_unavailable else "")),
        Item(label="Revision", value=str(revision)),
        Item(label="Pods", value=f"desired {ds.desired}, updated {ds.updated}, ready {ds.ready}, available {ds.available}"),
    ]
    return Message(title=ds.ref, fields=fields, table=table if table.rows else None)


def _dra(inv: Inventory) -> Message | None:
    if not (inv.device_classes or inv.slices or inv.claims):
        return None
    lines = [f"{c.kind} {c.name}: driver {', '.join(c.drivers) or '?'}" for c in inv.device_classes]
    for driver in sorted({s.driver for s in inv.slices}):
        slices = [s for s in inv.slices if s.driver == driver]
        lines.append(f"ResourceSlices of {driver}: {len(slices)} on {len({s.node for s in slices})} node(s), "
                     f"{sum(s.devices for s in slices)} device(s)")
    claims = inv.claims[:MAX_ROWS]
    table = Table(
        header=["NAMESPACE", "CLAIM", "STATE", "AGE", "RESERVED FOR"],
        rows=[[c.namespace, c.name, c.state, c.age, ",".join(c.reserved_for) or "-"] for c in claims],
        note=f"… {len(inv.claims) - len(claims)} more claims" if len(inv.claims) > len(claims) else "",
    )
    return Message(title="Dynamic Resource Allocation", text="\n".join(lines), table=table if claims else None)


def _metrics(inv: Inventory) -> Message | None:
    """What the policy's metric checks would read in Prometheus, and where they would be blind."""
    info = inv.metrics
    if info is None:
        return None
    if info.error:
        return Message(title="Metrics", text=f"{info.prometheus} was not asked: {info.error}", tone="warn")
    lines = [f"{info.prometheus}: the node in {info.node_label}, workloads in {info.pod_label}"]
    for c in info.checks:
        lines.append(f"{c.check}: reads {', '.join(c.reads) or 'its query'} on {c.nodes} GPU node(s)"
                     + (f"; blind on {len(c.blind)}: {next(iter(c.blind.values()))}" if c.blind else ""))
    blind = any(c.blind for c in info.checks)
    return Message(title="Metrics", text="\n".join(lines), tone="warn" if blind else "ok")


def _findings(inv: Inventory) -> Message:
    lines = [f"{SEVERITY[f.severity]}  {f.message}\n      next: {f.next_step}" for f in inv.findings]
    tone = "error" if inv.failed else "warn"
    return Message(title=f"Findings ({len(inv.findings)})", text="\n".join(lines), tone=tone)


def summarize(inv: Inventory) -> Reply:
    """The inventory for a chat: a summary message, the details as thread items."""
    fails = [f for f in inv.findings if f.severity == "fail"]
    warns = [f for f in inv.findings if f.severity == "warn"]
    dra = inv.dra
    if inv.findings:
        top = [f"{SEVERITY[f.severity]}  {f.message}" for f in (fails + warns)[:TOP_FINDINGS]]
        text = "\n".join([f"{len(fails)} failing, {len(warns)} warning; details in the thread", *top])
    else:
        text = "No findings: the cluster looks ready for an upgrade."
    gpu_nodes = sum(n.gpu_hardware for n in inv.nodes)
    not_ready = sum(not n.ready for n in inv.nodes)
    fields = [
        Item(label="Kubernetes", value=inv.kubernetes.version),
        Item(label="DynamicResourceAllocation", value=dra.feature_gate + (f" ({dra.stage})" if dra.stage else "")),
        Item(label="Nodes", value=f"{len(inv.nodes)} ({gpu_nodes} with GPU hardware, {not_ready} not ready)"),
        node_stack.summary_item(inv),
        Item(label="Plugin DaemonSets", value=", ".join(d.ref for d in inv.daemonsets) or "none found"),
        Item(label="resource.k8s.io", value=", ".join(dra.served_versions) or "not served"),
        Item(label="Taken", value=f"{inv.taken_at:%Y-%m-%d %H:%M:%S %Z} from {inv.server}"),
    ]
    thread = [_findings(inv)] if inv.findings else []
    thread += [m for m in (_plugins(inv),) if m is not None]
    thread += [_nodes(inv), *node_stack.messages(inv), *(_daemonset(d) for d in inv.daemonsets)]
    thread += [m for m in (_dra(inv), _metrics(inv)) if m is not None]
    if inv.notes:
        thread.append(Message(title="Notes", text="\n".join(inv.notes)))
    tone = "error" if fails else ("warn" if warns else "ok")
    return Reply(title=f"Inventory of {inv.context}", text=text, fields=fields, thread=thread, tone=tone)


def _handle(request: InventoryRequest, deps: Deps, caller: Caller) -> Inventory:
    """Inventories of one cluster asked for while one is being taken share it (read once), and
    so do those asked before the last one ended, however long they waited on the queue (a burst
    waiting its turn is answered by the inventory that ran or began after it was asked: at 5,000
    nodes each one is a quarter of a CPU second)."""
    return deps.in_flight.since(("inventory", request.cluster), caller.asked_at,
                                lambda: handle(request, connect=deps.connect, policy=deps.policy, watches=deps.watches))


COMMAND = Command.of(entry("inventory"), parse, _handle, summarize,
                     exit_code=lambda inv: EXIT_FAILED if inv.failed else EXIT_OK)
