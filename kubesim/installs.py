"""Scenarios installed from NVIDIA's published objects: the device-plugin Helm chart and the GPU
operator, their DaemonSets read from the YAML kept in ``kubesim/manifests/`` (each file's header
names its source: repository, path, tag, and the values it was rendered with).

- ``gpu-helm``: the chart v0.17.0 as its README installs it with GPU Feature Discovery
  (``helm-nvidia-device-plugin-0.17.0.yaml``, release ``nvdp`` in ``nvidia-device-plugin``):
  ``nvdp-nvidia-device-plugin`` (the plugin), ``nvdp-nvidia-device-plugin-gpu-feature-discovery``
  and ``nvdp-nvidia-device-plugin-mps-control-daemon``, all three on the plugin's image and
  under one selector. GFD labels ``nvidia.com/mps.capable`` on every GPU node: ``true`` on
  ``gpu-node3`` (as on a node whose GPUs are shared with MPS), ``false`` elsewhere, so the MPS
  control daemon, whose template selects ``nvidia.com/mps.capable: "true"``, runs there only.
- ``gpu-helm-mig``: the same install with ``migStrategy=mixed``
  (``helm-nvidia-device-plugin-0.17.0-mig.yaml``): the chart gives the plugin
  ``capabilities: add: [SYS_ADMIN]`` instead of its hardened securityContext.
  Both carry what ``helm upgrade -i`` writes (:mod:`kubesim.helmrelease`): Helm's ownership label and
  annotations on each DaemonSet and the release Secret ``sh.helm.release.v1.nvdp.v1`` (its ``config``:
  :data:`HELM_CONFIG`).
- ``gpu-operator``: the GPU operator v26.7.0's ``nvidia-device-plugin-daemonset`` (containers
  ``nvidia-device-plugin`` and ``config-manager``, init containers ``toolkit-validation`` and
  ``config-manager-init``, ``runtimeClassName: nvidia``) and ``gpu-feature-discovery`` in
  ``gpu-operator`` (``gpu-operator-v26.7.0.yaml``), with the ConfigMaps they mount; the GPU nodes
  carry the operator's ``nvidia.com/gpu.deploy.device-plugin`` and
  ``nvidia.com/gpu.deploy.gpu-feature-discovery`` labels. The ClusterPolicy CRD and ``cluster-policy``
  (:mod:`kubesim.gpuoperator`: the chart's CRD and its rendering of the object) are installed, the two
  DaemonSets are the operator's rendering of that ClusterPolicy (owned by it, with their
  ``nvidia.com/last-applied-hash``), and the operator's reconcile runs (:class:`kubesim.gpuoperator.GpuOperator`).

Each has gpu-small's nodes (``gpu-node1..3`` with 8 A100s on driver 535, ``cpu-node1``), no DRA
driver and no workload. Only the container that runs the plugin registers (see
:func:`kubesim.devices.kind_of`): GFD, the MPS control daemon and config-manager register nothing.
The objects go in as the API server stores them (:func:`server_defaults`), their pods settled.
"""

from __future__ import annotations

import copy
import datetime as dt
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from kubesim import admission, crdschema, gpuoperator, helmrelease
from kubesim.crds import CRDS, accepted_status
from kubesim.fixtures import make_namespace, make_node
from kubesim.hardware import A100_535, equip
from kubesim.installkinds import RUNTIME_CLASSES
from kubesim.podruntime import PodRt, init_status
from kubesim.revisions import TEMPLATE_GENERATION

if TYPE_CHECKING:
    from kubesim.kubelets import KubeletController
    from kubesim.scenarios import _Builder

MANIFESTS = Path(__file__).parent / "manifests"
HELM_FILES = {"gpu-helm": "helm-nvidia-device-plugin-0.17.0.yaml",
              "gpu-helm-mig": "helm-nvidia-device-plugin-0.17.0-mig.yaml"}
HELM_CONFIG: dict[str, dict[str, Any]] = {
    "gpu-helm": {"gfd": {"enabled": True}, "nfd": {"enabled": False}},
    "gpu-helm-mig": {"gfd": {"enabled": True}, "nfd": {"enabled": False}, "migStrategy": "mixed"}}
"""The values each file's ``helm upgrade -i`` set (its header), as the release's ``config`` keeps them."""
OPERATOR_FILE = "gpu-operator-v26.7.0.yaml"
INSTALLS = (*HELM_FILES, "gpu-operator")
HELM_NAMESPACE, OPERATOR_NAMESPACE = "nvidia-device-plugin", "gpu-operator"
MPS_CAPABLE = "nvidia.com/mps.capable"
OPERATOR_ACCOUNTS = ("nvidia-device-plugin", "nvidia-gpu-feature-discovery")
"""The ServiceAccounts the operator's plugin and GFD pods name (NVIDIA/gpu-operator v26.7.0
``assets/state-device-plugin/0100_service_account.yaml``, ``assets/gpu-feature-discovery/0100_service_account.yaml``;
``ServiceAccount`` in ``controllers/object_controls.go`` fills the namespace and makes the ClusterPolicy
their controller)."""
OPERATOR_DEPLOY_LABELS = {"nvidia.com/gpu.deploy.device-plugin": "true",
                          "nvidia.com/gpu.deploy.gpu-feature-discovery": "true"}
"""What the operator's state labeler puts on a GPU node (``gpuStateLabels`` in
``controllers/state_manager.go`` at v26.7.0), that its DaemonSets select."""
GPU_NODES = (("gpu-node1", 1), ("gpu-node2", 2), ("gpu-node3", 3))
MPS_NODES = ("gpu-node3",)


def manifest(name: str) -> list[dict[str, Any]]:
    """The objects of one file of ``kubesim/manifests/``, in order."""
    with (MANIFESTS / name).open(encoding="utf-8") as fh:
        return [doc for doc in yaml.safe_load_all(fh) if doc]


def helm_release_secret(scenario: str, created: str, *, revision: int = 1,
                        config: dict[str, Any] | None = None) -> dict[str, Any]:
    """The release Secret Helm 3 stored for ``scenario``'s install (:mod:`kubesim.helmrelease`); ``revision``
    and ``config`` as a later ``helm upgrade`` would write them (a test stores that one)."""
    text = (MANIFESTS / HELM_FILES[scenario]).read_text(encoding="utf-8")
    rendered = text[text.index("---"):]  # the templates as rendered, without the file's header
    unix = int(dt.datetime.fromisoformat(created.replace("Z", "+00:00")).timestamp())
    release = helmrelease.release_json(release=helmrelease.RELEASE_NAME_DEFAULT, namespace=HELM_NAMESPACE,
                                       revision=revision, config=config if config is not None else HELM_CONFIG[scenario],
                                       manifest=rendered, deployed=created)
    out = helmrelease.secret(release, created=created, created_unix=unix)
    out["metadata"]["uid"] = str(uuid.uuid4())
    return out


def _pod_template_defaults(spec: dict[str, Any]) -> None:
    """``SetDefaults_Volume``-level fields the API server writes into a pod template: a hostPath's
    ``type: ""``, a ConfigMap volume's ``defaultMode: 420``, a fieldRef's ``apiVersion: v1``."""
    for volume in spec.get("volumes") or []:
        if "hostPath" in volume:
            volume["hostPath"].setdefault("type", "")
        if "configMap" in volume:
            volume["configMap"].setdefault("defaultMode", 420)
    for kind in ("initContainers", "containers"):
        for ctr in spec.get(kind) or []:
            for env in ctr.get("env") or []:
                ref = (env.get("valueFrom") or {}).get("fieldRef")
                if ref is not None:
                    ref.setdefault("apiVersion", "v1")
    admission.default_pod_spec(spec)


def server_defaults(ds: dict[str, Any], created: str) -> dict[str, Any]:
    """A DaemonSet as the API server stores it once created: ``SetDefaults_DaemonSet``
    (RollingUpdate with maxUnavailable 1 and maxSurge 0, revisionHistoryLimit 10), its pod
    template defaulted, uid, generation 1 and the template-generation annotation."""
    ds = copy.deepcopy(ds)
    meta = ds["metadata"]
    meta.update(uid=str(uuid.uuid4()), generation=1, creationTimestamp=created)
    meta["annotations"] = {**(meta.get("annotations") or {}), TEMPLATE_GENERATION: "1"}
    spec = ds["spec"]
    spec.setdefault("revisionHistoryLimit", 10)
    strategy = spec.setdefault("updateStrategy", {})
    strategy.setdefault("type", "RollingUpdate")
    if strategy["type"] == "RollingUpdate":
        rolling = strategy.setdefault("rollingUpdate", {})
        rolling.setdefault("maxUnavailable", 1)
        rolling.setdefault("maxSurge", 0)
    _pod_template_defaults(spec["template"]["spec"])
    return ds


def _nodes(b: _Builder, kubelet: KubeletController, labels: dict[str, dict[str, str]], namespace: str) -> None:
    """gpu-small's nodes with ``labels`` added per node, its namespaces and ``namespace``."""
    from kubesim.scenarios import GPUS_PER_NODE, NAMESPACES

    for ns in (*NAMESPACES, namespace):
        b.add(("", "namespaces"), make_namespace(ns, b.created))
    for name, index in GPU_NODES:
        node = b.add(("", "nodes"), make_node(name, index, b.sim.minor, gpus=GPUS_PER_NODE, created=b.created))
        node["metadata"]["uid"] = str(uuid.uuid4())
        equip(node, A100_535, gpus=GPUS_PER_NODE, labelled_at=b.started)
        node["metadata"]["labels"].update(labels.get(name, {}))
        kubelet.gpus[name] = GPUS_PER_NODE
    b.add(("", "nodes"), make_node("cpu-node1", len(GPU_NODES) + 1, b.sim.minor, gpus=0, created=b.created))


def _settle(b: _Builder, obj: dict[str, Any], nodes: list[tuple[str, int]]) -> None:
    """A DaemonSet of the file, stored as the server would, with a settled pod on each of ``nodes``
    (its init containers completed)."""
    ds = server_defaults(obj, b.created)
    before = len(b.objects.get(("", "pods"), []))
    b.daemonset(ds, nodes)
    for pod in b.objects[("", "pods")][before:]:
        inits = pod["spec"].get("initContainers") or []
        if inits:
            rt = PodRt(pod["metadata"]["uid"], pod["metadata"]["namespace"], pod["metadata"]["name"],
                       pod["spec"]["nodeName"], start_time=pod["status"]["startTime"])
            pod["status"]["initContainerStatuses"] = [init_status(c, rt, True) for c in inits]


def install(b: _Builder, kubelet: KubeletController, scenario: str) -> None:
    """Load ``scenario`` (one of :data:`INSTALLS`) into the builder."""
    gpu_nodes = list(GPU_NODES)
    if scenario in HELM_FILES:
        _nodes(b, kubelet, {name: {MPS_CAPABLE: "true" if name in MPS_NODES else "false"} for name, _ in GPU_NODES},
               HELM_NAMESPACE)
        for obj in manifest(HELM_FILES[scenario]):
            helmrelease.owned(obj, helmrelease.RELEASE_NAME_DEFAULT, HELM_NAMESPACE)
            selector = ((obj["spec"]["template"]["spec"].get("nodeSelector")) or {})
            where = [(n, i) for n, i in gpu_nodes if selector.get(MPS_CAPABLE) != "true" or n in MPS_NODES]
            _settle(b, obj, where)
        b.add(("", "secrets"), helm_release_secret(scenario, b.created))
        return
    _nodes(b, kubelet, dict.fromkeys((name for name, _ in GPU_NODES), OPERATOR_DEPLOY_LABELS), OPERATOR_NAMESPACE)
    for obj in manifest(OPERATOR_FILE):
        if obj["kind"] in ("ConfigMap", "RuntimeClass"):
            obj["metadata"]["creationTimestamp"] = b.created
            b.add(("", "configmaps") if obj["kind"] == "ConfigMap" else RUNTIME_CLASSES, obj)
    crd = gpuoperator.crd()
    crd["metadata"].update(uid=str(uuid.uuid4()), creationTimestamp=b.created)
    crd["status"] = accepted_status(crd, b.created)
    b.add(CRDS, crd)
    policy = gpuoperator.cluster_policy()
    crdschema.default(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"], policy)  # as the API server stores it
    policy["metadata"].update(uid=str(uuid.uuid4()), creationTimestamp=b.created, generation=1)
    policy["status"] = gpuoperator.status_of("ready", OPERATOR_NAMESPACE, "Reconciled", gpuoperator.READY_MESSAGE,
                                             None, b.created)
    b.add_custom(gpuoperator.CLUSTER_POLICIES, policy)
    for account in OPERATOR_ACCOUNTS:  # the operands' accounts, made by the operator before their DaemonSets
        b.add(("", "serviceaccounts"), {"metadata": {
            "name": account, "namespace": OPERATOR_NAMESPACE, "creationTimestamp": b.created,
            "ownerReferences": [{"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy",
                                 "name": policy["metadata"]["name"], "uid": policy["metadata"]["uid"],
                                 "controller": True, "blockOwnerDeletion": True}]}})
    for name in gpuoperator.OPERANDS:  # as the operator created them from the ClusterPolicy, settled
        _settle(b, gpuoperator.desired(policy, name, OPERATOR_NAMESPACE), gpu_nodes)
