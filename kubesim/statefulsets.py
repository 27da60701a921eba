"""StatefulSets, as kube-controller-manager's StatefulSet controller keeps them.

- The API server's defaults (``replicas: 1``, ``podManagementPolicy: OrderedReady``,
  ``updateStrategy: {type: RollingUpdate, rollingUpdate: {partition: 0}}``,
  ``revisionHistoryLimit: 10``) are the store's (:mod:`kubesim.defaults`).
- Revisions are ControllerRevisions named ``<set>-<hash>``, as for DaemonSets; each pod
  carries its revision's name as ``controller-revision-hash``, its ``apps.kubernetes.io/pod-index``
  and ``statefulset.kubernetes.io/pod-name`` labels, ``hostname`` and ``subdomain``.
- Pods ``<set>-0`` … ``<set>-<n-1>``: under ``OrderedReady`` created one at a time, each once the
  one before is Running and Ready, and removed from the highest ordinal down, one at a time;
  ``Parallel`` does all at once. A failed pod is deleted and made again.
- ``RollingUpdate`` replaces pods from the highest ordinal down to ``partition``, one at a
  time and only while every other pod is Ready; a pod below the partition is made from the
  current revision. ``OnDelete`` replaces nothing by itself.
- Status: replicas, readyReplicas, availableReplicas, currentReplicas, updatedReplicas,
  currentRevision, updateRevision (current becomes update once every pod is updated and
  Ready), observedGeneration, collisionCount: what ``kubectl rollout status`` reads.

Volume claim templates are not provisioned (kubesim has no storage).
"""

from __future__ import annotations

import copy
from collections import defaultdict
from typing import Any

from kubesim import podstatus as ps
from kubesim.errors import ApiError
from kubesim.revisions import HASH_LABEL, History, compute_hash
from kubesim.simulation import Simulation
from kubesim.store import WatchEvent

PODS = ("", "pods")
STATEFULSETS = ("apps", "statefulsets")
INDEX_LABEL = "apps.kubernetes.io/pod-index"
NAME_LABEL = "statefulset.kubernetes.io/pod-name"


def ordinal(pod: dict[str, Any], name: str) -> int | None:
    suffix = pod["metadata"]["name"].removeprefix(f"{name}-")
    return int(suffix) if suffix.isdigit() and pod["metadata"]["name"] == f"{name}-{suffix}" else None


def _template_of(revision: dict[str, Any]) -> dict[str, Any]:
    template = dict(((revision.get("data") or {}).get("spec") or {}).get("template") or {})
    template.pop("$patch", None)
    return template


class StatefulSetController:
    """Keeps each StatefulSet's pods, revisions and status."""

    def __init__(self) -> None:
        self.sim: Simulation | None = None
        self.history: History | None = None
        self._owned: dict[str, set[str]] = defaultdict(set)
        self._owner: dict[str, str] = {}

    def start(self, sim: Simulation) -> None:
        self.sim = sim
        self.history = History(sim)
        for pod in sim.store.iter(PODS):
            self._index(pod)
        sim.store.subscribe(self._on_event)
        for sts in sim.store.iter(STATEFULSETS):
            self._enqueue(sts["metadata"]["namespace"], sts["metadata"]["name"])

    def _index(self, pod: dict[str, Any], deleted: bool = False) -> str | None:
        uid = pod["metadata"]["uid"]
        owner = self._owner.get(uid) or next(
            (str(r["uid"]) for r in pod["metadata"].get("ownerReferences") or []
             if r.get("controller") and r.get("kind") == "StatefulSet"), None)
        if owner is None:
            return None
        if deleted:
            self._owner.pop(uid, None)
            self._owned[owner].discard(uid)
        else:
            self._owner[uid] = owner
            self._owned[owner].add(uid)
        return owner

    def _enqueue(self, ns: str, name: str) -> None:
        assert self.sim is not None
        self.sim.enqueue(("statefulset", ns, name), lambda: self.sync(ns, name))

    def _on_event(self, res: Any, ev: WatchEvent) -> None:
        assert self.sim is not None
        if (res.group, res.plural) == STATEFULSETS:
            if ev.type == "DELETED":
                self._owned.pop(ev.obj["metadata"]["uid"], None)
            else:
                self._enqueue(ev.obj["metadata"]["namespace"], ev.obj["metadata"]["name"])
        elif (res.group, res.plural) == PODS:
            owner = self._index(ev.obj, deleted=ev.type == "DELETED")
            sts = self.sim.store.by_uid(owner) if owner else None
            if sts is not None:
                self._enqueue(sts["metadata"]["namespace"], sts["metadata"]["name"])

    def _pods(self, sts: dict[str, Any]) -> dict[int, dict[str, Any]]:
        assert self.sim is not None
        name, out = sts["metadata"]["name"], {}
        for uid in self._owned.get(sts["metadata"]["uid"], ()):
            pod = self.sim.store.by_uid(uid)
            if pod is not None and pod.get("kind") == "Pod" and (i := ordinal(pod, name)) is not None:
                out[i] = pod
        return out

    # ------------------------------------------------------------------ sync
    def sync(self, ns: str, name: str) -> None:
        assert self.sim is not None and self.history is not None
        store = self.sim.store
        sts = store.get(STATEFULSETS, ns, name)
        if sts is None or sts["metadata"].get("deletionTimestamp"):
            return
        spec = sts["spec"]
        update, old = self.history.construct(sts, compute_hash(spec.get("template") or {}))
        if update is None:
            return
        status = sts.get("status") or {}
        revisions = {r["metadata"]["name"]: r for r in [update, *old]}
        current_name = str(status.get("currentRevision")) if status.get("currentRevision") in revisions \
            else str(update["metadata"]["name"])
        pods = self._pods(sts)
        replicas = int(spec.get("replicas", 1))
        ordered = spec.get("podManagementPolicy", "OrderedReady") == "OrderedReady"
        strategy = (spec.get("updateStrategy") or {}).get("type", "RollingUpdate")
        partition = int(((spec.get("updateStrategy") or {}).get("rollingUpdate") or {}).get("partition") or 0)
        self._manage(sts, pods, replicas, ordered, update, revisions.get(current_name, update),
                     partition if strategy == "RollingUpdate" else replicas)
        pods = self._pods(sts)
        if strategy == "RollingUpdate":
            self._roll(sts, pods, replicas, partition, update)
        pods = self._pods(sts)
        self.history.cleanup(sts, old, {"": list(pods.values())})
        self._status(sts, self._pods(sts), replicas, update["metadata"]["name"], current_name)

    def _manage(self, sts: dict[str, Any], pods: dict[int, dict[str, Any]], replicas: int, ordered: bool,
                update: dict[str, Any], current: dict[str, Any], partition: int) -> None:
        for i in range(replicas):
            pod = pods.get(i)
            if pod is not None and (pod.get("status") or {}).get("phase") == "Failed" \
                    and not pod["metadata"].get("deletionTimestamp"):
                self._delete(sts, pod)
                return
            if pod is None:
                self._create(sts, i, update if i >= partition else current)
                if ordered:
                    return
                continue
            if ordered and (pod["metadata"].get("deletionTimestamp") or not ps.is_pod_ready(pod)):
                return  # OrderedReady: the next waits for this one
        for i in sorted((i for i in pods if i >= replicas), reverse=True):
            if not pods[i]["metadata"].get("deletionTimestamp"):
                self._delete(sts, pods[i])
            if ordered:
                return

    def _roll(self, sts: dict[str, Any], pods: dict[int, dict[str, Any]], replicas: int, partition: int,
              update: dict[str, Any]) -> None:
        """One pod at a time from the highest ordinal, while every other pod is Ready."""
        live = [pods.get(i) for i in range(replicas)]
        if any(p is None or p["metadata"].get("deletionTimestamp") or not ps.is_pod_ready(p) for p in live):
            return
        for i in range(replicas - 1, partition - 1, -1):
            pod = pods[i]
            if (pod["metadata"].get("labels") or {}).get(HASH_LABEL) != update["metadata"]["name"]:
                self._delete(sts, pod)
                return

    def _create(self, sts: dict[str, Any], index: int, revision: dict[str, Any]) -> None:
        assert self.sim is not None
        m = sts["metadata"]
        template = _template_of(revision) or copy.deepcopy(sts["spec"].get("template") or {})
        tmeta = template.get("metadata") or {}
        name = f"{m['name']}-{index}"
        spec = copy.deepcopy(template.get("spec") or {})
        spec.setdefault("hostname", name)
        if sts["spec"].get("serviceName"):
            spec.setdefault("subdomain", sts["spec"]["serviceName"])
        claims = [c["metadata"]["name"] for c in sts["spec"].get("volumeClaimTemplates") or []
                  if isinstance(c, dict) and (c.get("metadata") or {}).get("name")]
        if claims:  # updateStorage: a volume per claim template (its PVC), before the template's own
            spec["volumes"] = [{"name": c, "persistentVolumeClaim": {"claimName": f"{c}-{name}"}} for c in claims] + [
                v for v in spec.get("volumes") or [] if v.get("name") not in claims]
        labels = {**(tmeta.get("labels") or {}), HASH_LABEL: revision["metadata"]["name"], NAME_LABEL: name}
        if self.sim.minor >= 28:
            labels[INDEX_LABEL] = str(index)
        meta: dict[str, Any] = {"name": name, "namespace": m["namespace"], "labels": labels, "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": m["name"], "uid": m["uid"], "controller": True,
             "blockOwnerDeletion": True}]}
        if tmeta.get("annotations"):
            meta["annotations"] = dict(tmeta["annotations"])
        pod = {"metadata": meta, "spec": spec, "status": {"phase": "Pending", "qosClass": ps.qos_class(spec)}}
        store = self.sim.store
        try:
            store.create(store.storage_type(PODS), pod)
        except ApiError as exc:
            self.sim.record_event(sts, reason="FailedCreate", type="Warning", component="statefulset-controller",
                                  message=f"create Pod {name} in StatefulSet {m['name']} failed error: {exc}")
            return
        self.sim.record_event(sts, reason="SuccessfulCreate", component="statefulset-controller",
                              message=f"create Pod {name} in StatefulSet {m['name']} successful")

    def _delete(self, sts: dict[str, Any], pod: dict[str, Any]) -> None:
        assert self.sim is not None
        pm, m = pod["metadata"], sts["metadata"]
        try:
            self.sim.store.delete(PODS, pm["namespace"], pm["name"])
        except ApiError:
            return
        self.sim.record_event(sts, reason="SuccessfulDelete", component="statefulset-controller",
                              message=f"delete Pod {pm['name']} in StatefulSet {m['name']} successful")

    def _status(self, sts: dict[str, Any], pods: dict[int, dict[str, Any]], replicas: int, update: str,
                current: str) -> None:
        assert self.sim is not None
        now = self.sim.clock.time()
        min_ready = int(sts["spec"].get("minReadySeconds") or 0)
        live = [p for p in pods.values() if not p["metadata"].get("deletionTimestamp")]
        revision = {p["metadata"]["uid"]: (p["metadata"].get("labels") or {}).get(HASH_LABEL) for p in live}
        updated = sum(1 for p in live if revision[p["metadata"]["uid"]] == update)
        ready = sum(1 for p in live if ps.is_pod_ready(p))
        if updated == replicas and ready == replicas and len(live) == replicas:
            current = update
        status = {
            "observedGeneration": sts["metadata"].get("generation", 1), "replicas": len(live),
            "readyReplicas": ready, "availableReplicas": sum(1 for p in live if ps.is_pod_available(p, min_ready, now)),
            "currentReplicas": sum(1 for p in live if revision[p["metadata"]["uid"]] == current),
            "updatedReplicas": updated, "currentRevision": current, "updateRevision": update,
            "collisionCount": (sts.get("status") or {}).get("collisionCount", 0),
        }
        status = {k: v for k, v in status.items() if v or k in ("replicas", "observedGeneration", "collisionCount")}
        if status != sts.get("status"):
            m = sts["metadata"]
            self.sim.store.mutate(STATEFULSETS, m["namespace"], m["name"], lambda obj: obj.__setitem__("status", status))
