"""Pre-checks of a canary, and the baseline it records before touching anything.

:func:`canary_prechecks` answers "may we start?": the image reference is valid and new,
the container exists, the DaemonSet is healthy (every desired pod updated, ready and
available, nothing half rolled out), the canary node exists, is Ready, schedulable, has
GPU hardware and a Ready pod of the DaemonSet. It also takes the inventory the baseline
is cut from, so verify later compares against what the cluster looked like just before.
"""

from __future__ import annotations

from typing import Any

from runbooks import validation
from runbooks.cluster import Cluster
from runbooks.cluster.resources import NODES
from runbooks.daemonset.baselines import Baseline, baseline_from
from runbooks.daemonset.observing import Snapshot
from runbooks.engine.recording import failed, passed
from runbooks.engine.runs import Run
from runbooks.engine.steps import Check, StepSettings
from runbooks.errors import NotFound
from runbooks.inventory import take_inventory
from runbooks.inventory.reading import node_from


def resolve_container(requested: str, images: dict[str, str]) -> str | None:
    """The container to upgrade: the one named, else the only one; ``None`` if ambiguous or absent."""
    if requested:
        return requested if requested in images else None
    return next(iter(images)) if len(images) == 1 else None


def daemonset_health(snap: Snapshot) -> Check:
    status = snap.status
    counts: dict[str, Any] = {k: int(status.get(k) or 0) for k in (
        "desiredNumberScheduled", "currentNumberScheduled", "updatedNumberScheduled", "numberReady", "numberAvailable")}
    observed = int(status.get("observedGeneration") or 0)
    desired = counts["desiredNumberScheduled"]
    problems = []
    if desired == 0:
        problems.append("it schedules no pod")
    if observed < snap.generation:
        problems.append(f"the controller has not yet seen generation {snap.generation} (observed {observed})")
    for key, label in (("updatedNumberScheduled", "updated"), ("numberReady", "ready"), ("numberAvailable", "available")):
        if counts[key] != desired:
            problems.append(f"{counts[key]} of {desired} pods {label}")
    current = snap.current_revision
    stale = [p.node for p in snap.pods if current and not p.deleting and p.revision_hash != current.hash]
    if stale:
        problems.append(f"pods on {', '.join(stale)} run an older revision (a rollout is unfinished)")
    ref = f"{snap.meta.get('namespace')}/{snap.meta.get('name')}"
    if problems:
        return failed("daemonset-healthy", f"{ref} is not healthy: {'; '.join(problems)}: let it settle first", **counts)
    return passed("daemonset-healthy", f"{ref}: {desired} of {desired} pods updated, ready and available", **counts)


def node_checks(cluster: Cluster, snap: Snapshot, node: str, gpu_resources: tuple[str, ...]) -> list[Check]:
    try:
        obj = cluster.get(NODES, node)
    except NotFound:
        return [failed("node-exists", f"node {node} does not exist: pick one of {', '.join(snap.nodes) or 'the GPU nodes'}", node)]
    info = node_from(obj, gpu_resources)
    checks = [passed("node-exists", f"node {node} exists", node)]
    if not info.ready:
        checks.append(failed("node-ready", f"node {node} is not Ready: pick a Ready node", node))
    elif info.unschedulable:
        checks.append(failed("node-ready", f"node {node} is cordoned: uncordon it or pick another node", node))
    else:
        checks.append(passed("node-ready", f"node {node} is Ready and schedulable", node))
    pod = snap.pod_on(node)
    if not info.gpu_hardware:
        checks.append(failed("node-has-gpu", f"node {node} has no GPU hardware labels: pick a GPU node", node))
    elif pod is None or pod.deleting:
        checks.append(failed("node-has-gpu", f"the DaemonSet runs no pod on {node}: pick one of {', '.join(snap.nodes)}", node))
    elif not (pod.phase == "Running" and pod.ready):
        checks.append(failed("node-has-gpu", f"the DaemonSet's pod {pod.name} on {node} is not Ready", node, pod=pod.name))
    else:
        checks.append(passed("node-has-gpu", f"{node} has GPUs ({info.capacity or 'no extended resources'}) "
                             f"and its plugin pod {pod.name} is Ready", node, pod=pod.name, capacity=info.capacity))
    return checks


def canary_prechecks(
    cluster: Cluster, snap: Snapshot, *, run: Run, settings: StepSettings,
) -> tuple[list[Check], Baseline | None]:
    """The pre-checks (each a :class:`Check`) and, when they pass, the baseline."""
    checks: list[Check] = []
    try:
        validation.image_reference(run.image)
        checks.append(passed("image-valid", f"{run.image} is a valid image reference"))
    except ValueError as exc:
        checks.append(failed("image-valid", str(exc)))
    container = resolve_container(run.container, snap.images)
    if container is None:
        which = f"no container {run.container!r}" if run.container else "more than one container"
        checks.append(failed("container-exists", f"the pod template has {which}: use container=<one of "
                             f"{', '.join(snap.images)}>", containers=sorted(snap.images)))
    elif snap.images[container] == run.image:
        checks.append(failed("container-exists", f"container {container} already runs {run.image}: nothing to upgrade"))
    else:
        checks.append(passed("container-exists", f"container {container} runs {snap.images[container]}",
                             container=container, image=snap.images[container]))
    checks.append(daemonset_health(snap))
    checks += node_checks(cluster, snap, run.node, tuple(settings.gpu_resources))
    if any(c.status == "fail" for c in checks):
        return checks, None
    inventory = take_inventory(cluster, targets=[run.target.ref], gpu_resources=settings.gpu_resources)
    baseline = baseline_from(inventory, run.target.ref)
    checks.append(passed("baseline", f"baseline of {len(baseline.nodes)} node(s) recorded",
                         nodes=sorted(baseline.nodes), taken_at=baseline.taken_at.isoformat()))
    return checks, baseline
