"""Scenarios installed from the DRA drivers' own Helm charts, each object read from the YAML kept in
``kubesim/manifests/`` (each file's header names its source: repository, path, tag and values).

- ``dra-example-driver``: kubernetes-sigs/dra-example-driver's chart v0.2.0 with its default values
  (``dra-example-driver-v0.2.0.yaml``, release and namespace ``dra-example-driver``): the
  kubelet plugin's DaemonSet (no nodeSelector, so on every node, ``cpu-node1`` too; the example
  driver simulates its 8 GPUs wherever it runs), its ServiceAccount, ClusterRole and binding, and
  the ``gpu.example.com`` DeviceClass; gpu-small's nodes (A100s on driver 535) and namespaces, no
  device plugin, no claim. The plugin runs at klog's default verbosity 0 (the chart sets none).
- ``nvidia-dra-driver``: NVIDIA/k8s-dra-driver-gpu's chart v25.8.1 with
  ``gpuResourcesEnabledOverride=true`` (``nvidia-dra-driver-gpu-v25.8.1.yaml``, release and
  namespace ``nvidia-dra-driver-gpu``): the kubelet plugin's DaemonSet of two containers,
  ``compute-domains`` (driver ``compute-domain.nvidia.com``) and ``gpus`` (driver
  ``gpu.nvidia.com``), at the chart's ``logVerbosity`` 4, on the three GPU nodes (its nodeAffinity);
  the ``compute-domain`` controller Deployment on ``control-plane1`` (a control-plane node, tainted
  ``node-role.kubernetes.io/control-plane:NoSchedule``, as its affinity and toleration want); their
  ServiceAccounts and RBAC, and the four DeviceClasses. The GPU nodes are H100 nodes on driver
  570.172.08 (:data:`H100_570`): the compute-domain plugin refuses to start below 570.158.01 while
  its IMEXDaemonsWithDNSNames gate is on (the default), so gpu-small's 535 nodes would not do. No
  device plugin: the chart refuses the gpus driver beside it unless overridden, as here.

In both, no device plugin has ever registered on a node, so no node reports ``nvidia.com/gpu``: the
kubelet puts an extended resource in the node's status only from a registered device plugin (and sets
it to 0, never drops it, once that plugin is gone: kubernetes/kubernetes
``pkg/kubelet/nodestatus/setters.go``, ``MachineInfo``). The GPUs are the DRA drivers' devices.

Both charts say ``kubeVersion: ">=1.32.0-0"``: a build for an older minor is refused, as helm refuses
the install. ResourceSlices are those the pod running on each node publishes
(:mod:`kubesim.dradrivers`), owned by the Node as the kubeletplugin helper sets them.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from kubesim import dra, dradrivers
from kubesim.fixtures import make_namespace, make_node
from kubesim.hardware import A100_535, Stack, equip
from kubesim.installs import _settle, manifest
from kubesim.podstatus import GPU

if TYPE_CHECKING:
    from kubesim.kubelets import KubeletController
    from kubesim.scenarios import _Builder
    from kubesim.simulation import Simulation

EXAMPLE_FILE = "dra-example-driver-v0.2.0.yaml"
NVIDIA_FILE = "nvidia-dra-driver-gpu-v25.8.1.yaml"
DRA_INSTALLS = ("dra-example-driver", "nvidia-dra-driver")
FILES = {"dra-example-driver": EXAMPLE_FILE, "nvidia-dra-driver": NVIDIA_FILE}
NAMESPACES = {"dra-example-driver": "dra-example-driver", "nvidia-dra-driver": "nvidia-dra-driver-gpu"}
RELEASES = {"dra-example-driver": "dra-example-driver", "nvidia-dra-driver": "nvidia-dra-driver-gpu"}
"""The Helm release of each install (the release name its chart's README or docs install with)."""
KUBE_VERSION, MIN_MINOR = ">=1.32.0-0", 32
"""Both charts' ``kubeVersion`` (Chart.yaml at v0.2.0 and v25.8.1)."""
GPU_NODES = (("gpu-node1", 1), ("gpu-node2", 2), ("gpu-node3", 3))
CONTROL_PLANE = "control-plane1"
CONTROL_PLANE_LABEL = "node-role.kubernetes.io/control-plane"
H100_570 = Stack(
    product="NVIDIA-H100-80GB-HBM3", family="hopper", memory_mib=81559, compute=(9, 0), machine="DGX-H100",
    driver="570.172.08", cuda="12.8", os_image="Ubuntu 24.04.2 LTS", kernel="6.8.0-60-generic",
    runtime="containerd://2.0.5",
)
"""An H100 node on the 570 driver branch (CUDA 12.8): new enough for NVIDIA's compute-domain plugin."""
KINDS = {
    "ServiceAccount": ("", "serviceaccounts"), "ClusterRole": ("rbac.authorization.k8s.io", "clusterroles"),
    "ClusterRoleBinding": ("rbac.authorization.k8s.io", "clusterrolebindings"),
    "Role": ("rbac.authorization.k8s.io", "roles"), "RoleBinding": ("rbac.authorization.k8s.io", "rolebindings"),
    "DeviceClass": dra.DEVICE_CLASSES, "Deployment": ("apps", "deployments"),
}
CLUSTER_SCOPED = ("ClusterRole", "ClusterRoleBinding", "DeviceClass")


def check_minor(scenario: str, minor: int) -> None:
    """Refuse a minor the chart's kubeVersion does not admit, as helm does."""
    if minor < MIN_MINOR:
        raise ValueError(f"{scenario}: the chart's kubeVersion {KUBE_VERSION} does not admit Kubernetes 1.{minor}")


def _nodes(b: _Builder, kubelet: KubeletController, stack: Stack, namespace: str, *, control_plane: bool) -> None:
    from kubesim.scenarios import GPUS_PER_NODE
    from kubesim.scenarios import NAMESPACES as BASE_NAMESPACES

    for ns in dict.fromkeys((*BASE_NAMESPACES, namespace)):
        b.add(("", "namespaces"), make_namespace(ns, b.created))
    for name, index in GPU_NODES:
        node = b.add(("", "nodes"), make_node(name, index, b.sim.minor, gpus=GPUS_PER_NODE, created=b.created))
        equip(node, stack, gpus=GPUS_PER_NODE, labelled_at=b.started)
        for resources in (node["status"]["capacity"], node["status"]["allocatable"]):
            resources.pop(GPU, None)  # no device plugin ever registered here
        kubelet.gpus[name] = GPUS_PER_NODE
    b.add(("", "nodes"), make_node("cpu-node1", len(GPU_NODES) + 1, b.sim.minor, gpus=0, created=b.created))
    if control_plane:
        node = b.add(("", "nodes"), make_node(CONTROL_PLANE, len(GPU_NODES) + 2, b.sim.minor, gpus=0, created=b.created))
        node["metadata"]["labels"][CONTROL_PLANE_LABEL] = ""
        node["spec"]["taints"] = [{"key": CONTROL_PLANE_LABEL, "effect": "NoSchedule"}]
    for node in b.objects[("", "nodes")]:
        node["metadata"]["uid"] = str(uuid.uuid4())


def _publish(b: _Builder, kubelet: KubeletController, ds: dict[str, Any], nodes: list[str]) -> None:
    """The slices each plugin container of ``ds`` has published on each of ``nodes``."""
    by_name = {n["metadata"]["name"]: n for n in b.objects[("", "nodes")]}
    for container in ds["spec"]["template"]["spec"]["containers"]:
        driver = dradrivers.driver_of(container)
        if driver is None:
            continue
        for name in nodes:
            node = by_name[name]
            labels = node["metadata"]["labels"]
            gpus = kubelet.gpus.get(name, 0)
            devices = dradrivers.devices(driver, container, name, labels, gpus)
            obj = dra.resource_slice(b.sim.minor, name, node["metadata"]["uid"], gpus, driver, devices=devices)
            obj["metadata"]["name"] = obj["metadata"]["generateName"] + uuid.uuid4().hex[:5]
            obj["metadata"]["creationTimestamp"] = b.created
            b.add(dra.SLICES, obj)


def _released(obj: dict[str, Any], release: str, namespace: str) -> None:
    """What ``helm install`` writes on each object of the release before it creates it (helm's
    ``pkg/action/install.go`` visits them with ``setMetadataVisitor``, ``pkg/action/validate.go``):
    the ``app.kubernetes.io/managed-by: Helm`` label and the release's name and namespace annotations."""
    meta = obj["metadata"]
    meta.setdefault("labels", {})["app.kubernetes.io/managed-by"] = "Helm"
    meta.setdefault("annotations", {}).update({"meta.helm.sh/release-name": release,
                                               "meta.helm.sh/release-namespace": namespace})


def install(b: _Builder, kubelet: KubeletController, scenario: str) -> None:
    """Load ``scenario`` (one of :data:`DRA_INSTALLS`) into the builder."""
    check_minor(scenario, b.sim.minor)
    nvidia = scenario == "nvidia-dra-driver"
    _nodes(b, kubelet, H100_570 if nvidia else A100_535, NAMESPACES[scenario], control_plane=nvidia)
    everywhere = [(n["metadata"]["name"], i) for i, n in enumerate(b.objects[("", "nodes")], start=1)]
    for obj in manifest(FILES[scenario]):
        _released(obj, RELEASES[scenario], NAMESPACES[scenario])
        kind = obj["kind"]
        if kind == "DaemonSet":
            where = list(GPU_NODES) if nvidia else [w for w in everywhere if w[0] != CONTROL_PLANE]
            _settle(b, obj, where)
            _publish(b, kubelet, obj, [n for n, _ in where])
            continue
        if kind in CLUSTER_SCOPED:
            obj["metadata"].pop("namespace", None)  # the API server clears it on cluster-scoped kinds
        obj["metadata"]["creationTimestamp"] = b.created
        b.add(KINDS[kind], obj)


def settle(sim: Simulation) -> None:
    """Let the controllers bring up what the scenario left to them (NVIDIA's controller Deployment):
    a few simulated seconds, until its pod runs."""
    sim.advance(10)
