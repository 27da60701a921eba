"""The disruption controller, the unschedulable taint and the budget's printer, in process.

The disruption controller keeps each PodDisruptionBudget's status as
``pkg/controller/disruption`` does: the expected count from the pods' controllers' scale
(Deployment, ReplicaSet, StatefulSet) for a percentage or maxUnavailable, the pods' count for
an integer minAvailable; Ready pods not terminating and not just evicted are healthy; pods
without a controller are left out (an ``UnmanagedPods`` warning); a controller without a scale
makes the sync fail (``SyncFailed``, no disruption allowed). Cordoning a node adds the
``node.kubernetes.io/unschedulable:NoSchedule`` taint (the node lifecycle controller's) and
keeps new pods off it unless they tolerate it.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from kubesim import errors, eviction, openapi
from kubesim.clock import rfc3339
from kubesim.daemonsets import daemon_tolerations
from kubesim.simulation import Simulation
from kubesim.tables import to_table
from tests.kubesim._simkit import NODES, PODS, condition, create, events, get, small

PDBS = ("policy", "poddisruptionbudgets")
DEPLOYMENTS = ("apps", "deployments")
STATEFULSETS = ("apps", "statefulsets")
NS = "ml-team"
UNSCHEDULABLE = "node.kubernetes.io/unschedulable"


def deployment(name: str, replicas: int, *, node: str = "cpu-node1") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": NS},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"nodeSelector": {"kubernetes.io/hostname": node},
                                           "containers": [{"name": "app", "image": "registry.example.com/app:1"}]}}}}


def budget(name: str, selector: dict[str, str], **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": NS}, "spec": {**spec, "selector": {"matchLabels": selector}}}


def status(sim: Simulation, name: str) -> dict[str, Any]:
    pdb = get(sim, PDBS, NS, name)
    assert pdb is not None
    return dict(pdb["status"])


def counts(sim: Simulation, name: str) -> tuple[int, int, int, int]:
    st = status(sim, name)
    return st["expectedPods"], st["currentHealthy"], st["desiredHealthy"], st["disruptionsAllowed"]


@pytest.fixture
def sim() -> Simulation:
    s = small()
    create(s, DEPLOYMENTS, deployment("web", 4))
    s.advance(10)
    return s


def test_integer_min_available_counts_the_selected_pods(sim: Simulation) -> None:
    create(sim, PDBS, budget("web", {"app": "web"}, minAvailable=3))
    assert counts(sim, "web") == (4, 4, 3, 1)
    st = status(sim, "web")
    assert st["observedGeneration"] == get(sim, PDBS, NS, "web")["metadata"]["generation"] == 1  # type: ignore[index]
    cond = condition(get(sim, PDBS, NS, "web") or {}, "DisruptionAllowed")
    assert cond is not None and (cond["status"], cond["reason"], cond["message"]) == ("True", "SufficientPods", "")


@pytest.mark.parametrize(("spec", "expected"), [
    ({"maxUnavailable": 1}, (4, 4, 3, 1)),
    ({"maxUnavailable": "50%"}, (4, 4, 2, 2)),
    ({"maxUnavailable": "30%"}, (4, 4, 2, 2)),  # 30% of 4 rounded up is 2 unavailable
    ({"minAvailable": "30%"}, (4, 4, 2, 2)),  # 30% of 4 rounded up is 2 available
    ({"minAvailable": "100%"}, (4, 4, 4, 0)),
    ({}, (0, 4, 0, 0)),  # neither: nothing expected, nothing allowed
])
def test_percentages_and_max_unavailable_use_the_deployments_scale(sim: Simulation, spec: dict[str, Any],
                                                                    expected: tuple[int, int, int, int]) -> None:
    create(sim, PDBS, budget("web", {"app": "web"}, **spec))
    assert counts(sim, "web") == expected


def test_scale_comes_from_the_controller_not_the_pods(sim: Simulation) -> None:
    """A Deployment scaled up counts its spec.replicas at once, before the new pods are Ready."""
    create(sim, PDBS, budget("web", {"app": "web"}, maxUnavailable=1))
    sim.store.mutate(DEPLOYMENTS, NS, "web", lambda d: d["spec"].__setitem__("replicas", 6))
    sim.settle()
    expected, healthy, desired, allowed = counts(sim, "web")
    assert (expected, desired) == (6, 5) and healthy == 4 and allowed == 0
    sim.advance(10)
    assert counts(sim, "web") == (6, 6, 5, 1)


def test_statefulset_scale(sim: Simulation) -> None:
    sts = deployment("db", 2)
    sts["spec"]["serviceName"] = "db"
    create(sim, STATEFULSETS, sts)
    sim.advance(20)
    create(sim, PDBS, budget("db", {"app": "db"}, maxUnavailable="50%"))
    assert counts(sim, "db") == (2, 2, 1, 1)


def test_readiness_and_deletion_change_the_healthy_count(sim: Simulation) -> None:
    create(sim, PDBS, budget("web", {"app": "web"}, minAvailable=3))
    pods = [p for p in sim.store.list(PODS, NS) if p["metadata"]["labels"].get("app") == "web"]

    def unready(pod: dict[str, Any]) -> None:
        for cond in pod["status"]["conditions"]:
            if cond["type"] == "Ready":
                cond["status"] = "False"

    sim.store.mutate(PODS, NS, pods[0]["metadata"]["name"], unready)
    sim.settle()
    assert counts(sim, "web") == (4, 3, 3, 0)
    cond = condition(get(sim, PDBS, NS, "web") or {}, "DisruptionAllowed")
    assert cond is not None and (cond["status"], cond["reason"]) == ("False", "InsufficientPods")
    sim.store.delete(PODS, NS, pods[1]["metadata"]["name"])  # graceful: terminating, still counted as expected
    sim.settle()
    expected, healthy, _, _ = counts(sim, "web")
    assert healthy == 2 and expected == 5  # the terminating pod and its replacement


def test_evicted_pods_stay_out_of_the_healthy_count_until_the_deletion_timeout(sim: Simulation) -> None:
    """A name in disruptedPods (written by the eviction handler) is not healthy; the controller
    drops it once the pod is terminating or two minutes have passed without that."""
    create(sim, PDBS, budget("web", {"app": "web"}, minAvailable=2))
    assert counts(sim, "web") == (4, 4, 2, 2)
    pod = next(p["metadata"]["name"] for p in sim.store.list(PODS, NS) if p["metadata"]["labels"].get("app") == "web")
    stamp = rfc3339(sim.clock.now())

    def disrupt(pdb: dict[str, Any]) -> None:
        pdb["status"]["disruptedPods"] = {pod: stamp}
        pdb["status"]["disruptionsAllowed"] = 1

    sim.store.mutate(PDBS, NS, "web", disrupt)
    sim.settle()
    assert counts(sim, "web") == (4, 3, 2, 1) and status(sim, "web")["disruptedPods"] == {pod: stamp}
    sim.advance(121)
    assert counts(sim, "web") == (4, 4, 2, 2) and "disruptedPods" not in status(sim, "web")
    assert events(sim, reason="NotDeleted", name=pod)


def test_bare_pods_are_unmanaged(sim: Simulation) -> None:
    """gpu-small's trainer pods have no controller: with maxUnavailable they are left out of the
    expected count (so nothing is allowed) and the controller warns; minAvailable counts them."""
    assert not get(sim, PODS, NS, "trainer-0")["metadata"].get("ownerReferences")  # type: ignore[index]
    create(sim, PDBS, budget("trainers", {"app": "trainer"}, maxUnavailable=1))
    assert counts(sim, "trainers") == (0, 2, 0, 0)
    warned = events(sim, reason="UnmanagedPods", name="trainers")
    assert warned and warned[0]["type"] == "Warning"
    assert "were found to be unmanaged" in warned[0]["message"]
    create(sim, PDBS, budget("trainers-min", {"app": "trainer"}, minAvailable=1))
    assert counts(sim, "trainers-min") == (2, 2, 1, 1)


def test_a_controller_without_scale_fails_the_sync(sim: Simulation) -> None:
    """DaemonSet pods under a percentage: the scale lookup fails, the controller fails safe."""
    create(sim, PDBS, {**budget("plugin", {"name": "nvidia-device-plugin-ds"}, minAvailable="50%"),
                       "metadata": {"name": "plugin", "namespace": "kube-system"}})
    assert (get(sim, PDBS, "kube-system", "plugin") or {})["status"]["disruptionsAllowed"] == 0
    cond = condition(get(sim, PDBS, "kube-system", "plugin") or {}, "DisruptionAllowed")
    assert cond is not None and (cond["status"], cond["reason"]) == ("False", "SyncFailed")
    assert cond["message"] == "daemonsets.apps does not implement the scale subresource"
    assert events(sim, reason="CalculateExpectedPodCountFailed", name="plugin")


def test_no_matching_pods(sim: Simulation) -> None:
    create(sim, PDBS, budget("nothing", {"app": "nothing"}, minAvailable=1))
    assert counts(sim, "nothing") == (0, 0, 1, 0)
    assert events(sim, reason="NoPods", name="nothing")[0]["message"] == "No matching pods found"


def test_spec_change_moves_generation_and_observed_generation(sim: Simulation) -> None:
    create(sim, PDBS, budget("web", {"app": "web"}, minAvailable=3))
    sim.store.mutate(PDBS, NS, "web", lambda p: p["spec"].__setitem__("minAvailable", 1))
    sim.settle()
    pdb = get(sim, PDBS, NS, "web")
    assert pdb is not None and pdb["metadata"]["generation"] == 2 == pdb["status"]["observedGeneration"]
    assert counts(sim, "web") == (4, 4, 1, 3)


def test_validation_refuses_both_and_bad_values() -> None:
    sim = small()
    res = sim.store.storage_type(PDBS)
    with pytest.raises(errors.ApiError) as both:
        sim.store.create(res, budget("both", {"app": "x"}, minAvailable=1, maxUnavailable=1))
    assert both.value.code == 422 and both.value.details is not None
    assert both.value.details["causes"][0]["field"] == "spec"
    assert both.value.message.startswith('PodDisruptionBudget.policy "both" is invalid: spec: Invalid value: ')
    with pytest.raises(errors.ApiError) as pct:
        sim.store.create(res, budget("pct", {"app": "x"}, maxUnavailable="101%"))
    assert "spec.maxUnavailable: Invalid value: " in pct.value.message and "must not be greater than 100%" in pct.value.message
    created = sim.store.create(res, budget("ok", {"app": "x"}, maxUnavailable="100%"))
    assert created["status"] == {"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0}


# ------------------------------------------------------------------ cordon
def cordon(sim: Simulation, node: str, value: bool = True) -> None:
    def apply(obj: dict[str, Any]) -> None:
        if value:
            obj.setdefault("spec", {})["unschedulable"] = True
        else:
            obj.get("spec", {}).pop("unschedulable", None)

    sim.store.mutate(NODES, "", node, apply)
    sim.settle()


def test_cordon_adds_the_unschedulable_taint_and_uncordon_removes_it() -> None:
    sim = small()
    cordon(sim, "gpu-node2")
    taints = (get(sim, NODES, "", "gpu-node2") or {})["spec"]["taints"]
    assert [(t["key"], t["effect"]) for t in taints] == [(UNSCHEDULABLE, "NoSchedule")] and taints[0]["timeAdded"]
    cordon(sim, "gpu-node2", False)
    assert "taints" not in (get(sim, NODES, "", "gpu-node2") or {})["spec"]


def test_cordoned_node_takes_no_new_pods_unless_they_tolerate_it() -> None:
    sim = small()
    for node in ("gpu-node1", "gpu-node2", "gpu-node3"):
        cordon(sim, node)
    gpu = {"containers": [{"name": "c", "image": "registry.example.com/x:1",
                           "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
    create(sim, PODS, {"metadata": {"name": "waits", "namespace": NS}, "spec": dict(gpu)})
    pod = get(sim, PODS, NS, "waits") or {}
    assert not pod["spec"].get("nodeName")
    cond = condition(pod, "PodScheduled")
    assert cond is not None and cond["message"].startswith(
        "0/4 nodes are available: 1 Insufficient nvidia.com/gpu, 3 node(s) were unschedulable.")
    tolerant = {**gpu, "tolerations": [{"key": UNSCHEDULABLE, "operator": "Exists", "effect": "NoSchedule"}]}
    create(sim, PODS, {"metadata": {"name": "tolerates", "namespace": NS}, "spec": tolerant})
    assert (get(sim, PODS, NS, "tolerates") or {})["spec"].get("nodeName") == "gpu-node3"
    cordon(sim, "gpu-node1", False)
    sim.advance(1)
    assert (get(sim, PODS, NS, "waits") or {})["spec"].get("nodeName") == "gpu-node1"


def test_daemonset_pods_tolerate_a_cordon() -> None:
    keys = {(t["key"], t["effect"]) for t in daemon_tolerations({})}
    assert (UNSCHEDULABLE, "NoSchedule") in keys
    sim = small()
    cordon(sim, "gpu-node1")
    sim.advance(5)
    plugin = [p for p in sim.store.list(PODS, "kube-system") if p["spec"].get("nodeName") == "gpu-node1"]
    assert plugin and not any(p["metadata"].get("deletionTimestamp") for p in plugin)


# ------------------------------------------------------------------ the printer
def test_budget_printer_cells() -> None:
    now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    pdb = {"metadata": {"name": "web", "creationTimestamp": "2025-12-31T23:55:00Z"},
           "spec": {"maxUnavailable": "25%"}, "status": {"disruptionsAllowed": 2}}
    table = to_table("poddisruptionbudgets", [pdb], now=now)
    assert [(c["name"], c["type"]) for c in table["columnDefinitions"]] == [
        ("Name", "string"), ("Min Available", "string"), ("Max Unavailable", "string"),
        ("Allowed Disruptions", "integer"), ("Age", "string")]
    assert table["rows"][0]["cells"] == ["web", "N/A", "25%", 2, "5m"]
    pdb["spec"] = {"minAvailable": 0}
    assert to_table("poddisruptionbudgets", [pdb], now=now)["rows"][0]["cells"][1:3] == ["0", "N/A"]


# ------------------------------------------------------------------ the eviction handler, in process
def _field(number: int, payload: bytes | int) -> bytes:
    if isinstance(payload, int):
        return _varint(number << 3) + _varint(payload)
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def test_a_protobuf_eviction_is_read() -> None:
    """kubectl's typed clients may send protobuf: the envelope, the Eviction and its DeleteOptions."""
    meta = _field(1, b"trainer-0") + _field(3, NS.encode())
    options = _field(1, 7) + _field(2, _field(1, b"the-uid")) + _field(5, b"All")
    type_meta = _field(1, b"policy/v1") + _field(2, b"Eviction")
    raw = b"k8s\x00" + _field(1, type_meta) + _field(2, _field(1, meta) + _field(2, options))
    assert eviction.decode(raw, "application/vnd.kubernetes.protobuf") == {
        "apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "trainer-0", "namespace": NS},
        "deleteOptions": {"gracePeriodSeconds": 7, "preconditions": {"uid": "the-uid"}, "dryRun": ["All"]}}


def _evict(sim: Simulation, pod: str) -> dict[str, Any]:
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod}}
    return eviction.evict(sim, NS, pod, body, dry_run=False)


def _web_pods(sim: Simulation) -> list[str]:
    return sorted(p["metadata"]["name"] for p in sim.store.list(PODS, NS) if p["metadata"]["labels"].get("app") == "web")


def test_an_unready_pod_goes_without_spending_a_met_budget(sim: Simulation) -> None:
    create(sim, PDBS, budget("web", {"app": "web"}, minAvailable=3))
    first = _web_pods(sim)[0]

    def unready(pod: dict[str, Any]) -> None:
        for cond in pod["status"]["conditions"]:
            if cond["type"] == "Ready":
                cond["status"] = "False"

    sim.store.mutate(PODS, NS, first, unready)
    sim.settle()
    assert counts(sim, "web") == (4, 3, 3, 0)  # met, nothing to spare
    assert _evict(sim, first)["status"] == "Success"
    assert (get(sim, PODS, NS, first) or {})["metadata"]["deletionTimestamp"]
    assert "disruptedPods" not in status(sim, "web")
    with pytest.raises(errors.ApiError) as refused:  # a Ready pod would break it
        _evict(sim, _web_pods(sim)[1])
    assert refused.value.code == 429


def test_always_allow_lets_unready_pods_go_even_below_the_budget(sim: Simulation) -> None:
    create(sim, PDBS, budget("web", {"app": "web"}, minAvailable=4, unhealthyPodEvictionPolicy="AlwaysAllow"))
    names = _web_pods(sim)
    for name in names[:2]:
        sim.store.mutate(PODS, NS, name, lambda p: [c.__setitem__("status", "False")
                                                    for c in p["status"]["conditions"] if c["type"] == "Ready"])
    sim.settle()
    assert counts(sim, "web") == (4, 2, 4, 0)
    assert _evict(sim, names[0])["code"] == 201


def test_a_stale_budget_is_still_being_processed(sim: Simulation) -> None:
    """observedGeneration behind the generation: 429 with retryAfterSeconds 10."""
    create(sim, PDBS, budget("web", {"app": "web"}, minAvailable=1))
    sim.store.mutate(PDBS, NS, "web", lambda p: p["spec"].__setitem__("minAvailable", 2))  # not settled
    with pytest.raises(errors.ApiError) as stale:
        _evict(sim, _web_pods(sim)[0])
    assert (stale.value.code, stale.value.message) == (429, eviction.BUDGET_MESSAGE)
    assert stale.value.details == {"causes": [{"reason": "DisruptionBudget", "message":
                                               "The disruption budget web is still being processed by the server."}],
                                   "retryAfterSeconds": 10}


def test_pending_and_finished_pods_ignore_budgets(sim: Simulation) -> None:
    create(sim, PDBS, budget("web", {"app": "web"}, minAvailable=4))
    sim.store.mutate(DEPLOYMENTS, NS, "web", lambda d: d["spec"].__setitem__("replicas", 5))
    sim.settle()  # the fifth pod is Pending (the kubelet has not started it)
    pending = next(n for n in _web_pods(sim) if (get(sim, PODS, NS, n) or {})["status"].get("phase") == "Pending")
    assert _evict(sim, pending)["code"] == 201


def test_the_core_openapi_document_has_the_eviction_operation() -> None:
    sim = small()
    doc = openapi.gv_document(sim.surface, "", "v1")
    assert doc is not None
    post = doc["paths"]["/api/v1/namespaces/{namespace}/pods/{name}/eviction"]["post"]
    assert post["x-kubernetes-group-version-kind"] == {"group": "policy", "version": "v1", "kind": "Eviction"}
    assert "io.k8s.api.policy.v1.Eviction" in doc["components"]["schemas"]
    policy = openapi.gv_document(sim.surface, "policy", "v1")
    assert policy is not None and "/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets/{name}/status" \
        in policy["paths"]
