"""The disruption controller, after ``pkg/controller/disruption`` of kube-controller-manager.

It keeps each PodDisruptionBudget's ``status`` current whenever the budget, a pod it selects
or a workload's scale changes:

- ``expectedPods`` and ``desiredHealthy``: an integer ``minAvailable`` is the desired count
  and the selected pods (terminating ones included) are expected; a percentage
  ``minAvailable`` or any ``maxUnavailable`` takes the expected count from the pods'
  controllers' scale (a Deployment through its ReplicaSet, a ReplicaSet, a StatefulSet, or
  any kind with a ``scale`` subresource), percentages rounded up. Pods without a controller
  are left out of that count, with an ``UnmanagedPods`` warning; a controller that cannot be
  found or has no scale fails the sync: ``disruptionsAllowed`` 0 and the ``DisruptionAllowed``
  condition False with reason ``SyncFailed`` (the controller's fail-safe);
- ``currentHealthy``: selected pods that are Ready, not terminating and not in
  ``disruptedPods`` (pods the eviction handler let go, kept there until they are seen
  terminating or for two minutes, ``DeletionTimeout``);
- ``disruptionsAllowed`` = healthy - desired (0 when negative or nothing is expected),
  ``observedGeneration`` and the ``DisruptionAllowed`` condition (``SufficientPods`` /
  ``InsufficientPods``).

The selector semantics are policy/v1's: a missing selector selects nothing, an empty one
selects every pod of the namespace (the eviction handler, like the real one, lets neither
guard a pod). The helpers the eviction handler shares are here too.
"""

from __future__ import annotations

import copy
from typing import Any

from kubesim import podstatus as ps
from kubesim.clock import parse_time, rfc3339
from kubesim.selectors import LabelSelector, SelectorError, label_selector_from_spec
from kubesim.simulation import Simulation
from kubesim.store import Store, WatchEvent

PDBS = ("policy", "poddisruptionbudgets")
PODS = ("", "pods")
DEPLOYMENTS = ("apps", "deployments")
REPLICASETS = ("apps", "replicasets")
STATEFULSETS = ("apps", "statefulsets")
DELETION_TIMEOUT = 120.0
COMPONENT = "controllermanager"
CONDITION = "DisruptionAllowed"
_SCALED = (DEPLOYMENTS, REPLICASETS, STATEFULSETS)


class SyncError(Exception):
    """The expected count could not be worked out (the controller fails safe)."""


# ------------------------------------------------------------------ shared helpers
def selector_of(pdb: dict[str, Any]) -> LabelSelector | None:
    """The budget's selector; None when it selects nothing (missing or invalid)."""
    spec = (pdb.get("spec") or {}).get("selector")
    if spec is None:
        return None
    try:
        return label_selector_from_spec(spec)
    except SelectorError:
        return None


def selects(pdb: dict[str, Any], labels: dict[str, str] | None) -> bool:
    """The controller's view: does the budget select a pod with ``labels``."""
    selector = selector_of(pdb)
    return selector is not None and selector.matches(labels or {})


def guards(pdb: dict[str, Any], labels: dict[str, str] | None) -> bool:
    """The eviction handler's view: an empty (or missing) selector guards nothing."""
    selector = selector_of(pdb)
    return selector is not None and not selector.empty() and selector.matches(labels or {})


def budgets_for(store: Store, pod: dict[str, Any]) -> list[dict[str, Any]]:
    """The budgets guarding ``pod`` (``getPodDisruptionBudgets``), by name."""
    m = pod["metadata"]
    return [pdb for pdb in store.iter(PDBS, m.get("namespace") or "") if guards(pdb, m.get("labels"))]


def set_condition(conditions: list[dict[str, Any]], new: dict[str, Any], now: str) -> None:
    """``apimeta.SetStatusCondition``: the transition time moves only when the status does."""
    for cond in conditions:
        if cond.get("type") != new["type"]:
            continue
        if cond.get("status") != new["status"]:
            cond["status"], cond["lastTransitionTime"] = new["status"], now
        cond["reason"], cond["message"] = new["reason"], new.get("message", "")
        if new.get("observedGeneration"):
            cond["observedGeneration"] = new["observedGeneration"]
        else:
            cond.pop("observedGeneration", None)
        return
    added = {"type": new["type"], "status": new["status"]}
    if new.get("observedGeneration"):
        added["observedGeneration"] = new["observedGeneration"]
    added.update(lastTransitionTime=now, reason=new["reason"], message=new.get("message", ""))
    conditions.append(added)


def update_allowed_condition(status: dict[str, Any], now: str) -> None:
    """``UpdateDisruptionAllowedCondition``: True/SufficientPods while a disruption is allowed."""
    conditions = status.setdefault("conditions", [])
    sufficient = int(status.get("disruptionsAllowed") or 0) > 0
    set_condition(conditions, {"type": CONDITION, "status": "True" if sufficient else "False",
                               "reason": "SufficientPods" if sufficient else "InsufficientPods",
                               "observedGeneration": status.get("observedGeneration")}, now)


def conditions_up_to_date(pdb: dict[str, Any]) -> bool:
    """``ConditionsAreUpToDate``."""
    status = pdb.get("status") or {}
    cond = next((c for c in status.get("conditions") or [] if c.get("type") == CONDITION), None)
    if cond is None or status.get("observedGeneration", 0) != pdb["metadata"].get("generation", 0):
        return False
    if int(status.get("disruptionsAllowed") or 0) > 0:
        return cond.get("status") == "True" and cond.get("reason") == "SufficientPods"
    return cond.get("status") == "False" and cond.get("reason") == "InsufficientPods"


def scaled_up(value: Any, total: int) -> int:
    """``intstr.GetScaledValueFromIntOrPercent(value, total, roundUp=true)``."""
    if isinstance(value, str):
        if not value.endswith("%") or not value[:-1].isdigit():
            raise SyncError(f"invalid value for IntOrString: invalid type: string is not a percentage: {value}")
        return -(-int(value[:-1]) * total // 100)
    return int(value)


def _go_selector(selector: dict[str, Any] | None) -> str:
    """``%v`` of a ``*metav1.LabelSelector`` (its generated ``String()``)."""
    if selector is None:
        return "nil"
    labels = "".join(f"{k}: {v}," for k, v in sorted((selector.get("matchLabels") or {}).items()))
    exprs = "".join(
        f"LabelSelectorRequirement{{Key:{e.get('key', '')},Operator:{e.get('operator', '')},"
        f"Values:[]string{{{','.join(e.get('values') or [])}}},}},"
        for e in selector.get("matchExpressions") or [])
    return (f"&LabelSelector{{MatchLabels:map[string]string{{{labels}}},"
            f"MatchExpressions:[]LabelSelectorRequirement{{{exprs}}},}}")


def _controller_ref(obj: dict[str, Any]) -> dict[str, Any] | None:
    return next((r for r in obj["metadata"].get("ownerReferences") or [] if r.get("controller")), None)


def _group(ref: dict[str, Any]) -> str:
    api_version = str(ref.get("apiVersion") or "")
    return api_version.rpartition("/")[0] if "/" in api_version else ""


def _replicas(obj: dict[str, Any]) -> int:
    value = (obj.get("spec") or {}).get("replicas")
    return 1 if value is None else int(value)


# ------------------------------------------------------------------ the controller
class DisruptionController:
    """Keeps every PodDisruptionBudget's status as kube-controller-manager does."""

    def __init__(self) -> None:
        self.sim: Simulation | None = None

    def start(self, sim: Simulation) -> None:
        self.sim = sim
        sim.store.subscribe(self._on_event)
        for pdb in sim.store.iter(PDBS):
            self._enqueue(pdb["metadata"]["namespace"], pdb["metadata"]["name"])

    def _enqueue(self, ns: str, name: str) -> None:
        assert self.sim is not None
        self.sim.enqueue(("disruption", ns, name), lambda: self.sync(ns, name))

    def _on_event(self, res: Any, ev: WatchEvent) -> None:
        assert self.sim is not None
        gr = (res.group, res.plural)
        if gr == PDBS:
            if ev.type != "DELETED":
                self._enqueue(ev.obj["metadata"]["namespace"], ev.obj["metadata"]["name"])
            return
        if gr != PODS and gr not in _SCALED:
            return
        ns = ev.obj["metadata"].get("namespace") or ""
        budgets = list(self.sim.store.iter(PDBS, ns))
        if not budgets:
            return
        if gr != PODS:  # a workload's scale is the expected count of percentages and maxUnavailable
            if ev.type == "MODIFIED" and ev.old is not None and _replicas(ev.old) == _replicas(ev.obj):
                return
            for pdb in budgets:
                self._enqueue(ns, pdb["metadata"]["name"])
            return
        labels = [ev.obj["metadata"].get("labels")]
        if ev.old is not None:
            labels.append(ev.old["metadata"].get("labels"))
        matched = [pdb for pdb in budgets if any(selects(pdb, lbl) for lbl in labels)]
        if len(matched) > 1 and ev.type != "DELETED":
            m, first = ev.obj["metadata"], matched[0]["metadata"]["name"]
            self.sim.record_event(ev.obj, reason="MultiplePodDisruptionBudgets", type="Warning", component=COMPONENT,
                                  message=f'Pod "{m["namespace"]}"/"{m["name"]}" matches multiple '
                                          f'PodDisruptionBudgets.  Chose "{first}" arbitrarily.')
        for pdb in matched:
            self._enqueue(ns, pdb["metadata"]["name"])

    # ------------------------------------------------------------------ sync
    def sync(self, ns: str, name: str) -> None:
        assert self.sim is not None
        pdb = self.sim.store.get(PDBS, ns, name)
        if pdb is None:
            return
        selector = selector_of(pdb)
        pods = [] if selector is None else [p for p in self.sim.store.iter(PODS, ns)
                                            if selector.matches(p["metadata"].get("labels") or {})]
        if not pods:
            self._event(pdb, "NoPods", "No matching pods found")
        try:
            expected, desired, unmanaged = self._expected(pdb, pods)
        except SyncError as exc:
            self._event(pdb, "CalculateExpectedPodCountFailed",
                        f"Failed to calculate the number of expected pods: {exc}", "Warning")
            self._fail_safe(pdb, str(exc))
            return
        if unmanaged:
            self._event(pdb, "UnmanagedPods",
                        f"Pods selected by this PodDisruptionBudget (selector: "
                        f"{_go_selector((pdb.get('spec') or {}).get('selector'))}) were found to be unmanaged. As a "
                        "result, the status of the PDB cannot be calculated correctly, which may result in undefined "
                        'behavior. To account for these pods please set ".spec.minAvailable" field of the PDB to an '
                        "integer value.", "Warning")
        now = self.sim.clock.time()
        disrupted, recheck = self._disrupted(pdb, pods, now)
        healthy = sum(1 for p in pods if not p["metadata"].get("deletionTimestamp")
                      and p["metadata"]["name"] not in disrupted and ps.is_pod_ready(p))
        self._write(pdb, healthy, desired, expected, disrupted)
        if recheck is not None:
            self.sim.call_at(recheck + 0.001, lambda: self._enqueue(ns, name))

    def _event(self, pdb: dict[str, Any], reason: str, message: str, kind: str = "Normal") -> None:
        assert self.sim is not None
        self.sim.record_event(pdb, reason=reason, message=message, type=kind, component=COMPONENT)

    def _expected(self, pdb: dict[str, Any], pods: list[dict[str, Any]]) -> tuple[int, int, list[str]]:
        """``getExpectedPodCount``: (expected, desired healthy, unmanaged pod names)."""
        spec = pdb.get("spec") or {}
        max_unavailable, min_available = spec.get("maxUnavailable"), spec.get("minAvailable")
        if max_unavailable is not None:
            expected, unmanaged = self._expected_scale(pods)
            return expected, max(0, expected - scaled_up(max_unavailable, expected)), unmanaged
        if min_available is not None:
            if isinstance(min_available, int):
                return len(pods), min_available, []
            expected, unmanaged = self._expected_scale(pods)
            return expected, scaled_up(min_available, expected), unmanaged
        return 0, 0, []

    def _expected_scale(self, pods: list[dict[str, Any]]) -> tuple[int, list[str]]:
        """``getExpectedScale``: the sum of the scale of the pods' controllers."""
        scales: dict[str, int] = {}
        unmanaged: list[str] = []
        for pod in pods:
            ref = _controller_ref(pod)
            if ref is None:
                unmanaged.append(pod["metadata"]["name"])
                continue
            ns = pod["metadata"]["namespace"]
            found = (self._deployment(ref, ns) or self._replicaset(ref, ns) or self._statefulset(ref, ns)
                     or self._scale(ref, ns))
            if found is None:
                raise SyncError(f'found no controllers for pod "{pod["metadata"]["name"]}"')
            scales[found[0]] = found[1]
        return sum(scales.values()), unmanaged

    def _owned(self, gr: tuple[str, str], ref: dict[str, Any], ns: str) -> dict[str, Any] | None:
        assert self.sim is not None
        obj = self.sim.store.get(gr, ns, str(ref.get("name") or ""))
        return obj if obj is not None and obj["metadata"].get("uid") == ref.get("uid") else None

    def _deployment(self, ref: dict[str, Any], ns: str) -> tuple[str, int] | None:
        if ref.get("kind") != "ReplicaSet" or _group(ref) not in ("apps", "extensions"):
            return None
        rs = self._owned(REPLICASETS, ref, ns)
        owner = _controller_ref(rs) if rs is not None else None
        if owner is None or owner.get("kind") != "Deployment" or _group(owner) not in ("apps", "extensions"):
            return None
        deploy = self._owned(DEPLOYMENTS, owner, ns)
        return (deploy["metadata"]["uid"], _replicas(deploy)) if deploy is not None else None

    def _replicaset(self, ref: dict[str, Any], ns: str) -> tuple[str, int] | None:
        if ref.get("kind") != "ReplicaSet" or _group(ref) not in ("apps", "extensions"):
            return None
        rs = self._owned(REPLICASETS, ref, ns)
        if rs is None or (_controller_ref(rs) or {}).get("kind") == "Deployment":
            return None
        return rs["metadata"]["uid"], _replicas(rs)

    def _statefulset(self, ref: dict[str, Any], ns: str) -> tuple[str, int] | None:
        if ref.get("kind") != "StatefulSet" or _group(ref) != "apps":
            return None
        sts = self._owned(STATEFULSETS, ref, ns)
        return (sts["metadata"]["uid"], _replicas(sts)) if sts is not None else None

    def _scale(self, ref: dict[str, Any], ns: str) -> tuple[str, int] | None:
        """``getScaleController``: any kind served with a ``scale`` subresource."""
        assert self.sim is not None
        group, kind = _group(ref), str(ref.get("kind") or "")
        version = str(ref.get("apiVersion") or "").rpartition("/")[2]
        res = self.sim.surface.by_kind(str(ref.get("apiVersion") or ""), kind)
        if res is None:
            where = f"{group}/{version}" if group else version
            raise SyncError(f'no matches for kind "{kind}" in version "{where}"')
        if "scale" not in res.subresources:
            raise SyncError(f"{res.qualified} does not implement the scale subresource")
        obj = self._owned(res.group_resource, ref, ns)
        return (obj["metadata"]["uid"], _replicas(obj)) if obj is not None else None

    def _disrupted(self, pdb: dict[str, Any], pods: list[dict[str, Any]],
                   now: float) -> tuple[dict[str, str], float | None]:
        """``buildDisruptedPodMap``: entries of pods not yet terminating, within DeletionTimeout."""
        assert self.sim is not None
        listed = (pdb.get("status") or {}).get("disruptedPods") or {}
        kept: dict[str, str] = {}
        recheck: float | None = None
        for pod in pods:
            name = pod["metadata"]["name"]
            if pod["metadata"].get("deletionTimestamp") or name not in listed:
                continue
            when = parse_time(listed[name])
            due = (when.timestamp() if when else now) + DELETION_TIMEOUT
            if due < now:
                m = pdb["metadata"]
                self.sim.record_event(pod, reason="NotDeleted", type="Warning", component=COMPONENT,
                                      message=f"Pod was expected by PDB {m['namespace']}/{m['namespace']} to be "
                                              "deleted but it wasn't")
                continue
            kept[name] = listed[name]
            recheck = due if recheck is None else min(recheck, due)
        return kept, recheck

    def _write(self, pdb: dict[str, Any], healthy: int, desired: int, expected: int,
               disrupted: dict[str, str]) -> None:
        """``updatePdbStatus``: nothing is written when the status is already current."""
        assert self.sim is not None
        allowed = healthy - desired
        if expected <= 0 or allowed <= 0:
            allowed = 0
        old = pdb.get("status") or {}
        generation = pdb["metadata"].get("generation", 0)
        if (old.get("currentHealthy"), old.get("desiredHealthy"), old.get("expectedPods"),
                old.get("disruptionsAllowed"), old.get("disruptedPods") or {}, old.get("observedGeneration", 0)) \
                == (healthy, desired, expected, allowed, disrupted, generation) and conditions_up_to_date(pdb):
            return
        status: dict[str, Any] = {"observedGeneration": generation}
        if disrupted:
            status["disruptedPods"] = disrupted
        status.update(disruptionsAllowed=allowed, currentHealthy=healthy, desiredHealthy=desired,
                      expectedPods=expected, conditions=copy.deepcopy(old.get("conditions") or []))
        update_allowed_condition(status, rfc3339(self.sim.clock.now()))
        m = pdb["metadata"]
        self.sim.store.mutate(PDBS, m["namespace"], m["name"], lambda obj: obj.__setitem__("status", status))

    def _fail_safe(self, pdb: dict[str, Any], message: str) -> None:
        """``failSafe``: no disruption allowed, the condition says why."""
        assert self.sim is not None
        status = copy.deepcopy(pdb.get("status") or {})
        status["disruptionsAllowed"] = 0
        set_condition(status.setdefault("conditions", []),
                      {"type": CONDITION, "status": "False", "reason": "SyncFailed", "message": message,
                       "observedGeneration": status.get("observedGeneration")}, rfc3339(self.sim.clock.now()))
        m = pdb["metadata"]
        self.sim.store.mutate(PDBS, m["namespace"], m["name"], lambda obj: obj.__setitem__("status", status))
