"""Drain where needed (policy ``targets[].drain``) on kubesim ``gpu-small``, with the real
steps and the eviction API: a node is cordoned and the pods using its GPUs are evicted
(their PodDisruptionBudgets respected) before its plugin pod is replaced, and uncordoned
once it is verified. The order is read from kubesim's log of the requests it received and
the node state from kubectl, not from the bot's word."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from kubesim import KubeSim
from runbooks.cluster import Cluster
from runbooks.cluster.resources import NODES, PODS
from runbooks.engine.approving import Actor
from runbooks.engine.clocks import ClusterClock
from runbooks.engine.commands import Engine
from runbooks.engine.refusals import Refused
from runbooks.engine.runs import RunState, Target
from runbooks.engine.scoping import OutOfScope, ScopedCluster
from runbooks.policy import Policy
from tests.engine_support import kubesim_engine
from tests.support import TEST_BUILDS, Kubectl, pinned

S = RunState
NS, DS = "kube-system", "nvidia-device-plugin-daemonset"
TARGET = f"{NS}/{DS}"
OLD = "nvcr.io/nvidia/k8s-device-plugin:v0.14.2"
NEW = "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"
ML = "ml-team"
ALICE, BOB, CAROL = Actor("U0ALICE"), Actor("U0BOB"), Actor("U0CAROL")
GPU_NODES = ("gpu-node1", "gpu-node2", "gpu-node3")


def drain_policy(drain: Any, **target: Any) -> Policy:
    return Policy.model_validate({
        "approvers": {"users": ["U0BOB", "U0CAROL"]},
        "reports": {"after": []},
        # on the cluster's clock (20x): a node may take 15 s of wall clock to move
        "steps": {"observe_window": "1s", "poll_interval": "0.1s", "ready_timeout": "300s"},
        "targets": [{"namespace": NS, "name": DS, "drain": drain, **target}],
    })


def trainer(name: str, node: str) -> dict[str, Any]:
    """A one-replica Deployment whose pod asks for 2 GPUs of ``node`` (and only that node)."""
    labels = {"app": name}
    container = {"name": "train", "image": "registry.example.com/ml/trainer:2.1.0",
                 "resources": {"limits": {"nvidia.com/gpu": "2"}}}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": ML},
            "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"nodeSelector": {"kubernetes.io/hostname": node}, "containers": [container]}}}}


def budget(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name, "namespace": ML},
            "spec": {**spec, "selector": {"matchLabels": {"app": name}}}}


def apply(kubectl: Kubectl, *objects: dict[str, Any]) -> None:
    kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)}))


def workers(kubectl: Kubectl) -> dict[str, str]:
    """``app -> node`` of the Running trainer pods (kubectl's view)."""
    pods = kubectl.json("get", "pods", "-n", ML, "-l", "app")["items"]
    return {p["metadata"]["labels"]["app"]: p["spec"].get("nodeName", "") for p in pods
            if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
            and p["metadata"]["labels"]["app"].startswith("trainer-")}


def cordoned(kubectl: Kubectl) -> set[str]:
    return {n["metadata"]["name"] for n in kubectl.json("get", "nodes")["items"] if n["spec"].get("unschedulable")}


def plugin_images(kubectl: Kubectl) -> dict[str, str]:
    pods = kubectl.json("get", "pods", "-n", NS, "-l", "name=nvidia-device-plugin-ds")["items"]
    return {p["spec"]["nodeName"]: p["spec"]["containers"][0]["image"] for p in pods
            if not p["metadata"].get("deletionTimestamp")}


def pods_on(kubectl: Kubectl) -> dict[str, str]:
    """``pod -> node`` of every pod now (the pods a run evicts or replaces are gone after it)."""
    return {p["metadata"]["name"]: p["spec"].get("nodeName", "") for p in kubectl.json("get", "pods", "-A")["items"]}


def timeline(sim: KubeSim, node_of: dict[str, str]) -> list[tuple[str, str]]:
    """What the cluster received, in order, as (what, node): cordon or uncordon, evict, replace
    (``node_of``: where each pod ran before the run)."""
    out: list[tuple[str, str]] = []
    for m in sim.mutations():
        if m["code"] >= 400 or m["dryRun"]:
            continue
        parts = m["path"].split("/")
        if m["verb"] == "patch" and parts[1:4] == ["api", "v1", "nodes"]:
            out.append(("node", parts[4]))
        elif m["path"].endswith("/eviction"):
            out.append(("evict", parts[6]))
        elif m["verb"] == "delete" and parts[4] == NS and parts[6].startswith(f"{DS}-"):
            out.append(("replace", parts[6]))
    return [(what, node_of.get(name, name)) for what, name in out]


@pytest.fixture
def cluster() -> Iterator[tuple[KubeSim, Kubectl]]:
    with KubeSim(pushed=TEST_BUILDS, scenario="gpu-small", k8s_version="1.31", speed=20) as sim:
        kubectl = Kubectl(sim.kubeconfig)
        kubectl("delete", "pod", "-n", ML, "trainer-0", "trainer-1", "--wait=false")  # bare pods: see the last test
        apply(kubectl, *(trainer(f"trainer-{i}", node) for i, node in enumerate(GPU_NODES, start=1)),
              budget("trainer-2", maxUnavailable=1))
        for _ in range(100):
            if len(workers(kubectl)) == 3:
                break
            time.sleep(0.1)
        assert workers(kubectl) == {"trainer-1": "gpu-node1", "trainer-2": "gpu-node2", "trainer-3": "gpu-node3"}
        yield sim, kubectl


def engine_on(sim: KubeSim, redis_url: str, policy: Policy) -> Engine:
    clock = ClusterClock(Cluster.from_kubeconfig(sim.kubeconfig).server_time)
    return kubesim_engine(sim, redis_url, policy, clock=clock)


def test_each_node_is_cordoned_and_drained_before_its_plugin_pod_is_replaced_and_uncordoned_once_verified(
        cluster: tuple[KubeSim, Kubectl], redis_url: str) -> None:
    """Canary on gpu-node3, then waves [1, 100%]: on every node the cluster saw the cordon, the
    eviction of the trainer using its GPUs, the plugin pod's replacement and the uncordon, in
    that order; a wave's node is given back before the next wave's is cordoned; the trainers
    come back on their nodes once uncordoned."""
    sim, kubectl = cluster
    before = pods_on(kubectl)
    engine = engine_on(sim, redis_url, drain_policy({"timeout": "300s"},
                                                    waves=[{"nodes": 1, "approve_next": False}, "100%"]))
    run = engine.request_canary(actor=ALICE, target=TARGET, image=NEW, node="gpu-node3").run
    assert run.target.drain
    engine.approve(run.id, actor=BOB)
    run = engine.advance(run.id)
    assert run.state is S.AWAITING_PROMOTION, run.reason
    assert cordoned(kubectl) == set()  # the canary's node was given back once verified
    engine.approve(run.id, actor=CAROL)
    run = engine.advance(run.id)
    assert run.state is S.DONE, run.reason
    assert set(plugin_images(kubectl).values()) == {pinned(NEW)} and cordoned(kubectl) == set()

    seen = timeline(sim, before)
    order = [run.node, *(n for w in run.progress["waves"] for n in w["nodes"])]
    assert order[0] == "gpu-node3" and sorted(order) == list(GPU_NODES)
    for node in order[1:]:
        mine = [what for what, where in seen if where == node]
        assert mine == ["node", "evict", "replace", "node"], (node, mine)
    # the canary's node is drained a second time before wave 1, to move to the digest it verified
    # (images.pin_digest): cordoned, its trainer evicted again if it came back meanwhile, the canary's
    # own pod (not one of the pods before the run, so named by itself here) replaced, uncordoned
    mine = [(i, what) for i, (what, where) in enumerate(seen) if where == run.node]
    assert [what for _, what in mine[:4]] == ["node", "evict", "replace", "node"], mine
    again = [what for _, what in mine[4:]]
    assert again[0] == again[-1] == "node" and set(again) <= {"node", "evict"} and again.count("node") == 2, mine
    assert any(what == "replace" and where not in GPU_NODES for what, where in seen[mine[4][0]:mine[-1][0]]), seen
    firsts = [seen.index(("node", node)) for node in order]
    lasts = [len(seen) - 1 - seen[::-1].index(("node", node)) for node in order]
    assert all(lasts[i] < firsts[i + 1] for i in range(len(order) - 1)), seen  # one node at a time, in order
    assert {n: r["state"] for n, r in run.progress["drained"].items()} == dict.fromkeys(GPU_NODES, "uncordoned")

    for _ in range(200):  # the evicted trainers come back, each on its own node
        if len(workers(kubectl)) == 3:
            break
        sim.advance("5s")
    assert workers(kubectl) == {"trainer-1": "gpu-node1", "trainer-2": "gpu-node2", "trainer-3": "gpu-node3"}
    names = [e["name"] for e in engine.audit(run.id)]
    assert "canary.drain.cordon" in names and "canary.drain.evict" in names and "verify_canary.uncordon" in names


def test_a_budget_that_allows_no_eviction_stops_the_canary_before_its_plugin_pod_is_touched(
        cluster: tuple[KubeSim, Kubectl], redis_url: str) -> None:
    """trainer-1's budget wants its one pod available: the eviction is refused (429) until
    drain.timeout, the canary fails with the budget's words, the rollback uncordons the node,
    and the plugin pod on it was never deleted; the trainer never stopped."""
    sim, kubectl = cluster
    apply(kubectl, budget("trainer-1", minAvailable=1))
    before = pods_on(kubectl)
    engine = engine_on(sim, redis_url, drain_policy({"timeout": "20s"}))
    run = engine.request_canary(actor=ALICE, target=TARGET, image=NEW, node="gpu-node1").run
    engine.approve(run.id, actor=BOB)
    run = engine.advance(run.id)
    assert run.state is S.ROLLED_BACK, run.reason
    assert "the drain of gpu-node1 did not finish in 20s" in run.reason
    assert "The disruption budget trainer-1 needs 1 healthy pods and has 1 currently" in run.reason
    assert cordoned(kubectl) == set() and workers(kubectl)["trainer-1"] == "gpu-node1"
    assert [w for w in timeline(sim, before) if w[1] == "gpu-node1"] == [("node", "gpu-node1"), ("node", "gpu-node1")]
    assert set(plugin_images(kubectl).values()) == {OLD}
    refused = [m for m in sim.mutations() if m["path"].endswith("/eviction") and m["code"] == 429]
    assert refused, "the eviction API was asked, and refused"


def test_a_node_whose_new_plugin_fails_stays_cordoned_when_the_policy_says_so(
        cluster: tuple[KubeSim, Kubectl], redis_url: str) -> None:
    """A crash-looping canary with drain.keep_failed_cordoned: the rollback puts the old plugin
    back but leaves the node cordoned for a person, and says so."""
    sim, kubectl = cluster
    engine = engine_on(sim, redis_url, drain_policy({"keep_failed_cordoned": True}))
    run = engine.request_canary(actor=ALICE, target=TARGET, image=NEW + "-crash", node="gpu-node2").run
    engine.approve(run.id, actor=BOB)
    run = engine.advance(run.id)
    assert run.state is S.ROLLED_BACK, run.reason
    assert set(plugin_images(kubectl).values()) == {OLD}
    assert cordoned(kubectl) == {"gpu-node2"}
    kept = [e for e in engine.audit(run.id) if e["name"] == "rollback.uncordon"]
    assert kept and "gpu-node2 stays cordoned" in kept[-1]["detail"]
    assert run.progress["drained"]["gpu-node2"]["state"] == "kept"


def test_a_wave_whose_plugin_crashes_on_one_node_is_rolled_back_and_only_that_node_stays_cordoned(
        cluster: tuple[KubeSim, Kubectl], redis_url: str) -> None:
    """Canary on gpu-node3, then one wave of gpu-node1 and gpu-node2 replaced together
    (maxUnavailable 2), with drain.keep_failed_cordoned and an image that crashes only on
    gpu-node2: both are cordoned and drained, the wave fails, the rollback puts the old plugin
    back everywhere and uncordons everything but gpu-node2, whose new plugin crashed."""
    sim, kubectl = cluster
    kubectl("patch", "daemonset", DS, "-n", NS, "--type=merge",
            "-p", '{"spec":{"updateStrategy":{"rollingUpdate":{"maxUnavailable":2}}}}')
    crash = "nvcr.io/nvidia/k8s-device-plugin:v0.17.1-crash-on-wave"
    kubectl("label", "nodes", "gpu-node2", "kubesim.io/crash=wave")
    engine = engine_on(sim, redis_url, drain_policy({"keep_failed_cordoned": True}))
    run = engine.request_canary(actor=ALICE, target=TARGET, image=crash, node="gpu-node3").run
    engine.approve(run.id, actor=BOB)
    run = engine.advance(run.id)
    assert run.state is S.AWAITING_PROMOTION, run.reason
    assert [sorted(w["nodes"]) for w in run.progress["waves"]] == [["gpu-node1", "gpu-node2"]]
    engine.approve(run.id, actor=CAROL)
    run = engine.advance(run.id)
    assert run.state is S.ROLLED_BACK and "wave 1 of 1 failed" in run.reason, run.reason
    assert set(plugin_images(kubectl).values()) == {pinned(OLD)}  # the promotion began: the digest the pods ran
    assert cordoned(kubectl) == {"gpu-node2"}
    states = {n: (r["state"], bool(r.get("failed"))) for n, r in run.progress["drained"].items()}
    assert states == {"gpu-node3": ("uncordoned", False), "gpu-node1": ("uncordoned", False),
                      "gpu-node2": ("kept", True)}


def test_a_pod_without_a_controller_is_never_evicted(redis_url: str) -> None:
    """gpu-small's trainer-0 is a bare pod on gpu-node1: an eviction would delete it for good, so
    a draining canary there is refused before anyone approves, naming it. One that appears on
    the node after the request stops the approved canary before anything is cordoned."""
    with KubeSim(pushed=TEST_BUILDS, scenario="gpu-small", k8s_version="1.31", speed=20) as sim:
        kubectl = Kubectl(sim.kubeconfig)
        engine = engine_on(sim, redis_url, drain_policy(True))
        with pytest.raises(Refused, match="drain-possible: ml-team/trainer-0 on gpu-node1 uses its devices and has "
                                          "no controller"):
            engine.request_canary(actor=ALICE, target=TARGET, image=NEW, node="gpu-node1")
        run = engine.request_canary(actor=ALICE, target=TARGET, image=NEW, node="gpu-node3").run
        before = pods_on(kubectl)
        bare = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "notebook", "namespace": ML},
                "spec": {"nodeName": "gpu-node3", "containers": [
                    {"name": "nb", "image": "registry.example.com/ml/notebook:1",
                     "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
        apply(kubectl, bare)
        engine.approve(run.id, actor=BOB)
        run = engine.advance(run.id)
        assert run.state is S.ROLLED_BACK, run.reason
        assert "ml-team/notebook on gpu-node3 uses the devices and has no controller" in run.reason
        assert cordoned(kubectl) == set() and not [w for w in timeline(sim, before) if w[0] in ("node", "evict")]
        assert {"trainer-0", "notebook"} <= {p["metadata"]["name"] for p in kubectl.json("get", "pods", "-n", ML)["items"]}


def test_the_scope_lets_a_draining_run_cordon_its_nodes_and_evict_from_cordoned_ones_only(
        cluster: tuple[KubeSim, Kubectl]) -> None:
    sim, kubectl = cluster
    plain = Cluster.from_kubeconfig(sim.kubeconfig)
    pod = next(p for p in plain.list_objects(PODS, namespace=ML) if p["spec"].get("nodeName") == "gpu-node1")
    name = pod["metadata"]["name"]
    without = ScopedCluster(plain, Target(cluster="", namespace=NS, name=DS))
    with pytest.raises(OutOfScope):
        without.patch(NODES, "gpu-node1", {"spec": {"unschedulable": True}}, patch_type="merge")
    scoped = ScopedCluster(plain, Target(cluster="", namespace=NS, name=DS, drain=True))
    with pytest.raises(OutOfScope):
        scoped.evict(name, namespace=ML)  # gpu-node1 is not cordoned
    with pytest.raises(OutOfScope):
        scoped.patch(NODES, "gpu-node1", {"metadata": {"labels": {"x": "y"}}}, patch_type="merge")
    with pytest.raises(OutOfScope):
        scoped.patch(NODES, "cpu-node1", {"spec": {"unschedulable": True}}, patch_type="merge")  # no plugin pod there
    scoped.patch(NODES, "gpu-node1", {"spec": {"unschedulable": True}}, patch_type="merge")
    plugin = next(p["metadata"]["name"] for p in plain.list_objects(PODS, namespace=NS)
                  if p["metadata"]["name"].startswith(f"{DS}-") and p["spec"].get("nodeName") == "gpu-node1")
    with pytest.raises(OutOfScope):
        scoped.evict(plugin, namespace=NS)  # the plugin's own pod is replaced, never evicted
    scoped.evict(name, namespace=ML)
    assert cordoned(kubectl) == {"gpu-node1"}
    scoped.patch(NODES, "gpu-node1", {"spec": {"unschedulable": None}}, patch_type="merge")
    assert cordoned(kubectl) == set()
