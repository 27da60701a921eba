"""The default scheduler (for pods without ``spec.nodeName``) and the resource-claim work
that goes with it: claims created from templates, allocated on the chosen node and
reserved for the pod; released when the pod goes away.

Every pod without ``spec.nodeName`` is ours, DaemonSet pods too (since Kubernetes 1.12 the
DaemonSet controller pins its pods to their node with a ``metadata.name`` node-affinity term and
leaves the binding to the default scheduler). NodeAffinity's PreFilter narrows such a pod to the
node(s) it names, so only those are filtered. Filters run in the real plugin order
(NodeUnschedulable: a cordoned node takes only pods tolerating
``node.kubernetes.io/unschedulable:NoSchedule``; TaintToleration, NodeAffinity, NodeResourcesFit
(:mod:`kubesim.resourcefit`: cpu, memory, ephemeral storage, pod count and extended resources
against the node's allocatable less what its pods request), DynamicResources), each node stopping
at its first failing plugin, and a pod that fits nowhere gets the real ``FailedScheduling``
message (:func:`fit_error`) with the per-reason node counts and the preemption summary, also as
its ``PodScheduled=False`` condition (reason ``Unschedulable``). Unschedulable pods are retried on
cluster changes and every ``RETRY_SECONDS``.
"""

from __future__ import annotations

import functools
from collections import Counter, defaultdict
from typing import Any

from kubesim import classicdra, dra, resourcefit
from kubesim import podstatus as ps
from kubesim.clock import rfc3339
from kubesim.errors import ApiError
from kubesim.selectors import node_affinity_matches, tolerates, untolerated_taints
from kubesim.simulation import Simulation
from kubesim.store import WatchEvent

PODS = ("", "pods")
NODES = ("", "nodes")
SCHEDULER = "default-scheduler"
RETRY_SECONDS = 60.0
_UNSCHEDULABLE_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
_UNRESOLVABLE = ("node(s) were unschedulable", "node(s) had untolerated taint", "node(s) didn't match Pod's node affinity/selector",
                 "resourceclaim not available on the node")
ABSENT_NAMED_FROM = 32
"""The first release whose FailedScheduling counts the nodes NodeAffinity's PreFilter left out
(``node(s) didn't satisfy plugin(s) [NodeAffinity]``, kubernetes#126022); before, only the
preemption summary counts them (as not helped by preemption, kubernetes#125197)."""
NOT_HELPFUL = "Preemption is not helpful for scheduling"
NO_VICTIMS = "No preemption victims found for incoming pod"


def named_nodes(spec: dict[str, Any]) -> set[str] | None:
    """NodeAffinity's PreFilterResult: the node names the required terms pin the pod to (each term's
    ``metadata.name In`` values, intersected within a term, united across terms), or None when any
    term names no node (every node is then a candidate)."""
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution")) or {}
    terms = required.get("nodeSelectorTerms") or []
    if not terms:
        return None
    names: set[str] = set()
    for term in terms:
        found: set[str] | None = None
        for req in (term or {}).get("matchFields") or []:
            if req.get("key") == "metadata.name" and req.get("operator") == "In":
                values = set(req.get("values") or [])
                found = values if found is None else found & values
        if found is None:
            return None
        names |= found
    return names


def fit_error(minor: int, total: int, statuses: list[tuple[list[str], bool]], absent: int) -> str:
    """``FitError.Error()`` with DefaultPreemption's message: ``statuses`` are the evaluated nodes'
    (reasons, unresolvable), ``absent`` the nodes NodeAffinity's PreFilter left out."""
    counts: Counter[str] = Counter(r for reasons, _ in statuses for r in reasons)
    if absent and minor >= ABSENT_NAMED_FROM:
        counts["node(s) didn't satisfy plugin(s) [NodeAffinity]"] += absent
    msg = f"0/{total} nodes are available: " + ", ".join(sorted(f"{n} {r}" for r, n in counts.items())) + "."
    pre: Counter[str] = Counter({NOT_HELPFUL: absent} if absent else {})
    for _, unresolvable in statuses:
        pre[NOT_HELPFUL if unresolvable else NO_VICTIMS] += 1
    post = f"0/{total} nodes are available: " + ", ".join(sorted(f"{n} {r}" for r, n in pre.items())) + "."
    return f"{msg} preemption: {post}."  # the summary's own period, then FitError's: ".."


def is_ours(pod: dict[str, Any]) -> bool:
    spec = pod.get("spec") or {}
    return not spec.get("nodeName") and (spec.get("schedulerName") or SCHEDULER) == SCHEDULER \
        and not spec.get("schedulingGates") and not pod["metadata"].get("deletionTimestamp") and not ps.is_terminal(pod)


class Scheduler:
    """Binds pending pods to nodes; allocates and reserves their ResourceClaims."""

    def __init__(self) -> None:
        self.sim: Simulation | None = None
        self.pending: set[str] = set()
        self._usage: dict[str, dict[str, dict[str, int]]] = defaultdict(dict)  # node -> uid -> requests
        self._used: dict[str, Counter[str]] = defaultdict(Counter)  # node -> the sum of its pods' requests
        self._where: dict[str, str] = {}
        self._timer = False

    # ------------------------------------------------------------------ start
    def start(self, sim: Simulation) -> None:
        self.sim = sim
        for pod in sim.store.iter(PODS):
            self._track(pod)
        sim.store.subscribe(self._on_event)
        for uid in sorted(self.pending):
            self._enqueue(uid)

    def _track(self, pod: dict[str, Any]) -> None:
        uid = pod["metadata"]["uid"]
        node = (pod.get("spec") or {}).get("nodeName")
        if node:
            self.pending.discard(uid)
            if ps.is_terminal(pod):
                self._untrack(uid)
            elif uid not in self._where:
                self._where[uid] = node
                asked = self._usage[node][uid] = resourcefit.pod_requests(pod["spec"])
                self._used[node].update(asked)
        elif is_ours(pod):
            self.pending.add(uid)

    def _untrack(self, uid: str) -> bool:
        node = self._where.pop(uid, None)
        if node is not None:
            self._used[node].subtract(self._usage[node].pop(uid, {}))
        return node is not None

    def _on_event(self, res: Any, ev: WatchEvent) -> None:
        if res.group == "" and res.plural == "pods":
            uid = ev.obj["metadata"]["uid"]
            if ev.type == "DELETED":
                self.pending.discard(uid)
                freed = self._untrack(uid)
                self._release_claims(ev.obj)
                if freed:
                    self.retry_soon()
                return
            was_pending = uid in self.pending
            had_node = uid in self._where
            self._track(ev.obj)
            if uid not in self.pending and self._claims_missing(ev.obj):
                self.sim.enqueue(("make-claims", uid), lambda: self._make_claims(uid))  # type: ignore[union-attr]
            if ps.is_terminal(ev.obj) and had_node:
                self._release_claims(ev.obj)
                self.retry_soon()
            if uid in self.pending and not was_pending:
                self._enqueue(uid)
        elif res.group == "resource.k8s.io" and res.plural == "resourceclaims" and ev.type == "DELETED":
            self._claim_gone(ev.obj)
        elif self.pending and (
            (res.group == "" and res.plural == "nodes" and self._node_changed(ev))
            or (res.group == "resource.k8s.io" and res.plural in ("resourceslices", "resourceclaims", "deviceclasses", "resourceclasses"))
        ):
            self.retry_soon()

    @staticmethod
    def _node_changed(ev: WatchEvent) -> bool:
        if ev.type != "MODIFIED" or ev.old is None:
            return True
        old, new = ev.old, ev.obj
        return (old["metadata"].get("labels") != new["metadata"].get("labels") or old.get("spec") != new.get("spec")
                or (old.get("status") or {}).get("allocatable") != (new.get("status") or {}).get("allocatable"))

    def _enqueue(self, uid: str) -> None:
        assert self.sim is not None
        self.sim.enqueue(("schedule", uid), lambda: self.schedule(uid))
        self._arm_timer()

    def retry_soon(self) -> None:
        """Try every unschedulable pod again (cluster changed)."""
        if self.pending and self.sim is not None:
            self.sim.enqueue(("schedule-all",), self._retry_all)

    def _retry_all(self) -> None:
        for uid in sorted(self.pending):
            self.schedule(uid)

    def _arm_timer(self) -> None:
        if self._timer or self.sim is None:
            return
        self._timer = True

        def tick() -> None:
            self._timer = False
            if self.pending:
                self._retry_all()
                self._arm_timer()

        self.sim.call_later(RETRY_SECONDS, tick)

    # ------------------------------------------------------------------ claims
    def _claims_missing(self, pod: dict[str, Any]) -> bool:
        """A live pod naming a template whose claim is not there (the resourceclaim controller's work,
        for every pod: one created with ``spec.nodeName`` gets its claims too, never allocated)."""
        assert self.sim is not None
        if pod["metadata"].get("deletionTimestamp") or ps.is_terminal(pod):
            return False
        names = dra.resolved_claim_names(pod, self.sim.minor)
        ns = pod["metadata"]["namespace"]
        return any(template and not (names.get(pod_claim) and self.sim.store.get(dra.CLAIMS, ns, names[pod_claim] or ""))
                   for pod_claim, _, template in dra.pod_claim_refs(pod))

    def _make_claims(self, uid: str) -> None:
        assert self.sim is not None
        pod = self.sim.store.by_uid(uid)
        if pod is not None and self._claims_missing(pod):
            self._claims(pod)

    def _claim_gone(self, claim: dict[str, Any]) -> None:
        """A generated claim removed while its pod lives is made again (the resourceclaim controller's
        "perhaps it was deleted accidentally"); one still reserved never goes: its finalizer holds it."""
        assert self.sim is not None
        for owner in claim["metadata"].get("ownerReferences") or []:
            if owner.get("kind") == "Pod" and owner.get("controller"):
                uid = owner.get("uid", "")
                if uid in self.pending:
                    self.retry_soon()
                elif uid:
                    self.sim.enqueue(("make-claims", uid), functools.partial(self._make_claims, uid))

    def _claims(self, pod: dict[str, Any]) -> tuple[list[dict[str, Any]], str | None]:
        """The pod's ResourceClaims (creating them from templates), or a PreFilter message."""
        assert self.sim is not None
        store, minor = self.sim.store, self.sim.minor
        ns = pod["metadata"]["namespace"]
        names = dra.resolved_claim_names(pod, minor)
        claims = []
        for pod_claim, claim_name, template in dra.pod_claim_refs(pod):
            name = names.get(pod_claim)
            claim = store.get(dra.CLAIMS, ns, name) if name else None
            if claim is None and template:
                claim = self._claim_from_template(pod, pod_claim, template, name)
                if claim is None:
                    return [], f'resourceclaimtemplate "{template}" not found'
                pod = store.by_uid(pod["metadata"]["uid"]) or pod
            if claim is None:
                return [], f'resourceclaim "{claim_name}" not found'
            if claim["metadata"].get("deletionTimestamp"):  # held by its finalizer for the pods it serves
                return [], f'resourceclaim "{claim["metadata"]["name"]}" is being deleted'
            claims.append(claim)
        return claims, None

    def _claim_from_template(self, pod: dict[str, Any], pod_claim: str, template: str, name: str | None) -> dict[str, Any] | None:
        assert self.sim is not None
        store, minor = self.sim.store, self.sim.minor
        m = pod["metadata"]
        tmpl = store.get(dra.TEMPLATES, m["namespace"], template)
        if tmpl is None:
            return None
        tspec = tmpl.get("spec") or {}
        meta: dict[str, Any] = {
            "namespace": m["namespace"],
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": m["name"], "uid": m["uid"],
                                 "controller": True, "blockOwnerDeletion": True}],
        }
        if minor <= 27:
            meta["name"] = name or f"{m['name']}-{pod_claim}"
        else:
            meta["generateName"] = f"{m['name']}-{pod_claim}-"
            meta["annotations"] = {"resource.kubernetes.io/pod-claim-name": pod_claim}
        tmeta = tspec.get("metadata") or {}
        if tmeta.get("labels"):
            meta["labels"] = dict(tmeta["labels"])
        try:
            claim = store.create(store.storage_type(dra.CLAIMS), {"metadata": meta, "spec": tspec.get("spec") or {}})
        except ApiError:
            return store.get(dra.CLAIMS, m["namespace"], meta.get("name", ""))
        if minor >= 28:
            entry = {"name": pod_claim, "resourceClaimName": claim["metadata"]["name"]}

            def add(obj: dict[str, Any]) -> None:
                statuses = obj.setdefault("status", {}).setdefault("resourceClaimStatuses", [])
                statuses[:] = [s for s in statuses if s.get("name") != pod_claim] + [entry]

            store.mutate(PODS, m["namespace"], m["name"], add)
        return claim

    def _inventory(self, driver: str) -> dict[str, list[str]]:
        assert self.sim is not None
        if dra.has_slices(self.sim.minor):
            out: dict[str, list[str]] = defaultdict(list)
            mine = [obj for obj in self.sim.store.iter(dra.SLICES) if dra.slice_node_driver(obj)[1] == driver]
            published: Counter[tuple[str, int]] = Counter()
            for obj in mine:
                pool = dra.slice_pool(obj)
                if pool is not None:
                    published[pool[:2]] += 1
            for obj in mine:
                pool = dra.slice_pool(obj)
                if pool is not None and published[pool[:2]] < pool[2]:
                    continue  # an incomplete pool: the allocator uses none of its devices
                out[dra.slice_node_driver(obj)[0]] += dra.slice_devices(obj)
            return out
        kubelet = self.sim.controllers.get("kubelet")
        return kubelet.dra_inventory(driver) if kubelet is not None else {}

    def _in_use(self) -> set[tuple[str, str, str]]:
        assert self.sim is not None
        return {d for c in self.sim.store.iter(dra.CLAIMS) for d in dra.allocated_devices(c)}

    def _plan(self, claims: list[dict[str, Any]], node: str, cache: dict[str, Any]) -> list[tuple[dict[str, Any], list[tuple[str, str, str]]]] | str:
        """Devices for each unallocated claim on ``node``, or the reason it cannot work there."""
        assert self.sim is not None
        plan, taken = [], set(cache["in_use"])
        for claim in claims:
            if claim.get("status", {}).get("allocation"):
                if dra.allocated_node(claim) not in (None, node):
                    return "resourceclaim not available on the node"
                continue
            results = []
            for request, class_name, count in dra.claim_requests(claim):
                driver = cache["drivers"].setdefault(class_name, dra.class_driver(self.sim.store, self.sim.minor, class_name))
                if driver is None:
                    return "cannot allocate all claims"
                if driver not in cache["inventory"]:
                    cache["inventory"][driver] = self._inventory(driver)
                free = [d for d in cache["inventory"][driver].get(node, []) if (driver, node, d) not in taken]
                want = len(free) if count is None else count
                if want == 0 or len(free) < want:
                    return "cannot allocate all claims"
                for dev in free[:want]:
                    taken.add((driver, node, dev))
                    results.append((request, driver, dev))
            plan.append((claim, results))
        return plan

    # ------------------------------------------------------------------ scheduling
    def schedule(self, uid: str) -> None:
        assert self.sim is not None
        store = self.sim.store
        pod = store.by_uid(uid)
        if pod is None or not is_ours(pod):
            self.pending.discard(uid)
            return
        claims, prefilter = self._claims(pod)
        pod = store.by_uid(uid) or pod
        named = named_nodes(pod["spec"])
        if named is None:
            nodes = list(store.iter(NODES))
            total = len(nodes)
        else:  # NodeAffinity's PreFilter: only the named nodes are filtered
            nodes = [n for name in sorted(named) if (n := store.get(NODES, "", name)) is not None]
            total = store.count(NODES)
        statuses: list[tuple[list[str], bool]] = []
        feasible = []
        cache: dict[str, Any] = {"in_use": self._in_use() if claims else set(), "drivers": {}, "inventory": {}}
        wants = resourcefit.pod_requests(pod["spec"])
        if prefilter is None:
            for node in nodes:
                why = self._filter(pod, node, wants, claims, cache)
                if isinstance(why, tuple):
                    statuses.append(why)
                else:
                    feasible.append((node, why))
        if not feasible:
            self._unschedulable(pod, total, statuses, prefilter, absent=total - len(nodes))
            return
        # NodeResourcesFit's LeastAllocated spreads GPU pods: most free GPUs first, then by name.
        best = min(feasible, key=lambda item: (-self._free(item[0]), item[0]["metadata"]["name"]))
        node_name = best[0]["metadata"]["name"]
        if classicdra.waits_for_consumer(claims):
            classicdra.scheduling_context(self.sim, pod, node=node_name, potential=[n["metadata"]["name"] for n, _ in feasible])
        for claim, results in best[1]:
            self._allocate(claim, node_name, results)
        for claim in claims:
            self._reserve(claim, pod)
        name = pod["metadata"]["name"]
        now = rfc3339(self.sim.clock.now())

        def bind(obj: dict[str, Any]) -> None:
            obj["spec"]["nodeName"] = node_name
            st = obj.setdefault("status", {})
            st["conditions"] = [c for c in st.get("conditions") or [] if c.get("type") != "PodScheduled"]
            st["conditions"].append(ps.condition("PodScheduled", True, now))

        self.pending.discard(uid)
        store.mutate(PODS, pod["metadata"]["namespace"], name, bind)
        self.sim.record_event(pod, reason="Scheduled", message=f"Successfully assigned {pod['metadata']['namespace']}/{name} to {node_name}",
                              component=SCHEDULER)

    def _free(self, node: dict[str, Any]) -> int:
        name = node["metadata"]["name"]
        used = self._used.get(name)
        return resourcefit.allocatable(node).get(ps.GPU, 0) - (used[ps.GPU] if used is not None else 0)

    def _filter(self, pod: dict[str, Any], node: dict[str, Any], wants: dict[str, int], claims: list[dict[str, Any]], cache: dict[str, Any]) -> Any:
        spec = pod["spec"]
        """The node's plan for the pod's claims, or (reasons, unresolvable) from the first filter refusing it."""
        if (node.get("spec") or {}).get("unschedulable") and not tolerates(spec.get("tolerations"), _UNSCHEDULABLE_TAINT):
            return ["node(s) were unschedulable"], True  # NodeUnschedulable: a cordon, unless the pod tolerates its taint
        taints = untolerated_taints(spec, node)
        if taints:
            return [f"node(s) had untolerated taint {{{taints[0].get('key')}: {taints[0].get('value') or ''}}}"], True
        if not node_affinity_matches(spec, node):
            return ["node(s) didn't match Pod's node affinity/selector"], True
        name = node["metadata"]["name"]
        assert self.sim is not None
        short, beyond = resourcefit.insufficient(wants, resourcefit.allocatable(node), self._used.get(name, {}),
                                                 len(self._usage.get(name, {})))
        if short:
            return short, beyond and self.sim.minor >= resourcefit.UNRESOLVABLE_FROM
        if claims:
            plan = self._plan(claims, name, cache)
            return ([plan], plan.startswith(_UNRESOLVABLE)) if isinstance(plan, str) else plan
        return []

    def _unschedulable(self, pod: dict[str, Any], total: int, statuses: list[tuple[list[str], bool]],
                       prefilter: str | None, *, absent: int = 0) -> None:
        assert self.sim is not None
        if prefilter:
            msg = (f"0/{total} nodes are available: {prefilter}. preemption: 0/{total} nodes are available: "
                   f"{total} {NOT_HELPFUL}..")
        else:
            msg = fit_error(self.sim.minor, total, statuses, absent)
        now = rfc3339(self.sim.clock.now())
        cond = ps.condition("PodScheduled", False, now, "Unschedulable", msg)

        def mark(obj: dict[str, Any]) -> None:
            st = obj.setdefault("status", {})
            st.setdefault("phase", "Pending")
            conds = [c for c in st.get("conditions") or [] if c.get("type") != "PodScheduled"]
            st["conditions"] = ps.merge_conditions(st.get("conditions"), [*conds, cond])

        m = pod["metadata"]
        self.sim.store.mutate(PODS, m["namespace"], m["name"], mark)
        self.sim.record_event(pod, reason="FailedScheduling", message=msg, type="Warning", component=SCHEDULER)

    def _allocate(self, claim: dict[str, Any], node: str, results: list[tuple[str, str, str]]) -> None:
        assert self.sim is not None
        fields = dra.allocation_status(self.sim.minor, node, results)
        guard = dra.claim_finalizer(self.sim.minor, results[0][1] if results else dra.DRIVER)
        m = claim["metadata"]

        def allocate(obj: dict[str, Any]) -> None:
            finalizers = obj["metadata"].setdefault("finalizers", [])
            if guard not in finalizers:
                finalizers.append(guard)  # set before the allocation, as the scheduler does
            obj.setdefault("status", {}).update(fields)

        self.sim.store.mutate(dra.CLAIMS, m["namespace"], m["name"], allocate)

    def _reserve(self, claim: dict[str, Any], pod: dict[str, Any]) -> None:
        assert self.sim is not None
        ref = {"resource": "pods", "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]}

        def add(obj: dict[str, Any]) -> None:
            reserved = obj.setdefault("status", {}).setdefault("reservedFor", [])
            if not any(r.get("uid") == ref["uid"] for r in reserved):
                reserved.append(ref)

        m = claim["metadata"]
        self.sim.store.mutate(dra.CLAIMS, m["namespace"], m["name"], add)

    def _release_claims(self, pod: dict[str, Any]) -> None:
        """The resourceclaim controller: drop the pod's reservations (later, not in a listener)."""
        if not (pod.get("spec") or {}).get("resourceClaims") or self.sim is None:
            return
        uid, ns = pod["metadata"]["uid"], pod["metadata"]["namespace"]
        self.sim.enqueue(("release-claims", uid), lambda: self._release(uid, ns))

    def _release(self, uid: str, ns: str) -> None:
        assert self.sim is not None
        minor = self.sim.minor
        for claim in list(self.sim.store.iter(dra.CLAIMS, ns)):
            if uid not in dra.reserved_uids(claim):
                continue

            def drop(obj: dict[str, Any]) -> None:
                st = obj.setdefault("status", {})
                st["reservedFor"] = [r for r in st.get("reservedFor") or [] if r.get("uid") != uid]
                if not st["reservedFor"]:
                    guards = {dra.claim_finalizer(minor, d) for d in dra.claim_drivers(obj) or {dra.DRIVER}}
                    for key in ("reservedFor", "allocation", "driverName"):
                        st.pop(key, None)
                    left = [f for f in obj["metadata"].get("finalizers") or [] if f not in guards]
                    if left:  # deallocated: the protection goes, and a deleted claim with it
                        obj["metadata"]["finalizers"] = left
                    else:
                        obj["metadata"].pop("finalizers", None)
                if not st:
                    obj.pop("status", None)

            m = claim["metadata"]
            self.sim.store.mutate(dra.CLAIMS, m["namespace"], m["name"], drop)
        self.retry_soon()
