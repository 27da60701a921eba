"""Pre-checks of a canary, and the baseline it records before touching anything.

:func:`request_checks` answers "may we start?", read-only, when the canary is requested
(before any approver is asked) and again after approval: the image reference is valid
and new, the container exists, the DaemonSet is healthy (every desired pod updated,
ready and available, nothing half rolled out), the canary node exists, is Ready,
schedulable, has GPU hardware and a Ready pod of the DaemonSet, and the inventory has no
failing finding on the target (:func:`target_findings`). :func:`canary_prechecks` runs
them after approval and cuts the baseline, so verify later compares against what the cluster
looked like just before. After approval it reads again only what may have moved since the
request and what a check judges: the DaemonSet, its pods (the step's cache), the canary nodes,
and the registration of the canary nodes' plugin pods and of a sample per hardware class; every
other node's GPUs and hardware class come from the request's inventory, kept in the run
(:mod:`runbooks.daemonset.requested`).
"""

from __future__ import annotations

from typing import Any

from runbooks import templates, validation
from runbooks.cluster import Cluster
from runbooks.cluster.resources import NODES
from runbooks.daemonset.baselines import Baseline, baseline_from
from runbooks.daemonset.observing import Snapshot, wait_for
from runbooks.daemonset.requested import (
    REQUESTED,
    RequestedView,
    baseline_with,
    log_sample,
    view_of,
)
from runbooks.daemonset.verifying import sample_nodes
from runbooks.engine.recording import failed, passed, warned
from runbooks.engine.runs import Run
from runbooks.engine.steps import Check, Clock, StepSettings
from runbooks.errors import NotFound, plural
from runbooks.inventory import HardwareClass, Inventory, Node, take_inventory
from runbooks.inventory.compatibility import judge
from runbooks.inventory.plugins import LOG_BUDGET, classify
from runbooks.inventory.reading import node_from
from runbooks.inventory.stacks import hardware_classes
from runbooks.plugin_containers import plugin_container
from runbooks.templates import same

REGISTRATION_SAMPLE = 2
"""Plugin pods per hardware class (besides the canary nodes') whose registration the baseline reads
from their logs after approval: the most suspect first."""


def resolve_container(requested: str, template: dict[str, Any]) -> str | None:
    """The container of the pod ``template`` to upgrade: the one named, else the only one, else the
    only one that is not GFD, the MPS control daemon or config-manager
    (:func:`runbooks.plugin_containers.plugin_container`); ``None`` if ambiguous or absent."""
    containers = templates.containers(template)
    if requested:
        return requested if any(c.get("name") == requested for c in containers) else None
    return plugin_container(containers)


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


def node_checks(cluster: Cluster, snap: Snapshot, node: str, gpu_resources: tuple[str, ...],
                read: dict[str, Node] | None = None) -> list[Check]:
    """The canary node's checks, from the node read now (kept in ``read``, by name, when given)."""
    try:
        obj = cluster.get(NODES, node)
    except NotFound:
        return [failed("node-exists", f"node {node} does not exist: pick one of {', '.join(snap.nodes) or 'the GPU nodes'}", node)]
    info = node_from(obj, gpu_resources)
    if read is not None:
        read[node] = info
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
        none = ("no extended resource: a DRA driver's devices" if classify(snap.ds) != "device-plugin"
                else "no GPU resource yet")
        gpus = ", ".join(f"{count} {name}" for name, count in sorted(info.capacity.items())) or none
        checks.append(passed("node-has-gpu", f"{node} has GPUs ({gpus}) and its plugin pod {pod.name} is Ready",
                             node, pod=pod.name, capacity=info.capacity))
    return checks


MOUNT_FINDINGS = ("plugin-not-registered", "device-plugin-hostpath")
"""Failing findings a change of the template's volumes may fix (a socket directory mounted from the
wrong place): they do not refuse a canary that moves a volume; its verification judges them."""


def target_findings(inventory: Inventory, ref: str, node: str, edits: templates.Edits | None = None) -> list[Check]:
    """The inventory's FAIL findings about this target: its DaemonSet, the canary nodes (``node``,
    one or several joined by commas), and for a DRA kubelet plugin the cluster-wide DRA findings
    and the classes of the drivers it serves. With ``edits`` that move a volume, the findings of
    :data:`MOUNT_FINDINGS` are a warning, not a refusal: the run is the fix they ask for."""
    ds = next((d for d in inventory.daemonsets if d.ref == ref), None)
    mine = {f"daemonset/{ref}", *(f"node/{n}" for n in node.split(","))}
    if ds is not None and ds.kind == "dra-kubelet-plugin":
        mine.add("cluster")
        mine.update(f"{c.kind.lower()}/{c.name}" for c in inventory.device_classes if set(c.drivers) & set(ds.drivers))
    fails = [f for f in inventory.findings if f.severity == "fail" and f.object in mine]
    if edits is not None and edits.volumes and (fixed := [f for f in fails if f.code in MOUNT_FINDINGS]):
        fails = [f for f in fails if f.code not in MOUNT_FINDINGS]
        moved = ", ".join(edits.volumes)
        warning = warned("no-fail-finding", f"{fixed[0].message}: this run moves volume {moved}, which may fix it; "
                         "its verification judges the registration", code=fixed[0].code, object=fixed[0].object)
        if not fails:
            return [warning]
    if fails:
        return [failed("no-fail-finding", f"{f.message}: {f.next_step}", code=f.code, object=f.object) for f in fails]
    return [passed("no-fail-finding", f"the inventory has no failing finding about {ref} or {node}")]


def _plugin_nodes(inventory: Inventory, run: Run) -> set[str]:
    """The nodes the target's pods run on (every node a promotion reaches), and the canary's."""
    ds = inventory.daemonset(run.target.ref)
    return {p.node for p in ds.pods} | set(run.canary_nodes) if ds is not None else set(run.canary_nodes)


def reached_classes(inventory: Inventory, run: Run) -> list[HardwareClass]:
    """The hardware classes of the nodes the target's pods run on, and the canary's."""
    reached = _plugin_nodes(inventory, run)  # once: per node it made the check quadratic (issue 39)
    return hardware_classes(n for n in inventory.nodes if n.name in reached)


def class_checks(inventory: Inventory, run: Run, settings: StepSettings, *,
                 classes: list[HardwareClass] | None = None) -> list[Check]:
    """One canary node per hardware class: two named nodes of one class fail (name one per class);
    with ``canary.per_class`` a class of the target's nodes without a canary node fails, named.
    ``classes``: those of the target's nodes when the caller has them (else from ``inventory``)."""
    nodes = run.canary_nodes
    classes = classes if classes is not None else reached_classes(inventory, run)
    of = {name: c.name for c in classes for name in c.nodes}
    seen: dict[str, str] = {}
    for node in nodes:
        if node in of and of[node] in seen:
            return [failed("canary-per-class", f"{seen[of[node]]} and {node} are both of class {of[node]}: name one "
                           "canary node per hardware class (node=auto picks one in each)", classes=[of[node]])]
        seen.setdefault(of.get(node, node), node)
    if not classes:
        return []
    missing = [c for c in classes if not set(c.nodes) & set(nodes)]
    if missing and settings.canary_per_class:
        return [failed("canary-per-class", "canary.per_class: every hardware class needs its canary node before "
                       "promotion, and " + "; ".join(f"{c.name} ({', '.join(c.nodes)})" for c in missing)
                       + " has none: add one node of each to node=, or use node=auto", classes=[c.name for c in missing])]
    covered = sorted({of[n] for n in nodes if n in of})
    if missing:
        return [passed("canary-per-class", f"the canary covers {plural(len(covered), 'hardware class', 'hardware classes')} of "
                       f"{len(classes)} ({'; '.join(c.name for c in missing)} without a canary node)",
                       classes=covered, without=[c.name for c in missing])]
    return [passed("canary-per-class", f"the canary covers every hardware class ({len(classes)})", classes=covered)]


def compatibility_checks(inventory: Inventory, run: Run, settings: StepSettings, *,
                         classes: list[HardwareClass] | None = None) -> list[Check]:
    """The image against the compatibility matrix on the hardware classes of the nodes the
    target's pods run on (every node a promotion reaches): a class whose driver is too old, or a
    Kubernetes outside the row's range, fails; an unknown combination is a warning. ``classes``:
    as :func:`class_checks`."""
    classes = classes if classes is not None else reached_classes(inventory, run)
    entry = settings.targets.get(run.target.ref)
    override = entry.compatibility if entry is not None else None
    verdicts = judge(run.image, classes, kubernetes=inventory.kubernetes.version,
                     min_driver=override.min_driver if override else None, ignore=bool(override and override.ignore))
    make = {"pass": passed, "fail": failed, "warn": warned}
    return [make[v.status]("compatibility", v.detail, row=v.row, nodes=v.nodes) for v in verdicts]


def request_checks(
    cluster: Cluster, snap: Snapshot, *, run: Run, settings: StepSettings, baseline: bool = True,
) -> tuple[list[Check], Inventory | None]:
    """Everything knowable before anyone approves, read-only: a valid and new image, the
    container, a healthy DaemonSet, a Ready, schedulable GPU node with a Ready plugin pod, and
    no failing inventory finding on the target, and the image fits the compatibility matrix on
    the target's hardware classes. The inventory comes back for the baseline; ``baseline=False``
    (the request, before approval): no plugin log is read, since no check judges registration
    (the baseline records it, cut after approval)."""
    checks, container = _own_checks(cluster, snap, run=run, settings=settings)
    if any(c.status == "fail" for c in checks):
        return checks, None
    # the target's pods are the snapshot's, read just now; no check reads the devices in use (IN USE),
    # so no pod of the cluster is listed for them; a device plugin's findings name no device class,
    # so the DRA kubelet plugins (their pods, their logs) are read for a DRA target only (issue 39)
    inventory = take_inventory(cluster, targets=[run.target.ref], gpu_resources=settings.gpu_resources,
                               registration=settings.registration, in_use_of=(), owned={run.target.ref: snap.pods},
                               dra_plugins=classify(snap.ds) != "device-plugin",
                               log_budget=LOG_BUDGET if baseline else 0)
    return checks + _inventory_checks(inventory, snap, run=run, settings=settings, container=container), inventory


def requested_view(inventory: Inventory, run: Run) -> dict[str, Any]:
    """What the run keeps of its request's ``inventory`` (the progress key and its value) for the
    pre-checks after approval."""
    return {REQUESTED: view_of(inventory, _plugin_nodes(inventory, run)).model_dump(mode="json")}


def _own_checks(
    cluster: Cluster, snap: Snapshot, *, run: Run, settings: StepSettings, read: dict[str, Node] | None = None,
) -> tuple[list[Check], str | None]:
    """The checks of the run's own image, container, DaemonSet and canary nodes (read now, kept in
    ``read`` when given), and the container to change."""
    checks: list[Check] = []
    try:
        validation.image_reference(run.image)
        checks.append(passed("image-valid", f"{run.image} is a valid image reference"))
    except ValueError as exc:
        checks.append(failed("image-valid", str(exc)))
    container = resolve_container(run.container, snap.template)
    if container is None:
        which = f"no container {run.container!r}" if run.container else "more than one container"
        checks.append(failed("container-exists", f"the pod template has {which}: use container=<one of "
                             f"{', '.join(snap.images)}>", containers=sorted(snap.images)))
    elif wrong := templates.problems(snap.template, container, run.edits):
        checks.append(failed("container-exists", f"cannot change container {container}: {'; '.join(wrong)}"))
    elif same(templates.apply(snap.template, container, run.image, run.edits), snap.template):
        detail = (f"container {container} already runs {run.image}: nothing to upgrade" if run.edits.empty else
                  f"the template of {run.target.ref} already has {run.edits.summary()} with {run.image}: nothing to change")
        checks.append(failed("container-exists", detail))
    else:
        checks.append(passed("container-exists", f"container {container} runs {snap.images[container]}",
                             container=container, image=snap.images[container]))
    checks.append(daemonset_health(snap))
    for node in run.canary_nodes:
        checks += node_checks(cluster, snap, node, tuple(settings.gpu_resources), read)
    return checks, container


def _inventory_checks(inventory: Inventory, snap: Snapshot, *, run: Run, settings: StepSettings,
                      container: str | None, classes: list[HardwareClass] | None = None) -> list[Check]:
    """No failing finding on the target, one canary node per class, the image on the matrix."""
    classes = classes if classes is not None else reached_classes(inventory, run)
    checks = target_findings(inventory, run.target.ref, run.node, run.edits) + class_checks(inventory, run, settings, classes=classes)
    if run.image and run.image != snap.images.get(container or "", ""):
        checks += compatibility_checks(inventory, run, settings, classes=classes)
    return checks


def _unsettled(baseline: Baseline) -> list[str]:
    """Nodes caught mid-change: fewer allocatable GPUs than capacity, or a plugin pod not registered."""
    return [n.name for n in baseline.nodes.values()
            if any(n.allocatable.get(r, 0) < c for r, c in n.capacity.items()) or n.registered is False]


def canary_prechecks(
    cluster: Cluster, snap: Snapshot, *, run: Run, settings: StepSettings, clock: Clock | None = None,
) -> tuple[list[Check], Baseline | None]:
    """The request's checks again, after approval (the cluster may have moved), and, when they
    pass, the baseline: a node caught mid-change (a kubelet restart, a plugin re-registering)
    is read again until it settles, for up to ``settings.settle_window``; one still degraded
    then is recorded as it is, and verify says so rather than blame the upgrade.

    With the request's view in the run (:data:`~runbooks.daemonset.requested.REQUESTED`), only the
    DaemonSet (``snap``), its pods, the canary nodes and the registration of their pods and of
    :data:`REGISTRATION_SAMPLE` pods per hardware class are read again; the nodes are not listed."""
    kept = run.progress.get(REQUESTED)
    if not isinstance(kept, dict):  # a run requested before its request kept a view: read it all again
        checks, inventory = request_checks(cluster, snap, run=run, settings=settings)
        if inventory is None or any(c.status == "fail" for c in checks):
            return checks, None
        return _with_baseline(cluster, snap, checks, baseline_from(inventory, run.target.ref), run=run,
                              settings=settings, clock=clock)
    view = RequestedView.model_validate(kept)
    fresh: dict[str, Node] = {}
    checks, container = _own_checks(cluster, snap, run=run, settings=settings, read=fresh)
    if any(c.status == "fail" for c in checks):
        return checks, None
    sample = log_sample(view, snap.pods, run.canary_nodes, REGISTRATION_SAMPLE, fresh)
    inventory = _target_inventory(cluster, snap, run=run, settings=settings, nodes=list(fresh.values()),
                                  logs_of=sample)
    checks += _inventory_checks(inventory, snap, run=run, settings=settings, container=container,
                                classes=view.hardware_classes)
    if any(c.status == "fail" for c in checks):
        return checks, None
    return _with_baseline(cluster, snap, checks, baseline_with(inventory, view, run.target.ref), run=run,
                          settings=settings, clock=clock)


def _target_inventory(cluster: Cluster, snap: Snapshot, *, run: Run, settings: StepSettings, nodes: list[Node],
                      logs_of: set[str], owned: bool = True) -> Inventory:
    """An inventory of the target that lists no node: ``nodes`` are the ones read, and only the
    plugin pods on ``logs_of`` have their registration read; its pods are the snapshot's (``owned``)
    or listed again."""
    return take_inventory(cluster, targets=[run.target.ref], gpu_resources=settings.gpu_resources,
                          registration=settings.registration, in_use_of=(),
                          owned={run.target.ref: snap.pods} if owned else None, dra_plugins=classify(snap.ds) != "device-plugin", nodes=nodes, log_nodes=logs_of)


def _with_baseline(cluster: Cluster, snap: Snapshot, checks: list[Check], baseline: Baseline, *, run: Run,
                   settings: StepSettings, clock: Clock | None) -> tuple[list[Check], Baseline]:
    """``checks`` with the baseline's, a node caught mid-change read again (it, its plugin pod and
    that pod's registration, nothing else) until it settles or ``settings.settle_window`` passes."""
    if clock is not None and _unsettled(baseline) and settings.settle_window > 0:
        resources = tuple(settings.gpu_resources)

        def settled() -> Baseline | None:
            names = _unsettled(baseline)
            nodes = list(sample_nodes(cluster, names, resources, {}).values())
            again = baseline_from(_target_inventory(cluster, snap, run=run, settings=settings, nodes=nodes,
                                                    logs_of=set(names), owned=False), run.target.ref)
            merged = baseline.model_copy(update={"nodes": {
                **baseline.nodes, **{n: again.nodes[n] for n in names if n in again.nodes}}})
            return merged if not _unsettled(merged) else None

        baseline = wait_for(clock, timeout=settings.settle_window, interval=max(settings.poll_interval, 1.0),
                            probe=settled) or baseline
    degraded = _unsettled(baseline)
    note = f"; degraded before the run: {', '.join(degraded)}" if degraded else ""
    checks.append(passed("baseline", f"baseline of {plural(len(baseline.nodes), 'node')} recorded{note}",
                         nodes=sorted(baseline.nodes), taken_at=baseline.taken_at.isoformat(), degraded=degraded))
    return checks, baseline
