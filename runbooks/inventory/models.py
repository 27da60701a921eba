"""The inventory: what the cluster looked like at one moment, as pydantic models.

It is the baseline later steps compare against (verify, stability reports), so it
serializes losslessly: ``Inventory.model_validate_json(inv.model_dump_json()) == inv``.
Slack-free and surface-neutral; renderers live in ``bot/``.

Every string it keeps of what the cluster said is a :data:`Shown`: made inert once, as the model
is built from what was read (:func:`runbooks.characters.shown`: control, bidi and zero-width
characters escaped, mention openers broken), so no surface shows a node's ``osImage`` raw
(attack run, finding 3); ``--json`` carries these values as kept.
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from runbooks.characters import shown
from runbooks.owners import Owner

Severity = Literal["info", "warn", "fail"]
GateState = Literal["enabled", "disabled", "unknown"]
PluginKind = Literal["device-plugin", "dra-kubelet-plugin"]
Shown = Annotated[str, AfterValidator(shown)]
"""A string read from the cluster, kept as :func:`runbooks.characters.shown` makes it (idempotent:
an inventory read back from the store is unchanged)."""


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class KubernetesInfo(Model):
    version: Shown = Field(description="gitVersion, e.g. v1.31.13")
    minor: int
    platform: Shown = ""


class DraInfo(Model):
    feature_gate: GateState = Field(description="DynamicResourceAllocation as /metrics reports it")
    stage: str | None = Field(None, description="ALPHA, BETA or GA; None when unknown")
    served_versions: list[str] = Field(default_factory=list, description="resource.k8s.io, newest first")
    kinds: dict[str, list[str]] = Field(default_factory=dict, description="kinds per served version")
    read_versions: dict[str, str] = Field(default_factory=dict, description="kind -> version the bot read")


class Taint(Model):
    key: Shown
    value: Shown = ""
    effect: Shown


class Node(Model):
    name: Shown
    ready: bool
    unschedulable: bool = Field(description="cordoned")
    taints: list[Taint] = Field(default_factory=list)
    gpu_hardware: bool = Field(description="NFD or GPU-operator labels say the node has GPUs")
    labels: dict[Shown, Shown] = Field(default_factory=dict, description="NFD and GPU labels only")
    capacity: dict[str, int] = Field(default_factory=dict, description="GPU extended resources")
    allocatable: dict[str, int] = Field(default_factory=dict, description="GPU extended resources")
    kubelet_version: Shown = ""
    in_use: dict[str, int] = Field(default_factory=dict, description="GPU extended resources requested by the "
                                   "node's pods that have not finished")
    devices_in_use: int = Field(0, description="DRA devices allocated to claims on the node")
    os_image: Shown | None = Field(None, description="status.nodeInfo.osImage; None: unknown")
    kernel: Shown | None = Field(None, description="status.nodeInfo.kernelVersion; None: unknown")
    runtime: Shown | None = Field(None, description="status.nodeInfo.containerRuntimeVersion; None: unknown")
    gpu_product: Shown | None = Field(None, description="GFD's nvidia.com/gpu.product; None: not labelled")
    gpu_family: Shown | None = Field(None, description="GFD's nvidia.com/gpu.family; None: not labelled")
    gpu_count: int | None = Field(None, description="GFD's nvidia.com/gpu.count; None: not labelled")
    driver: Shown | None = Field(None, description="NVIDIA driver version from GFD's labels; None: not labelled")
    cuda: Shown | None = Field(None, description="CUDA version from GFD's labels; None: not labelled")

    @property
    def busy(self) -> int:
        """Devices in use on the node, of every kind."""
        return sum(self.in_use.values()) + self.devices_in_use


class HardwareClass(Model):
    """GPU nodes of one GPU product, driver branch and runtime branch (see ``stacks``)."""

    name: str = Field(description="product / driver branch / runtime, e.g. "
                      "NVIDIA-A100-SXM4-80GB / driver 535 / containerd 1.7")
    gpu_product: Shown | None = None
    driver_branch: Shown | None = Field(None, description="the driver's major version, e.g. 535")
    runtime: Shown | None = Field(None, description="runtime name and minor, e.g. containerd 1.7")
    drivers: list[Shown] = Field(default_factory=list, description="driver versions of its nodes")
    cuda: list[Shown] = Field(default_factory=list, description="CUDA versions of its nodes")
    kernels: list[Shown] = Field(default_factory=list)
    os_images: list[Shown] = Field(default_factory=list)
    kubelets: list[Shown] = Field(default_factory=list)
    nodes: list[Shown] = Field(default_factory=list)


class PluginPod(Model):
    name: Shown
    node: Shown
    phase: Shown
    ready: bool
    restarts: int
    crashloop: bool
    waiting_reason: Shown | None = None
    images: dict[Shown, Shown] = Field(default_factory=dict, description="container -> image")
    image_ids: dict[Shown, Shown] = Field(default_factory=dict, description="container -> the image it runs as the "
                                          "runtime resolved it (status imageID, repo@sha256:…), those reported")
    revision_hash: Shown | None = Field(None, description="controller-revision-hash label")
    registered: bool | None = Field(
        None, description="registered with the kubelet: a device plugin's log shows the registration line; a DRA "
        "driver's ResourceSlices for the node are published by this pod (issue 59); None when not known"
    )
    uid: str | None = Field(None, description="metadata.uid (deletes are made with it as precondition)")
    deleting: bool = Field(False, description="has a deletionTimestamp: terminating")
    started: dict[Shown, dt.datetime] = Field(default_factory=dict,
                                              description="container -> when it started running (running ones only)")
    unschedulable: Shown | None = Field(
        None, description="the scheduler's message while the pod cannot be scheduled (PodScheduled=False, reason "
        "Unschedulable); None once it is bound or before the scheduler has tried")


class ContainerFacts(Model):
    """What the findings read of one container of a plugin's pod template."""

    name: Shown
    image: Shown = ""
    env: dict[Shown, Shown] = Field(default_factory=dict, description="literal values (valueFrom left out)")
    args: list[Shown] = Field(default_factory=list)
    command: list[Shown] = Field(default_factory=list)
    privileged: bool = False
    allow_privilege_escalation: bool | None = Field(None, description="None: not set (Kubernetes allows it)")
    drops_all: bool = Field(False, description="capabilities.drop has ALL")
    adds: list[Shown] = Field(default_factory=list, description="capabilities.add")
    mounts: dict[Shown, Shown] = Field(default_factory=dict, description="mountPath -> volume name")


class Manifest(Model):
    """What the findings read of a plugin's pod template: the settings that break GPU nodes."""

    priority_class: Shown = ""
    tolerations: list[dict[Shown, Shown]] = Field(default_factory=list)
    host_paths: dict[Shown, Shown] = Field(default_factory=dict, description="volume name -> hostPath path")
    containers: list[ContainerFacts] = Field(default_factory=list)


class DaemonSet(Model):
    namespace: Shown
    name: Shown
    kind: PluginKind
    drivers: list[Shown] = Field(default_factory=list, description="DRA drivers it serves")
    images: dict[Shown, Shown] = Field(description="container -> image of the pod template")
    update_strategy: Shown
    max_unavailable: Shown | None = None
    current_revision: int | None = Field(None, description="newest ControllerRevision number")
    current_revision_hash: Shown | None = None
    generation: int = Field(0, description="metadata.generation")
    observed_generation: int = Field(0, description="status.observedGeneration")
    desired: int = Field(0, description="status.desiredNumberScheduled")
    current: int = Field(0, description="status.currentNumberScheduled")
    updated: int = Field(0, description="status.updatedNumberScheduled")
    ready: int = Field(0, description="status.numberReady")
    available: int = Field(0, description="status.numberAvailable")
    selector: dict[Shown, Shown] = Field(default_factory=dict)
    pods: list[PluginPod] = Field(default_factory=list)
    manifest: Manifest = Field(default_factory=Manifest, description="the pod template's settings")
    owners: list[Owner] = Field(default_factory=list, description="who puts a direct change back, the one that "
                                "governs first (runbooks.owners)")

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def owner(self) -> Owner | None:
        """The owner that governs the DaemonSet (a controller, then GitOps, then Helm); None: nobody."""
        return self.owners[0] if self.owners else None


class DeviceClass(Model):
    name: Shown
    kind: Literal["DeviceClass", "ResourceClass"]
    drivers: list[Shown] = Field(default_factory=list, description="drivers its selectors name")


class ResourceSlice(Model):
    name: Shown
    node: Shown | None
    driver: Shown
    pool: Shown = ""
    devices: int = 0
    generation: int = Field(0, description="spec.pool.generation")
    slice_count: int = Field(1, description="spec.pool.resourceSliceCount: the slices its pool says it has")
    owner_node: Shown | None = Field(None, description="the Node its ownerReferences name (a kubelet plugin's)")
    created: dt.datetime | None = Field(None, description="metadata.creationTimestamp")
    written: dt.datetime | None = Field(None, description="its newest write: creation or a managedFields time")


class ResourceClaim(Model):
    namespace: Shown
    name: Shown
    state: str = Field(description="as kubectl prints it: pending, allocated, allocated,reserved, deleted")
    created: dt.datetime | None = None
    age: str = Field("", description="as kubectl prints it, at taken_at")
    classes: list[Shown] = Field(default_factory=list)
    drivers: list[Shown] = Field(default_factory=list, description="drivers of the allocated devices")
    reserved_for: list[Shown] = Field(default_factory=list, description="consumers (pod names)")
    node: Shown | None = Field(None, description="the node an allocated claim's devices are on")
    devices: int = Field(0, description="devices allocated to the claim")
    waiting_pods: list[Shown] = Field(default_factory=list, description="Pending pods that use it")


class Finding(Model):
    severity: Severity
    code: str = Field(description="stable identifier, e.g. plugin-not-registered")
    message: Shown
    next_step: Shown
    object: Shown = Field(description="kind/namespace/name the finding is about")


class MetricCoverage(Model):
    """One metric check as Prometheus can feed it on the GPU nodes: what it reads, where it is blind."""

    check: str
    reads: list[Shown] = Field(default_factory=list, description="the metrics its query selects")
    nodes: int = Field(0, description="GPU nodes whose exporter exports them")
    blind: dict[Shown, Shown] = Field(default_factory=dict, description="node -> why the check cannot judge it")


class MetricsInfo(Model):
    """What the policy's metric checks would find in Prometheus (the inventory's Metrics section)."""

    prometheus: str = Field(description="scheme://host:port of the policy's Prometheus")
    node_label: str = Field("", description="the label naming a series' node (Hostname or hostname)")
    pod_label: str = Field("", description="the label naming a workload's pod (pod or exported_pod)")
    checks: list[MetricCoverage] = Field(default_factory=list)
    error: Shown = Field("", description="why Prometheus could not be asked")


class Inventory(Model):
    taken_at: dt.datetime
    context: str
    server: str
    gpu_resources: list[str]
    kubernetes: KubernetesInfo
    dra: DraInfo
    nodes: list[Node] = Field(default_factory=list)
    classes: list[HardwareClass] = Field(default_factory=list, description="hardware classes: GPU nodes by "
                                         "product, driver branch and runtime, with their nodes")
    daemonsets: list[DaemonSet] = Field(default_factory=list)
    device_classes: list[DeviceClass] = Field(default_factory=list, description="DRA DeviceClasses "
                                              "(ResourceClasses on older APIs)")
    slices: list[ResourceSlice] = Field(default_factory=list)
    claims: list[ResourceClaim] = Field(default_factory=list)
    findings: list[Finding] = Field(default_factory=list)
    notes: list[Shown] = Field(default_factory=list, description="what was not read, and why")
    metrics: MetricsInfo | None = Field(None, description="with a Prometheus in the policy: what its metric "
                                        "checks would read, and where they would be blind")

    @property
    def failed(self) -> bool:
        return any(f.severity == "fail" for f in self.findings)

    def node(self, name: str) -> Node | None:
        return next((n for n in self.nodes if n.name == name), None)

    def daemonset(self, ref: str) -> DaemonSet | None:
        return next((d for d in self.daemonsets if d.ref == ref), None)
