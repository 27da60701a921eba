"""Deployments and ReplicaSets, as kube-controller-manager's two controllers keep them.

The ReplicaSet controller keeps ``spec.replicas`` pods of its template (pending, for the
scheduler to bind), deleting the least useful first when there are too many (unscheduled,
then pending, then not ready, then the newest), and writes ``status`` (replicas,
fullyLabeledReplicas, readyReplicas, availableReplicas, observedGeneration).

The Deployment controller follows ``pkg/controller/deployment``:

- the *new* ReplicaSet is the one whose template equals the Deployment's, ignoring the
  ``pod-template-hash`` label; it is created (named ``<deployment>-<hash>``, the hash in
  its labels and selector) when none is;
- revisions: the new ReplicaSet gets ``deployment.kubernetes.io/revision`` one above the
  highest, also when an old one becomes new again (a rollback), and the Deployment carries it;
- ``RollingUpdate`` scales the new ReplicaSet up within ``maxSurge`` and the old ones down
  within ``maxUnavailable`` (percentages: surge rounded up, unavailable down; both 0
  means one unavailable), unhealthy old replicas first; ``Recreate`` scales every old
  ReplicaSet to zero, waits until their pods are gone, then scales the new one up;
- status: replicas, updatedReplicas, readyReplicas, availableReplicas,
  unavailableReplicas, observedGeneration, and the ``Available`` and ``Progressing``
  conditions with the controller's reasons and messages, ``ProgressDeadlineExceeded``
  after ``progressDeadlineSeconds`` without progress (what ``kubectl rollout status`` reads);
- old ReplicaSets scaled to zero beyond ``revisionHistoryLimit`` are deleted, oldest first.

Pods made by a ReplicaSet carry its labels and an owner reference; the scheduler binds
them (and makes their claims from ResourceClaimTemplates), the kubelets run them.
"""

from __future__ import annotations

import copy
import math
from collections import defaultdict
from typing import Any

from kubesim import podstatus as ps
from kubesim.clock import parse_time, rfc3339
from kubesim.errors import ApiError
from kubesim.revisions import compute_hash
from kubesim.simulation import Simulation
from kubesim.store import WatchEvent

PODS = ("", "pods")
DEPLOYMENTS = ("apps", "deployments")
REPLICASETS = ("apps", "replicasets")
HASH_LABEL = "pod-template-hash"
REVISION = "deployment.kubernetes.io/revision"
DESIRED = "deployment.kubernetes.io/desired-replicas"
MAX_REPLICAS = "deployment.kubernetes.io/max-replicas"
COMPONENT = "deployment-controller"


# ------------------------------------------------------------------ pure parts
def replicas_of(obj: dict[str, Any]) -> int:
    value = (obj.get("spec") or {}).get("replicas")
    return 1 if value is None else int(value)


def scaled_value(value: Any, total: int, *, round_up: bool) -> int:
    """``intstr.GetScaledValueFromIntOrPercent``."""
    if isinstance(value, str) and value.endswith("%"):
        exact = int(value[:-1]) * total / 100
        return math.ceil(exact) if round_up else math.floor(exact)
    return int(value)


def surge_and_unavailable(deploy: dict[str, Any]) -> tuple[int, int]:
    """``ResolveFenceposts``: (maxSurge, maxUnavailable) of a RollingUpdate Deployment."""
    rolling = ((deploy["spec"].get("strategy") or {}).get("rollingUpdate")) or {}
    desired = replicas_of(deploy)
    surge = scaled_value(rolling.get("maxSurge", "25%"), desired, round_up=True)
    unavailable = scaled_value(rolling.get("maxUnavailable", "25%"), desired, round_up=False)
    if surge == 0 and unavailable == 0:
        unavailable = 1
    return surge, unavailable


def strategy_of(deploy: dict[str, Any]) -> str:
    return (deploy["spec"].get("strategy") or {}).get("type") or "RollingUpdate"


def _semantic(value: Any) -> Any:
    """As ``apiequality.Semantic`` compares typed objects: nothing, an empty struct, an empty
    list and an empty map are the same (a client that decodes and encodes the object adds
    ``resources: {}``)."""
    if isinstance(value, dict):
        out = {k: v for k, v in ((k, _semantic(v)) for k, v in value.items()) if v not in (None, {}, [])}
        return out
    if isinstance(value, list):
        return [_semantic(v) for v in value]
    return value


def without_hash(template: dict[str, Any]) -> dict[str, Any]:
    """``EqualIgnoreHash``'s view of a pod template: no ``pod-template-hash`` label, compared semantically."""
    out = copy.deepcopy(template or {})
    labels = (out.get("metadata") or {}).get("labels")
    if labels:
        labels.pop(HASH_LABEL, None)
    semantic: dict[str, Any] = _semantic(out)
    return semantic


def revision_of(rs: dict[str, Any]) -> int:
    try:
        return int((rs["metadata"].get("annotations") or {}).get(REVISION, "0"))
    except ValueError:
        return 0


def owner_ref(obj: dict[str, Any]) -> dict[str, Any]:
    m = obj["metadata"]
    return {"apiVersion": "apps/v1", "kind": obj["kind"], "name": m["name"], "uid": m["uid"],
            "controller": True, "blockOwnerDeletion": True}


def controller_of(obj: dict[str, Any], kind: str) -> str | None:
    for ref in obj["metadata"].get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") == kind:
            return str(ref.get("uid"))
    return None


def _alive(pod: dict[str, Any]) -> bool:
    return not pod["metadata"].get("deletionTimestamp") and not ps.is_terminal(pod)


def _deletion_rank(pod: dict[str, Any]) -> tuple[int, int, int, str]:
    """``ActivePodsWithRanks``: unscheduled, pending, not ready first; then the newest."""
    status = pod.get("status") or {}
    created = pod["metadata"].get("creationTimestamp") or ""
    newest_first = "".join(chr(0x10FFFF - ord(c)) for c in created)
    return (0 if not (pod.get("spec") or {}).get("nodeName") else 1,
            0 if status.get("phase") == "Pending" else 1,
            1 if ps.is_pod_ready(pod) else 0, newest_first)


class _Owned:
    """Which objects each controller owns (uid -> uids), kept from watch events."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.children: dict[str, set[str]] = defaultdict(set)
        self.parent: dict[str, str] = {}

    def index(self, obj: dict[str, Any], deleted: bool = False) -> str | None:
        uid = obj["metadata"]["uid"]
        owner = self.parent.get(uid) or controller_of(obj, self.kind)
        if owner is None:
            return None
        if deleted:
            self.parent.pop(uid, None)
            self.children[owner].discard(uid)
        else:
            self.parent[uid] = owner
            self.children[owner].add(uid)
        return owner


class ReplicaSetController:
    """Keeps each ReplicaSet's pods and status."""

    def __init__(self) -> None:
        self.sim: Simulation | None = None
        self.pods = _Owned("ReplicaSet")

    def start(self, sim: Simulation) -> None:
        self.sim = sim
        for pod in sim.store.iter(PODS):
            self.pods.index(pod)
        sim.store.subscribe(self._on_event)
        for rs in sim.store.iter(REPLICASETS):
            self._enqueue(rs["metadata"]["namespace"], rs["metadata"]["name"])

    def _enqueue(self, ns: str, name: str) -> None:
        assert self.sim is not None
        self.sim.enqueue(("replicaset", ns, name), lambda: self.sync(ns, name))

    def _on_event(self, res: Any, ev: WatchEvent) -> None:
        assert self.sim is not None
        if (res.group, res.plural) == REPLICASETS:
            if ev.type == "DELETED":
                self.pods.children.pop(ev.obj["metadata"]["uid"], None)
            else:
                self._enqueue(ev.obj["metadata"]["namespace"], ev.obj["metadata"]["name"])
        elif (res.group, res.plural) == PODS:
            owner = self.pods.index(ev.obj, deleted=ev.type == "DELETED")
            rs = self.sim.store.by_uid(owner) if owner else None
            if rs is not None:
                self._enqueue(rs["metadata"]["namespace"], rs["metadata"]["name"])

    def owned_pods(self, rs: dict[str, Any]) -> list[dict[str, Any]]:
        assert self.sim is not None
        pods = (self.sim.store.by_uid(u) for u in self.pods.children.get(rs["metadata"]["uid"], ()))
        return [p for p in pods if p is not None and p.get("kind") == "Pod"]

    def sync(self, ns: str, name: str) -> None:
        assert self.sim is not None
        rs = self.sim.store.get(REPLICASETS, ns, name)
        if rs is None or rs["metadata"].get("deletionTimestamp"):
            return
        active = [p for p in self.owned_pods(rs) if _alive(p)]
        diff = len(active) - replicas_of(rs)
        if diff < 0:
            for _ in range(-diff):
                self._create_pod(rs)
        elif diff > 0:
            for pod in sorted(active, key=_deletion_rank)[:diff]:
                self._delete_pod(rs, pod)
        self._update_status(rs)

    def _create_pod(self, rs: dict[str, Any]) -> None:
        assert self.sim is not None
        template = rs["spec"].get("template") or {}
        tmeta = template.get("metadata") or {}
        spec = copy.deepcopy(template.get("spec") or {})
        meta: dict[str, Any] = {"generateName": rs["metadata"]["name"] + "-", "namespace": rs["metadata"]["namespace"],
                                "labels": dict(tmeta.get("labels") or {}), "ownerReferences": [owner_ref(rs)]}
        if tmeta.get("annotations"):
            meta["annotations"] = dict(tmeta["annotations"])
        pod = {"metadata": meta, "spec": spec,
               "status": {"phase": "Pending", "qosClass": ps.qos_class(spec)}}
        store = self.sim.store
        try:
            created = store.create(store.storage_type(PODS), pod)
        except ApiError as exc:
            self.sim.record_event(rs, reason="FailedCreate", type="Warning", message=f"Error creating: {exc}",
                                  component="replicaset-controller")
            return
        self.sim.record_event(rs, reason="SuccessfulCreate", message=f"Created pod: {created['metadata']['name']}",
                              component="replicaset-controller")

    def _delete_pod(self, rs: dict[str, Any], pod: dict[str, Any]) -> None:
        assert self.sim is not None
        m = pod["metadata"]
        try:
            self.sim.store.delete(PODS, m["namespace"], m["name"])
        except ApiError:
            return
        self.sim.record_event(rs, reason="SuccessfulDelete", message=f"Deleted pod: {m['name']}",
                              component="replicaset-controller")

    def _update_status(self, rs: dict[str, Any]) -> None:
        assert self.sim is not None
        now = self.sim.clock.time()
        min_ready = int(rs["spec"].get("minReadySeconds") or 0)
        active = [p for p in self.owned_pods(rs) if _alive(p)]
        labels = ((rs["spec"].get("template") or {}).get("metadata") or {}).get("labels") or {}
        counts = {
            "replicas": len(active),
            "fullyLabeledReplicas": sum(1 for p in active
                                        if all((p["metadata"].get("labels") or {}).get(k) == v for k, v in labels.items())),
            "readyReplicas": sum(1 for p in active if ps.is_pod_ready(p)),
            "availableReplicas": sum(1 for p in active if ps.is_pod_available(p, min_ready, now)),
            "observedGeneration": rs["metadata"].get("generation", 1),
        }
        status = {k: v for k, v in counts.items() if v or k in ("replicas", "observedGeneration")}
        if status != rs.get("status"):
            m = rs["metadata"]
            self.sim.store.mutate(REPLICASETS, m["namespace"], m["name"], lambda obj: obj.__setitem__("status", status))
        if min_ready and any(ps.is_pod_ready(p) and not ps.is_pod_available(p, min_ready, now) for p in active):
            m = rs["metadata"]
            self.sim.call_later(1.0, lambda: self._enqueue(m["namespace"], m["name"]))


class DeploymentController:
    """Keeps each Deployment's ReplicaSets, revisions and status."""

    def __init__(self) -> None:
        self.sim: Simulation | None = None
        self.sets = _Owned("Deployment")

    def start(self, sim: Simulation) -> None:
        self.sim = sim
        for rs in sim.store.iter(REPLICASETS):
            self.sets.index(rs)
        sim.store.subscribe(self._on_event)
        for deploy in sim.store.iter(DEPLOYMENTS):
            self._enqueue(deploy["metadata"]["namespace"], deploy["metadata"]["name"])

    def _enqueue(self, ns: str, name: str) -> None:
        assert self.sim is not None
        self.sim.enqueue(("deployment", ns, name), lambda: self.sync(ns, name))

    def _on_event(self, res: Any, ev: WatchEvent) -> None:
        assert self.sim is not None
        if (res.group, res.plural) == DEPLOYMENTS:
            if ev.type == "DELETED":
                self.sets.children.pop(ev.obj["metadata"]["uid"], None)
            else:
                self._enqueue(ev.obj["metadata"]["namespace"], ev.obj["metadata"]["name"])
        elif (res.group, res.plural) == REPLICASETS:
            owner = self.sets.index(ev.obj, deleted=ev.type == "DELETED")
            deploy = self.sim.store.by_uid(owner) if owner else None
            if deploy is not None:
                self._enqueue(deploy["metadata"]["namespace"], deploy["metadata"]["name"])

    def owned(self, deploy: dict[str, Any]) -> list[dict[str, Any]]:
        assert self.sim is not None
        sets = (self.sim.store.by_uid(u) for u in self.sets.children.get(deploy["metadata"]["uid"], ()))
        return sorted((s for s in sets if s is not None and s.get("kind") == "ReplicaSet"
                       and not s["metadata"].get("deletionTimestamp")),
                      key=lambda s: (s["metadata"].get("creationTimestamp") or "", s["metadata"]["name"]))

    # ------------------------------------------------------------------ sync
    def sync(self, ns: str, name: str) -> None:
        assert self.sim is not None
        deploy = self.sim.store.get(DEPLOYMENTS, ns, name)
        if deploy is None or deploy["metadata"].get("deletionTimestamp"):
            return
        sets = self.owned(deploy)
        template = without_hash(deploy["spec"].get("template") or {})
        new = next((s for s in sets if without_hash(s["spec"].get("template") or {}) == template), None)
        old = [s for s in sets if s is not new]
        new = self._new_set(deploy, new, old)
        if new is None:
            return
        if strategy_of(deploy) == "Recreate":
            self._recreate(deploy, new, old)
        else:
            self._rolling(deploy, new, old)
        self._cleanup(deploy, old)
        self._update_status(deploy)

    def _new_set(self, deploy: dict[str, Any], new: dict[str, Any] | None,
                 old: list[dict[str, Any]]) -> dict[str, Any] | None:
        """The new ReplicaSet, created or given the next revision; the Deployment's revision annotation."""
        assert self.sim is not None
        store, m = self.sim.store, deploy["metadata"]
        revision = str(max((revision_of(s) for s in old), default=0) + 1)
        if new is None:
            hash_ = compute_hash(deploy["spec"].get("template") or {}, (deploy.get("status") or {}).get("collisionCount"))
            template = copy.deepcopy(deploy["spec"].get("template") or {})
            template.setdefault("metadata", {}).setdefault("labels", {})[HASH_LABEL] = hash_
            selector = copy.deepcopy(deploy["spec"].get("selector") or {})
            selector.setdefault("matchLabels", {})[HASH_LABEL] = hash_
            surge = surge_and_unavailable(deploy)[0] if strategy_of(deploy) == "RollingUpdate" else 0
            rs = {
                "metadata": {"name": f"{m['name']}-{hash_}", "namespace": m["namespace"],
                             "labels": dict(template["metadata"]["labels"]), "ownerReferences": [owner_ref(deploy)],
                             "annotations": {DESIRED: str(replicas_of(deploy)),
                                             MAX_REPLICAS: str(replicas_of(deploy) + surge), REVISION: revision}},
                "spec": {"replicas": 0, "minReadySeconds": int(deploy["spec"].get("minReadySeconds") or 0),
                         "selector": selector, "template": template},
            }
            try:
                new = store.create(store.storage_type(REPLICASETS), rs)
            except ApiError:
                return None
            self.sets.index(new)
        elif revision_of(new) < int(revision) - 1 or (old and revision_of(new) <= max(revision_of(s) for s in old)):
            new = store.mutate(REPLICASETS, m["namespace"], new["metadata"]["name"],
                               lambda obj: obj["metadata"].setdefault("annotations", {}).__setitem__(REVISION, revision)) or new
        current = str(revision_of(new))
        if (m.get("annotations") or {}).get(REVISION) != current:
            store.mutate(DEPLOYMENTS, m["namespace"], m["name"],
                         lambda obj: obj["metadata"].setdefault("annotations", {}).__setitem__(REVISION, current))
        return new

    def _scale(self, deploy: dict[str, Any], rs: dict[str, Any], count: int) -> dict[str, Any]:
        assert self.sim is not None
        before = replicas_of(rs)
        if before == count:
            return rs
        surge = surge_and_unavailable(deploy)[0] if strategy_of(deploy) == "RollingUpdate" else 0

        def apply(obj: dict[str, Any]) -> None:
            obj["spec"]["replicas"] = count
            ann = obj["metadata"].setdefault("annotations", {})
            ann[DESIRED], ann[MAX_REPLICAS] = str(replicas_of(deploy)), str(replicas_of(deploy) + surge)

        m = rs["metadata"]
        scaled = self.sim.store.mutate(REPLICASETS, m["namespace"], m["name"], apply) or rs
        way = "up" if count > before else "down"
        self.sim.record_event(deploy, reason="ScalingReplicaSet", component=COMPONENT,
                              message=f"Scaled {way} replica set {m['name']} to {count} from {before}")
        return scaled

    def _rolling(self, deploy: dict[str, Any], new: dict[str, Any], old: list[dict[str, Any]]) -> None:
        desired = replicas_of(deploy)
        surge, unavailable = surge_and_unavailable(deploy)
        # reconcileNewReplicaSet
        total = replicas_of(new) + sum(replicas_of(s) for s in old)
        if replicas_of(new) > desired:
            new = self._scale(deploy, new, desired)
        elif replicas_of(new) < desired and total < desired + surge:
            new = self._scale(deploy, new, replicas_of(new) + min(desired + surge - total, desired - replicas_of(new)))
        # reconcileOldReplicaSets
        old = [s for s in old if replicas_of(s) > 0]
        if not old:
            return
        all_pods = replicas_of(new) + sum(replicas_of(s) for s in old)
        min_available = desired - unavailable
        new_unavailable = replicas_of(new) - int((new.get("status") or {}).get("availableReplicas") or 0)
        room = all_pods - min_available - new_unavailable
        if room <= 0:
            return
        for rs in old:  # cleanupUnhealthyReplicas: unavailable old replicas go first
            if room <= 0:
                break
            unhealthy = replicas_of(rs) - int((rs.get("status") or {}).get("availableReplicas") or 0)
            cut = min(room, unhealthy)
            if cut > 0:
                self._scale(deploy, rs, replicas_of(rs) - cut)
                room -= cut
        sets = [new, *(self.sim.store.get(REPLICASETS, s["metadata"]["namespace"], s["metadata"]["name"]) or s  # type: ignore[union-attr]
                       for s in old)]
        available = sum(int((s.get("status") or {}).get("availableReplicas") or 0) for s in sets)
        budget = available - min_available
        for rs in sets[1:]:
            if budget <= 0:
                break
            cut = min(replicas_of(rs), budget)
            if cut > 0:
                self._scale(deploy, rs, replicas_of(rs) - cut)
                budget -= cut

    def _recreate(self, deploy: dict[str, Any], new: dict[str, Any], old: list[dict[str, Any]]) -> None:
        assert self.sim is not None
        for rs in old:
            if replicas_of(rs) > 0:
                self._scale(deploy, rs, 0)
        if any(int((s.get("status") or {}).get("replicas") or 0) for s in old):
            return  # old pods still running: the new ones wait
        self._scale(deploy, new, replicas_of(deploy))

    def _cleanup(self, deploy: dict[str, Any], old: list[dict[str, Any]]) -> None:
        assert self.sim is not None
        limit = deploy["spec"].get("revisionHistoryLimit")
        limit = 10 if limit is None else int(limit)
        idle = [s for s in old if replicas_of(s) == 0 and not int((s.get("status") or {}).get("replicas") or 0)]
        idle.sort(key=revision_of)
        for rs in idle[:max(0, len(idle) - limit)]:
            try:
                self.sim.store.delete(REPLICASETS, rs["metadata"]["namespace"], rs["metadata"]["name"])
            except ApiError:
                continue

    def _update_status(self, deploy: dict[str, Any]) -> None:
        assert self.sim is not None
        store, m = self.sim.store, deploy["metadata"]
        deploy = store.get(DEPLOYMENTS, m["namespace"], m["name"]) or deploy
        sets = self.owned(deploy)
        template = without_hash(deploy["spec"].get("template") or {})
        new = next((s for s in sets if without_hash(s["spec"].get("template") or {}) == template), None)
        desired = replicas_of(deploy)

        def count(rs: dict[str, Any] | None, key: str) -> int:
            return int(((rs or {}).get("status") or {}).get(key) or 0)

        replicas = sum(count(s, "replicas") for s in sets)
        updated = count(new, "replicas")
        ready = sum(count(s, "readyReplicas") for s in sets)
        available = sum(count(s, "availableReplicas") for s in sets)
        unavailable = 0 if strategy_of(deploy) == "Recreate" else surge_and_unavailable(deploy)[1]
        old_status = deploy.get("status") or {}
        now = rfc3339(self.sim.clock.now())
        conditions = {c["type"]: c for c in old_status.get("conditions") or []}
        is_available = available >= desired - unavailable
        self._condition(conditions, "Available", is_available, now,
                        "MinimumReplicasAvailable" if is_available else "MinimumReplicasUnavailable",
                        "Deployment has minimum availability." if is_available
                        else "Deployment does not have minimum availability.")
        complete = (new is not None and updated == desired and count(new, "availableReplicas") == desired
                    and replicas == desired)
        name = new["metadata"]["name"] if new else ""
        counts = (replicas, updated, ready, available)
        progressed = counts != tuple(int(old_status.get(k) or 0) for k in
                                     ("replicas", "updatedReplicas", "readyReplicas", "availableReplicas"))
        deadline = deploy["spec"].get("progressDeadlineSeconds", 600)
        previous = conditions.get("Progressing") or {}
        if complete:
            self._condition(conditions, "Progressing", True, now, "NewReplicaSetAvailable",
                            f'ReplicaSet "{name}" has successfully progressed.')
        elif progressed or previous.get("reason") not in ("ReplicaSetUpdated", "ProgressDeadlineExceeded") \
                or deploy["metadata"].get("generation") != old_status.get("observedGeneration"):
            self._condition(conditions, "Progressing", True, now, "ReplicaSetUpdated",
                            f'ReplicaSet "{name}" is progressing.', touch=True)
        elif previous.get("reason") == "ReplicaSetUpdated" and deadline is not None:
            since = parse_time(previous.get("lastUpdateTime"))
            if since is not None and since.timestamp() + int(deadline) <= self.sim.clock.time():
                self._condition(conditions, "Progressing", False, now, "ProgressDeadlineExceeded",
                                f'ReplicaSet "{name}" has timed out progressing.')
                self.sim.record_event(deploy, reason="ProgressDeadlineExceeded", type="Warning", component=COMPONENT,
                                      message=f'Deployment "{m["name"]}" has timed out progressing.')
            elif since is not None:
                self.sim.call_at(since.timestamp() + int(deadline) + 0.001,
                                 lambda: self._enqueue(m["namespace"], m["name"]))
        status = {
            "observedGeneration": deploy["metadata"].get("generation", 1), "replicas": replicas,
            "updatedReplicas": updated, "readyReplicas": ready, "availableReplicas": available,
            "unavailableReplicas": max(0, desired - available),
            "conditions": [conditions[k] for k in ("Available", "Progressing") if k in conditions],
        }
        if old_status.get("collisionCount") is not None:
            status["collisionCount"] = old_status["collisionCount"]
        status = {k: v for k, v in status.items() if v or k == "observedGeneration"}
        if status != old_status:
            store.mutate(DEPLOYMENTS, m["namespace"], m["name"], lambda obj: obj.__setitem__("status", status))

    @staticmethod
    def _condition(conditions: dict[str, dict[str, Any]], kind: str, value: bool, now: str, reason: str,
                   message: str, *, touch: bool = False) -> None:
        """``SetDeploymentCondition``: a changed status moves lastTransitionTime; a changed reason
        or message (or ``touch``: progress) moves lastUpdateTime."""
        old = conditions.get(kind)
        status = "True" if value else "False"
        if old is not None and old.get("status") == status and old.get("reason") == reason \
                and old.get("message") == message and not touch:
            return
        transition = old["lastTransitionTime"] if old is not None and old.get("status") == status else now
        conditions[kind] = {"type": kind, "status": status, "lastUpdateTime": now, "lastTransitionTime": transition,
                            "reason": reason, "message": message}
