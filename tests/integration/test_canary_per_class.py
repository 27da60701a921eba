"""One canary per hardware class (issue 36, item 3) on kubesim ``gpu-mixed``, with the real
engine and steps: classes A100/535/containerd 1.7 (gpu-node1, gpu-node2), H100/550/containerd
2.0 (gpu-node3, gpu-node4) and a GPU node without GFD labels (gpu-node5); a 4-GPU trainer
runs on gpu-node1 and on gpu-node3.

``node=auto`` picks the least busy node of each class; a request may name one node per class
(two of one class are refused); ``canary.per_class: true`` refuses a request that leaves a
class without a canary, naming it; the canary replaces the pod on every canary node and the
promotion's first wave holds a node of every class, even when its size says one."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from handlers.run_views import gate_message
from kubesim import KubeSim
from runbooks.cluster import Cluster
from runbooks.engine.approving import Actor
from runbooks.engine.clocks import ClusterClock
from runbooks.engine.commands import Engine
from runbooks.engine.refusals import Refused
from runbooks.engine.runs import RunState
from runbooks.policy import Policy
from tests.engine_support import kubesim_engine
from tests.support import Kubectl

S = RunState
NS, DS = "kube-system", "nvidia-device-plugin-daemonset"
TARGET = f"{NS}/{DS}"
NEW = "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"
ALICE, BOB, CAROL = Actor("U0ALICE"), Actor("U0BOB"), Actor("U0CAROL")
A100, H100 = "NVIDIA-A100-SXM4-80GB / driver 535 / containerd 1.7", "NVIDIA-H100-80GB-HBM3 / driver 550 / containerd 2.0"
CLASS_OF = {"gpu-node1": A100, "gpu-node2": A100, "gpu-node3": H100, "gpu-node4": H100,
            "gpu-node5": "unknown GPU / driver unknown / containerd 1.7"}


def policy(**extra: Any) -> Policy:
    return Policy.model_validate({
        "approvers": {"users": ["U0BOB", "U0CAROL"]}, "reports": {"after": []},
        "steps": {"observe_window": "1s", "poll_interval": "0.1s", "ready_timeout": "60s"}, **extra})


def engine_on(sim: KubeSim, redis_url: str, pol: Policy) -> Engine:
    return kubesim_engine(sim, redis_url, pol, clock=ClusterClock(Cluster.from_kubeconfig(sim.kubeconfig).server_time))


@pytest.fixture
def mixed() -> Iterator[KubeSim]:
    with KubeSim(scenario="gpu-mixed", k8s_version="1.32", speed=4) as sim:
        yield sim


def test_node_auto_picks_one_node_per_class_and_the_canary_replaces_each(mixed: KubeSim, redis_url: str) -> None:
    """issue 36, item 3: node=auto chooses gpu-node2, gpu-node4 and gpu-node5 (the least busy of
    each class; the trainers make gpu-node1 and gpu-node3 busy), says so in the request, and the
    approved canary runs the new image on exactly those three nodes and verifies them."""
    engine = engine_on(mixed, redis_url, policy())
    run = engine.request_canary(actor=ALICE, target=TARGET, image=NEW, node="auto").run
    assert run.node == "gpu-node2,gpu-node4,gpu-node5" and run.canary_nodes == ["gpu-node2", "gpu-node4", "gpu-node5"]
    [requested] = [e for e in engine.audit(run.id) if e["name"] == "requested"]
    assert "node=auto chose one canary node per hardware class" in requested["detail"]
    assert all(f"{n} for {CLASS_OF[n]}" in requested["detail"] for n in run.canary_nodes), requested["detail"]
    assert run.gate is not None and "gpu-node2, gpu-node4, gpu-node5" in gate_message(run, run.gate).text
    engine.approve(run.id, actor=BOB)
    run = engine.advance(run.id)
    assert run.state is S.AWAITING_PROMOTION, run.reason
    pods = Kubectl(mixed.kubeconfig).json("get", "pods", "-n", NS, "-l", "name=nvidia-device-plugin-ds")["items"]
    images = {p["spec"]["nodeName"]: p["spec"]["containers"][0]["image"] for p in pods
              if not p["metadata"].get("deletionTimestamp")}
    assert {n for n, i in images.items() if i == NEW} == {"gpu-node2", "gpu-node4", "gpu-node5"}, images
    engine.reject(run.id, actor=CAROL)


def test_named_nodes_one_per_class_and_two_of_one_class_refused(mixed: KubeSim, redis_url: str) -> None:
    """issue 36, item 3: node=gpu-node1,gpu-node3 is one node per class and is requested;
    node=gpu-node1,gpu-node2 names two A100 nodes and is refused before any approver is asked."""
    engine = engine_on(mixed, redis_url, policy())
    run = engine.request_canary(actor=ALICE, target=TARGET, image=NEW, node="gpu-node1,gpu-node3").run
    assert run.canary_nodes == ["gpu-node1", "gpu-node3"] and run.gate is not None
    engine.reject(run.id, actor=BOB)
    with pytest.raises(Refused, match=f"gpu-node1 and gpu-node2 are both of class {A100}: name one canary node per"):
        engine.request_canary(actor=ALICE, target=TARGET, image=NEW, node="gpu-node1,gpu-node2")


def test_per_class_policy_refuses_a_class_without_a_canary(mixed: KubeSim, redis_url: str) -> None:
    """issue 36, item 3: with canary.per_class: true a canary on gpu-node3 alone is refused, naming
    the A100 class and the unlabelled one with their nodes; node=auto covers every class."""
    engine = engine_on(mixed, redis_url, policy(canary={"per_class": True}))
    with pytest.raises(Refused) as refused:
        engine.request_canary(actor=ALICE, target=TARGET, image=NEW, node="gpu-node3")
    said = str(refused.value)
    assert "canary.per_class: every hardware class needs its canary node before promotion" in said
    assert f"{A100} (gpu-node1, gpu-node2)" in said and f"{CLASS_OF['gpu-node5']} (gpu-node5)" in said, said
    assert H100 not in said
    run = engine.request_canary(actor=ALICE, target=TARGET, image=NEW, node="auto").run
    assert len(run.canary_nodes) == 3
    engine.reject(run.id, actor=BOB)


def test_the_first_wave_holds_every_class(mixed: KubeSim, redis_url: str) -> None:
    """issue 36, item 3: waves [1, 100%] after a canary on gpu-node3: the first wave grows to one
    node of each class among the rest (A100, H100, unlabelled), the second takes the others."""
    engine = engine_on(mixed, redis_url, policy(targets=[{"namespace": NS, "name": DS, "waves": [1, "100%"]}]))
    run = engine.request_canary(actor=ALICE, target=TARGET, image=NEW, node="gpu-node3").run
    engine.approve(run.id, actor=BOB)
    run = engine.advance(run.id)
    assert run.state is S.AWAITING_PROMOTION, run.reason
    first, second = (w["nodes"] for w in run.progress["waves"])
    assert len(first) == 3 and {CLASS_OF[n] for n in first} == set(CLASS_OF.values()), first
    assert sorted(first + second) == ["gpu-node1", "gpu-node2", "gpu-node4", "gpu-node5"]
    engine.reject(run.id, actor=CAROL)
