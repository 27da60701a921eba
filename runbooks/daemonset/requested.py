"""What a canary's request read of the cluster, kept in the run for the pre-checks after approval.

Purely data. The request takes an inventory of the target (every node, the DaemonSet, its pods)
before any approver is asked; :func:`view_of` keeps of it what the pre-checks after approval
cannot get cheaper than by listing every node again: the GPUs of each node the target's pods
run on, and the hardware classes of those nodes. After approval the pre-checks read again only
what may have moved and what a safety check judges (the DaemonSet, its pods from the step's
cache, the canary nodes, the registration of their pods and of a sample per class:
:func:`log_sample`) and :func:`baseline_with` cuts the baseline from those reads and this view
(issue 63: a 5,000-node canary listed every node three times and read 200 plugin logs again).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence

from pydantic import Field

from runbooks.daemonset.baselines import Baseline, baseline_from
from runbooks.inventory.models import HardwareClass, Inventory, Model, Node, PluginPod
from runbooks.inventory.plugins import suspicion
from runbooks.inventory.stacks import hardware_classes

REQUESTED = "requested"
"""The key of the run's progress that holds the request's :class:`RequestedView`."""


class NodeGpus(Model):
    capacity: dict[str, int] = Field(default_factory=dict, description="GPU resources only")
    allocatable: dict[str, int] = Field(default_factory=dict, description="GPU resources only")


class RequestedView(Model):
    taken_at: dt.datetime = Field(description="the API server's time of the request's inventory")
    gpu_resources: list[str]
    nodes: dict[str, NodeGpus] = Field(default_factory=dict, description="every node the target's pods ran on")
    hardware_classes: list[HardwareClass] = Field(default_factory=list, description="the classes of those nodes")


def view_of(inventory: Inventory, reached: set[str]) -> RequestedView:
    """What the request's ``inventory`` says of the nodes in ``reached`` (the target's and the canary's)."""
    nodes = [n for n in inventory.nodes if n.name in reached]
    return RequestedView(
        taken_at=inventory.taken_at, gpu_resources=list(inventory.gpu_resources),
        nodes={n.name: NodeGpus(capacity=dict(n.capacity), allocatable=dict(n.allocatable)) for n in nodes},
        hardware_classes=hardware_classes(nodes),
    )


def log_sample(view: RequestedView, pods: Sequence[PluginPod], canary: Sequence[str], per_class: int,
               fresh: dict[str, Node]) -> set[str]:
    """The nodes whose plugin pod's registration the baseline reads: the canary nodes, and in each
    hardware class up to ``per_class`` others, the most suspect first (not Ready, restarted, fewer
    allocatable GPUs than capacity: :func:`~runbooks.inventory.plugins.suspicion`), then by name."""
    on = {p.node: p for p in pods if p.node and not p.deleting}
    chosen = {n for n in canary if n in on}

    def doubt(name: str) -> int:
        node = fresh.get(name)
        gpus = node or view.nodes.get(name)
        short = gpus is not None and any(gpus.allocatable.get(r, 0) < c or not gpus.allocatable.get(r, 0)
                                         for r, c in gpus.capacity.items())
        return suspicion(on[name], {}) + (4 if short else 0)

    for klass in view.hardware_classes:
        members = [n for n in klass.nodes if n in on and n not in chosen]
        ranked = sorted(members, key=lambda n: (-doubt(n), n))
        chosen.update(ranked[:per_class])
    return chosen


def baseline_with(inventory: Inventory, view: RequestedView, ref: str) -> Baseline:
    """The baseline of ``ref`` from the inventory taken after approval (the DaemonSet, its pods,
    the nodes it read again) and, for every other node, the GPUs and classes the request read."""
    cut = baseline_from(inventory, ref)
    read = {n.name for n in inventory.nodes}
    nodes = {}
    for name, entry in cut.nodes.items():
        gpus = view.nodes.get(name)
        if name not in read and gpus is not None:
            entry = entry.model_copy(update={"capacity": dict(gpus.capacity), "allocatable": dict(gpus.allocatable)})
        nodes[name] = entry
    return cut.model_copy(update={"nodes": nodes, "hardware_classes": classes_of(view, nodes)})


def classes_of(view: RequestedView, nodes: Iterable[str]) -> list[HardwareClass]:
    """The request's hardware classes, each with only its nodes among ``nodes`` (empty ones dropped)."""
    wanted = set(nodes)
    kept = [c.model_copy(update={"nodes": [n for n in c.nodes if n in wanted]}) for c in view.hardware_classes]
    return [c for c in kept if c.nodes]
