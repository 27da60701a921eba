"""NVIDIA's device-plugin DaemonSet as its static manifest ships it, and the named edits
(deltas) the scenarios apply to it.

The manifest is NVIDIA/k8s-device-plugin's ``nvidia-device-plugin.yml`` at tag v0.14.2 (the
tag of :data:`kubesim.scenarios.DEVICE_PLUGIN_IMAGE`; ``deployments/static/nvidia-device-plugin.yml``
is a symlink to it there), kept verbatim in ``kubesim/manifests/``. It has
``priorityClassName: system-node-critical``, ``allowPrivilegeEscalation: false`` with every
capability dropped, ``FAIL_ON_INIT_ERROR=false``, the ``nvidia.com/gpu`` toleration and no
nodeSelector. :func:`plugin_daemonset` loads it, applies the deltas in order, and stores
it as the API server would after ``kubectl create -f``: the defaults of ``SetDefaults_DaemonSet``
(``revisionHistoryLimit``, the rolling update's ``maxUnavailable: 1``/``maxSurge: 0``),
``SetDefaults_PodSpec``/``SetDefaults_Container`` on its template and ``SetDefaults_HostPathVolumeSource``
(a hostPath's ``type: ""``).

Every delta is a :class:`Delta`: a name, the sentence docs/kubesim.md gives it, and the edit.
Nothing else of the manifest is changed.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any

import yaml

from kubesim import admission
from kubesim.fixtures import NFD_GPU, make_daemonset

STATIC_MANIFEST = "k8s-device-plugin-v0.14.2-static.yml"
"""The file under ``kubesim/manifests/`` (its header names the repository, path and tag)."""
CRITICAL = "system-node-critical"


@dataclass(frozen=True)
class Delta:
    """One named edit of the manifest (``edit`` changes the DaemonSet dict in place)."""

    name: str
    says: str
    edit: Callable[[dict[str, Any]], None]


@functools.cache
def _loaded() -> dict[str, Any]:
    text = (resources.files("kubesim") / "manifests" / STATIC_MANIFEST).read_text(encoding="utf-8")
    doc = yaml.safe_load(text)
    if not isinstance(doc, dict) or doc.get("kind") != "DaemonSet":
        raise ValueError(f"{STATIC_MANIFEST} is not one DaemonSet")
    return doc


def static_manifest() -> dict[str, Any]:
    """A fresh copy of the manifest as shipped (``apiVersion``, ``kind``, ``metadata``, ``spec``)."""
    return copy.deepcopy(_loaded())


def _pod_spec(ds: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = ds["spec"]["template"]["spec"]
    return spec


def _plugin_container(ds: dict[str, Any]) -> dict[str, Any]:
    ctr: dict[str, Any] = _pod_spec(ds)["containers"][0]
    return ctr


def _set_env(name: str, value: str) -> Callable[[dict[str, Any]], None]:
    def edit(ds: dict[str, Any]) -> None:
        env = _plugin_container(ds).setdefault("env", [])
        env[:] = [e for e in env if e.get("name") != name] + [{"name": name, "value": value}]
    return edit


def _gpu_nodes_only(ds: dict[str, Any]) -> None:
    _pod_spec(ds)["nodeSelector"] = {NFD_GPU: "true"}


def _no_priority_class(ds: dict[str, Any]) -> None:
    _pod_spec(ds).pop("priorityClassName", None)


def _no_security_context(ds: dict[str, Any]) -> None:
    _plugin_container(ds).pop("securityContext", None)


GPU_NODES_ONLY = Delta(
    "gpu-nodes-only", f"the cluster admin's edit: nodeSelector {NFD_GPU}=true (Node Feature Discovery's label "
    "of an NVIDIA PCI device, the label the chart's GFD subchart selects on), so the plugin runs on GPU nodes only",
    _gpu_nodes_only)
FAIL_ON_INIT_ERROR = Delta(
    "fail-on-init-error", "the cluster admin's edit: FAIL_ON_INIT_ERROR=true (the plugin's own default, "
    "cmd/nvidia-device-plugin/main.go; the manifest sets false)", _set_env("FAIL_ON_INIT_ERROR", "true"))
NO_PRIORITY_CLASS = Delta(
    "priority-class-removed", f"someone removed the pod's priorityClassName ({CRITICAL} in the manifest)",
    _no_priority_class)
NO_SECURITY_CONTEXT = Delta(
    "security-context-removed", "someone removed the container's securityContext (allowPrivilegeEscalation: "
    "false and capabilities.drop ALL in the manifest)", _no_security_context)


def max_unavailable(value: int | str) -> Delta:
    """The rolling update's ``maxUnavailable`` set to ``value`` (the manifest leaves the default, 1)."""
    def edit(ds: dict[str, Any]) -> None:
        ds["spec"].setdefault("updateStrategy", {}).setdefault("rollingUpdate", {})["maxUnavailable"] = value
    return Delta("max-unavailable", f"someone set updateStrategy.rollingUpdate.maxUnavailable: {value}", edit)


def renamed(name: str) -> Delta:
    """The DaemonSet applied a second time under ``name``, its selector and pod label ``name: <name>-ds``
    (the manifest's ``nvidia-device-plugin-daemonset`` selects ``name: nvidia-device-plugin-ds``)."""
    label = name.removesuffix("-daemonset") + "-ds"

    def edit(ds: dict[str, Any]) -> None:
        ds["metadata"]["name"] = name
        ds["spec"]["selector"] = {"matchLabels": {"name": label}}
        ds["spec"]["template"]["metadata"]["labels"] = {"name": label}
    return Delta("renamed", f"applied again as {name} (selector and pod label name: {label})", edit)


def socket_host_path(path: str) -> Delta:
    """The ``device-plugin`` volume's hostPath set to ``path`` (the manifest's: /var/lib/kubelet/device-plugins)."""
    def edit(ds: dict[str, Any]) -> None:
        for volume in _pod_spec(ds)["volumes"]:
            if volume.get("name") == "device-plugin":
                volume["hostPath"]["path"] = path
    return Delta("socket-host-path", f"the device-plugin volume's hostPath changed to {path}", edit)


def plugin_daemonset(created: str, *deltas: Delta) -> dict[str, Any]:
    """The static manifest with ``deltas`` applied in order, as the API server stores it (see the
    module's docstring), created at ``created``."""
    doc = static_manifest()
    for delta in deltas:
        delta.edit(doc)
    spec = _pod_spec(doc)
    admission.default_pod_spec(spec)
    for ctr in spec["containers"]:
        ctr.setdefault("resources", {})
    for volume in spec.get("volumes") or []:
        if "hostPath" in volume:
            volume["hostPath"].setdefault("type", "")
    meta = doc["metadata"]
    labels = doc["spec"]["template"]["metadata"]["labels"]
    ds = make_daemonset(meta["namespace"], meta["name"], labels, spec, created)
    ds["spec"]["selector"] = doc["spec"]["selector"]
    rolling = (doc["spec"].get("updateStrategy") or {}).get("rollingUpdate") or {}
    ds["spec"]["updateStrategy"]["rollingUpdate"].update(rolling)
    return ds
