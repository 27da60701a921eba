"""Operator-native runs end to end (issue 60, "Done when"): on the gpu-operator scenario with kubesim's GPU
operator reconcile, a canary through ClusterPolicy/cluster-policy leaves every node but the canary node on the
old version (an unrelated ClusterPolicy edit meanwhile reverts nothing); promotion puts every node on the new
version with the ClusterPolicy saying so and its update strategy as it was; a rollback restores the
ClusterPolicy's fields exactly and the operator re-renders the old version on every node."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kubesim import KubeSim
from runbooks.engine.approving import Actor
from runbooks.engine.runs import RunState
from runbooks.policy import Policy
from tests.engine_support import kubesim_engine
from tests.support import Kubectl

NS, DS = "gpu-operator", "nvidia-device-plugin-daemonset"
TARGET = f"{NS}/{DS}"
RUNNING, CANARY = "nvcr.io/nvidia/k8s-device-plugin:v0.20.0", "nvcr.io/nvidia/k8s-device-plugin:v0.19.3"
ALICE, BOB = Actor("U0ALICE"), Actor("U0BOB")
POLICY = Policy.model_validate({
    "approvers": {"users": ["U0BOB"]}, "reports": {"after": ["24h"]},
    "steps": {"observe_window": "1s", "poll_interval": "0.1s", "ready_timeout": "120s"},
    "targets": [{"namespace": NS, "name": DS, "owner": "clusterpolicy/cluster-policy"}]})


@pytest.fixture
def sim() -> Iterator[KubeSim]:
    with KubeSim(scenario="gpu-operator", k8s_version="1.31", speed=4) as served:
        yield served


def clusterpolicy(kubectl: Kubectl) -> dict[str, Any]:
    found: dict[str, Any] = kubectl.json("get", "clusterpolicies.nvidia.com", "cluster-policy")
    return found


def plugin_images(kubectl: Kubectl) -> dict[str, str]:
    """``{node: the plugin container's image}`` of the plugin's live pods."""
    pods = kubectl.json("get", "pods", "-n", NS, "-l", f"app={DS}")["items"]
    return {p["spec"]["nodeName"]: next(c["image"] for c in p["spec"]["containers"] if c["name"] == "nvidia-device-plugin")
            for p in pods if not p["metadata"].get("deletionTimestamp")}


def test_canary_promotion_through_the_clusterpolicy(sim: KubeSim, redis_url: str) -> None:
    from handlers.run_views import gate_message

    kubectl = Kubectl(sim.kubeconfig)
    before = clusterpolicy(kubectl)["spec"]
    engine = kubesim_engine(sim, redis_url, POLICY)
    run = engine.request_canary(actor=ALICE, target=TARGET, image=CANARY, node="gpu-node1").run
    assert run.target.owner == "clusterpolicy/cluster-policy"
    assert run.container == "nvidia-device-plugin"  # picked without container=, beside config-manager
    assert "template_diff" not in run.progress  # the operator renders the template: the ClusterPolicy's diff is shown
    assert run.gate is not None
    asked = gate_message(run, run.gate).text
    assert "- spec.devicePlugin.version: v0.20.0\n+ spec.devicePlugin.version: v0.19.3" in asked
    assert "- spec.daemonsets.updateStrategy: RollingUpdate\n+ spec.daemonsets.updateStrategy: OnDelete" in asked
    engine.approve(run.id, actor=BOB)
    run = engine.advance(run.id)
    assert run.state is RunState.AWAITING_PROMOTION, (run.state, run.reason)
    spec = clusterpolicy(kubectl)["spec"]
    assert (spec["devicePlugin"]["version"], spec["daemonsets"]["updateStrategy"]) == ("v0.19.3", "OnDelete")
    ds = kubectl.json("get", "daemonset", DS, "-n", NS)
    assert {c["name"]: c["image"] for c in ds["spec"]["template"]["spec"]["containers"]} == {
        "nvidia-device-plugin": CANARY, "config-manager": CANARY}  # the operator renders both from devicePlugin
    images = plugin_images(kubectl)
    assert images["gpu-node1"] == CANARY and {n: i for n, i in images.items() if n != "gpu-node1"} == {
        "gpu-node2": RUNNING, "gpu-node3": RUNNING}
    # someone edits another field of the ClusterPolicy during the canary: nothing is put back, no pod replaced
    kubectl("patch", "clusterpolicies.nvidia.com", "cluster-policy", "--type", "merge",
            "-p", json.dumps({"spec": {"devicePlugin": {"imagePullPolicy": "Always"}}}))
    sim.operator_reconciles()
    assert plugin_images(kubectl) == images
    assert clusterpolicy(kubectl)["spec"]["devicePlugin"]["version"] == "v0.19.3"
    mutations = [e for e in engine.audit(run.id) if e.get("kind") == "mutation"]
    assert [e["name"] for e in mutations] == ["canary.clusterpolicy", "canary.delete-pod"], mutations

    engine.approve(run.id, actor=BOB)
    run = engine.advance(run.id)
    assert run.state is RunState.MONITORING, (run.state, run.reason)
    assert set(plugin_images(kubectl).values()) == {CANARY}
    spec = clusterpolicy(kubectl)["spec"]
    assert spec["devicePlugin"]["version"] == "v0.19.3"
    assert spec["daemonsets"] == before["daemonsets"]
    assert kubectl.json("get", "daemonset", DS, "-n", NS)["spec"]["updateStrategy"]["type"] == "RollingUpdate"


def test_rollback_restores_the_clusterpolicy_exactly(sim: KubeSim, redis_url: str) -> None:
    kubectl = Kubectl(sim.kubeconfig)
    before = clusterpolicy(kubectl)["spec"]
    engine = kubesim_engine(sim, redis_url, POLICY)
    run = engine.request_canary(actor=ALICE, target=TARGET, image=CANARY, node="gpu-node1").run
    engine.approve(run.id, actor=BOB)
    run = engine.advance(run.id)
    assert run.state is RunState.AWAITING_PROMOTION, (run.state, run.reason)
    engine.rollback(run.id, actor=ALICE, reason="the test rolls back")
    engine.decide(run.id, actor=BOB, approve=True)
    run = engine.advance(run.id)
    assert run.state is RunState.ROLLED_BACK, (run.state, run.reason)
    assert clusterpolicy(kubectl)["spec"] == before
    assert set(plugin_images(kubectl).values()) == {RUNNING}
    names = [e["name"] for e in engine.audit(run.id) if e.get("kind") == "mutation"]
    assert "rollback.clusterpolicy" in names and not [n for n in names if n.endswith((".image", ".strategy"))]


def test_the_rbac_upgradebot_rbac_prints_runs_it_with_zero_403s(sim: KubeSim, redis_url: str, tmp_path: Path) -> None:
    """As the bot's ServiceAccount, with the install's RBAC and what ``upgradebot rbac`` adds for this policy (the
    Role of gpu-operator, the ClusterRole of get and patch on cluster-policy): canary, promotion, rollback, no 403."""
    from bot.storage.redis_store import RedisRunStore
    from runbooks.daemonset.steps import DaemonSetSteps
    from runbooks.engine.commands import Engine
    from runbooks.rbac_manifests import manifests
    from tests.integration.test_install_rbac import install, rendered_rbac

    added = [o for o in manifests(POLICY) if o["metadata"].get("namespace") == NS
             or o["metadata"]["name"] == "upgradebot-clusterpolicy"]
    bot = install(sim, tmp_path, [*rendered_rbac(), *added])
    engine = Engine(store=RedisRunStore.from_url(redis_url), steps=DaemonSetSteps(), policy=POLICY, connect=bot.connect)
    run = engine.request_canary(actor=ALICE, target=TARGET, image=CANARY, node="gpu-node1").run
    engine.approve(run.id, actor=BOB)
    assert engine.advance(run.id).state is RunState.AWAITING_PROMOTION
    engine.approve(run.id, actor=BOB)
    assert engine.advance(run.id).state is RunState.MONITORING
    engine.rollback(run.id, actor=ALICE, reason="the test rolls back")
    engine.decide(run.id, actor=BOB, approve=True)
    assert engine.advance(run.id).state is RunState.ROLLED_BACK
    assert bot.refusals() == []


def test_without_the_clusterpolicy_role_the_request_is_refused_naming_the_rule(
        sim: KubeSim, redis_url: str, tmp_path: Path) -> None:
    from bot.storage.redis_store import RedisRunStore
    from runbooks.daemonset.steps import DaemonSetSteps
    from runbooks.engine.commands import Engine
    from runbooks.engine.refusals import Refused
    from runbooks.rbac_manifests import manifests
    from tests.integration.test_install_rbac import install, rendered_rbac

    bot = install(sim, tmp_path, [*rendered_rbac(), *(o for o in manifests(POLICY) if o["metadata"].get("namespace") == NS)])
    engine = Engine(store=RedisRunStore.from_url(redis_url), steps=DaemonSetSteps(), policy=POLICY, connect=bot.connect)
    with pytest.raises(Refused, match=r'clusterpolicies.*verbs: \[get\], resourceNames: \[cluster-policy\]'):
        engine.request_canary(actor=ALICE, target=TARGET, image=CANARY, node="gpu-node1")
    assert engine.runs() == []


def test_a_configuration_run_in_waves_through_the_clusterpolicy(sim: KubeSim, redis_url: str) -> None:
    """env= through spec.devicePlugin.env, promoted in waves (the ClusterPolicy keeps OnDelete until the last
    wave, then its update strategy as it was); the rollback puts the ClusterPolicy back exactly (env absent)."""
    from runbooks.templates import Edits

    kubectl = Kubectl(sim.kubeconfig)
    before = clusterpolicy(kubectl)["spec"]
    pol = Policy.model_validate({**POLICY.model_dump(mode="json", exclude_defaults=True), "targets": [
        {"namespace": NS, "name": DS, "owner": "clusterpolicy/cluster-policy",
         "waves": [{"nodes": 1, "approve_next": False}, "100%"]}]})
    engine = kubesim_engine(sim, redis_url, pol)
    run = engine.request_canary(actor=ALICE, target=TARGET, image="", node="gpu-node1",
                                edits=Edits(env={"FAIL_ON_INIT_ERROR": "false"})).run
    assert run.progress["clusterpolicy"]["wanted"] == {
        "spec.devicePlugin.env": [{"name": "FAIL_ON_INIT_ERROR", "value": "false"}],
        "spec.daemonsets.updateStrategy": "OnDelete"}
    engine.approve(run.id, actor=BOB)
    assert engine.advance(run.id).state is RunState.AWAITING_PROMOTION
    engine.approve(run.id, actor=BOB)
    run = engine.advance(run.id)
    assert run.state is RunState.MONITORING, (run.state, run.reason)
    spec = clusterpolicy(kubectl)["spec"]
    assert spec["daemonsets"] == before["daemonsets"]
    assert spec["devicePlugin"]["env"] == [{"name": "FAIL_ON_INIT_ERROR", "value": "false"}]
    pods = kubectl.json("get", "pods", "-n", NS, "-l", f"app={DS}")["items"]
    envs = {p["spec"]["nodeName"]: {e["name"]: e.get("value") for c in p["spec"]["containers"]
                                    if c["name"] == "nvidia-device-plugin" for e in c.get("env") or []}
            for p in pods if not p["metadata"].get("deletionTimestamp")}
    assert all(env.get("FAIL_ON_INIT_ERROR") == "false" for env in envs.values()), envs
    engine.rollback(run.id, actor=ALICE, reason="the test rolls back")
    engine.decide(run.id, actor=BOB, approve=True)
    run = engine.advance(run.id)
    assert run.state is RunState.ROLLED_BACK, (run.state, run.reason)
    assert clusterpolicy(kubectl)["spec"] == before
