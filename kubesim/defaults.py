"""The API server's defaulting of the kinds whose controllers rely on it (``SetDefaults_*``).

Applied by the store wherever it completes an object (create, replace, patches, controllers'
writes), as the API server defaults every object it decodes. Only the fields clients and
controllers read are set; a kind not listed here is stored as sent.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kubesim import admission, classicdra, dra, installkinds


def statefulset(obj: dict[str, Any]) -> None:
    """``SetDefaults_StatefulSet``: replicas, podManagementPolicy, updateStrategy, revisionHistoryLimit."""
    spec = obj.setdefault("spec", {})
    spec.setdefault("replicas", 1)
    spec.setdefault("podManagementPolicy", "OrderedReady")
    spec.setdefault("revisionHistoryLimit", 10)
    strategy = spec.setdefault("updateStrategy", {"type": "RollingUpdate"})
    strategy.setdefault("type", "RollingUpdate")
    if strategy["type"] == "RollingUpdate":
        rolling = strategy.setdefault("rollingUpdate", {})
        if isinstance(rolling, dict):
            rolling.setdefault("partition", 0)


def daemonset(obj: dict[str, Any]) -> None:
    """``SetDefaults_DaemonSet``: updateStrategy RollingUpdate with maxUnavailable 1 and maxSurge 0 (the
    rollingUpdate's defaults only for that type), revisionHistoryLimit 10."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    strategy = spec.setdefault("updateStrategy", {})
    if isinstance(strategy, dict):
        strategy.setdefault("type", "RollingUpdate")
        if strategy["type"] == "RollingUpdate":
            rolling = strategy.setdefault("rollingUpdate", {})
            if isinstance(rolling, dict):
                rolling.setdefault("maxUnavailable", 1)
                rolling.setdefault("maxSurge", 0)
    spec.setdefault("revisionHistoryLimit", 10)


def pod_volumes_and_env(spec: dict[str, Any]) -> None:
    """``SetDefaults_HostPathVolumeSource`` (``type: ""``), ``SetDefaults_ConfigMapVolumeSource`` (``defaultMode:
    420``) and ``SetDefaults_ObjectFieldSelector`` (an env fieldRef's ``apiVersion: v1``) in a pod spec, in place."""
    for volume in spec.get("volumes") or []:
        if not isinstance(volume, dict):
            continue
        if isinstance(volume.get("hostPath"), dict):
            volume["hostPath"].setdefault("type", "")
        if isinstance(volume.get("configMap"), dict):
            volume["configMap"].setdefault("defaultMode", 420)
    for kind in ("initContainers", "containers"):
        for ctr in spec.get(kind) or []:
            for env in (ctr.get("env") or []) if isinstance(ctr, dict) else []:
                ref = (env.get("valueFrom") or {}).get("fieldRef") if isinstance(env, dict) else None
                if isinstance(ref, dict):
                    ref.setdefault("apiVersion", "v1")


def namespace(obj: dict[str, Any]) -> None:
    """``SetDefaults_Namespace``: the ``kubernetes.io/metadata.name`` label is always the name."""
    name = (obj.get("metadata") or {}).get("name")
    if name:
        metadata = obj.setdefault("metadata", {})
        labels = metadata.get("labels") or {}
        if labels.get("kubernetes.io/metadata.name") != name:
            metadata["labels"] = {**labels, "kubernetes.io/metadata.name": name}


def node(obj: dict[str, Any]) -> None:
    """``SetDefaults_NodeStatus``: allocatable is the capacity when not set."""
    status = obj.get("status")
    if isinstance(status, dict) and status.get("capacity") and status.get("allocatable") is None:
        status["allocatable"] = dict(status["capacity"])


def csidriver(obj: dict[str, Any]) -> None:
    """``SetDefaults_CSIDriver`` (SELinuxMountReadWriteOncePod is on in every simulated release)."""
    spec = obj.setdefault("spec", {})
    spec.setdefault("attachRequired", True)
    spec.setdefault("podInfoOnMount", False)
    spec.setdefault("storageCapacity", False)
    spec.setdefault("fsGroupPolicy", "ReadWriteOnceWithFSType")
    if not spec.get("volumeLifecycleModes"):
        spec["volumeLifecycleModes"] = ["Persistent"]
    spec.setdefault("requiresRepublish", False)
    spec.setdefault("seLinuxMount", False)


DEFAULTERS: dict[tuple[str, str], Callable[[dict[str, Any]], None]] = {
    ("apps", "statefulsets"): statefulset, ("apps", "daemonsets"): daemonset, ("", "namespaces"): namespace,
    ("", "nodes"): node,
    ("storage.k8s.io", "csidrivers"): csidriver}
DEFAULTERS.update({("", "secrets"): installkinds.secret, ("", "services"): installkinds.service})
DEFAULTERS.update(classicdra.DEFAULTERS)  # allocationMode of v1alpha2 claims


def _with_template(first: Callable[[dict[str, Any]], None] | None) -> Callable[[dict[str, Any]], None]:
    """The kind's own defaulter (if any), then ``SetDefaults_PodSpec`` on its pod template."""
    def default(obj: dict[str, Any]) -> None:
        if first is not None:
            first(obj)
        admission.default_template(obj)
        spec = ((obj.get("spec") or {}).get("template") or {}).get("spec") if isinstance(obj.get("spec"), dict) else None
        if isinstance(spec, dict):
            pod_volumes_and_env(spec)
    return default


DEFAULTERS[("", "pods")] = admission.default_pod
DEFAULTERS.update({kind: _with_template(DEFAULTERS.get(kind)) for kind in admission.TEMPLATED})


def _device_request(request: Any) -> None:
    """``SetDefaults_DeviceRequest`` (v1beta1, a flat request), ``SetDefaults_ExactDeviceRequest`` and
    ``SetDefaults_DeviceSubRequest`` (v1beta2, v1): allocationMode ExactCount, then a count of 1."""
    if not isinstance(request, dict):
        return
    request.setdefault("allocationMode", "ExactCount")
    if request["allocationMode"] == "ExactCount" and not request.get("count"):
        request["count"] = 1


def _device_claim_spec(spec: Any) -> None:
    """The structured-parameters claim spec's defaults (1.31 on): each request's, or its ``exactly``'s,
    or each of its ``firstAvailable`` subrequests'."""
    requests = ((spec.get("devices") or {}).get("requests") if isinstance(spec, dict) else None) or []
    for request in requests if isinstance(requests, list) else []:
        if not isinstance(request, dict):
            continue
        if isinstance(request.get("exactly"), dict):
            _device_request(request["exactly"])
        elif isinstance(request.get("firstAvailable"), list):
            for sub in request["firstAvailable"]:
                _device_request(sub)
        elif request.get("deviceClassName"):
            _device_request(request)


def _claims(first: Callable[[dict[str, Any]], None] | None, *, template: bool) -> Callable[[dict[str, Any]], None]:
    def default(obj: dict[str, Any]) -> None:
        if first is not None:
            first(obj)
        spec = obj.get("spec")
        _device_claim_spec((spec or {}).get("spec") if template and isinstance(spec, dict) else spec)
    return default


DEFAULTERS[dra.CLAIMS] = _claims(DEFAULTERS.get(dra.CLAIMS), template=False)
DEFAULTERS[dra.TEMPLATES] = _claims(DEFAULTERS.get(dra.TEMPLATES), template=True)
