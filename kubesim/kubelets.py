"""One simulated kubelet per node, all run by one controller with per-node indexes.

Pods bound to a node go Pending (ContainerCreating) -> sandbox (pod IP) -> image pulled (only
what the simulation's registry has, :mod:`kubesim.registry`; else ErrImagePull and back-off)
-> containers created and started -> Running and Ready, on the simulated clock. What a
container does follows its image tag, resolved once when the kubelet starts the pod (a
``-crash-on-<word>`` image crashes only where the node is labelled
``kubesim.io/crash=<word>``; see :func:`kubesim.podstatus.behaviour`); device and DRA
plugins register with the node's kubelet (see :mod:`kubesim.devices`). A pod with
a deletionTimestamp is removed about a second later. A CUDA sample container runs to
completion (see :mod:`kubesim.jobs`). ``restart_kubelet`` and
``set_node_ready`` are the faults the control API injects.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from typing import Any

from kubesim import dra, dradrivers, pluginreleases
from kubesim import podstatus as ps
from kubesim.clock import rfc3339
from kubesim.configrefs import ConfigRefs
from kubesim.devices import DEVICE_PLUGIN_IMAGE, NODES, DeviceRegistry, kind_of
from kubesim.ipam import PodAddresses
from kubesim.jobs import JobRunner, is_job, sleeps
from kubesim.nodestatus import NodeLifecycle
from kubesim.plugins import PluginAgent
from kubesim.podruntime import (
    BACKOFF_MAX,
    BACKOFF_START,
    Ctr,
    PodRt,
    dra_prepare_message,
    new_runtime,
    render_status,
    runtime_from_status,
)
from kubesim.simulation import Simulation
from kubesim.store import WatchEvent

PODS = ("", "pods")
SANDBOX_DELAY = 0.5
PULL_SECONDS = 1.2
SLOW_PULL_SECONDS = 180.0
CRASH_AFTER = 1.0
PULL_ERROR_SECONDS = 2.0
"""How long ErrImagePull shows before the pod's next sync turns it into ImagePullBackOff."""
TERMINATION_DELAY = 1.0
DRA_RETRY = 10.0
ORPHAN_QUARANTINE = 40.0


class KubeletController(DeviceRegistry, NodeLifecycle, PluginAgent, JobRunner, ConfigRefs):
    """Kubelets for every node: pod lifecycles, plugin registrations, node faults."""

    def __init__(self) -> None:
        DeviceRegistry.__init__(self)
        NodeLifecycle.__init__(self)
        PluginAgent.__init__(self)
        ConfigRefs.__init__(self)
        self._pods: dict[str, set[str]] = defaultdict(set)  # node -> pod uids
        self._where: dict[str, tuple[str, str, str]] = {}  # uid -> (ns, name, node)
        self._rt: dict[str, PodRt] = {}
        self._dra_wait: dict[str, set[str]] = defaultdict(set)
        self.addresses = PodAddresses()

    # ------------------------------------------------------------------ start
    def start(self, sim: Simulation) -> None:
        self.sim = sim
        self.on_dra_change.append(self._dra_registration_changed)
        for obj in sim.store.iter(dra.SLICES) if dra.has_slices(sim.minor) else ():
            self.index_slice(obj, deleted=False)
        for pod in sim.store.iter(PODS):
            node = (pod.get("spec") or {}).get("nodeName")
            if node:
                self._index(pod, node)
                ip = (pod.get("status") or {}).get("podIP")
                if ip and not pod["spec"].get("hostNetwork"):
                    self.addresses.hold(node, ip, pod["metadata"]["uid"])
                self._adopt(pod)
        for node in sim.store.iter(NODES):
            name = node["metadata"]["name"]
            if self.desired_gpu(node) != self._current_gpu(node):
                self._enqueue_node(name)
        sim.store.subscribe(self._on_event)

    @staticmethod
    def _current_gpu(node: dict[str, Any]) -> tuple[str | None, str | None]:
        st = node.get("status") or {}
        return (st.get("capacity") or {}).get(ps.GPU), (st.get("allocatable") or {}).get(ps.GPU)

    def _index(self, pod: dict[str, Any], node: str) -> None:
        m = pod["metadata"]
        self._where[m["uid"]] = (m.get("namespace", ""), m["name"], node)
        self._pods[node].add(m["uid"])

    def _adopt(self, pod: dict[str, Any]) -> None:
        """Take over a pod loaded by a scenario without rewriting it."""
        m, status = pod["metadata"], pod.get("status") or {}
        uid = m["uid"]
        if m.get("deletionTimestamp") or status.get("phase") not in ("Running", "Succeeded", "Failed"):
            self._enqueue_sync(uid)
            return
        if status.get("phase") != "Running":
            return
        containers = pod["spec"].get("containers") or []
        labels = self._node_labels(pod["spec"]["nodeName"])
        if all(kind_of(c) == "generic" and ps.behaviour(self.sim.registry.content(c.get("image", "")), labels) != "crash"  # type: ignore[union-attr]
               for c in containers):
            for c in containers:
                self._touch_log_key(m.get("namespace", ""), m["name"], c["name"])
            return
        rt = runtime_from_status(pod, labels, host=self.sim.faults.hosts.get(pod["spec"]["nodeName"]),  # type: ignore[union-attr]
                                 content=self.sim.registry.content)  # type: ignore[union-attr]
        for ctr in rt.ctrs.values():
            if ctr.state != "running":
                continue
            self._touch_log(rt, ctr.name)
            if ctr.kind != "generic" or ctr.mode == "crash":
                self._rt[uid] = rt
            if ctr.mode == "crash":
                self._later(rt, CRASH_AFTER, lambda r=rt, c=ctr: self._crash(r, c))
            elif ctr.kind != "generic":
                self._plugin_started(rt, ctr, pod, adopted=True)

    # ------------------------------------------------------------------ watch
    def _on_event(self, res: Any, ev: WatchEvent) -> None:
        if res.group == "" and res.plural == "pods":
            self._on_pod(ev)
        elif res.group == "resource.k8s.io" and res.plural == "resourceslices":
            self.index_slice(ev.obj, deleted=ev.type == "DELETED")
        elif res.group == "" and res.plural == "nodes" and ev.type == "DELETED":
            name = ev.obj["metadata"]["name"]
            self.not_ready.discard(name)
            assert self.sim is not None
            self.sim.call_later(ORPHAN_QUARANTINE, lambda: self._collect_orphans(name))
        elif res.group == "" and res.plural in ("secrets", "configmaps") and ev.type != "DELETED":
            self._config_written(ev.obj["metadata"].get("namespace", ""))

    def _collect_orphans(self, node: str) -> None:
        """PodGC: pods bound to a node that does not exist are deleted (after a 40 s quarantine)."""
        assert self.sim is not None
        if self.sim.store.get(NODES, "", node) is not None:
            return
        for uid in list(self._pods.get(node, ())):
            where = self._where.get(uid)
            if where is not None and self._pod(uid) is not None:
                self.sim.store.delete(PODS, where[0], where[1], grace_seconds=0, preconditions={"uid": uid})

    def _on_pod(self, ev: WatchEvent) -> None:
        pod, m = ev.obj, ev.obj["metadata"]
        uid = m["uid"]
        if ev.type == "DELETED":
            self._forget(uid)
            return
        node = (pod.get("spec") or {}).get("nodeName")
        if not node:
            return
        if uid not in self._where:
            self._index(pod, node)
            self._enqueue_sync(uid)
        elif m.get("deletionTimestamp") and not (ev.old or {}).get("metadata", {}).get("deletionTimestamp"):
            self._enqueue_sync(uid)

    def _enqueue_sync(self, uid: str) -> None:
        assert self.sim is not None
        self.sim.enqueue(("kubelet-pod", uid), lambda: self._sync(uid))

    def _forget(self, uid: str) -> None:
        where = self._where.pop(uid, None)
        rt = self._rt.pop(uid, None)
        if where is None:
            return
        ns, name, node = where
        self.addresses.release(uid)
        self._pods[node].discard(uid)
        self._dra_wait[node].discard(uid)
        if rt is not None:
            rt.epoch += 1
        self.unregister(node, uid)
        assert self.sim is not None
        self.sim.logs.forget(ns, name)

    # ------------------------------------------------------------------ lifecycle
    def _pod(self, uid: str) -> dict[str, Any] | None:
        assert self.sim is not None
        return self.sim.store.by_uid(uid)

    def _later(self, rt: PodRt, delay: float, fn: Any) -> None:
        epoch = rt.epoch

        def fire() -> None:
            if self._rt.get(rt.uid) is rt and rt.epoch == epoch:
                fn()

        assert self.sim is not None
        self.sim.call_later(delay, fire)

    def _sync(self, uid: str) -> None:
        pod = self._pod(uid)
        if pod is None or uid not in self._where:
            return
        node = self._where[uid][2]
        if node in self.not_ready:
            self.deferred[node].add(uid)
            return
        node_obj = self.sim.store.get(NODES, "", node)  # type: ignore[union-attr]
        if node_obj is None:
            self.sim.call_later(ORPHAN_QUARANTINE, lambda: self._collect_orphans(node))  # type: ignore[union-attr]
            return
        rt = self._rt.get(uid)
        if pod["metadata"].get("deletionTimestamp"):
            self._terminate(pod, rt)
            return
        if rt is not None or ps.is_terminal(pod):
            if rt is not None and rt.stage != "terminating":
                self._write(rt)
            return
        rt = new_runtime(pod, node, node_obj["metadata"].get("labels"), host=self.sim.faults.hosts.get(node),  # type: ignore[union-attr]
                         content=self.sim.registry.content)  # type: ignore[union-attr]
        self._rt[uid] = rt
        rt.start_time = rfc3339(self.sim.clock.now())  # type: ignore[union-attr]
        rt.stage = "preparing"
        self._write(rt)
        self._prepare(rt)

    def _prepare_if_waiting(self, rt: PodRt) -> None:
        if rt.stage == "preparing":
            self._prepare(rt)

    def _prepare(self, rt: PodRt) -> None:
        """Prepare the pod's DRA claims (before the sandbox), then create the sandbox."""
        pod = self._pod(rt.uid)
        if pod is None or self._mount_blocked(rt, pod):
            return
        missing = self._unprepared_driver(pod, rt.node)
        if missing is not None:
            self._dra_wait[rt.node].add(rt.uid)
            if missing:
                self._event(pod, "FailedPrepareDynamicResources", missing, "Warning")
            self._later(rt, DRA_RETRY, lambda: self._prepare(rt) if rt.stage == "preparing" else None)
            return
        self._dra_wait[rt.node].discard(rt.uid)
        self._later(rt, SANDBOX_DELAY, lambda: self._sandbox(rt))

    def _unprepared_driver(self, pod: dict[str, Any], node: str) -> str | None:
        """None when every claim can be prepared; why not otherwise ("" to wait for the claim to be made).

        A claim not reserved for the pod (a pod created with ``spec.nodeName`` skipped the
        scheduler, which allocates and reserves) fails every retry, as the kubelet does."""
        assert self.sim is not None
        ns = pod["metadata"].get("namespace", "")
        for claim_name in dra.resolved_claim_names(pod, self.sim.minor).values():
            claim = self.sim.store.get(dra.CLAIMS, ns, claim_name) if claim_name else None
            if claim is None:
                return ""
            if pod["metadata"]["uid"] not in dra.reserved_uids(claim):
                return dra.unreserved_message(self.sim.minor, pod, claim)
            for driver in sorted(dra.claim_drivers(claim)):
                if driver not in self.drivers_on(node):
                    return dra_prepare_message(self.sim.minor, driver)
        return None

    def _dra_registration_changed(self, node: str, driver: str) -> None:
        for uid in list(self._dra_wait.get(node, ())):
            rt = self._rt.get(uid)
            if rt is not None and rt.stage == "preparing":
                assert self.sim is not None
                self.sim.enqueue(("kubelet-prepare", uid), functools.partial(self._prepare_if_waiting, rt))
        sched = self.sim.controllers.get("scheduler") if self.sim else None
        if sched is not None and hasattr(sched, "retry_soon"):
            sched.retry_soon()

    def _sandbox(self, rt: PodRt) -> None:
        pod = self._pod(rt.uid)
        if pod is None:
            return
        assert self.sim is not None
        rt.stage = "sandbox"
        rt.pod_ip = self._host_ip(rt.node) if pod["spec"].get("hostNetwork") else self._allocate_ip(rt.node, rt.uid)
        self._write(rt)
        for ctr in rt.ctrs.values():
            self._event(pod, "Pulling", f'Pulling image "{ctr.image}"', ctr=ctr.name)
            took = SLOW_PULL_SECONDS if ctr.mode == "slow" else PULL_SECONDS
            if self.sim.registry.pull_error(ctr.image):
                self._later(rt, PULL_SECONDS, lambda c=ctr: self._pull_failed(rt, c))
            else:
                self._later(rt, took, lambda c=ctr, t=took: self._pulled(rt, c, t))

    def _pull_failed(self, rt: PodRt, ctr: Ctr) -> None:
        """The registry refused the image: ErrImagePull, then ImagePullBackOff until the back-off
        (10 s doubling to 300 s, as the kubelet's image back-off) lets it pull again."""
        pod = self._pod(rt.uid)
        assert self.sim is not None
        error = self.sim.registry.pull_error(ctr.image)
        if pod is None:
            return
        if error is None:  # pushed since the last attempt
            ctr.pull_waiting = None
            self._pulled(rt, ctr, PULL_SECONDS)
            return
        self._event(pod, "Failed", f'Failed to pull image "{ctr.image}": {error}', "Warning", ctr=ctr.name)
        self._event(pod, "Failed", "Error: ErrImagePull", "Warning", ctr=ctr.name)
        ctr.pull_waiting = {"message": error, "reason": "ErrImagePull"}
        ctr.backoff = min(ctr.backoff * 2, BACKOFF_MAX) if ctr.backoff else BACKOFF_START
        self._write(rt)
        self._later(rt, PULL_ERROR_SECONDS, lambda: self._pull_backoff(rt, ctr, error))

    def _pull_backoff(self, rt: PodRt, ctr: Ctr, error: str) -> None:
        pod = self._pod(rt.uid)
        if pod is None:
            return
        assert self.sim is not None
        self._event(pod, "BackOff", f'Back-off pulling image "{ctr.image}"', ctr=ctr.name)
        self._event(pod, "Failed", "Error: ImagePullBackOff", "Warning", ctr=ctr.name)
        ctr.pull_waiting = {"message": ps.pull_backoff_message(self.sim.minor, ctr.image, error),
                            "reason": "ImagePullBackOff"}
        self._write(rt)
        self._later(rt, ctr.backoff, lambda: self._pull_again(rt, ctr))

    def _pull_again(self, rt: PodRt, ctr: Ctr) -> None:
        pod = self._pod(rt.uid)
        if pod is None:
            return
        self._event(pod, "Pulling", f'Pulling image "{ctr.image}"', ctr=ctr.name)
        self._later(rt, PULL_SECONDS, lambda: self._pull_failed(rt, ctr))

    def _pulled(self, rt: PodRt, ctr: Ctr, took: float) -> None:
        pod = self._pod(rt.uid)
        if pod is None:
            return
        self._event(pod, "Pulled", ps.pulled_message(self.sim.minor, ctr.image, took), ctr=ctr.name)  # type: ignore[union-attr]
        ctr.image_id = self.sim.registry.image_id(ctr.image)  # type: ignore[union-attr]  # the digest pulled now
        if not self._env_blocked(rt, ctr, pod):
            self._start_container(rt, ctr, pod)

    def _start_container(self, rt: PodRt, ctr: Ctr, pod: dict[str, Any]) -> None:
        assert self.sim is not None
        minor = self.sim.minor
        now = self.sim.clock.now()
        ctr.state, ctr.started_at = "running", rfc3339(now)
        ctr.cid = ps.container_id(f"{rt.uid}/{ctr.name}/{ctr.restarts}")
        rt.stage = "started"
        self._event(pod, "Created", ps.created_message(minor, ctr.name), ctr=ctr.name)
        self._event(pod, "Started", ps.started_message(minor, ctr.name), ctr=ctr.name)
        self._touch_log(rt, ctr.name)
        if is_job(ctr.image) and not sleeps(next(
                (c for c in pod["spec"].get("containers") or [] if c["name"] == ctr.name), {})):
            self._run_job(rt, ctr, pod)
        elif ctr.mode == "crash":
            if DEVICE_PLUGIN_IMAGE in ctr.image:
                container: dict[str, Any] = next(
                    (c for c in pod["spec"].get("containers") or [] if c["name"] == ctr.name), {})
                self._write_log(rt, ctr.name, pluginreleases.crashed(ctr.image, container, now, ctr.crash_reason))
            self._later(rt, CRASH_AFTER, lambda: self._crash(rt, ctr))
        elif ctr.kind != "generic":
            self._plugin_started(rt, ctr, pod, adopted=False)
        self._write(rt)

    def _crash(self, rt: PodRt, ctr: Ctr) -> None:
        pod = self._pod(rt.uid)
        if pod is None or ctr.state != "running":
            return
        assert self.sim is not None
        now = rfc3339(self.sim.clock.now())
        ctr.last_term = {
            "containerID": ctr.cid, "exitCode": 1, "finishedAt": now, "reason": "Error", "startedAt": ctr.started_at,
        }
        if ctr.registered:
            ctr.registered = False
            spec: dict[str, Any] = next((c for c in pod["spec"].get("containers") or [] if c["name"] == ctr.name), {})
            self.unregister(rt.node, rt.uid, driver=dradrivers.driver_of(spec) if ctr.kind == "dra-plugin" else None)
        if ctr.backoff <= 0:
            ctr.backoff = BACKOFF_START
            self._restart(rt, ctr)
            return
        ctr.state = "backoff"
        self._write(rt)
        self._event(pod, "BackOff", f"Back-off restarting failed container {ctr.name} in pod {ps.pod_ref(pod)}", "Warning", ctr=ctr.name)
        self._later(rt, ctr.backoff, lambda: self._restart(rt, ctr, grow=True))

    def _restart(self, rt: PodRt, ctr: Ctr, grow: bool = False) -> None:
        pod = self._pod(rt.uid)
        if pod is None:
            return
        assert self.sim is not None
        if grow:
            ctr.backoff = min(ctr.backoff * 2, BACKOFF_MAX)
        ctr.restarts += 1
        self.sim.logs.rotate(rt.ns, rt.name, ctr.name)
        self._event(pod, "Pulled", f'Container image "{ctr.image}" already present on machine', ctr=ctr.name)
        self._start_container(rt, ctr, pod)

    def _terminate(self, pod: dict[str, Any], rt: PodRt | None) -> None:
        uid = pod["metadata"]["uid"]
        node = self._where[uid][2]
        if rt is None:
            rt = runtime_from_status(pod, self._node_labels(node), host=self.sim.faults.hosts.get(node),  # type: ignore[union-attr]
                                         content=self.sim.registry.content)  # type: ignore[union-attr]
            self._rt[uid] = rt
        if rt.stage == "terminating":
            return
        rt.epoch += 1
        rt.stage = "terminating"
        self.unregister(node, uid)
        for ctr in rt.ctrs.values():
            if ctr.state == "running":
                self._event(pod, "Killing", f"Stopping container {ctr.name}", ctr=ctr.name)
        grace = pod["metadata"].get("deletionGracePeriodSeconds")
        delay = min(TERMINATION_DELAY, float(grace)) if grace is not None else TERMINATION_DELAY
        self._later(rt, delay, lambda: self._finish(rt))

    def _finish(self, rt: PodRt) -> None:
        assert self.sim is not None
        pod = self._pod(rt.uid)
        if pod is None:
            return
        if rt.node in self.not_ready:
            self.deferred[rt.node].add(rt.uid)
            return
        self.sim.store.delete(PODS, rt.ns, rt.name, grace_seconds=0, preconditions={"uid": rt.uid})

    def _event(self, pod: dict[str, Any], reason: str, message: str, kind: str = "Normal", ctr: str | None = None) -> None:
        assert self.sim is not None
        node = (pod.get("spec") or {}).get("nodeName")
        if node in self.not_ready:
            return
        self.sim.record_event(
            pod, reason=reason, message=message, type=kind, component="kubelet", host=node,
            field_path=f"spec.containers{{{ctr}}}" if ctr else None,
        )

    def _node_labels(self, node: str) -> dict[str, str]:
        """The node's labels as they are now (an image's mode may depend on them)."""
        assert self.sim is not None
        obj = self.sim.store.get(NODES, "", node) or {}
        return (obj.get("metadata") or {}).get("labels") or {}

    def _host_ip(self, node: str) -> str:
        assert self.sim is not None
        obj = self.sim.store.get(NODES, "", node) or {}
        for addr in (obj.get("status") or {}).get("addresses") or []:
            if addr.get("type") == "InternalIP":
                return addr["address"]
        return "10.0.0.1"

    def _allocate_ip(self, node: str, uid: str) -> str | None:
        assert self.sim is not None
        obj = self.sim.store.get(NODES, "", node) or {}
        cidr = (obj.get("spec") or {}).get("podCIDR")
        return self.addresses.allocate(node, cidr, uid) if cidr else None

    def _write(self, rt: PodRt) -> None:
        """Render the pod's status from the runtime state and store it (if it changed)."""
        assert self.sim is not None
        if rt.node in self.not_ready or rt.stage == "terminating":
            return
        pod = self._pod(rt.uid)
        if pod is None:
            return
        status = render_status(rt, pod, minor=self.sim.minor, now=rfc3339(self.sim.clock.now()), host_ip=self._host_ip(rt.node))
        self.sim.store.mutate(PODS, rt.ns, rt.name, lambda obj: obj.__setitem__("status", status))
