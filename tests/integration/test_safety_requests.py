"""A run changes only what it must: what is knowable before approval is refused at request
time, and a run that changed nothing rolls nothing back.

Each test plants the situation in kubesim, then checks kubesim's own log of mutating
requests: a refused request sends none, and a run that changed nothing never patches
the DaemonSet (in particular, it never falls back to "the previous ControllerRevision").
"""

from __future__ import annotations

import pytest

from kubesim import KubeSim
from runbooks.engine.approving import Actor
from runbooks.engine.commands import Engine
from runbooks.engine.refusals import Refused
from runbooks.engine.runs import RunState
from runbooks.policy import Policy
from tests.engine_support import kubesim_engine
from tests.support import Kubectl

TARGET = "kube-system/nvidia-device-plugin-daemonset"
DS = "ds/nvidia-device-plugin-daemonset"
DRA_TARGET = "dra-example-driver/dra-example-driver-kubeletplugin"
OLD = "nvcr.io/nvidia/k8s-device-plugin:v0.14.2"
NEW = "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"
POLICY = Policy.model_validate({
    "approvers": {"users": ["U0BOB"]},
    "reports": {"after": []},
    "steps": {"observe_window": "1s", "poll_interval": "0.1s", "ready_timeout": "60s"},
})


def engine_on(sim: KubeSim, redis_url: str) -> Engine:
    return kubesim_engine(sim, redis_url, POLICY)


def template_and_strategy(sim: KubeSim) -> tuple[object, object]:
    spec = Kubectl(sim.kubeconfig).json("-n", "kube-system", "get", DS)["spec"]
    return spec["template"], spec["updateStrategy"]


def refused_with_nothing_sent(sim: KubeSim, engine: Engine, match: str, **request: str) -> None:
    before = len(sim.mutations())
    with pytest.raises(Refused, match=match):
        engine.request_canary(actor=Actor("U0ALICE"), **{"target": TARGET, "image": NEW, "node": "gpu-node1", **request})
    assert engine.runs() == [], "nothing is stored"
    assert sim.mutations()[before:] == [], "no request changed the cluster"


def test_the_image_the_daemonset_already_runs_is_refused_before_any_approver_is_asked(
    sim: KubeSim, redis_url: str,
) -> None:
    """A canary of the current image: refused at request time, no run, nothing sent to the cluster."""
    engine = engine_on(sim, redis_url)
    refused_with_nothing_sent(sim, engine, "already runs nvcr.io/nvidia/k8s-device-plugin:v0.14.2", image=OLD)


def test_a_node_that_cannot_take_the_canary_is_refused_at_request_time(sim: KubeSim, redis_url: str) -> None:
    """A GPU-less, a NotReady and a cordoned node are each refused with the reason; nothing is stored."""
    engine = engine_on(sim, redis_url)
    refused_with_nothing_sent(sim, engine, "cpu-node1 has no GPU hardware", node="cpu-node1")
    sim.fault(kind="node-not-ready", node="gpu-node2")
    sim.advance("50s")  # the node lifecycle controller's grace on the stopped heartbeat
    refused_with_nothing_sent(sim, engine, "gpu-node2 is not Ready", node="gpu-node2")
    Kubectl(sim.kubeconfig).run("cordon", "gpu-node3")
    refused_with_nothing_sent(sim, engine, "gpu-node3 is cordoned", node="gpu-node3")


def test_a_fail_finding_of_the_inventory_on_the_target_is_refused(sim: KubeSim, redis_url: str) -> None:
    """The DRA gate off while DRA objects exist (a FAIL finding): a DRA driver's canary is refused."""
    engine = engine_on(sim, redis_url)
    sim.fault(kind="feature-gate", name="DynamicResourceAllocation", enabled=False)
    refused_with_nothing_sent(sim, engine, "DynamicResourceAllocation feature gate is disabled", target=DRA_TARGET,
                              image="registry.k8s.io/dra-example-driver/dra-example-driver:v0.2.0")


def test_a_run_that_changed_nothing_rolls_nothing_back(sim: KubeSim, redis_url: str) -> None:
    """Someone else rolls the requested image out between request and approval: the canary's pre-checks
    fail, and the rollback leaves the DaemonSet exactly as it found it. It never restores "the
    previous ControllerRevision" (the fleet would go back to an image nobody asked for)."""
    engine = engine_on(sim, redis_url)
    run = engine.request_canary(actor=Actor("U0ALICE"), target=TARGET, image=NEW, node="gpu-node1").run
    kubectl = Kubectl(sim.kubeconfig)
    kubectl.run("-n", "kube-system", "set", "image", DS, f"nvidia-device-plugin-ctr={NEW}")
    before = template_and_strategy(sim)
    mutations = len(sim.mutations())
    engine.approve(run.id, actor=Actor("U0BOB"))
    run = engine.advance(run.id)
    assert run.state is RunState.ROLLED_BACK, run.reason
    assert "changed nothing" in run.reason or any(
        e["name"] == "nothing-to-roll-back" for e in engine.audit(run.id)), run.reason
    assert template_and_strategy(sim) == before
    sent = [m for m in sim.mutations()[mutations:] if "daemonsets" in m["path"]]
    assert sent == [], f"the run wrote to the DaemonSet although it changed nothing: {sent}"


def test_a_check_that_could_not_be_made_never_lets_the_run_ask_for_promotion(sim: KubeSim, redis_url: str) -> None:
    """Events unreadable (403) during the canary's verify: the run does not reach its promotion
    request; it names the check it could not make and rolls the canary back."""
    engine = engine_on(sim, redis_url)
    before = template_and_strategy(sim)
    run = engine.request_canary(actor=Actor("U0ALICE"), target=TARGET, image=NEW, node="gpu-node1").run
    sim.fault(kind="forbid", path="/api/v1/events", verb="list")
    engine.approve(run.id, actor=Actor("U0BOB"))
    run = engine.advance(run.id)
    assert run.state is RunState.ROLLED_BACK, run.reason
    assert "events" in run.reason and "could not be checked" in run.reason
    assert template_and_strategy(sim) == before


GENERIC = "registry.example.com/acme/gpu-device-plugin:v2.0.0"


def test_a_plugin_that_logs_the_generic_registration_line_is_verified(sim: KubeSim, redis_url: str) -> None:
    """Another vendor's plugin logs "Registered device plugin with Kubelet": verify counts it as
    registered (no false failure, no automatic rollback of a healthy canary)."""
    engine = engine_on(sim, redis_url)
    run = engine.request_canary(actor=Actor("U0ALICE"), target=TARGET, image=GENERIC, node="gpu-node1").run
    engine.approve(run.id, actor=Actor("U0BOB"))
    run = engine.advance(run.id)
    assert run.state is RunState.AWAITING_PROMOTION, run.reason


def test_the_policy_names_the_registration_line_of_a_target(sim: KubeSim, redis_url: str) -> None:
    """``targets: [{namespace, name, registration: <regex>}]``: verify looks for that line and no other."""
    # the old plugin's log has no such line either, so the baseline sees every node unregistered and
    # waits settle_window for them to settle: a short one keeps this test short, and changes nothing it checks
    policy = POLICY.model_copy(update={
        "targets": Policy.model_validate({"targets": [
            {"namespace": "kube-system", "name": "nvidia-device-plugin-daemonset", "registration": "plugin is up and ready"},
        ]}).targets,
        "steps": POLICY.steps.model_copy(update={"settle_window": "1s"})})
    engine = kubesim_engine(sim, redis_url, policy)
    run = engine.request_canary(actor=Actor("U0ALICE"), target=TARGET, image=GENERIC, node="gpu-node1").run
    engine.approve(run.id, actor=Actor("U0BOB"))
    run = engine.advance(run.id)
    assert run.state is RunState.ROLLED_BACK and "plugin-registered" in run.reason, run.reason
    assert "plugin is up and ready" in run.reason


def test_a_node_briefly_degraded_while_the_baseline_is_taken_is_not_blamed_on_the_upgrade(
    sim: KubeSim, redis_url: str,
) -> None:
    """gpu-node2's kubelet restarts as the canary starts (its GPUs drop out for a moment): the
    baseline waits for it to settle, and a node that comes back is no failure."""
    engine = engine_on(sim, redis_url)
    run = engine.request_canary(actor=Actor("U0ALICE"), target=TARGET, image=NEW, node="gpu-node1").run
    sim.fault(kind="kubelet-restart", node="gpu-node2")
    engine.approve(run.id, actor=Actor("U0BOB"))
    run = engine.advance(run.id)
    assert run.state is RunState.AWAITING_PROMOTION, run.reason
