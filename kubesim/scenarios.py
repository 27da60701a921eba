"""Scenarios: a :class:`~kubesim.simulation.Simulation` with its controllers and a cluster
loaded in a settled state (pods running and ready, device plugins registered, DRA slices
published), so nothing churns at start.

- ``gpu-small``: ``gpu-node1..3`` (8 GPUs each) and ``cpu-node1``; the NVIDIA device
  plugin DaemonSet (its v0.14.2 static manifest with the admin's two edits,
  :data:`ADMIN_EDITS`), the DRA example driver's kubelet plugin and its class, ResourceSlices
  (1.30+), claims ``ml-team/shared-gpu`` (allocated, reserved by ``inference-0``) and
  ``ml-team/pending-gpu`` (pending), and ``trainer-0``/``trainer-1`` using 4 GPUs each.
- ``gpu-large``: ``nodes`` GPU nodes (default 5000) with about ten pods each: the device
  plugin, the DRA plugin (only from 1.30, where it publishes slices), kube-proxy and
  node-exporter DaemonSet pods, and six one-GPU workers; loaded with ``store.load``.
  Its nodes carry failure-domain labels (:func:`failure_domain`): ``gpu-node<i>`` is in
  ``topology.kubernetes.io/region: sim-region-1``, ``topology.kubernetes.io/zone:
  sim-zone-a|b|c`` round-robin (node 1 in a, 2 in b, 3 in c, 4 in a, ...) and
  ``kubesim.io/rack: <zone>-rack<k>``, eight nodes to a rack within a zone (zone a's first
  eight nodes, 1, 4, ..., 22, are ``sim-zone-a-rack1``, node 25 opens ``sim-zone-a-rack2``).
  ``gpu-small``'s nodes have none of these.
- ``gpu-unsafe``: ``gpu-small``'s four nodes with plugin manifest mistakes planted that break
  GPU nodes though the image is fine, each a named delta on NVIDIA's static manifest
  (:mod:`kubesim.plugin_manifest`; docs/kubesim.md lists them): the plugin DaemonSet with the
  admin's nodeSelector, FAIL_ON_INIT_ERROR left as the manifest ships it (``false``), and
  someone's edits: the priority class removed, the container's securityContext removed,
  ``maxUnavailable: 2``; ``gpu-node3`` tainted ``example.com/maintenance=planned:NoSchedule``,
  which it does not tolerate, so no plugin runs there; the manifest applied a second time as
  ``nvidia-device-plugin-legacy``, as shipped (no nodeSelector: it runs on ``cpu-node1`` too)
  but with its socket directory on the wrong hostPath (``/var/lib/kubelet/plugins``),
  advertising ``nvidia.com/gpu`` on the same nodes; no DRA driver.
- ``gpu-mixed``: mixed hardware, ``gpu-node1..5`` (8 GPUs each) and ``cpu-node1``, with
  gpu-small's DaemonSets and DRA class: ``gpu-node1``/``gpu-node2`` are A100 nodes on driver
  535 (CUDA 12.2, Ubuntu 22.04, containerd 1.7), ``gpu-node3``/``gpu-node4`` H100 nodes on
  driver 550 (CUDA 12.4, Ubuntu 24.04, containerd 2.0), and ``gpu-node5`` a GPU node without
  GPU Feature Discovery labels (its product, driver and CUDA are unknown; Rocky Linux 9);
  ``trainer-0`` on ``gpu-node1`` and ``trainer-1`` on ``gpu-node3`` use 4 GPUs each.
- ``dra-broken-claims``: gpu-small plus broken ResourceClaims in ``ml-team`` (:func:`_broken_claims`).
- ``gpu-helm``, ``gpu-helm-mig``, ``gpu-operator``: NVIDIA's Helm chart and GPU operator installed
  from their published objects (:mod:`kubesim.installs`).
- ``dra-example-driver``, ``nvidia-dra-driver``: the DRA drivers' own charts (1.32 on,
  :mod:`kubesim.dra_installs`).

The GPU nodes of ``gpu-small`` and ``gpu-unsafe`` carry GFD's labels of an A100 node on
driver 535 (:mod:`kubesim.hardware`); ``gpu-large``'s carry none (kept light at 5000 nodes).
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable
from typing import Any

from kubesim import dra, dra_installs, ipam
from kubesim import plugin_manifest as pm
from kubesim.batchjobs import JobController
from kubesim.clock import rfc3339
from kubesim.crds import CrdController
from kubesim.daemonsets import DaemonSetController
from kubesim.deployments import DeploymentController, ReplicaSetController
from kubesim.disruption import DisruptionController
from kubesim.fixtures import (
    NFD_GPU,
    DaemonPods,
    container,
    make_daemonset,
    make_namespace,
    make_node,
    pod_spec,
    revision_for,
    settle_daemonset,
    workload_pod,
)
from kubesim.gpuoperator import GpuOperator
from kubesim.hardware import A100_535, H100_550, Stack, equip
from kubesim.heartbeats import NodeHeartbeats
from kubesim.installkinds import BuiltinObjects
from kubesim.installs import INSTALLS, install
from kubesim.kubelets import KubeletController
from kubesim.namespaces import NamespaceController
from kubesim.nodestatus import UnschedulableTaints
from kubesim.rootca import RootCAPublisher
from kubesim.scheduling import Scheduler
from kubesim.simulation import Simulation
from kubesim.statefulsets import StatefulSetController

SCENARIOS = ("gpu-small", "gpu-large", "gpu-unsafe", "gpu-mixed", "dra-broken-claims", *INSTALLS,
             *dra_installs.DRA_INSTALLS)
GPUS_PER_NODE = 8
NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease", "dra-example-driver", "ml-team")
DEVICE_PLUGIN_IMAGE = "nvcr.io/nvidia/k8s-device-plugin:v0.14.2"
DRA_IMAGE = "registry.k8s.io/dra-example-driver/dra-example-driver:v0.1.0"
WORKLOAD_IMAGES = ("registry.example.com/ml/trainer:2.1.0", "registry.example.com/ml/inference:1.4.0",
                   "registry.example.com/ml/worker:3.0.2")
"""The scenarios' own workloads, built by the cluster's owner and pushed to its private registry
(``registry.example.com``, RFC 2606): every scenario pushes them when it is built."""
REGION_LABEL, ZONE_LABEL, RACK_LABEL = "topology.kubernetes.io/region", "topology.kubernetes.io/zone", "kubesim.io/rack"
REGION, ZONES, NODES_PER_RACK = "sim-region-1", ("sim-zone-a", "sim-zone-b", "sim-zone-c"), 8
ADMIN_EDITS = (pm.GPU_NODES_ONLY, pm.FAIL_ON_INIT_ERROR)
"""The cluster admin's two edits of the static manifest in every scenario with the plugin."""
UNSAFE_EDITS = (pm.GPU_NODES_ONLY, pm.NO_PRIORITY_CLASS, pm.NO_SECURITY_CONTEXT, pm.max_unavailable(2))
"""gpu-unsafe's plugin: the admin's nodeSelector, FAIL_ON_INIT_ERROR left as shipped (false), and the planted mistakes."""
LEGACY_EDITS = (pm.renamed("nvidia-device-plugin-legacy"), pm.socket_host_path("/var/lib/kubelet/plugins"))
"""gpu-unsafe's second plugin DaemonSet: the manifest applied again, as shipped (no nodeSelector), on the wrong hostPath."""


def failure_domain(index: int) -> dict[str, str]:
    """Region, zone and rack labels of ``gpu-node<index>`` (from 1) in ``gpu-large``: zones
    round-robin, racks of ``NODES_PER_RACK`` consecutive nodes of one zone."""
    zone = ZONES[(index - 1) % len(ZONES)]
    rack = (index - 1) // len(ZONES) // NODES_PER_RACK + 1
    return {REGION_LABEL: REGION, ZONE_LABEL: zone, RACK_LABEL: f"{zone}-rack{rack}"}


def device_plugin_daemonset(created: str, *deltas: pm.Delta) -> dict[str, Any]:
    """NVIDIA's device plugin as its v0.14.2 static manifest ships it (:mod:`kubesim.plugin_manifest`)
    with ``deltas``; by default the two edits of gpu-small's cluster admin (:data:`ADMIN_EDITS`)."""
    return pm.plugin_daemonset(created, *(deltas or ADMIN_EDITS))


DRA_ACCOUNT = "dra-example-driver-service-account"


def dra_plugin_daemonset(created: str) -> dict[str, Any]:
    labels = {"app.kubernetes.io/name": "dra-example-driver", "app.kubernetes.io/component": "kubeletplugin"}
    ctr = container(
        "plugin", DRA_IMAGE, command=["dra-example-kubeletplugin"],
        env=[
            {"name": "CDI_ROOT", "value": "/var/run/cdi"},
            {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "spec.nodeName"}}},
            {"name": "NAMESPACE", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}},
            {"name": "NUM_DEVICES", "value": str(GPUS_PER_NODE)},
        ],
        securityContext={"privileged": True},
        volumeMounts=[
            {"mountPath": "/var/lib/kubelet/plugins_registry", "name": "plugins-registry"},
            {"mountPath": "/var/lib/kubelet/plugins", "name": "plugins"},
            {"mountPath": "/var/run/cdi", "name": "cdi"},
        ],
    )
    spec = pod_spec(
        [ctr], nodeSelector={NFD_GPU: "true"}, serviceAccountName=DRA_ACCOUNT,
        priorityClassName="system-node-critical",
        volumes=[
            {"hostPath": {"path": "/var/lib/kubelet/plugins_registry", "type": ""}, "name": "plugins-registry"},
            {"hostPath": {"path": "/var/lib/kubelet/plugins", "type": ""}, "name": "plugins"},
            {"hostPath": {"path": "/var/run/cdi", "type": ""}, "name": "cdi"},
        ],
    )
    return make_daemonset("dra-example-driver", "dra-example-driver-kubeletplugin", labels, spec, created,
                          ds_labels={"app.kubernetes.io/name": "dra-example-driver"})


def dra_plugin_account(created: str) -> dict[str, Any]:
    """The ServiceAccount the DRA driver's pods name, as its chart creates it beside them
    (kubernetes-sigs/dra-example-driver ``deployments/helm/dra-example-driver/templates/serviceaccount.yaml``,
    ``serviceAccount.create: true``; named by ``_helpers.tpl``), with the DaemonSet's own labels."""
    return {"metadata": {"name": DRA_ACCOUNT, "namespace": "dra-example-driver", "creationTimestamp": created,
                         "labels": {"app.kubernetes.io/name": "dra-example-driver"}}}


def simple_daemonset(ns: str, name: str, image: str, created: str, **spec_extra: Any) -> dict[str, Any]:
    labels = {"k8s-app": name}
    spec = pod_spec([container(name, image)], priorityClassName="system-node-critical", **spec_extra)
    return make_daemonset(ns, name, labels, spec, created, ds_labels=dict(labels))


class _Builder:
    """Collects the objects of one scenario, then loads them into the store in bulk."""

    def __init__(self, sim: Simulation, started: dt.datetime) -> None:
        self.sim, self.started = sim, started
        self.created = rfc3339(started)
        self.objects: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self.slots: dict[int, int] = {}
        self.ds_pods: dict[str, int] = {}
        self.custom: list[tuple[tuple[str, str], dict[str, Any]]] = []

    def add(self, gr: tuple[str, str], obj: dict[str, Any]) -> dict[str, Any]:
        self.objects.setdefault(gr, []).append(obj)
        return obj

    def slot(self, index: int) -> int:
        self.slots[index] = self.slots.get(index, 9) + 1
        return self.slots[index]

    def daemonset(self, ds: dict[str, Any], nodes: list[tuple[str, int]]) -> None:
        pods = DaemonPods(ds, self.sim.minor)
        for node, index in nodes:
            self.add(("", "pods"), pods.pod(node, index, self.slot(index), self.started))
        settle_daemonset(ds, len(nodes))
        self.add(("apps", "daemonsets"), ds)
        self.add(("apps", "controllerrevisions"), revision_for(ds, self.created))

    def add_custom(self, gr: tuple[str, str], obj: dict[str, Any]) -> dict[str, Any]:
        """An object of a kind a CRD of the scenario serves: loaded once the CRDs are served (:meth:`load_custom`)."""
        self.custom.append((gr, obj))
        return obj

    def load(self) -> None:
        order = [("", "namespaces"), ("", "nodes")]
        for gr in order + [g for g in self.objects if g not in order]:
            if gr in self.objects:
                self.sim.store.load(gr, self.objects[gr])

    def load_custom(self) -> None:
        for gr, obj in self.custom:
            self.sim.store.load(gr, [obj])


def _base(b: _Builder, gpu_nodes: list[tuple[str, int]], kubelet: KubeletController, *, dra_plugin: bool = True,
          node_labels: Callable[[int], dict[str, str]] | None = None) -> None:
    minor = b.sim.minor
    for ns in NAMESPACES:
        b.add(("", "namespaces"), make_namespace(ns, b.created))
    for name, index in gpu_nodes:
        node = b.add(("", "nodes"), make_node(name, index, minor, gpus=GPUS_PER_NODE, created=b.created,
                                              labels=node_labels(index) if node_labels else None))
        node["metadata"]["uid"] = str(uuid.uuid4())
        kubelet.gpus[name] = GPUS_PER_NODE
    b.daemonset(device_plugin_daemonset(b.created), gpu_nodes)
    if dra_plugin:
        b.add(("", "serviceaccounts"), dra_plugin_account(b.created))
        b.daemonset(dra_plugin_daemonset(b.created), gpu_nodes)
    gr, klass = dra.device_class(minor)
    klass["metadata"]["creationTimestamp"] = b.created
    b.add(gr, klass)
    if dra.has_slices(minor) and dra_plugin:
        for node in b.objects[("", "nodes")]:
            name = node["metadata"]["name"]
            if name in kubelet.gpus:
                obj = dra.resource_slice(minor, name, node["metadata"]["uid"], GPUS_PER_NODE)
                obj["metadata"]["name"] = obj["metadata"]["generateName"] + uuid.uuid4().hex[:5]
                obj["metadata"]["creationTimestamp"] = b.created
                b.add(dra.SLICES, obj)


def _equip(b: _Builder, stacks: dict[str, Stack | None]) -> None:
    """GFD labels and nodeInfo of the named nodes (:func:`kubesim.hardware.equip`)."""
    for node in b.objects[("", "nodes")]:
        name = node["metadata"]["name"]
        if name in stacks:
            equip(node, stacks[name], gpus=GPUS_PER_NODE, labelled_at=b.started)


def _gpu_small(b: _Builder, kubelet: KubeletController) -> None:
    minor = b.sim.minor
    gpu_nodes = [(f"gpu-node{i}", i) for i in (1, 2, 3)]
    _base(b, gpu_nodes, kubelet)
    _equip(b, dict.fromkeys((name for name, _ in gpu_nodes), A100_535))
    b.add(("", "nodes"), make_node("cpu-node1", 4, minor, gpus=0, created=b.created))
    for i, (node, index) in enumerate(gpu_nodes[:2]):
        b.add(("", "pods"), workload_pod("ml-team", f"trainer-{i}", node, index, b.slot(index),
                                         "registry.example.com/ml/trainer:2.1.0", b.started, minor, gpus=4,
                                         labels={"app": "trainer"}))
    pod_uid = str(uuid.uuid4())
    ref = dra.pod_claim_ref(minor, "gpu", claim="shared-gpu")
    node, index = gpu_nodes[2]
    b.add(("", "pods"), workload_pod("ml-team", "inference-0", node, index, b.slot(index),
                                     "registry.example.com/ml/inference:1.4.0", b.started, minor,
                                     labels={"app": "inference"}, claims=[ref], uid=pod_uid))
    shared = {"metadata": {"name": "shared-gpu", "namespace": "ml-team", "creationTimestamp": b.created,
                           "finalizers": [dra.claim_finalizer(minor, dra.DRIVER)]},  # allocated: protected
              "spec": dra.claim_spec(minor)}
    shared["status"] = {**dra.allocation_status(minor, node, [("gpu" if minor > 30 else "", dra.DRIVER, "gpu-0")]),
                        "reservedFor": [{"resource": "pods", "name": "inference-0", "uid": pod_uid}]}
    b.add(dra.CLAIMS, shared)
    b.add(dra.CLAIMS, {"metadata": {"name": "pending-gpu", "namespace": "ml-team", "creationTimestamp": b.created},
                       "spec": dra.claim_spec(minor)})


MAINTENANCE_TAINT = {"key": "example.com/maintenance", "value": "planned", "effect": "NoSchedule"}


def _gpu_unsafe(b: _Builder, kubelet: KubeletController) -> None:
    """gpu-small's nodes with the manifest mistakes the inventory must find, planted (see the
    module's docstring); no DRA driver."""
    minor = b.sim.minor
    gpu_nodes = [(f"gpu-node{i}", i) for i in (1, 2, 3)]
    for ns in NAMESPACES:
        b.add(("", "namespaces"), make_namespace(ns, b.created))
    for name, index in gpu_nodes:
        node = b.add(("", "nodes"), make_node(name, index, minor, gpus=GPUS_PER_NODE, created=b.created))
        node["metadata"]["uid"] = str(uuid.uuid4())
        kubelet.gpus[name] = GPUS_PER_NODE
        if name == "gpu-node3":
            node["spec"]["taints"] = [dict(MAINTENANCE_TAINT)]
    cpu = ("cpu-node1", 4)
    b.add(("", "nodes"), make_node(cpu[0], cpu[1], minor, gpus=0, created=b.created))
    _equip(b, dict.fromkeys((name for name, _ in gpu_nodes), A100_535))
    b.daemonset(device_plugin_daemonset(b.created, *UNSAFE_EDITS), gpu_nodes[:2])
    b.daemonset(device_plugin_daemonset(b.created, *LEGACY_EDITS), [*gpu_nodes[:2], cpu])


MIXED_STACKS: dict[str, Stack | None] = {
    "gpu-node1": A100_535, "gpu-node2": A100_535, "gpu-node3": H100_550, "gpu-node4": H100_550, "gpu-node5": None,
}
"""gpu-mixed's GPU nodes and their stacks (None: no GFD labels)."""


def _gpu_mixed(b: _Builder, kubelet: KubeletController) -> None:
    """Two GPU products on two driver branches and two runtimes, and a GPU node GFD never
    labelled (see the module's docstring)."""
    minor = b.sim.minor
    gpu_nodes = [(name, int(name.removeprefix("gpu-node"))) for name in MIXED_STACKS]
    _base(b, gpu_nodes, kubelet)
    b.add(("", "nodes"), make_node("cpu-node1", len(gpu_nodes) + 1, minor, gpus=0, created=b.created))
    _equip(b, MIXED_STACKS)
    for i, (node, index) in enumerate((gpu_nodes[0], gpu_nodes[2])):
        b.add(("", "pods"), workload_pod("ml-team", f"trainer-{i}", node, index, b.slot(index),
                                         "registry.example.com/ml/trainer:2.1.0", b.started, minor, gpus=4,
                                         labels={"app": "trainer"}))


def _gpu_large(b: _Builder, kubelet: KubeletController, count: int) -> None:
    minor = b.sim.minor
    gpu_nodes = [(f"gpu-node{i}", i) for i in range(1, count + 1)]
    _base(b, gpu_nodes, kubelet, dra_plugin=dra.has_slices(minor), node_labels=failure_domain)
    b.daemonset(simple_daemonset("kube-system", "kube-proxy", "registry.k8s.io/kube-proxy:" + _k8s_tag(minor), b.created,
                                 hostNetwork=True), gpu_nodes)
    b.daemonset(simple_daemonset("kube-system", "node-exporter", "quay.io/prometheus/node-exporter:v1.8.1", b.created,
                                 hostNetwork=True), gpu_nodes)
    image = "registry.example.com/ml/worker:3.0.2"
    for node, index in gpu_nodes:
        for j in range(6):
            b.add(("", "pods"), workload_pod("ml-team", f"worker-{index}-{j}", node, index, b.slot(index), image,
                                             b.started, minor, gpus=1, labels={"app": "worker"}))


def _broken_claims(b: _Builder) -> None:
    """gpu-small plus, in ml-team, the claims left broken by what happened to their holders:
    ``orphaned-gpu`` allocated on gpu-node1 and reserved for a pod ``batch-7`` that no longer
    exists; ``stranded-gpu`` allocated on cpu-node1, where the driver publishes no slice;
    ``stuck-gpu`` deleted an hour ago, allocated on gpu-node2 and reserved for nobody, held by
    its finalizer (gpu-small's ``pending-gpu``, pending with no pod, is broken too)."""
    minor = b.sim.minor
    gone = rfc3339(b.started + dt.timedelta(hours=23))

    def claim(name: str, node: str, device: str, **extra: Any) -> dict[str, Any]:
        meta = {"name": name, "namespace": "ml-team", "creationTimestamp": b.created,
                "finalizers": [dra.claim_finalizer(minor, dra.DRIVER)], **extra.pop("meta", {})}
        status = {**dra.allocation_status(minor, node, [("gpu" if minor > 30 else "", dra.DRIVER, device)]), **extra}
        return b.add(dra.CLAIMS, {"metadata": meta, "spec": dra.claim_spec(minor), "status": status})

    claim("orphaned-gpu", "gpu-node1", "gpu-7",
          reservedFor=[{"resource": "pods", "name": "batch-7", "uid": str(uuid.uuid4())}])
    claim("stranded-gpu", "cpu-node1", "gpu-0")
    claim("stuck-gpu", "gpu-node2", "gpu-7", meta={"deletionTimestamp": gone, "deletionGracePeriodSeconds": 0})


def _k8s_tag(minor: int) -> str:
    from kubesim.resources import git_version

    return git_version(minor)


def build(*, scenario: str = "gpu-small", nodes: int | None = None, minor: int = 31, event_ttl: float = 3600,
          speed: float = 1.0) -> Simulation:
    """A simulation of ``scenario`` on Kubernetes 1.``minor``, settled and with its controllers."""
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r}: use one of {', '.join(SCENARIOS)}")
    sim = Simulation(minor=minor, event_ttl=event_ttl, speed=speed)
    for image in WORKLOAD_IMAGES:
        sim.registry.push(image)
    b = _Builder(sim, sim.clock.now() - dt.timedelta(days=1))
    kubelet = KubeletController()
    if scenario == "gpu-small":
        _gpu_small(b, kubelet)
    elif scenario == "gpu-unsafe":
        _gpu_unsafe(b, kubelet)
    elif scenario == "gpu-mixed":
        _gpu_mixed(b, kubelet)
    elif scenario == "dra-broken-claims":
        _gpu_small(b, kubelet)
        _broken_claims(b)
    elif scenario in INSTALLS:
        install(b, kubelet, scenario)
    elif scenario in dra_installs.DRA_INSTALLS:
        dra_installs.install(b, kubelet, scenario)
    else:
        _gpu_large(b, kubelet, 5000 if nodes is None else nodes)
    b.load()
    sim.add_controller("namespaces", NamespaceController())
    sim.add_controller("root-ca-cert-publisher", RootCAPublisher())
    sim.add_controller("daemonsets", DaemonSetController())
    sim.add_controller("deployments", DeploymentController())
    sim.add_controller("replicasets", ReplicaSetController())
    sim.add_controller("statefulsets", StatefulSetController())
    sim.add_controller("disruption", DisruptionController())
    sim.add_controller("nodelifecycle", UnschedulableTaints())
    sim.add_controller("nodeipam", ipam.NodeIpam())
    sim.add_controller("kubelet", kubelet)
    sim.add_controller("nodeheartbeats", NodeHeartbeats())
    sim.add_controller("scheduler", Scheduler())
    sim.add_controller("builtins", BuiltinObjects())
    sim.add_controller("crds", CrdController())
    b.load_custom()
    if scenario == "gpu-operator":
        sim.add_controller("gpu-operator", GpuOperator())
    sim.add_controller("jobs", JobController())
    sim.settle()
    if scenario in dra_installs.DRA_INSTALLS:
        dra_installs.settle(sim)
    sim.store.start_watch_caches()
    return sim
