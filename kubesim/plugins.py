"""The kubelet's side of plugin containers: what a device plugin or DRA kubelet plugin
prints when it starts (or re-registers after a kubelet restart), and its registration.
NVIDIA's device plugin prints the lines of its release (:mod:`kubesim.pluginreleases`).

The kubelet serves device-plugin registration at :data:`KUBELET_DEVICE_PLUGINS` on every node,
whatever its ``--root-dir`` (``pluginapi.KubeletSocket``): NVIDIA's plugin dials kubelet.sock in
the directory mounted at that path in its container, so one whose hostPath there is another
host directory (:func:`socket_dir_mounted`) serves its socket and never registers.

A mixin for :class:`kubesim.kubelets.KubeletController` (it uses the controller's pod
indexes and the registrations of :class:`kubesim.devices.DeviceRegistry`).
"""

from __future__ import annotations

import datetime as dt
import posixpath
from typing import Any

from kubesim import dra, dradrivers, dralogs, pluginlogs, pluginreleases
from kubesim.clock import parse_time
from kubesim.devices import DEVICE_PLUGIN_IMAGE, NODES
from kubesim.podruntime import Ctr, PodRt

KUBELET_DEVICE_PLUGINS = pluginreleases.DEVICE_PLUGIN_PATH.rstrip("/")
"""The kubelet's device-plugin directory on the host: ``/var/lib/kubelet/device-plugins``, fixed."""
DEFER_AFTER = 1.0
"""Log lines stamped more than this many seconds ahead are written when their moment comes."""


def socket_dir_mounted(pod_spec: dict[str, Any], container: dict[str, Any]) -> bool | None:
    """Whether the container's :data:`KUBELET_DEVICE_PLUGINS` is the host's (a hostPath of that
    directory mounted there); None when nothing is mounted there (kubesim does not judge it)."""
    mount = next((m for m in container.get("volumeMounts") or []
                  if str(m.get("mountPath", "")).rstrip("/") == KUBELET_DEVICE_PLUGINS and not m.get("subPath")), None)
    if mount is None:
        return None
    volume: dict[str, Any] = next((v for v in pod_spec.get("volumes") or [] if v.get("name") == mount.get("name")), {})
    path = str((volume.get("hostPath") or {}).get("path") or "")
    return bool(path) and posixpath.normpath(path) == KUBELET_DEVICE_PLUGINS


class PluginAgent:
    """Start-up lines, registration and re-registration of plugin containers."""

    sim: Any
    gpus: dict[str, int]
    _pods: dict[str, set[str]]
    _rt: dict[str, PodRt]

    def __init__(self) -> None:
        self._log_cache: dict[Any, list[Any]] = {}

    def _plugin_started(self, rt: PodRt, ctr: Ctr, pod: dict[str, Any], *, adopted: bool) -> None:
        start = (parse_time(ctr.started_at) if adopted else None) or self.sim.clock.now()
        node = rt.node
        container: dict[str, Any] = next(
            (c for c in pod["spec"].get("containers") or [] if c["name"] == ctr.name), {}
        )
        healthy = ctr.mode in ("healthy", "slow", "noalloc")
        if ctr.kind == "device-plugin":
            healthy = healthy and self.gpus.get(node, 0) > 0
            if DEVICE_PLUGIN_IMAGE not in ctr.image:
                lines = self._lines(("other", healthy), start, lambda: pluginlogs.other_device_plugin_registered(start)
                                    if healthy else [])
            elif healthy and socket_dir_mounted(pod["spec"], container) is False:
                healthy = False  # its kubelet.sock is not the kubelet's: it serves, and never registers
                key: tuple[Any, ...] = (ctr.image, repr(container.get("env")), repr(container.get("args")), "unregistered")
                lines = self._lines(key, start, lambda: pluginreleases.unregistered(ctr.image, container, start))
            else:
                key = (ctr.image, repr(container.get("env")), repr(container.get("args")), ctr.crash_reason, healthy)
                lines = self._lines(key, start, lambda: pluginreleases.started(
                    ctr.image, container, start, why=ctr.crash_reason, registered=healthy))
            self._write_log(rt, ctr.name, lines)
            if healthy:
                ctr.registered = True
                self.register_device_plugin(node, rt.uid)  # type: ignore[attr-defined]
            return
        driver = dradrivers.driver_of(container) or dra.DRIVER
        if healthy:
            labels = self._labels_of(node)
            lines = dralogs.started(container, driver, node=node, labels=labels, gpus=self.gpus.get(node, 0),
                                    start=start, first=adopted)
        else:
            lines = dralogs.silent(container, start)
        self._write_log(rt, ctr.name, lines)
        if healthy:
            ctr.registered = True
            self._register_dra(node, rt.uid, ctr, container)

    def _labels_of(self, node: str) -> dict[str, str]:
        obj = self.sim.store.get(NODES, "", node)
        return dict(((obj or {}).get("metadata") or {}).get("labels") or {})

    def _register_dra(self, node: str, uid: str, ctr: Ctr, container: dict[str, Any]) -> None:
        """Register the container's DRA driver with the devices it publishes on ``node``."""
        driver = dradrivers.driver_of(container) or dra.DRIVER
        devices = dradrivers.devices(driver, container, node, self._labels_of(node), self.gpus.get(node, 0))
        self.register_dra(node, driver, uid, broken=ctr.mode == "noalloc", devices=devices)  # type: ignore[attr-defined]

    def reregister_plugins(self, node: str) -> None:
        """After a kubelet restart: healthy running plugins register again."""
        now = self.sim.clock.now()
        for uid in list(self._pods.get(node, ())):
            rt = self._rt.get(uid)
            pod = self.sim.store.by_uid(uid)
            if rt is None or pod is None or rt.stage != "started":
                continue
            for ctr in rt.ctrs.values():
                if ctr.state != "running" or not ctr.registered:
                    continue
                container: dict[str, Any] = next(
                    (c for c in pod["spec"]["containers"] if c["name"] == ctr.name), {}
                )
                if ctr.kind == "device-plugin":
                    if DEVICE_PLUGIN_IMAGE in ctr.image:
                        self._write_log(rt, ctr.name, pluginreleases.reregistered(ctr.image, container, now))
                    self.register_device_plugin(node, uid)  # type: ignore[attr-defined]
                elif ctr.kind == "dra-plugin":
                    self._write_log(rt, ctr.name, dralogs.reregistered(container, now))
                    self._register_dra(node, uid, ctr, container)

    def _touch_log(self, rt: PodRt, container: str) -> None:
        self._touch_log_key(rt.ns, rt.name, container)

    def _touch_log_key(self, ns: str, pod: str, container: str) -> None:
        """A started container has a (possibly empty) log, so ``kubectl logs`` answers."""
        self.sim.logs.touch(ns, pod, container)

    def _lines(self, what: Any, start: Any, make: Any) -> list[Any]:
        """Plugin start-up lines, shared by every pod of the same image and settings that started
        at the same moment."""
        key = (what, start)
        lines = self._log_cache.get(key)
        if lines is None:
            if len(self._log_cache) > 64:
                self._log_cache.clear()
            lines = self._log_cache[key] = make()
        return lines

    def _write_log(self, rt: PodRt, container: str, lines: list[Any]) -> None:
        """Write ``lines`` now, those stamped more than :data:`DEFER_AFTER` ahead when their moment comes."""
        due = self.sim.clock.now() + dt.timedelta(seconds=DEFER_AFTER)
        later = [entry for entry in lines if entry[0] > due]
        for moment, line in lines:
            if moment <= due:
                self.sim.logs.write(rt.ns, rt.name, container, moment, line)
        if later:
            wait = (later[0][0] - self.sim.clock.now()).total_seconds()
            self._later(rt, wait, lambda: self._write_log(rt, container, later))  # type: ignore[attr-defined]
