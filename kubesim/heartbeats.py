"""Node heartbeats: each kubelet's Lease in ``kube-node-lease``, and the node lifecycle
controller that watches them.

A kubelet renews its node's Lease (``holderIdentity`` = the node, ``leaseDurationSeconds:
40``) every 10 s. Storing a write per node every 10 s would cost a 5,000-node cluster 500
writes a second, so the renewals are not stored: the Lease is stored once, and its
``spec.renewTime`` is computed from the simulated clock when it is read (the last 10 s tick
since the kubelet started renewing). A renewal is thus never a mutating request
(``/sim/v1/requests``) nor a watch event.

The kubelet also posts its node's status every ``nodeStatusReportFrequency`` (5 min) when
nothing changed; the post only moves its conditions' ``lastHeartbeatTime``, so that too is
computed when the node is read (:meth:`NodeHeartbeats.view`), never stored.

The ``node-not-ready`` fault stops a kubelet's renewals. The node lifecycle controller
(monitor period 5 s) finds the Lease older than its grace period (``--node-monitor-grace-period``:
40 s, 50 s from 1.32) and marks the node as it does when a kubelet stopped posting its status
(:meth:`kubesim.nodestatus.NodeLifecycle.set_node_ready`: conditions ``Unknown``,
``NodeStatusUnknown``, the ``node.kubernetes.io/unreachable`` ``NoSchedule`` and ``NoExecute``
taints). A kubelet that still heartbeats but posts ``Ready=False`` (the ``runtime-down`` fault,
:meth:`kubesim.nodestatus.NodeLifecycle.stop_runtime`) gets ``node.kubernetes.io/not-ready``
instead: ``NoSchedule`` as the controller sees the update, ``NoExecute`` from its next monitor
pass (:meth:`NodeHeartbeats._ready_changed`).

The taint eviction controller then evicts the node's pods that do not tolerate the
``NoExecute`` taint: at once without a matching toleration, after the smallest
``tolerationSeconds`` of the matching ones (from the taint's ``timeAdded``), never when a
matching toleration has no ``tolerationSeconds`` (DaemonSet pods). It adds the
``DisruptionTarget`` condition, records ``TaintManagerEviction`` and deletes the pod, which
stays Terminating while its kubelet is away.
"""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

from kubesim import leaderleases
from kubesim.clock import parse_time, rfc3339, rfc3339_micro
from kubesim.nodestatus import NODES, NOT_READY, PODS, UNREACHABLE, ready_status
from kubesim.selectors import tolerates
from kubesim.store import WatchEvent

LEASES = ("coordination.k8s.io", "leases")
LEASE_NAMESPACE = "kube-node-lease"
LEASE_SECONDS = 40
RENEW_EVERY = 10.0
"""The kubelet's renew interval: a quarter of the lease duration."""
MONITOR_PERIOD = 5.0
"""``--node-monitor-period``."""
STATUS_EVERY = 300.0
"""The kubelet's ``nodeStatusReportFrequency``: with a Lease, it posts an unchanged status every 5 min."""
KUBELET_CONDITIONS = frozenset({"MemoryPressure", "DiskPressure", "PIDPressure", "Ready"})
"""The node conditions the kubelet posts (others, a CNI's or a problem detector's, are not its to beat)."""


def grace_period(minor: int) -> float:
    """``--node-monitor-grace-period``: 40 s, 50 s from 1.32 (kubernetes#126287)."""
    return 50.0 if minor >= 32 else 40.0


def _eviction_component(minor: int) -> str:
    """The taint manager is its own controller from 1.29 (kubernetes#119208)."""
    return "taint-eviction-controller" if minor >= 29 else "taint-controller"


def node_lease(node: dict[str, Any]) -> dict[str, Any]:
    """The Lease a kubelet creates for its node (``renewTime`` is filled on read)."""
    m = node["metadata"]
    meta: dict[str, Any] = {
        "name": m["name"], "namespace": LEASE_NAMESPACE,
        "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": m["name"], "uid": m.get("uid", "")}],
    }
    if m.get("creationTimestamp"):  # made as the kubelet registered its node
        meta["creationTimestamp"] = m["creationTimestamp"]
    return {"metadata": meta, "spec": {"holderIdentity": m["name"], "leaseDurationSeconds": LEASE_SECONDS}}


class NodeHeartbeats:
    """The kubelets' Lease renewals and the node lifecycle controller's reading of them."""

    def __init__(self) -> None:
        self.sim: Any = None
        self.started: dict[str, float] = {}
        """Node -> when its kubelet (re)started renewing."""
        self.stopped: dict[str, float] = {}
        """Node -> its last renewal, for kubelets that stopped renewing."""
        self._generation: dict[str, int] = {}
        self._evictions: dict[str, int] = {}

    # ----------------------------------------------------------------- kubelet
    def start(self, sim: Any) -> None:
        self.sim = sim
        now = sim.clock.time()
        missing = []
        for node in sim.store.iter(NODES):
            name = node["metadata"]["name"]
            self.started[name] = now
            if sim.store.get(LEASES, LEASE_NAMESPACE, name) is None:
                missing.append(node_lease(node))
        missing += [leaderleases.leader_lease(name, sim.clock.now()) for name in leaderleases.LEADERS
                    if sim.store.get(LEASES, leaderleases.NAMESPACE, name) is None]  # the control plane's leaders
        if missing:
            sim.store.load(LEASES, missing)
        sim.store.subscribe(self._on_event)

    def _on_event(self, res: Any, ev: WatchEvent) -> None:
        if res.group != "" or res.plural != "nodes":
            return
        name = ev.obj["metadata"]["name"]
        if ev.type == "MODIFIED":
            self._ready_changed(name, ready_status(ev.old), ready_status(ev.obj))
        if ev.type == "ADDED" and name not in self.started:
            self.started[name] = self.sim.clock.time()
            self.sim.enqueue(("node-lease", name), lambda: self._create_lease(name))
        elif ev.type == "DELETED":
            self.started.pop(name, None)
            self.stopped.pop(name, None)
            kubelet = self.sim.controllers.get("kubelet")
            if kubelet is not None:
                kubelet.marked_unknown.discard(name)

    def _create_lease(self, name: str) -> None:
        store = self.sim.store
        node = store.get(NODES, "", name)
        if node is not None and store.get(LEASES, LEASE_NAMESPACE, name) is None:
            store.create(store.storage_type(LEASES), node_lease(node))

    def renewed(self, node: str) -> float | None:
        """The simulated time of the node's last renewal (``None``: its kubelet never ran)."""
        if node in self.stopped:
            return self.stopped[node]
        start = self.started.get(node)
        if start is None:
            return None
        now = self.sim.clock.time()
        return start + math.floor(max(now - start, 0.0) / RENEW_EVERY) * RENEW_EVERY

    def posted(self, node: str) -> float | None:
        """The simulated time of the kubelet's last status post (``None``: its kubelet never ran);
        it stops with the renewals."""
        start = self.started.get(node)
        if start is None:
            return None
        until = self.stopped.get(node, self.sim.clock.time())
        return start + math.floor(max(until - start, 0.0) / STATUS_EVERY) * STATUS_EVERY

    def view(self, obj: dict[str, Any]) -> dict[str, Any]:
        """A stored Lease or Node as read: a node's Lease carries its kubelet's last renewal, a
        node's kubelet conditions the last status post as ``lastHeartbeatTime`` (posting an
        unchanged status changes nothing else: ``lastTransitionTime`` stays)."""
        if obj.get("kind") == "Node":
            return self._node_view(obj)
        if leaderleases.is_leader_lease(obj):
            return leaderleases.view(obj, self.sim.clock.now())
        m = obj.get("metadata") or {}
        if m.get("namespace") != LEASE_NAMESPACE or (obj.get("spec") or {}).get("holderIdentity") != m.get("name"):
            return obj
        when = self.renewed(m.get("name", ""))
        if when is None:
            return obj
        moment = dt.datetime.fromtimestamp(when, dt.UTC)
        return {**obj, "spec": {**obj["spec"], "renewTime": rfc3339_micro(moment)}}

    def _node_view(self, obj: dict[str, Any]) -> dict[str, Any]:
        when = self.posted((obj.get("metadata") or {}).get("name", ""))
        status = obj.get("status") or {}
        if when is None or not status.get("conditions"):
            return obj
        beat = rfc3339(dt.datetime.fromtimestamp(when, dt.UTC))
        conditions = [{**c, "lastHeartbeatTime": beat} if c.get("type") in KUBELET_CONDITIONS and _older(c, when)
                      else c for c in status["conditions"]]
        return {**obj, "status": {**status, "conditions": conditions}}

    def stop(self, node: str) -> None:
        """The node's kubelet stops renewing (and posting status): the controller's grace runs."""
        if node in self.stopped:
            return
        last = self.renewed(node)
        self.stopped[node] = self.sim.clock.time() if last is None else last
        gen = self._generation[node] = self._generation.get(node, 0) + 1
        kubelet = self.sim.controllers.get("kubelet")
        if kubelet is not None:
            kubelet.stop_posting(node)
        due = self.stopped[node] + grace_period(self.sim.minor)
        due = math.ceil(due / MONITOR_PERIOD) * MONITOR_PERIOD
        self.sim.call_at(due, lambda: self._monitor(node, gen))

    def resume(self, node: str) -> None:
        """The kubelet is back: it renews at once and posts a Ready status."""
        self.stopped.pop(node, None)
        self._generation[node] = self._generation.get(node, 0) + 1
        self.started[node] = self.sim.clock.time()
        kubelet = self.sim.controllers.get("kubelet")
        if kubelet is not None:
            kubelet.set_node_ready(node, True)

    # ------------------------------------------------- node lifecycle controller
    def _monitor(self, node: str, gen: int) -> None:
        if self._generation.get(node) != gen or node not in self.stopped:
            return
        kubelet = self.sim.controllers.get("kubelet")
        if kubelet is None:
            return
        kubelet.set_node_ready(node, False)
        self._taint_evictions(node)

    def _ready_changed(self, node: str, was: str | None, now: str | None) -> None:
        """A kubelet that posts ``Ready=False`` (it still heartbeats): ``doNoScheduleTaintingPass``
        adds ``not-ready:NoSchedule`` as the update is seen, the next monitor pass
        (``processTaintBaseEviction``) ``not-ready:NoExecute``; posted ``True`` again, both go."""
        sim = self.sim
        if now == "False" and was != "False":
            sim.enqueue(("node-not-ready-taint", node), lambda: self._taint_not_ready(node, "NoSchedule"))
            due = math.ceil(sim.clock.time() / MONITOR_PERIOD) * MONITOR_PERIOD
            sim.call_at(due, lambda: self._monitor_not_ready(node))
        elif was == "False" and now == "True":
            self._generation[node] = self._generation.get(node, 0) + 1  # pending evictions are off
            sim.enqueue(("node-not-ready-taint", node), lambda: self._untaint_not_ready(node))

    def _monitor_not_ready(self, node: str) -> None:
        if ready_status(self.sim.store.get(NODES, "", node)) != "False":
            return
        self._taint_not_ready(node, "NoExecute")
        self._taint_evictions(node)

    def _taint_not_ready(self, node: str, effect: str) -> None:
        """``SwapNodeControllerTaint``: the not-ready taint of ``effect`` (stamped ``timeAdded``)
        replaces an unreachable one of the same effect."""
        if ready_status(self.sim.store.get(NODES, "", node)) != "False":
            return
        now = rfc3339(self.sim.clock.now())

        def swap(obj: dict[str, Any]) -> None:
            spec = obj.setdefault("spec", {})
            taints = spec.get("taints") or []
            if any(t.get("key") == NOT_READY and t.get("effect") == effect for t in taints):
                return
            spec["taints"] = [*(t for t in taints if not (t.get("key") == UNREACHABLE and t.get("effect") == effect)),
                              {"effect": effect, "key": NOT_READY, "timeAdded": now}]

        self.sim.store.mutate(NODES, "", node, swap)

    def _untaint_not_ready(self, node: str) -> None:
        def untaint(obj: dict[str, Any]) -> None:
            spec = obj.setdefault("spec", {})
            taints = [t for t in spec.get("taints") or [] if t.get("key") != NOT_READY]
            if taints:
                spec["taints"] = taints
            else:
                spec.pop("taints", None)

        if self.sim.store.get(NODES, "", node) is not None:
            self.sim.store.mutate(NODES, "", node, untaint)

    def _taint_evictions(self, node: str) -> None:
        """Queue the eviction of every pod on ``node`` not tolerating its NoExecute taints."""
        sim = self.sim
        obj = sim.store.get(NODES, "", node)
        if obj is None:
            return
        taints = [t for t in (obj.get("spec") or {}).get("taints") or [] if t.get("effect") == "NoExecute"]
        if not taints:
            return
        gen = self._generation.get(node, 0)
        for pod in sim.store.list(PODS, None, lambda p: (p.get("spec") or {}).get("nodeName") == node):
            if pod["metadata"].get("deletionTimestamp"):
                continue
            delay = _toleration_delay((pod.get("spec") or {}).get("tolerations"), taints, sim.clock.time())
            if delay is None:
                continue
            uid = pod["metadata"]["uid"]
            self._evictions[uid] = gen
            sim.call_later(delay, lambda uid=uid, gen=gen: self._evict(node, uid, gen))

    def _evict(self, node: str, uid: str, gen: int) -> None:
        sim = self.sim
        if self._evictions.pop(uid, None) != gen or self._generation.get(node, 0) != gen:
            return
        pod = sim.store.by_uid(uid)
        if pod is None or pod["metadata"].get("deletionTimestamp") or not _lost(sim.store.get(NODES, "", node)):
            return
        m = pod["metadata"]
        ns, name = m.get("namespace", ""), m["name"]
        now = rfc3339(sim.clock.now())
        sim.store.mutate(PODS, ns, name, lambda obj: _disruption_target(obj, now))
        sim.record_event(pod, reason="TaintManagerEviction", message=f"Marking for deletion Pod {ns}/{name}",
                         component=_eviction_component(sim.minor))
        sim.store.delete(PODS, ns, name)


def _older(cond: dict[str, Any], when: float) -> bool:
    stored = parse_time(cond.get("lastHeartbeatTime"))
    return stored is None or stored.timestamp() < when


def _lost(node: dict[str, Any] | None) -> bool:
    """The node still has the node lifecycle controller's unreachable or not-ready NoExecute taint."""
    return node is not None and any(t.get("key") in (UNREACHABLE, NOT_READY) and t.get("effect") == "NoExecute"
                                    for t in (node.get("spec") or {}).get("taints") or [])


def _toleration_delay(tolerations: list[dict[str, Any]] | None, taints: list[dict[str, Any]],
                      now: float) -> float | None:
    """Seconds until a pod must go (``getMinTolerationTime``): 0 when a taint is not tolerated,
    ``None`` when every taint is tolerated for ever."""
    limits: list[float] = []
    for taint in taints:
        matching = [t for t in tolerations or [] if tolerates([t], taint)
                    and t.get("effect") in (None, "", "NoExecute")]
        if not matching:
            return 0.0
        added = parse_time(taint.get("timeAdded"))
        since = now - added.timestamp() if added else 0.0
        for tol in matching:
            if tol.get("tolerationSeconds") is not None:
                limits.append(max(float(tol["tolerationSeconds"]) - since, 0.0))
    return min(limits) if limits else None


def _disruption_target(obj: dict[str, Any], now: str) -> None:
    conditions = [c for c in (obj.setdefault("status", {}).get("conditions") or [])
                  if c.get("type") != "DisruptionTarget"]
    conditions.append({"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager",
                       "message": "Taint manager: deleting due to NoExecute taint", "lastProbeTime": None,
                       "lastTransitionTime": now})
    obj["status"]["conditions"] = conditions
