"""The simulated DaemonSet controller, in process (no HTTP)."""

from __future__ import annotations

from _simkit import (
    DAEMONSETS,
    NODES,
    PODS,
    REVISIONS,
    create,
    daemonset,
    events,
    get,
    pods_of,
    set_image,
    small,
)

from kubesim import podstatus as ps
from tests.support import push_test_builds

GPU_SELECTOR = {"feature.node.kubernetes.io/pci-10de.present": "true"}


def _nodes(pods: list[dict]) -> list[str]:
    return sorted(p["spec"]["nodeName"] for p in pods)


def _taint(sim, node: str, effect: str = "NoSchedule") -> None:
    def apply(obj: dict) -> None:
        obj["spec"]["taints"] = [{"key": "dedicated", "value": "infra", "effect": effect}]

    sim.store.mutate(NODES, "", node, apply)
    sim.settle()


def test_one_pod_per_node_without_selector():
    """A DaemonSet without a selector runs exactly one pod on each of the four nodes."""
    sim = small()
    create(sim, DAEMONSETS, daemonset("agent"))
    sim.advance(3)
    assert _nodes(pods_of(sim, "default", "app", "agent")) == ["cpu-node1", "gpu-node1", "gpu-node2", "gpu-node3"]


def test_node_selector_limits_pods_to_gpu_nodes():
    """A nodeSelector on the NFD GPU label puts pods on the three GPU nodes only."""
    sim = small()
    create(sim, DAEMONSETS, daemonset("agent", node_selector=GPU_SELECTOR))
    sim.advance(3)
    assert _nodes(pods_of(sim, "default", "app", "agent")) == ["gpu-node1", "gpu-node2", "gpu-node3"]
    assert get(sim, DAEMONSETS, "default", "agent")["status"]["desiredNumberScheduled"] == 3


def test_untolerated_taint_keeps_pod_off_and_toleration_lets_it_on():
    """A NoSchedule taint keeps the daemon pod off a node unless the template tolerates it."""
    sim = small()
    _taint(sim, "cpu-node1")
    create(sim, DAEMONSETS, daemonset("plain"))
    tol = [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]
    create(sim, DAEMONSETS, daemonset("tolerant", tolerations=tol))
    sim.advance(3)
    assert "cpu-node1" not in _nodes(pods_of(sim, "default", "app", "plain"))
    assert "cpu-node1" in _nodes(pods_of(sim, "default", "app", "tolerant"))


def test_noexecute_taint_evicts_and_noschedule_leaves_running_pod_misscheduled():
    """A NoSchedule taint added later leaves the pod (misscheduled); NoExecute removes it."""
    sim = small()
    create(sim, DAEMONSETS, daemonset("agent"))
    sim.advance(3)
    _taint(sim, "cpu-node1", "NoSchedule")
    sim.advance(2)
    assert "cpu-node1" in _nodes(pods_of(sim, "default", "app", "agent"))
    status = get(sim, DAEMONSETS, "default", "agent")["status"]
    assert status["numberMisscheduled"] == 1 and status["desiredNumberScheduled"] == 3
    _taint(sim, "cpu-node1", "NoExecute")
    sim.advance(3)
    assert "cpu-node1" not in _nodes(pods_of(sim, "default", "app", "agent"))


def test_daemon_pod_shape_matches_the_real_controller():
    """Pods carry generateName, hash and generation labels, a controller ref, nodeName and matchFields affinity."""
    sim = small()
    ds = create(sim, DAEMONSETS, daemonset("agent", node_selector=GPU_SELECTOR))
    pod = next(p for p in pods_of(sim, "default", "app", "agent") if p["spec"]["nodeName"] == "gpu-node1")
    rev = sim.store.list(REVISIONS, "default")[0]
    m = pod["metadata"]
    assert m["generateName"] == "agent-" and m["name"].startswith("agent-")
    assert m["labels"] == {"app": "agent", "controller-revision-hash": rev["metadata"]["labels"]["controller-revision-hash"],
                           "pod-template-generation": "1"}
    assert m["ownerReferences"] == [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent",
                                     "uid": ds["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]
    assert pod["spec"]["affinity"] == {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-node1"]}]}]}}}
    keys = {(t["key"], t["effect"]) for t in pod["spec"]["tolerations"]}
    assert {("node.kubernetes.io/not-ready", "NoExecute"), ("node.kubernetes.io/unreachable", "NoExecute"),
            ("node.kubernetes.io/disk-pressure", "NoSchedule"), ("node.kubernetes.io/memory-pressure", "NoSchedule"),
            ("node.kubernetes.io/pid-pressure", "NoSchedule"), ("node.kubernetes.io/unschedulable", "NoSchedule")} <= keys
    assert [e["message"] for e in events(sim, reason="SuccessfulCreate")].count(f"Created pod: {m['name']}") == 1


def test_controller_revision_shape():
    """The revision is <ds>-<hash> with the replace patch, template labels plus the hash, and revision 1."""
    sim = small()
    ds = create(sim, DAEMONSETS, daemonset("agent"))
    [rev] = sim.store.list(REVISIONS, "default")
    hash_ = rev["metadata"]["labels"]["controller-revision-hash"]
    assert rev["metadata"]["name"] == f"agent-{hash_}"
    assert set(hash_) <= set("bcdfghjklmnpqrstvwxz2456789") and 6 <= len(hash_) <= 10
    assert rev["revision"] == 1
    assert rev["metadata"]["labels"] == {"app": "agent", "controller-revision-hash": hash_}
    assert rev["data"] == {"spec": {"template": {"$patch": "replace", **ds["spec"]["template"]}}}
    assert rev["metadata"]["ownerReferences"][0]["uid"] == ds["metadata"]["uid"]
    assert rev["metadata"]["ownerReferences"][0]["controller"] is True


def _unavailable(sim, name: str) -> int:
    pods = [p for p in pods_of(sim, "default", "app", name) if not p["metadata"].get("deletionTimestamp")]
    available = {p["spec"]["nodeName"] for p in pods if ps.is_pod_ready(p)}
    return 4 - len(available)


def test_rolling_update_keeps_unavailable_within_max_unavailable():
    """RollingUpdate with maxUnavailable 1 never has more than one node without an available pod."""
    sim = small()
    create(sim, DAEMONSETS, daemonset("agent"))
    sim.advance(3)
    set_image(sim, "default", "agent", "registry.example.com/agent:2.0")
    worst = 0
    for _ in range(80):
        sim.advance(0.25)
        worst = max(worst, _unavailable(sim, "agent"))
    pods = pods_of(sim, "default", "app", "agent")
    assert worst == 1
    assert sorted(p["spec"]["containers"][0]["image"] for p in pods) == ["registry.example.com/agent:2.0"] * 4
    assert {p["metadata"]["labels"]["pod-template-generation"] for p in pods} == {"2"}
    status = get(sim, DAEMONSETS, "default", "agent")["status"]
    assert status["updatedNumberScheduled"] == 4 and status["numberAvailable"] == 4


def test_rolling_update_percent_max_unavailable_replaces_in_parallel():
    """maxUnavailable 50% of four nodes lets two pods be replaced at once, never three."""
    sim = small()
    strategy = {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "50%"}}
    create(sim, DAEMONSETS, daemonset("agent", strategy=strategy))
    sim.advance(3)
    set_image(sim, "default", "agent", "registry.example.com/agent:2.0")
    seen = []
    for _ in range(40):
        sim.advance(0.25)
        seen.append(_unavailable(sim, "agent"))
    assert max(seen) == 2


def test_rolling_update_stalls_on_crashing_pods():
    """A crash-looping new pod holds the rollout at one updated pod (maxUnavailable 1)."""
    sim = small()
    create(sim, DAEMONSETS, daemonset("agent"))
    sim.advance(3)
    set_image(sim, "default", "agent", "registry.example.com/agent:2.0-crash")
    sim.advance(120)
    status = get(sim, DAEMONSETS, "default", "agent")["status"]
    assert status["updatedNumberScheduled"] == 1
    assert status["numberUnavailable"] == 1 and status["numberAvailable"] == 3


def test_on_delete_replaces_only_deleted_pods_with_new_template():
    """OnDelete never replaces pods by itself; a deleted pod comes back with the current template."""
    sim = small()
    create(sim, DAEMONSETS, daemonset("agent", strategy={"type": "OnDelete"}))
    sim.advance(3)
    set_image(sim, "default", "agent", "registry.example.com/agent:2.0")
    sim.advance(30)
    images = {p["spec"]["nodeName"]: p["spec"]["containers"][0]["image"] for p in pods_of(sim, "default", "app", "agent")}
    assert set(images.values()) == {"registry.example.com/agent:1.0"}
    victim = next(p for p in pods_of(sim, "default", "app", "agent") if p["spec"]["nodeName"] == "gpu-node2")
    sim.store.delete(PODS, "default", victim["metadata"]["name"])
    sim.advance(5)
    images = {p["spec"]["nodeName"]: p["spec"]["containers"][0]["image"] for p in pods_of(sim, "default", "app", "agent")}
    assert images == {"cpu-node1": "registry.example.com/agent:1.0", "gpu-node1": "registry.example.com/agent:1.0",
                      "gpu-node2": "registry.example.com/agent:2.0", "gpu-node3": "registry.example.com/agent:1.0"}
    status = get(sim, DAEMONSETS, "default", "agent")["status"]
    assert status["updatedNumberScheduled"] == 1 and status["observedGeneration"] == 2


def test_undo_reuses_the_old_revision_with_a_new_number():
    """Going back to an older template reuses its revision and renumbers it max+1."""
    sim = small()
    create(sim, DAEMONSETS, daemonset("agent"))
    sim.advance(3)
    first = sim.store.list(REVISIONS, "default")[0]["metadata"]["name"]
    set_image(sim, "default", "agent", "registry.example.com/agent:2.0")
    sim.advance(20)
    set_image(sim, "default", "agent", "registry.example.com/agent:1.0")
    sim.advance(20)
    revisions = {r["metadata"]["name"]: r["revision"] for r in sim.store.list(REVISIONS, "default")}
    assert len(revisions) == 2
    assert revisions[first] == 3
    assert get(sim, DAEMONSETS, "default", "agent")["metadata"]["annotations"]["deprecated.daemonset.template.generation"] == "3"


def test_revision_history_limit_prunes_unused_old_revisions():
    """Old revisions beyond revisionHistoryLimit are deleted, oldest first, unless a pod still uses them."""
    sim = small()
    create(sim, DAEMONSETS, daemonset("agent", history_limit=1))
    sim.advance(3)
    for version in ("2.0", "3.0", "4.0"):
        set_image(sim, "default", "agent", f"registry.example.com/agent:{version}")
        sim.advance(20)
    revisions = sorted(r["revision"] for r in sim.store.list(REVISIONS, "default"))
    assert revisions == [3, 4]


def test_status_fields_omit_zero_values():
    """Status counts nodes as the real controller does and omits zero omitempty fields."""
    sim = small()
    create(sim, DAEMONSETS, daemonset("agent", image="registry.example.com/agent:1.0-slow"))
    sim.advance(5)
    status = get(sim, DAEMONSETS, "default", "agent")["status"]
    assert status == {"currentNumberScheduled": 4, "desiredNumberScheduled": 4, "numberMisscheduled": 0,
                      "numberReady": 0, "observedGeneration": 1, "updatedNumberScheduled": 4, "numberUnavailable": 4}
    sim.advance(180)
    status = get(sim, DAEMONSETS, "default", "agent")["status"]
    assert status == {"currentNumberScheduled": 4, "desiredNumberScheduled": 4, "numberMisscheduled": 0,
                      "numberReady": 4, "observedGeneration": 1, "updatedNumberScheduled": 4, "numberAvailable": 4}
    assert "collisionCount" not in status


def test_settled_scenario_daemonsets_are_not_rewritten():
    """At start the controllers adopt the loaded DaemonSets: no write happens."""
    sim = small()
    before = sim.store.rv
    sim.advance(5)
    assert sim.store.rv == before
    ds = get(sim, DAEMONSETS, "kube-system", "nvidia-device-plugin-daemonset")
    assert ds["status"]["numberAvailable"] == 3 and ds["status"]["updatedNumberScheduled"] == 3


def test_a_burst_of_pod_updates_costs_a_few_syncs_of_their_daemonset_not_one_each():
    """kube-controller-manager's workqueue merges a key added while it waits: when a 200-node
    rollout's kubelets all report at once (the loop was busy), their DaemonSet is synced a few
    times, not once per pod update (at 5,000 nodes that was 5,000 x 5,000 and the API server
    stopped answering)."""
    from kubesim.scenarios import build

    sim = push_test_builds(build(scenario="gpu-large", nodes=200))
    controller = sim.controllers["daemonsets"]
    name = "nvidia-device-plugin-daemonset"
    syncs: list[str] = []
    sync = controller.sync

    def counted(ns: str, ds: str) -> None:
        if ds == name:
            syncs.append(ds)
        sync(ns, ds)

    controller.sync = counted

    def everything(obj: dict) -> None:
        obj["spec"]["updateStrategy"] = {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "100%"}}
        obj["spec"]["template"]["spec"]["containers"][0]["image"] = "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"

    sim.store.mutate(DAEMONSETS, "kube-system", name, everything)
    for _ in range(12):  # the loop falls behind: everything due by then fires before the next sync
        sim.clock.advance(10)
        sim.settle()
    status = get(sim, DAEMONSETS, "kube-system", name)["status"]
    assert status["updatedNumberScheduled"] == 200 and status["numberAvailable"] == 200
    assert len(syncs) <= 40, f"{len(syncs)} syncs of the DaemonSet for 200 pods replaced"


def test_a_sync_that_deletes_a_pod_counts_the_status_without_it():
    """The status a sync writes counts the pods as that sync left them: one that deleted a node's
    Failed pod (its replacement comes with the next sync) counts that node unscheduled, not the
    pod it just deleted; a sync that changed no pod counts the pods it read."""
    sim = small()
    ns, name = "kube-system", "nvidia-device-plugin-daemonset"
    sim.advance(5)
    assert get(sim, DAEMONSETS, ns, name)["status"]["currentNumberScheduled"] == 3
    victim = next(p for p in pods_of(sim, ns, "name", "nvidia-device-plugin-ds") if p["spec"]["nodeName"] == "gpu-node2")

    def failed(obj: dict) -> None:
        obj["status"]["phase"] = "Failed"

    sim.store.mutate(PODS, ns, victim["metadata"]["name"], failed)  # its resync not yet run
    sim.controllers["daemonsets"].sync(ns, name)
    assert get(sim, PODS, ns, victim["metadata"]["name"]) is None or \
        get(sim, PODS, ns, victim["metadata"]["name"])["metadata"].get("deletionTimestamp")
    status = get(sim, DAEMONSETS, ns, name)["status"]
    assert (status["currentNumberScheduled"], status["numberReady"]) == (2, 2), status
    sim.advance(60)
    status = get(sim, DAEMONSETS, ns, name)["status"]
    assert (status["currentNumberScheduled"], status["numberReady"]) == (3, 3), status
