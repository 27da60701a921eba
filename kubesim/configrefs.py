"""The kubelet's wait for the Secrets and ConfigMaps a pod references.

As a real kubelet does:

- a volume of a Secret or ConfigMap that does not exist (``volumes[].secret``,
  ``volumes[].configMap``, or a ``projected`` volume's sources) cannot be mounted: the pod stays
  ``ContainerCreating`` (no sandbox) with a ``FailedMount`` warning,
  ``MountVolume.SetUp failed for volume "<v>" : secret "<name>" not found``;
- a container whose environment reads one (``env[].valueFrom.secretKeyRef`` /
  ``configMapKeyRef``, ``envFrom[].secretRef`` / ``configMapRef``) that is missing, or misses
  the key, is not created: it waits with reason ``CreateContainerConfigError`` and the message
  ``secret "<name>" not found`` (or ``couldn't find key <k> in Secret <ns>/<name>``), and the pod
  gets a ``Failed`` warning event ``Error: <message>``.

A reference marked ``optional: true`` never holds a pod. The pod starts once the object (or
its key) is created: the kubelet retries when a Secret or ConfigMap of the pod's namespace is
written. A mixin for :class:`kubesim.kubelets.KubeletController`.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from kubesim.podruntime import Ctr, PodRt

SECRETS = ("", "secrets")
CONFIG_MAPS = ("", "configmaps")
_KINDS = {"secret": ("Secret", SECRETS), "configmap": ("ConfigMap", CONFIG_MAPS)}


def _lookup(store: Any, ns: str, kind: str, name: str, key: str | None) -> str | None:
    """Why the reference cannot be read (the kubelet's words), or None when it can."""
    label, gr = _KINDS[kind]
    obj = store.get(gr, ns, name)
    if obj is None:
        return f'{kind} "{name}" not found'
    if key is not None and key not in (obj.get("data") or {}) and key not in (obj.get("binaryData") or {}):
        return f"couldn't find key {key} in {label} {ns}/{name}"
    return None


def env_error(store: Any, ns: str, container: dict[str, Any]) -> str | None:
    """The first reference of the container's environment that holds it, in the kubelet's order."""
    for source in container.get("envFrom") or []:
        for field, kind in (("secretRef", "secret"), ("configMapRef", "configmap")):
            ref = source.get(field)
            if isinstance(ref, dict) and not ref.get("optional"):
                why = _lookup(store, ns, kind, str(ref.get("name") or ""), None)
                if why:
                    return why
    for var in container.get("env") or []:
        value_from = var.get("valueFrom") or {}
        for field, kind in (("secretKeyRef", "secret"), ("configMapKeyRef", "configmap")):
            ref = value_from.get(field)
            if isinstance(ref, dict) and not ref.get("optional"):
                why = _lookup(store, ns, kind, str(ref.get("name") or ""), str(ref.get("key") or ""))
                if why:
                    return why
    return None


def _volume_sources(volume: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = []
    if isinstance(volume.get("secret"), dict):
        out.append(("secret", {"name": volume["secret"].get("secretName"), "optional": volume["secret"].get("optional")}))
    if isinstance(volume.get("configMap"), dict):
        out.append(("configmap", volume["configMap"]))
    for source in (volume.get("projected") or {}).get("sources") or []:
        if isinstance(source.get("secret"), dict):
            out.append(("secret", source["secret"]))
        if isinstance(source.get("configMap"), dict):
            out.append(("configmap", source["configMap"]))
    return out


def mount_error(store: Any, pod: dict[str, Any]) -> str | None:
    """``MountVolume.SetUp failed …`` for the first volume whose Secret or ConfigMap is missing."""
    ns = pod["metadata"].get("namespace", "")
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        for kind, ref in _volume_sources(volume):
            if ref.get("optional"):
                continue
            why = _lookup(store, ns, kind, str(ref.get("name") or ""), None)
            if why:
                return f'MountVolume.SetUp failed for volume "{volume.get("name")}" : {why}'
    return None


class ConfigRefs:
    """Holds pods whose Secrets or ConfigMaps are missing; retries when one is written."""

    sim: Any

    def __init__(self) -> None:
        self._config_wait: dict[str, set[str]] = defaultdict(set)  # namespace -> pod uids waiting

    def _mount_blocked(self, rt: PodRt, pod: dict[str, Any]) -> bool:
        """True (with a FailedMount event) while a volume's Secret or ConfigMap is missing."""
        why = mount_error(self.sim.store, pod)
        if why is None:
            return False
        self._config_wait[rt.ns].add(rt.uid)
        self._event(pod, "FailedMount", why, "Warning")  # type: ignore[attr-defined]
        return True

    def _env_blocked(self, rt: PodRt, ctr: Ctr, pod: dict[str, Any]) -> bool:
        """True (the container waiting, CreateContainerConfigError) while its environment cannot be made."""
        container: dict[str, Any] = next((c for c in pod["spec"].get("containers") or [] if c.get("name") == ctr.name), {})
        why = env_error(self.sim.store, rt.ns, container)
        if why is None:
            ctr.config_error = None
            return False
        first = ctr.config_error != why
        ctr.config_error = why
        self._config_wait[rt.ns].add(rt.uid)
        if first:
            self._event(pod, "Failed", f"Error: {why}", "Warning", ctr=ctr.name)  # type: ignore[attr-defined]
            self._write(rt)  # type: ignore[attr-defined]
        return True

    def _config_written(self, ns: str) -> None:
        """A Secret or ConfigMap of ``ns`` was written: retry the pods waiting for one."""
        for uid in list(self._config_wait.get(ns, ())):
            rt = self._rt.get(uid)  # type: ignore[attr-defined]
            pod = self._pod(uid) if rt is not None else None  # type: ignore[attr-defined]
            if rt is None or pod is None or pod["metadata"].get("deletionTimestamp"):
                self._config_wait[ns].discard(uid)
                continue
            self._config_wait[ns].discard(uid)
            if rt.stage == "preparing":
                self._prepare(rt)  # type: ignore[attr-defined]
                continue
            for ctr in rt.ctrs.values():
                if ctr.config_error is not None and ctr.state == "waiting" and not self._env_blocked(rt, ctr, pod):
                    self._start_container(rt, ctr, pod)  # type: ignore[attr-defined]
