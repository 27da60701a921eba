"""Node conditions and the node faults: kubelet restarts, nodes that stop reporting, and
container runtimes that go down (the kubelet reports ``Ready=False``: :meth:`NodeLifecycle.stop_runtime`).

``set_node_ready(node, False)`` plays the node lifecycle controller: every condition goes
Unknown ("Kubelet stopped posting node status."), the ``node.kubernetes.io/unreachable``
taints are added, ``NodeNotReady`` events recorded and the node's pods marked not ready.
The kubelet side of a node that does not report (``stop_posting``: from the moment its heartbeat
stops) holds its writes until the node is back.

:class:`UnschedulableTaints` is that controller's NoSchedule tainting pass for cordons: a
node with ``spec.unschedulable`` (``kubectl cordon``) gets the
``node.kubernetes.io/unschedulable:NoSchedule`` taint, which goes again on uncordon.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from kubesim.clock import rfc3339
from kubesim.devices import DEVICE_PLUGIN_RESOURCES
from kubesim.podstatus import extended_requests
from kubesim.store import WatchEvent

NODES = ("", "nodes")
PODS = ("", "pods")
UNREACHABLE = "node.kubernetes.io/unreachable"
NOT_READY = "node.kubernetes.io/not-ready"
UNSCHEDULABLE = "node.kubernetes.io/unschedulable"
RUNTIME_WAIT = 30.0
"""The kubelet's ``maxWaitForContainerRuntime``: how long a runtime may be silent before it is down."""
RUNTIME_DOWN = "container runtime is down"
_HEALTHY = (
    ("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
    ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
    ("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
)


def node_conditions(when: str, heartbeat: str | None = None) -> list[dict[str, Any]]:
    """The four conditions of a healthy node, as its kubelet posts them."""
    return [
        {"lastHeartbeatTime": heartbeat or when, "lastTransitionTime": when, "message": msg,
         "reason": reason, "status": status, "type": kind}
        for kind, status, reason, msg in _HEALTHY
    ]


def node_ref(name: str) -> dict[str, Any]:
    """How the kubelet and node controller name a node in events (uid = node name)."""
    return {"kind": "Node", "apiVersion": "v1", "metadata": {"name": name, "uid": name}}


class NodeLifecycle:
    """Mixin for the kubelet controller: node readiness and kubelet restarts."""

    sim: Any

    def __init__(self) -> None:
        self.not_ready: set[str] = set()
        """Nodes whose kubelet does not post (its writes wait in ``deferred``)."""
        self.marked_unknown: set[str] = set()
        """Nodes the node lifecycle controller marked Unknown."""
        self.deferred: dict[str, set[str]] = defaultdict(set)
        self.runtime_down: set[str] = set()
        """Nodes whose container runtime is down (the ``runtime-down`` fault): their kubelet still
        heartbeats, but reports ``Ready=False`` and can neither start nor stop a container."""

    def restart_kubelet(self, node: str, *, reboot: bool = False) -> None:
        """Restart the node's kubelet: plugin registrations are lost, and healthy plugins
        register again about two seconds later. The restarted kubelet admits the node's pods
        again before any device plugin is back, so a pod that asks for a device plugin's
        resource and whose containers are not running fails admission
        (``UnexpectedAdmissionError``, as the device manager words it) and stays Failed; its
        controller, if it has one, makes a new pod. Pods whose containers run are let be, as
        kubelets are since the fix of kubernetes#118559 (1.25.14, 1.26.9, 1.27.6, 1.28).
        ``reboot`` (a node reboot, kubernetes#125579): no container survived, so every pod
        asking for a device plugin's resource fails so; other pods are left as they were."""
        self.forget_node_registrations(node)  # type: ignore[attr-defined]
        self.sim.record_event(node_ref(node), reason="Starting", message="Starting kubelet.", component="kubelet", host=node)
        self._readmit(node, reboot=reboot)
        self.sim.call_later(2.0, lambda: self.reregister_plugins(node))  # type: ignore[attr-defined]

    def _readmit(self, node: str, *, reboot: bool) -> None:
        sim = self.sim
        now = rfc3339(sim.clock.now())
        for uid in list(self._pods.get(node, ())):  # type: ignore[attr-defined]
            pod = sim.store.by_uid(uid)
            if pod is None or pod["metadata"].get("deletionTimestamp") or \
                    (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            if not reboot and _containers_running(pod):
                continue
            wanted = [r for r in extended_requests(pod.get("spec") or {}) if r in DEVICE_PLUGIN_RESOURCES]
            if not wanted:
                continue
            message = (f"Allocate failed due to no healthy devices present; cannot allocate unhealthy devices "
                       f"{wanted[0]}, which is unexpected")
            m = pod["metadata"]
            self._rt.pop(uid, None)  # type: ignore[attr-defined]  # its containers are killed
            sim.store.mutate(PODS, m.get("namespace", ""), m["name"], lambda obj, msg=message: _rejected(obj, msg, now))
            sim.record_event(pod, reason="UnexpectedAdmissionError", message=message, type="Warning",
                             component="kubelet", host=node)

    def stop_posting(self, node: str) -> None:
        """The kubelet stops posting (its heartbeat stopped): its writes wait until it is back."""
        if self.sim.store.get(NODES, "", node) is not None:
            self.not_ready.add(node)

    def stop_runtime(self, node: str) -> None:
        """The node's container runtime stops: the kubelet's pod work waits for it, and once the
        runtime has been silent for ``maxWaitForContainerRuntime`` the kubelet posts ``Ready=False``
        (``KubeletNotReady``: "container runtime is down") and records ``NodeNotReady``; it goes on
        renewing its Lease. The node lifecycle controller taints the node from that condition
        (:mod:`kubesim.heartbeats`)."""
        if node in self.runtime_down:
            return
        self.runtime_down.add(node)
        self.not_ready.add(node)
        self.sim.call_later(RUNTIME_WAIT, lambda: self._post_runtime_down(node))

    def _post_runtime_down(self, node: str) -> None:
        sim = self.sim
        if node not in self.runtime_down or node in self.marked_unknown or sim.store.get(NODES, "", node) is None:
            return
        now = rfc3339(sim.clock.now())
        sim.store.mutate(NODES, "", node, lambda obj: _post_ready(obj, now, ready=False))
        sim.record_event(node_ref(node), reason="NodeNotReady", message=f"Node {node} status is now: NodeNotReady",
                         component="kubelet", host=node)

    def set_node_ready(self, node: str, ready: bool) -> None:
        """Make a node stop (False) or resume (True) posting its status."""
        sim = self.sim
        if sim.store.get(NODES, "", node) is None:
            return
        now = rfc3339(sim.clock.now())
        if not ready:
            if node in self.marked_unknown:
                return
            self.not_ready.add(node)
            self.marked_unknown.add(node)
            sim.store.mutate(NODES, "", node, lambda obj: _mark_unknown(obj, now))
            sim.record_event(node_ref(node), reason="NodeNotReady", message=f"Node {node} status is now: NodeNotReady",
                             component="node-controller")
            for uid in list(self._pods.get(node, ())):  # type: ignore[attr-defined]
                pod = sim.store.by_uid(uid)
                if pod is None or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                    continue
                m = pod["metadata"]
                sim.store.mutate(PODS, m.get("namespace", ""), m["name"], lambda obj: _pod_not_ready(obj, now))
                sim.record_event(pod, reason="NodeNotReady", message="Node is not ready", type="Warning",
                                 component="node-controller")
            return
        if node not in self.not_ready:
            return
        self.not_ready.discard(node)
        if node in self.runtime_down:  # the runtime is back: a Ready=False the kubelet posted turns True
            self.runtime_down.discard(node)
            if ready_status(sim.store.get(NODES, "", node)) == "False":
                sim.store.mutate(NODES, "", node, lambda obj: _post_ready(obj, now, ready=True))
                sim.record_event(node_ref(node), reason="NodeReady", message=f"Node {node} status is now: NodeReady",
                                 component="kubelet", host=node)
        if node in self.marked_unknown:  # a kubelet back within the grace changed nothing the controller saw
            self.marked_unknown.discard(node)
            sim.store.mutate(NODES, "", node, lambda obj: _mark_ready(obj, now))
            sim.record_event(node_ref(node), reason="NodeReady", message=f"Node {node} status is now: NodeReady",
                             component="kubelet", host=node)
        for uid in list(self._pods.get(node, ())):  # type: ignore[attr-defined]
            rt = self._rt.get(uid)  # type: ignore[attr-defined]
            if rt is not None:
                self._write(rt)  # type: ignore[attr-defined]
            else:
                pod = sim.store.by_uid(uid)
                if pod is not None and (pod.get("status") or {}).get("phase") == "Running":
                    m = pod["metadata"]
                    sim.store.mutate(PODS, m.get("namespace", ""), m["name"], lambda obj: _pod_ready_again(obj, now))
        for uid in self.deferred.pop(node, set()):
            rt = self._rt.get(uid)  # type: ignore[attr-defined]
            if rt is not None and rt.stage == "terminating":
                self._finish(rt)  # type: ignore[attr-defined]
            else:
                self._enqueue_sync(uid)  # type: ignore[attr-defined]


def ready_status(node: dict[str, Any] | None) -> str | None:
    for cond in ((node or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return str(cond.get("status"))
    return None


def _post_ready(obj: dict[str, Any], now: str, *, ready: bool) -> None:
    """The kubelet's status post after its Ready condition changed (``setNodeReadyCondition``):
    every condition beats, Ready changes status."""
    for cond in (obj.setdefault("status", {}).get("conditions")) or []:
        cond["lastHeartbeatTime"] = now
        if cond.get("type") == "Ready":
            cond.update(status="True" if ready else "False", lastTransitionTime=now,
                        reason="KubeletReady" if ready else "KubeletNotReady",
                        message="kubelet is posting ready status" if ready else RUNTIME_DOWN)


def _mark_unknown(obj: dict[str, Any], now: str) -> None:
    st = obj.setdefault("status", {})
    for cond in st.get("conditions") or []:
        cond.update(status="Unknown", reason="NodeStatusUnknown", message="Kubelet stopped posting node status.",
                    lastTransitionTime=now)
    spec = obj.setdefault("spec", {})
    taints = [t for t in spec.get("taints") or [] if t.get("key") not in (UNREACHABLE, NOT_READY)]
    taints.append({"effect": "NoSchedule", "key": UNREACHABLE, "timeAdded": now})
    taints.append({"effect": "NoExecute", "key": UNREACHABLE, "timeAdded": now})
    spec["taints"] = taints


def _mark_ready(obj: dict[str, Any], now: str) -> None:
    st = obj.setdefault("status", {})
    st["conditions"] = node_conditions(now)
    spec = obj.setdefault("spec", {})
    taints = [t for t in spec.get("taints") or [] if t.get("key") not in (UNREACHABLE, NOT_READY)]
    if taints:
        spec["taints"] = taints
    else:
        spec.pop("taints", None)


def _pod_not_ready(obj: dict[str, Any], now: str) -> None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready" and cond.get("status") != "False":
            cond["status"] = "False"
            cond["lastTransitionTime"] = now


def _pod_ready_again(obj: dict[str, Any], now: str) -> None:
    statuses = (obj.get("status") or {}).get("containerStatuses") or []
    if not all(s.get("ready") for s in statuses):
        return
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready" and cond.get("status") != "True":
            cond["status"] = "True"
            cond["lastTransitionTime"] = now


def _containers_running(pod: dict[str, Any]) -> bool:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return bool(statuses) and all("running" in (c.get("state") or {}) for c in statuses)


def _rejected(obj: dict[str, Any], message: str, now: str) -> None:
    """A pod the kubelet refused at admission (``rejectPod``): the status it sets is new, Failed
    with the reason and message, and no container statuses (so kubectl's STATUS column shows
    ``UnexpectedAdmissionError``); the pod's conditions say it is not ready."""
    old = obj.get("status") or {}
    conditions = [dict(c) for c in old.get("conditions") or []]
    for cond in conditions:
        if cond.get("type") in ("Ready", "ContainersReady") and cond.get("status") != "False":
            cond.update(status="False", lastTransitionTime=now, reason="PodFailed")
    obj["status"] = {k: v for k, v in {
        "phase": "Failed", "reason": "UnexpectedAdmissionError", "message": f"Pod was rejected: {message}",
        "conditions": conditions, "hostIP": old.get("hostIP"), "hostIPs": old.get("hostIPs"),
        "startTime": old.get("startTime"), "qosClass": old.get("qosClass")}.items() if v is not None}


def _cordon_tainted(node: dict[str, Any]) -> bool:
    return any(t.get("key") == UNSCHEDULABLE and t.get("effect") == "NoSchedule"
               for t in (node.get("spec") or {}).get("taints") or [])


def _cordoned(node: dict[str, Any]) -> bool:
    return bool((node.get("spec") or {}).get("unschedulable"))


class UnschedulableTaints:
    """``doNoScheduleTaintingPass`` for ``spec.unschedulable``: the taint follows the cordon
    (added with its ``timeAdded``, as ``SwapNodeControllerTaint`` stamps it; removed on uncordon)."""

    def __init__(self) -> None:
        self.sim: Any = None

    def start(self, sim: Any) -> None:
        self.sim = sim
        sim.store.subscribe(self._on_event)
        for node in sim.store.iter(NODES):
            if _cordoned(node) != _cordon_tainted(node):
                self._enqueue(node["metadata"]["name"])

    def _enqueue(self, name: str) -> None:
        self.sim.enqueue(("node-unschedulable-taint", name), lambda: self.sync(name))

    def _on_event(self, res: Any, ev: WatchEvent) -> None:
        if res.group == "" and res.plural == "nodes" and ev.type != "DELETED" \
                and _cordoned(ev.obj) != _cordon_tainted(ev.obj):
            self._enqueue(ev.obj["metadata"]["name"])

    def sync(self, name: str) -> None:
        now = rfc3339(self.sim.clock.now())

        def swap(node: dict[str, Any]) -> None:
            spec = node.setdefault("spec", {})
            taints = [t for t in spec.get("taints") or []
                      if not (t.get("key") == UNSCHEDULABLE and t.get("effect") == "NoSchedule")]
            if _cordoned(node):
                taints.append({"effect": "NoSchedule", "key": UNSCHEDULABLE, "timeAdded": now})
            if taints:
                spec["taints"] = taints
            else:
                spec.pop("taints", None)

        self.sim.store.mutate(NODES, "", name, swap)
