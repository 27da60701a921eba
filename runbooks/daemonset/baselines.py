"""The baseline of an upgrade: what every node of the plugin looked like before the canary.

Purely data: :func:`baseline_from` reduces an :class:`~runbooks.inventory.Inventory`
(taken by the canary's pre-checks) to what verify and rollback compare against, per node
of the plugin DaemonSet: GPU capacity and allocatable, the plugin pod (name, uid,
restarts, images, registration) and, for DRA drivers, the devices of its ResourceSlices;
and the hardware classes of those nodes (GPU product, driver branch, runtime, with their
driver, CUDA, kernel and OS versions and node names: a few short strings, not per node).
It is stored in the run's progress, so it serializes losslessly.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict

from pydantic import Field

from runbooks.inventory.models import HardwareClass, Inventory, Model, PluginKind
from runbooks.inventory.stacks import hardware_classes


class NodeBaseline(Model):
    name: str
    capacity: dict[str, int] = Field(default_factory=dict, description="GPU resources only")
    allocatable: dict[str, int] = Field(default_factory=dict, description="GPU resources only")
    pod: str | None = Field(None, description="the plugin pod on the node")
    pod_uid: str | None = None
    restarts: int = 0
    images: dict[str, str] = Field(default_factory=dict, description="container -> image of the plugin pod")
    revision_hash: str | None = None
    registered: bool | None = Field(None, description="registered: a device plugin's log line, a DRA driver's slices")
    slices: dict[str, int] = Field(default_factory=dict, description="DRA driver -> devices in its ResourceSlices")


class Baseline(Model):
    taken_at: dt.datetime
    daemonset: str = Field(description="namespace/name")
    kind: PluginKind
    drivers: list[str] = Field(default_factory=list, description="DRA drivers the DaemonSet serves")
    gpu_resources: list[str]
    images: dict[str, str] = Field(default_factory=dict, description="container -> image of the template")
    revision_hash: str | None = None
    nodes: dict[str, NodeBaseline] = Field(default_factory=dict, description="every node the DaemonSet runs on")
    claims_allocated: list[str] = Field(default_factory=list, description="namespace/name of allocated claims of its drivers")
    hardware_classes: list[HardwareClass] = Field(default_factory=list, description="the hardware classes of its nodes")

    def node(self, name: str) -> NodeBaseline | None:
        return self.nodes.get(name)

    def class_of(self, node: str) -> HardwareClass | None:
        """The hardware class ``node`` was in when the baseline was taken."""
        return next((c for c in self.hardware_classes if node in c.nodes), None)


def baseline_from(inventory: Inventory, ref: str) -> Baseline:
    """The baseline of the DaemonSet ``ref`` (``namespace/name``); ``KeyError`` if the
    inventory did not see it."""
    ds = inventory.daemonset(ref)
    if ds is None:
        raise KeyError(ref)
    nodes = {n.name: n for n in inventory.nodes}
    slices: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for s in inventory.slices:
        if s.node and s.driver in ds.drivers:
            slices[s.node][s.driver] += s.devices
    per_node: dict[str, NodeBaseline] = {}
    for pod in ds.pods:
        if pod.deleting or not pod.node:
            continue
        node = nodes.get(pod.node)
        per_node[pod.node] = NodeBaseline(
            name=pod.node,
            capacity=dict(node.capacity) if node else {},
            allocatable=dict(node.allocatable) if node else {},
            pod=pod.name, pod_uid=pod.uid, restarts=pod.restarts, images=dict(pod.images),
            revision_hash=pod.revision_hash, registered=pod.registered,
            slices=dict(slices.get(pod.node, {})),
        )
    claims = sorted(
        f"{c.namespace}/{c.name}" for c in inventory.claims
        if c.state.startswith("allocated") and set(c.drivers) & set(ds.drivers)
    )
    return Baseline(
        taken_at=inventory.taken_at, daemonset=ref, kind=ds.kind, drivers=list(ds.drivers),
        gpu_resources=list(inventory.gpu_resources), images=dict(ds.images),
        revision_hash=ds.current_revision_hash, nodes=dict(sorted(per_node.items())), claims_allocated=claims,
        hardware_classes=hardware_classes(n for n in inventory.nodes if n.name in per_node),
    )
