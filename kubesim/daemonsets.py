"""The DaemonSet controller, after ``pkg/controller/daemon`` of kube-controller-manager.

One pod per eligible node (nodeSelector, required node affinity, taints against the
tolerations plus the standard DaemonSet ones), created unbound and pinned to its node by a
``metadata.name`` node-affinity term for the default scheduler to bind (``ScheduleDaemonSetPods``,
GA since 1.17): a pod the node has no room for stays Pending with the scheduler's
``FailedScheduling``; ControllerRevisions named
``<ds>-<hash>`` holding ``{"spec": {"template": ..., "$patch": "replace"}}``; RollingUpdate
within maxUnavailable (a new pod is created once the old one is gone) or OnDelete; the
status fields ``kubectl rollout status`` reads. Pods are indexed by owner uid and node,
so a sync costs one pass over the nodes and nothing is rewritten when all is settled.
"""

from __future__ import annotations

import copy
import math
from collections import defaultdict
from typing import Any

from kubesim import podstatus as ps
from kubesim.clock import parse_time
from kubesim.errors import ApiError
from kubesim.revisions import HASH_LABEL, TEMPLATE_GENERATION, History, compute_hash
from kubesim.selectors import node_affinity_matches, untolerated_taints
from kubesim.simulation import Simulation
from kubesim.store import WatchEvent

DAEMONSETS = ("apps", "daemonsets")
PODS = ("", "pods")
NODES = ("", "nodes")
GENERATION_LABEL = "pod-template-generation"
DAEMON_TOLERATIONS = (
    ("node.kubernetes.io/not-ready", "NoExecute"),
    ("node.kubernetes.io/unreachable", "NoExecute"),
    ("node.kubernetes.io/disk-pressure", "NoSchedule"),
    ("node.kubernetes.io/memory-pressure", "NoSchedule"),
    ("node.kubernetes.io/pid-pressure", "NoSchedule"),
    ("node.kubernetes.io/unschedulable", "NoSchedule"),
)


def daemon_tolerations(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """``AddOrUpdateDaemonPodTolerations``: the template's tolerations with the controller's added,
    each one replacing a template toleration of the same key, effect, operator and value where it
    stands (``AddOrUpdateTolerationInPodSpec``), else appended."""
    out = list(spec.get("tolerations") or [])
    extra = list(DAEMON_TOLERATIONS)
    if spec.get("hostNetwork"):
        extra.append(("node.kubernetes.io/network-unavailable", "NoSchedule"))
    for key, effect in extra:
        tol = {"effect": effect, "key": key, "operator": "Exists"}
        same = [i for i, t in enumerate(out) if isinstance(t, dict) and t.get("key") == key
                and t.get("effect") == effect and t.get("operator") == "Exists" and not t.get("value")]
        if same:
            out[same[0]] = tol
        else:
            out.append(tol)
    return out


def node_name_affinity(affinity: dict[str, Any] | None, node: str) -> dict[str, Any]:
    """``ReplaceDaemonSetPodNodeNameNodeAffinity``: pin the pod to one node by name."""
    out = copy.deepcopy(affinity) if affinity else {}
    terms = [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
    node_aff = out.setdefault("nodeAffinity", {})
    node_aff["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": terms}
    return out


def owner_ref(ds: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": ds["metadata"]["name"],
            "uid": ds["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}


def template_generation(ds: dict[str, Any]) -> str:
    return (ds["metadata"].get("annotations") or {}).get(TEMPLATE_GENERATION) or str(ds["metadata"].get("generation", 1))


def target_node(pod: dict[str, Any]) -> str:
    """``util.GetTargetNodeName``: the pod's ``spec.nodeName``, else the one node its required
    node affinity names by ``metadata.name`` (a daemon pod not bound yet); '' when neither."""
    spec = pod.get("spec") or {}
    if spec.get("nodeName"):
        return str(spec["nodeName"])
    required = ((((spec.get("affinity") or {}).get("nodeAffinity") or {})
                 .get("requiredDuringSchedulingIgnoredDuringExecution")) or {})
    for term in required.get("nodeSelectorTerms") or []:
        for req in (term or {}).get("matchFields") or []:
            if req.get("key") == "metadata.name" and req.get("operator") == "In" and len(req.get("values") or []) == 1:
                return str(req["values"][0])
    return ""


def daemon_pod(ds: dict[str, Any], node: str, hash_: str) -> dict[str, Any]:
    """A new daemon pod for ``node``, unbound and pinned to it by node affinity (no status; the
    scenarios bind and add one for loaded pods), as the controller sends it: the store's create
    admits it (token volume, priority, ...)."""
    template = ds["spec"]["template"]
    tmeta = template.get("metadata") or {}
    spec = copy.deepcopy(template.get("spec") or {})
    spec["affinity"] = node_name_affinity(spec.get("affinity"), node)
    spec["tolerations"] = daemon_tolerations(spec)
    labels = {**(tmeta.get("labels") or {}), HASH_LABEL: hash_, GENERATION_LABEL: template_generation(ds)}
    meta: dict[str, Any] = {"generateName": ds["metadata"]["name"] + "-", "namespace": ds["metadata"]["namespace"],
                            "labels": labels, "ownerReferences": [owner_ref(ds)]}
    if tmeta.get("annotations"):
        meta["annotations"] = dict(tmeta["annotations"])
    return {"metadata": meta, "spec": spec}


def should_run(ds: dict[str, Any], node: dict[str, Any], probe: dict[str, Any] | None = None) -> tuple[bool, bool]:
    """``NodeShouldRunDaemonPod``: (should run, should continue running)."""
    tspec = ds["spec"]["template"].get("spec") or {}
    if tspec.get("nodeName") and tspec["nodeName"] != node["metadata"]["name"]:
        return False, False
    if not node_affinity_matches(tspec, node):
        return False, False
    if not (node.get("spec") or {}).get("taints"):
        return True, True
    probe = probe or {"tolerations": daemon_tolerations(tspec)}
    if untolerated_taints(probe, node):
        return False, not untolerated_taints(probe, node, effects=("NoExecute",))
    return True, True


def _max_unavailable(ds: dict[str, Any], desired: int) -> int:
    strategy = ds["spec"].get("updateStrategy") or {}
    rolling = strategy.get("rollingUpdate") or {}
    value = rolling.get("maxUnavailable", 1)
    surge = rolling.get("maxSurge", 0)
    if isinstance(value, str) and value.endswith("%"):
        value = math.ceil(float(value[:-1]) * desired / 100)
    value = int(value)
    if value == 0 and (surge in (0, "0", "0%", None)):
        value = 1
    return value


def _created(pod: dict[str, Any]) -> str:
    return pod["metadata"].get("creationTimestamp") or ""


class DaemonSetController:
    """Keeps every DaemonSet's pods, revisions and status as kube-controller-manager does."""

    def __init__(self) -> None:
        self.sim: Simulation | None = None
        self._owned: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
        self._pod_owner: dict[str, tuple[str, str]] = {}
        self._eligible: dict[str, dict[str, tuple[bool, bool]]] = defaultdict(dict)
        self._eligible_gen: dict[str, Any] = {}
        self._template_changed: set[str] = set()
        self.history: History | None = None

    # ------------------------------------------------------------------ start
    def start(self, sim: Simulation) -> None:
        self.sim = sim
        self.history = History(sim)
        for pod in sim.store.iter(PODS):
            self._index_pod(pod)
        sim.store.subscribe(self._on_event)
        for ds in sim.store.iter(DAEMONSETS):
            self._enqueue(ds)

    def _enqueue(self, ds: dict[str, Any]) -> None:
        assert self.sim is not None
        ns, name = ds["metadata"]["namespace"], ds["metadata"]["name"]
        self.sim.enqueue_resync(("daemonset", ns, name), lambda: self.sync(ns, name))

    @staticmethod
    def _controller_uid(pod: dict[str, Any]) -> str | None:
        for ref in pod["metadata"].get("ownerReferences") or []:
            if ref.get("controller") and ref.get("kind") == "DaemonSet":
                return ref.get("uid")
        return None

    def _index_pod(self, pod: dict[str, Any]) -> None:
        owner = self._controller_uid(pod)
        node = target_node(pod)
        if owner:
            uid = pod["metadata"]["uid"]
            self._pod_owner[uid] = (owner, node)
            self._owned[owner][node].add(uid)

    def _on_event(self, res: Any, ev: WatchEvent) -> None:
        if res.group == "apps" and res.plural == "daemonsets":
            uid = ev.obj["metadata"]["uid"]
            if ev.type == "DELETED":
                self._owned.pop(uid, None)
                self._eligible.pop(uid, None)
                return
            old_t = ((ev.old or {}).get("spec") or {}).get("template")
            if ev.old is not None and old_t != ev.obj["spec"].get("template"):
                old_ann = (ev.old["metadata"].get("annotations") or {}).get(TEMPLATE_GENERATION)
                if old_ann == (ev.obj["metadata"].get("annotations") or {}).get(TEMPLATE_GENERATION):
                    self._template_changed.add(uid)
            self._enqueue(ev.obj)
        elif res.group == "" and res.plural == "pods":
            uid = ev.obj["metadata"]["uid"]
            known = self._pod_owner.get(uid)
            if ev.type == "DELETED":
                if known:
                    self._pod_owner.pop(uid, None)
                    self._owned[known[0]][known[1]].discard(uid)
            elif known is None:
                self._index_pod(ev.obj)
                known = self._pod_owner.get(uid)
            if known:
                self._enqueue_owner(known[0])
        elif res.group == "" and res.plural == "nodes":
            old, new = ev.old or {}, ev.obj
            if ev.type == "MODIFIED" and (old.get("metadata") or {}).get("labels") == new["metadata"].get("labels") \
                    and (old.get("spec") or {}).get("taints") == (new.get("spec") or {}).get("taints"):
                return
            name = new["metadata"]["name"]
            for cache in self._eligible.values():
                cache.pop(name, None)
            assert self.sim is not None
            for ds in self.sim.store.iter(DAEMONSETS):
                self._enqueue(ds)

    def _enqueue_owner(self, ds_uid: str) -> None:
        assert self.sim is not None
        ds = self.sim.store.by_uid(ds_uid)
        if ds is not None and ds.get("kind") == "DaemonSet":
            self._enqueue(ds)

    # ------------------------------------------------------------------ sync
    def _should_run(self, ds: dict[str, Any], node: dict[str, Any]) -> tuple[bool, bool]:
        """``should_run`` cached per DaemonSet generation and node (nodes drop out on change)."""
        uid, generation = ds["metadata"]["uid"], ds["metadata"].get("generation")
        if self._eligible_gen.get(uid) != generation:
            self._eligible[uid], self._eligible_gen[uid] = {}, generation
        cache, name = self._eligible[uid], node["metadata"]["name"]
        hit = cache.get(name)
        if hit is None:
            hit = cache[name] = should_run(ds, node)
        return hit

    def _pods_by_node(self, uid: str) -> dict[str, list[dict[str, Any]]]:
        assert self.sim is not None
        out: dict[str, list[dict[str, Any]]] = {}
        for node, uids in self._owned.get(uid, {}).items():
            pods = [p for p in (self.sim.store.by_uid(u) for u in uids) if p is not None]
            pods = [p for p in pods if not (p["metadata"].get("deletionTimestamp") and ps.is_terminal(p))]
            if len(pods) > 1:
                pods.sort(key=_created)
            if pods:
                out[node] = pods
        return out

    def sync(self, ns: str, name: str) -> None:
        assert self.sim is not None and self.history is not None
        store = self.sim.store
        ds = store.get(DAEMONSETS, ns, name)
        if ds is None or ds["metadata"].get("deletionTimestamp"):
            return
        uid = ds["metadata"]["uid"]
        ds = self._ensure_template_generation(ds)
        hash_ = compute_hash(ds["spec"]["template"])
        _current, old = self.history.construct(ds, hash_)
        by_node = self._pods_by_node(uid)
        nodes = list(store.iter(NODES))
        changed = self._manage(ds, nodes, by_node, hash_)
        strategy = (ds["spec"].get("updateStrategy") or {}).get("type") or "RollingUpdate"
        if not changed and strategy == "RollingUpdate":
            changed = self._rolling_update(ds, nodes, by_node, hash_)
        self.history.cleanup(ds, old, by_node)
        # the status counts the pods as they are now: read again only when this sync changed them
        self._update_status(ds, nodes, self._pods_by_node(uid) if changed else by_node, hash_)

    def _ensure_template_generation(self, ds: dict[str, Any]) -> dict[str, Any]:
        """The API server keeps ``deprecated.daemonset.template.generation``; do it if not."""
        assert self.sim is not None
        uid = ds["metadata"]["uid"]
        ann = ds["metadata"].get("annotations") or {}
        bump = uid in self._template_changed
        self._template_changed.discard(uid)
        if TEMPLATE_GENERATION in ann and not bump:
            return ds
        value = str(int(ann.get(TEMPLATE_GENERATION, "0")) + 1) if bump and TEMPLATE_GENERATION in ann else "1"

        def apply(obj: dict[str, Any]) -> None:
            obj["metadata"].setdefault("annotations", {})[TEMPLATE_GENERATION] = value

        m = ds["metadata"]
        return self.sim.store.mutate(DAEMONSETS, m["namespace"], m["name"], apply) or ds

    def _manage(self, ds: dict[str, Any], nodes: list[dict[str, Any]], by_node: dict[str, list[dict[str, Any]]], hash_: str) -> bool:
        create, delete = [], []
        for node in nodes:
            name = node["metadata"]["name"]
            run, keep = self._should_run(ds, node)
            pods = by_node.get(name)
            if run and not pods:
                create.append(name)
            elif keep and pods:
                if len(pods) == 1 and not pods[0]["metadata"].get("deletionTimestamp") \
                        and (pods[0].get("status") or {}).get("phase") != "Failed":
                    continue  # one live pod where one belongs (nearly every node): nothing to do
                alive = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
                delete += [p for p in alive if (p.get("status") or {}).get("phase") == "Failed"]
                alive = [p for p in alive if (p.get("status") or {}).get("phase") != "Failed"]
                delete += alive[1:]
            elif not keep and pods:
                delete += [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        known = {n["metadata"]["name"] for n in nodes}
        for name, pods in by_node.items():
            if name not in known:
                delete += [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        self._sync_nodes(ds, delete, create, hash_)
        return bool(create or delete)

    def _sync_nodes(self, ds: dict[str, Any], delete: list[dict[str, Any]], create: list[str], hash_: str) -> None:
        assert self.sim is not None
        store = self.sim.store
        for pod in delete:
            m = pod["metadata"]
            try:
                store.delete(PODS, m["namespace"], m["name"])
            except ApiError:
                continue
            self.sim.record_event(ds, reason="SuccessfulDelete", message=f"Deleted pod: {m['name']}", component="daemonset-controller")
        for node in create:
            pod = daemon_pod(ds, node, hash_)
            pod["status"] = {"phase": "Pending", "qosClass": ps.qos_class(pod["spec"])}
            try:
                created = store.create(store.storage_type(PODS), pod)
            except ApiError as exc:  # admission refuses it: its namespace is terminating, an unknown PriorityClass
                self.sim.record_event(ds, reason="FailedCreate", type="Warning", message=f"Error creating: {exc}",
                                      component="daemonset-controller")
                continue
            m = created["metadata"]
            self.sim.record_event(ds, reason="SuccessfulCreate", message=f"Created pod: {m['name']}", component="daemonset-controller")

    @staticmethod
    def _is_updated(pod: dict[str, Any], hash_: str, generation: str) -> bool:
        labels = pod["metadata"].get("labels") or {}
        return labels.get(HASH_LABEL) == hash_ or labels.get(GENERATION_LABEL) == generation

    def _rolling_update(self, ds: dict[str, Any], nodes: list[dict[str, Any]], by_node: dict[str, list[dict[str, Any]]], hash_: str) -> bool:
        """Old pods replaced within maxUnavailable; whether any was deleted."""
        assert self.sim is not None
        now = self.sim.clock.time()
        min_ready = int(ds["spec"].get("minReadySeconds") or 0)
        generation = template_generation(ds)
        desired = sum(1 for n in nodes if self._should_run(ds, n)[0])
        max_unavailable = _max_unavailable(ds, desired)
        unavailable, replace, candidates = 0, [], []
        for node in sorted(by_node):
            new = old = None
            ok = True
            for pod in by_node[node]:
                if pod["metadata"].get("deletionTimestamp"):
                    continue
                if self._is_updated(pod, hash_, generation):
                    ok, new = ok and new is None, pod
                else:
                    ok, old = ok and old is None, pod
            if not ok or (new is None) == (old is None):
                unavailable += 1
            elif new is not None:
                if not ps.is_pod_available(new, min_ready, now):
                    unavailable += 1
            elif old is not None:
                if not ps.is_pod_available(old, min_ready, now):
                    replace.append(old)
                elif unavailable < max_unavailable:
                    candidates.append(old)
        room = max(0, min(max_unavailable - unavailable, len(candidates)))
        delete = replace + candidates[:room]
        self._sync_nodes(ds, delete, [], hash_)
        return bool(delete)

    def _update_status(self, ds: dict[str, Any], nodes: list[dict[str, Any]], by_node: dict[str, list[dict[str, Any]]], hash_: str) -> None:
        assert self.sim is not None
        now = self.sim.clock.time()
        min_ready = int(ds["spec"].get("minReadySeconds") or 0)
        generation = template_generation(ds)
        desired = current = misscheduled = ready = available = updated = 0
        wake: float | None = None
        for node in nodes:
            run, _ = self._should_run(ds, node)
            pods = by_node.get(node["metadata"]["name"])
            if not run:
                misscheduled += 1 if pods else 0
                continue
            desired += 1
            if not pods:
                continue
            current += 1
            pod = pods[0]
            if ps.is_pod_ready(pod):
                ready += 1
                if ps.is_pod_available(pod, min_ready, now):
                    available += 1
                else:
                    since = parse_time((ps.get_condition(pod, "Ready") or {}).get("lastTransitionTime"))
                    if since is not None:
                        due = since.timestamp() + min_ready
                        wake = due if wake is None else min(wake, due)
            if self._is_updated(pod, hash_, generation):
                updated += 1
        counts = {
            "currentNumberScheduled": current, "numberMisscheduled": misscheduled,
            "desiredNumberScheduled": desired, "numberReady": ready,
            "observedGeneration": ds["metadata"].get("generation", 1),
            "updatedNumberScheduled": updated, "numberAvailable": available,
            "numberUnavailable": desired - available,
        }
        status = dict(ds.get("status") or {})
        status.update(counts)
        for key in ("updatedNumberScheduled", "numberAvailable", "numberUnavailable"):
            if not status[key]:
                del status[key]
        if status != ds.get("status"):
            m = ds["metadata"]
            self.sim.store.mutate(DAEMONSETS, m["namespace"], m["name"], lambda obj: obj.__setitem__("status", status))
        if wake is not None:
            m = ds["metadata"]
            self.sim.call_at(wake + 0.001, lambda: self.sim.enqueue_resync(("daemonset", m["namespace"], m["name"]),  # type: ignore[union-attr]
                                                                   lambda: self.sync(m["namespace"], m["name"])))

