"""The verdict of a stability report, from the collected events and the cluster now.

Purely data-manipulative, no I/O. The rules, worst first:

==========  ====================================================================
failing     a node's GPU capacity or allocatable is below the baseline; a node of
            the plugin has no Running and Ready plugin pod, or it crash-loops; a
            GPU node is not Ready; a DRA driver publishes fewer devices than before
degraded    the plugin's pods restarted since the promotion; warning events that
            matter happened in the window (kubelet restarts are only noted);
            claims created since the upgrade stayed pending longer than
            ``reports.claims_pending_after``; claims allocated before are not now
stable      none of these
==========  ====================================================================

Each finding names its nodes, so on-call sees where to look.
"""

from __future__ import annotations

from collections.abc import Sequence

from runbooks.daemonset.baselines import Baseline, NodeBaseline
from runbooks.inventory import PluginPod
from runbooks.inventory.reading import human_duration
from runbooks.stability.reading import ClusterNow
from runbooks.stability.reports import (
    CapacityDrop,
    EventSummary,
    Finding,
    NodeComparison,
    PendingClaim,
    Restart,
    Verdict,
)
from runbooks.stability.tallying import KUBELET_RESTART

SHOWN = 5


def listing(names: Sequence[str], limit: int = SHOWN) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def capacity_drops(baseline: Baseline, now: ClusterNow) -> list[CapacityDrop]:
    drops = []
    for name, base in baseline.nodes.items():
        node = now.nodes.get(name)
        for res in baseline.gpu_resources:
            for which, before in (("capacity", base.capacity.get(res, 0)), ("allocatable", base.allocatable.get(res, 0))):
                value = 0 if node is None else (node.capacity if which == "capacity" else node.allocatable).get(res, 0)
                if value < before:
                    drops.append(CapacityDrop(node=name, resource=res, field=which, baseline=before, now=value))
    return drops


def restarts_since(base: NodeBaseline | None, pod: PluginPod) -> int:
    """A pod the baseline saw counts from its baseline restarts; a newer pod from zero."""
    if base is not None and base.pod_uid and base.pod_uid == pod.uid:
        return max(0, pod.restarts - base.restarts)
    return pod.restarts


def restarts(baseline: Baseline, now: ClusterNow) -> list[Restart]:
    out = [Restart(node=node, pod=pod.name, restarts=restarts_since(baseline.node(node), pod))
           for node, pod in sorted(now.pods.items())]
    return [r for r in out if r.restarts > 0]


def pending_claims(baseline: Baseline, now: ClusterNow, *, older_than: float) -> list[PendingClaim]:
    out = []
    for claim in now.claims or []:
        if claim.state != "pending" or claim.created is None:
            continue
        if (now.taken_at - claim.created).total_seconds() < older_than:
            continue
        out.append(PendingClaim(claim=f"{claim.namespace}/{claim.name}", age=human_duration(now.taken_at - claim.created),
                                pre_existing=claim.created < baseline.taken_at, waiting_pods=claim.waiting_pods))
    return out


def lost_claims(baseline: Baseline, now: ClusterNow) -> list[str]:
    if now.claims is None:
        return []
    current = {f"{c.namespace}/{c.name}": c for c in now.claims}
    return [k for k in baseline.claims_allocated if k not in current or not current[k].state.startswith("allocated")]


def _gpus(capacity: dict[str, int], allocatable: dict[str, int], resources: Sequence[str]) -> str:
    return ", ".join(f"{capacity.get(r, 0)}/{allocatable.get(r, 0)}" for r in resources) or "-"


def _devices(now: ClusterNow, node: str, drivers: Sequence[str]) -> int:
    return sum(s.devices for s in now.slices or [] if s.node == node and s.driver in drivers)


def comparisons(baseline: Baseline, now: ClusterNow) -> list[NodeComparison]:
    out = []
    for name in sorted(set(baseline.nodes) | set(now.pods)):
        base, node, pod = baseline.node(name), now.nodes.get(name), now.pods.get(name)
        out.append(NodeComparison(
            node=name, ready=node.ready if node else None,
            gpus_before=_gpus(base.capacity, base.allocatable, baseline.gpu_resources) if base else "-",
            gpus_now=_gpus(node.capacity, node.allocatable, baseline.gpu_resources) if node else "-",
            image_before=", ".join(base.images.values()) if base else "",
            image_now=", ".join(pod.images.values()) if pod else "",
            pod_now=pod.name if pod else "", pod_ready=pod.ready if pod else None,
            restarts=restarts_since(base, pod) if pod else 0,
            slices_before=sum(base.slices.values()) if base else 0, slices_now=_devices(now, name, baseline.drivers),
        ))
    return out


def findings(
    baseline: Baseline, now: ClusterNow, *, events: Sequence[EventSummary], drops: Sequence[CapacityDrop],
    restarted: Sequence[Restart], pending: Sequence[PendingClaim], lost: Sequence[str],
) -> list[Finding]:
    out: list[Finding] = []
    if drops:
        nodes = sorted({d.node for d in drops})
        detail = "; ".join(f"{d.node} {d.resource} {d.field} {d.baseline} -> {d.now}" for d in drops[:SHOWN])
        out.append(Finding(severity="failing", code="gpu-capacity-dropped", nodes=nodes,
                           text=f"GPUs fell below the baseline on {listing(nodes)}: {detail}"))
    if not now.daemonset_found:
        out.append(Finding(severity="failing", code="daemonset-missing", nodes=sorted(baseline.nodes),
                           text=f"the DaemonSet {baseline.daemonset} is gone"))
    else:
        down = {n: _pod_problem(now.pods.get(n)) for n in baseline.nodes}
        bad = sorted(n for n, problem in down.items() if problem)
        if bad:
            out.append(Finding(severity="failing", code="plugin-down", nodes=bad,
                               text="the plugin is not serving on " + "; ".join(f"{n} ({down[n]})" for n in bad[:SHOWN])))
    not_ready = sorted(n for n in baseline.nodes if (node := now.nodes.get(n)) is not None and not node.ready)
    if not_ready:
        out.append(Finding(severity="failing", code="node-not-ready", nodes=not_ready,
                           text=f"GPU node(s) not Ready: {listing(not_ready)}"))
    if now.slices is not None and baseline.drivers:
        fewer = sorted(n for n, b in baseline.nodes.items() if _devices(now, n, baseline.drivers) < sum(b.slices.values()))
        if fewer:
            out.append(Finding(severity="failing", code="dra-devices-dropped", nodes=fewer,
                               text=f"{', '.join(baseline.drivers)} publishes fewer devices than before on {listing(fewer)}"))
    if restarted:
        nodes = [r.node for r in restarted]
        total = sum(r.restarts for r in restarted)
        out.append(Finding(severity="degraded", code="plugin-restarts", nodes=nodes,
                           text=f"the plugin restarted {total} time(s) since the promotion, on {listing(nodes)}"))
    for summary in events:
        if summary.reason == KUBELET_RESTART:
            continue
        nodes = [c.name for c in summary.nodes]
        where = f" on {listing(nodes)}" if nodes else f" ({listing([c.name for c in summary.objects])})"
        out.append(Finding(severity="degraded", code=f"events-{summary.reason}", nodes=nodes,
                           text=f"{summary.count} {summary.reason} event(s){where}"))
    new_pending = [p.claim for p in pending if not p.pre_existing]
    if new_pending:
        out.append(Finding(severity="degraded", code="claims-pending",
                           text=f"claims pending too long since the upgrade: {listing(new_pending)}"))
    if lost:
        out.append(Finding(severity="degraded", code="claims-lost",
                           text=f"claims allocated before the upgrade are not now: {listing(list(lost))}"))
    return out


def _pod_problem(pod: PluginPod | None) -> str:
    if pod is None:
        return "no plugin pod"
    if pod.crashloop:
        return "CrashLoopBackOff"
    if pod.phase != "Running" or not pod.ready:
        return f"{pod.phase}, {pod.waiting_reason or 'not ready'}"
    return ""


def verdict_of(found: Sequence[Finding]) -> Verdict:
    if any(f.severity == "failing" for f in found):
        return "failing"
    return "degraded" if found else "stable"

