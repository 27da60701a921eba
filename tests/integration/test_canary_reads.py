"""What a canary reads of the cluster (issue 39: one read per request), counted from kubesim's
read log (``/sim/v1/requests?reads=true``: every get, list and watch it answered).

Found before: the inventory of a canary's pre-checks listed every unfinished pod of the cluster
for the IN USE column (about 50,000 pods at 5,000 nodes) at request time and again after
approval, and the canary's step, its verify and the promotion listed the plugin's pods again at
every look (8 lists after approval) instead of reading the watch cache they already held.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs

import pytest

from kubesim import KubeSim
from runbooks.cluster import Cluster
from runbooks.cluster.informing import Watches
from runbooks.cluster.resources import PODS as PODS_RESOURCE
from runbooks.daemonset.preflight import REGISTRATION_SAMPLE
from runbooks.engine.approving import Actor
from runbooks.engine.clocks import SystemClock
from runbooks.engine.runs import RunState
from runbooks.inventory import take_inventory
from runbooks.policy import Policy
from tests.engine_support import kubesim_engine

NS = "kube-system"
TARGET = f"{NS}/nvidia-device-plugin-daemonset"
NEW = "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"
PLUGIN_PODS = f"/api/v1/namespaces/{NS}/pods"
POLICY = Policy.model_validate({"approvers": {"users": ["U0BOB"]}, "reports": {"after": []},
                                "steps": {"observe_window": "2s", "poll_interval": "0.2s", "ready_timeout": "120s"}})


@pytest.fixture
def sim() -> Iterator[KubeSim]:
    with KubeSim(scenario="gpu-small", k8s_version="1.31", speed=4) as served:
        yield served


def pod_lists(reads: list[dict[str, Any]]) -> list[tuple[str, dict[str, list[str]]]]:
    """The pod lists among ``reads``: (path, query)."""
    return [(r["path"], parse_qs(r["query"])) for r in reads
            if r["verb"] == "list" and r["path"].endswith("/pods")]


def whole_cluster(lists: list[tuple[str, dict[str, list[str]]]]) -> list[str]:
    """The lists of every pod of the cluster (all namespaces, no node, not only the Pending ones)."""
    return [f"{path}?{query}" for path, query in lists if path == "/api/v1/pods"
            and not any(s.startswith("spec.nodeName=") or s == "status.phase=Pending"
                        for s in ",".join(query.get("fieldSelector", [])).split(","))]


def dra_plugin_reads(sim: KubeSim) -> list[str]:
    """Reads of the DRA driver's kubelet plugin pods (their list, their logs)."""
    return [r["path"] for r in sim.reads() if r["path"].startswith("/api/v1/namespaces/dra-example-driver/pods")]


def log_reads(sim: KubeSim) -> list[str]:
    """Reads of pod logs."""
    return [r["path"] for r in sim.reads() if r["path"].endswith("/log")]


def fresh_reads(sim: KubeSim) -> None:
    sim.call(lambda s: s.reads.clear())


def test_a_canary_lists_no_pod_of_the_whole_cluster_and_the_plugin_pods_once_per_phase(
        sim: KubeSim, redis_url: str) -> None:
    """issue 39: the request's pre-checks list the plugin's pods once (the inventory takes the
    snapshot's), no pod of the whole cluster (no check reads IN USE) and, for a device plugin, nothing
    of the DRA kubelet plugins (no check of it judges a device class), and no plugin log but the one
    that names a plugin's driver (registration is recorded in the baseline, cut after approval);
    the request reads them through the process's watch cache, so that after approval (while the
    cache is kept) the pre-checks, the canary and its verify list them no more, nor do the
    promotion and its verify; no step lists the whole cluster's pods."""
    watches = Watches(lambda context: Cluster.from_kubeconfig(sim.kubeconfig, context))
    engine = kubesim_engine(sim, redis_url, POLICY, clock=SystemClock(), watches=watches)
    try:
        fresh_reads(sim)
        run = engine.request_canary(actor=Actor("U0ANA"), target=TARGET, image=NEW, node="gpu-node1").run
        assert run.state is RunState.AWAITING_APPROVAL, run.reason
        requested = pod_lists(sim.reads())
        assert whole_cluster(requested) == []
        plugin = [q for p, q in requested if p == PLUGIN_PODS and "labelSelector" in q]
        assert len(plugin) == 1, f"the request listed the plugin's pods {len(plugin)} times"
        assert dra_plugin_reads(sim) == [], "a device plugin's request read the DRA kubelet plugin's pods or logs"
        assert len(log_reads(sim)) <= 1, "the request read plugin logs (registration is for the baseline, after approval)"

        fresh_reads(sim)
        engine.approve(run.id, actor=Actor("U0BOB"))
        run = engine.advance(run.id)
        assert run.state is RunState.AWAITING_PROMOTION, run.reason
        approved = pod_lists(sim.reads())
        assert whole_cluster(approved) == []
        plugin = [q for p, q in approved if p == PLUGIN_PODS and "labelSelector" in q]
        assert plugin == [], f"the plugin's pods listed {len(plugin)} times after approval, not from the request's cache"
        assert dra_plugin_reads(sim) == [], "a device plugin's pre-checks read the DRA kubelet plugin's pods or logs"
        assert log_reads(sim), "the baseline after approval read no registration from the plugin's logs"

        fresh_reads(sim)
        engine.approve(run.id, actor=Actor("U0BOB"))
        run = engine.advance(run.id)
        assert run.state is RunState.DONE, run.reason
        promoted = pod_lists(sim.reads())
        assert whole_cluster(promoted) == []
        plugin = [q for p, q in promoted if p == PLUGIN_PODS and "labelSelector" in q]
        assert plugin == [], "the promotion and its verify listed the plugin's pods the kept cache holds"
    finally:
        watches.close()


def test_in_use_of_a_few_nodes_is_read_by_node_and_counts_what_the_whole_cluster_list_counts(sim: KubeSim) -> None:
    """issue 39: an inventory asked for the devices in use on some nodes reads each node's pods
    (``spec.nodeName``), finds on them what the cluster-wide list finds, and leaves the other
    nodes' IN USE empty; the inventory of every node lists the cluster's pods once, and takes the
    plugins' pods from that list (the same pods as a list by the plugin's selector) instead of
    listing them again."""
    with Cluster.from_kubeconfig(str(sim.kubeconfig)) as cluster:
        fresh_reads(sim)
        everything = take_inventory(cluster)
        lists = pod_lists(sim.reads())
        assert len(whole_cluster(lists)) == 1
        assert [p for p, _ in lists if p != "/api/v1/pods"] == [], "the plugins' pods listed again beside the cluster's"
        fresh_reads(sim)
        few = take_inventory(cluster, targets=[TARGET], in_use_of=["gpu-node1", "gpu-node3"])
        lists = pod_lists(sim.reads())
    assert whole_cluster(lists) == []
    by_node = sorted(s.split(",")[0] for p, q in lists if p == "/api/v1/pods" for s in q.get("fieldSelector", [])
                     if s.startswith("spec.nodeName="))
    assert by_node == ["spec.nodeName=gpu-node1", "spec.nodeName=gpu-node3"]
    used = {n.name: (n.in_use, n.devices_in_use) for n in everything.nodes}
    assert used["gpu-node1"] == ({"nvidia.com/gpu": 4}, 0)
    assert {n.name: (n.in_use, n.devices_in_use) for n in few.nodes if n.name in ("gpu-node1", "gpu-node3")} == {
        "gpu-node1": used["gpu-node1"], "gpu-node3": used["gpu-node3"]}
    assert next(n for n in few.nodes if n.name == "gpu-node2").in_use == {}
    listed = few.daemonset(TARGET)
    assert listed is not None and listed.pods
    assert listed.pods == next(d for d in everything.daemonsets if d.ref == TARGET).pods


def pods_by_name(sim: KubeSim) -> dict[str, str]:
    """The plugin's pods: name -> node (read before the counted phase)."""
    with Cluster.from_kubeconfig(str(sim.kubeconfig)) as cluster:
        return {p["metadata"]["name"]: p["spec"].get("nodeName", "")
                for p in cluster.list_objects(PODS_RESOURCE, namespace=NS)}


def test_after_approval_the_canary_reuses_the_requests_inventory(redis_url: str) -> None:
    """issue 63, item 3: on 40 nodes (more than verify reads one by one), the pre-checks after
    approval take the request's inventory from the run and read again only the DaemonSet, the canary
    node and the plugin's pods (from the kept cache): the node list is read once after approval (by the
    canary's verify, which compares the other nodes with the baseline), never by the pre-checks, and
    the registration logs read are those of the canary node's pod and a sample per hardware class
    (one class here), not every plugin pod up to the budget; the baseline still has every node, with
    its GPUs as the request read them; a device plugin's pre-checks list no ResourceSlice (no check of
    theirs judges one)."""
    with KubeSim(scenario="gpu-large", nodes=40, k8s_version="1.31", speed=5) as sim:
        node_of = pods_by_name(sim)
        watches = Watches(lambda context: Cluster.from_kubeconfig(sim.kubeconfig, context))
        engine = kubesim_engine(sim, redis_url, POLICY, clock=SystemClock(), watches=watches)
        try:
            fresh_reads(sim)
            run = engine.request_canary(actor=Actor("U0ANA"), target=TARGET, image=NEW, node="gpu-node1").run
            assert run.state is RunState.AWAITING_APPROVAL, run.reason
            assert node_lists(sim.reads()) == 1, "the request lists the nodes once"
            fresh_reads(sim)
            engine.approve(run.id, actor=Actor("U0BOB"))
            run = engine.advance(run.id)
            assert run.state is RunState.AWAITING_PROMOTION, run.reason
            reads = sim.reads()
            node_of.update(pods_by_name(sim))  # the canary's new pod too
        finally:
            watches.close()
    assert node_lists(reads) <= 1, f"the nodes listed {node_lists(reads)} times after approval"
    assert not [r for r in reads if r["path"].endswith("/resourceslices")], "a device plugin's canary listed the slices"
    logged = {r["path"].split("/")[-2] for r in reads if r["path"].endswith("/log")}
    assert logged, "no registration read after approval"
    others = {pod for pod in logged if node_of.get(pod) != "gpu-node1"}
    assert len(others) <= REGISTRATION_SAMPLE, f"logs read after approval of {sorted(others)} beyond the canary node"
    baseline = run.progress["baseline"]
    assert len(baseline["nodes"]) == 40
    assert all(n["capacity"] == {"nvidia.com/gpu": 8} for n in baseline["nodes"].values())


def node_lists(reads: list[dict[str, Any]]) -> int:
    return sum(1 for r in reads if r["verb"] == "list" and r["path"] == "/api/v1/nodes")
