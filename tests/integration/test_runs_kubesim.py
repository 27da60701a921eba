"""Whole runs on kubesim with the real cluster steps, kubectl as the referee."""

from __future__ import annotations

import datetime as dt

import pytest

from kubesim import KubeSim
from runbooks.engine.approving import Actor
from runbooks.engine.commands import Engine
from runbooks.engine.runs import RunState
from runbooks.policy import Policy
from tests.engine_support import kubesim_engine
from tests.support import Kubectl, pinned

S = RunState
TARGET = "kube-system/nvidia-device-plugin-daemonset"
OLD = "nvcr.io/nvidia/k8s-device-plugin:v0.14.2"
NEW = "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"
POLICY = Policy.model_validate({
    "approvers": {"users": ["U0BOB", "U0CAROL"]},
    "reports": {"after": []},
    "steps": {"observe_window": "1s", "poll_interval": "0.1s", "ready_timeout": "60s"},
})



def engine_on(sim: KubeSim, redis_url: str) -> Engine:
    return kubesim_engine(sim, redis_url, POLICY)


def plugin_images(sim: KubeSim) -> dict[str, str]:
    """node -> image of its plugin pod, as kubectl sees them."""
    pods = Kubectl(sim.kubeconfig).json("get", "pods", "-n", "kube-system")["items"]
    return {p["spec"]["nodeName"]: p["spec"]["containers"][0]["image"] for p in pods
            if p["metadata"]["name"].startswith("nvidia-device-plugin-daemonset-")}


def gpu_capacity(sim: KubeSim) -> dict[str, tuple[str, str]]:
    nodes = Kubectl(sim.kubeconfig).json("get", "nodes")["items"]
    return {n["metadata"]["name"]: (n["status"]["capacity"].get("nvidia.com/gpu", "0"),
                                    n["status"]["allocatable"].get("nvidia.com/gpu", "0")) for n in nodes}


def test_full_run_canary_then_promotion_with_its_audit_trail(sim: KubeSim, redis_url: str) -> None:
    """canary -> approve -> canary on one node only -> promotion approved -> every node -> done; audited."""
    engine = engine_on(sim, redis_url)
    run = engine.request_canary(actor=Actor("U0ALICE"), target=TARGET, image=NEW, node="gpu-node1").run
    assert (run.target.cluster, run.container) == ("kubesim", "nvidia-device-plugin-ctr")
    engine.approve(run.id, actor=Actor("U0BOB"))
    run = engine.advance(run.id)
    assert run.state is S.AWAITING_PROMOTION, run.reason
    assert plugin_images(sim) == {"gpu-node1": NEW, "gpu-node2": OLD, "gpu-node3": OLD}
    engine.approve(run.id, actor=Actor("U0CAROL"))
    run = engine.advance(run.id)
    assert run.state is S.DONE, run.reason
    assert set(plugin_images(sim).values()) == {pinned(NEW)}  # the digest the canary verified, not the tag
    assert engine.store.lock_holder(run.target.key) is None

    entries = engine.audit(run.id)
    for entry in entries:
        assert dt.datetime.fromisoformat(entry["at"]).tzinfo is not None and entry["actor"], entry
    transitions = [(e["name"], e["actor"]) for e in entries if e["kind"] == "transition"]
    assert transitions == [
        ("requested", "U0ALICE"), ("requested -> awaiting_approval", "upgradebot"),
        ("awaiting_approval -> canary_rolling", "U0BOB"), ("canary_rolling -> canary_verifying", "upgradebot"),
        ("canary_verifying -> awaiting_promotion", "upgradebot"), ("awaiting_promotion -> promoting", "U0CAROL"),
        ("promoting -> verifying", "upgradebot"), ("verifying -> monitoring", "upgradebot"),
        ("monitoring -> done", "upgradebot"),
    ]
    names = [e["name"] for e in entries]
    for step in ("canary", "verify_canary", "promote", "verify_all"):
        assert names.count(step) == 1
    assert {"canary.strategy", "canary.image", "canary.delete-pod", "promote.strategy"} <= set(names)
    assert [(e["name"], e["actor"]) for e in entries if e["kind"] == "decision"] == [
        ("canary approved", "U0BOB"), ("promotion approved", "U0CAROL")]
    stamps = [e["at"] for e in entries]
    assert stamps == sorted(stamps)


def test_crashing_image_is_rolled_back_automatically(sim: KubeSim, redis_url: str) -> None:
    """A -crash image fails the canary; the run rolls back by itself, every node on the old image and capacity."""
    engine = engine_on(sim, redis_url)
    before = gpu_capacity(sim)
    run = engine.request_canary(actor=Actor("U0ALICE"), target=TARGET, image=NEW + "-crash", node="gpu-node2").run
    engine.approve(run.id, actor=Actor("U0BOB"))
    run = engine.advance(run.id)
    assert run.state is S.ROLLED_BACK
    assert "crash" in run.reason.lower() and "rolling back automatically" in run.reason
    assert set(plugin_images(sim).values()) == {OLD}  # a canary's rollback: the exact saved template
    assert gpu_capacity(sim) == before
    names = [e["name"] for e in engine.audit(run.id)]
    assert "canary_rolling -> rolling_back" in names and "rolling_back -> rolled_back" in names
    assert engine.store.lock_holder(run.target.key) is None


def test_a_request_for_a_missing_daemonset_or_node_is_refused(sim: KubeSim, redis_url: str) -> None:
    """The request reads the cluster first: an unknown DaemonSet or node is refused and nothing is stored."""
    from runbooks.engine.requesting import InvalidRequest

    engine = engine_on(sim, redis_url)
    with pytest.raises(InvalidRequest, match="there is no DaemonSet kube-system/nope in cluster kubesim"):
        engine.request_canary(actor=Actor("U0ALICE"), target="kube-system/nope", image=NEW, node="gpu-node1")
    with pytest.raises(InvalidRequest, match="there is no node gpu-node9"):
        engine.request_canary(actor=Actor("U0ALICE"), target=TARGET, image=NEW, node="gpu-node9")
    assert engine.runs() == []


def test_a_dra_driver_that_cannot_allocate_is_rolled_back_by_the_run(sim: KubeSim, redis_url: str) -> None:
    """A DRA driver canary whose image runs and registers but cannot allocate: the run's verify fails
    on the DRA smoke test, and the run rolls the driver back by itself."""
    Kubectl(sim.kubeconfig)("apply", "-f", "-", input="apiVersion: v1\nkind: Namespace\nmetadata: {name: upgradebot-smoke}\n")
    policy = Policy.model_validate({**POLICY.model_dump(exclude_unset=True), "steps": {
        **POLICY.steps.model_dump(exclude_unset=True),
        "smoke_test": {"image": "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0", "timeout": 3}}})
    engine = kubesim_engine(sim, redis_url, policy)
    target = "dra-example-driver/dra-example-driver-kubeletplugin"
    old = "registry.k8s.io/dra-example-driver/dra-example-driver:v0.1.0"
    run = engine.request_canary(actor=Actor("U0ALICE"), target=target, image=old.replace("v0.1.0", "v0.2.0-noalloc"),
                                node="gpu-node1").run
    engine.approve(run.id, actor=Actor("U0BOB"))
    run = engine.advance(run.id)
    assert run.state is S.ROLLED_BACK, run.reason
    smoke = [e for e in engine.audit(run.id) if e["name"] == "verify_canary.smoke-test"]
    assert smoke and "cannot allocate all claims" in smoke[0]["detail"]
    pods = Kubectl(sim.kubeconfig).json("get", "pods", "-n", "dra-example-driver")["items"]
    assert {p["spec"]["containers"][0]["image"] for p in pods if not p["metadata"].get("deletionTimestamp")} == {old}
