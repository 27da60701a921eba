"""A target made of several workloads (a DRA driver's kubelet-plugin DaemonSet and its
controller Deployment), upgraded in one run in the policy's order and rolled back together
in the reverse order, on kubesim with its Deployment controller; kubectl referees."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from kubesim import KubeSim
from runbooks.engine.approving import Actor
from runbooks.engine.refusals import Refused
from runbooks.engine.runs import RunState
from runbooks.policy import Policy
from tests.engine_support import kubesim_engine
from tests.support import TEST_BUILDS, Kubectl, pinned

NS = "dra-example-driver"
PLUGIN = "dra-example-driver-kubeletplugin"
CONTROLLER = "dra-example-driver-controller"
OLD = "registry.k8s.io/dra-example-driver/dra-example-driver:v0.1.0"
NEW = "registry.k8s.io/dra-example-driver/dra-example-driver:v0.2.0"
ALICE, BOB = Actor("U0ALICE"), Actor("U0BOB")


def policy(*workloads: str) -> Policy:
    return Policy.model_validate({
        "approvers": {"users": ["U0BOB"]}, "reports": {"after": []},
        "targets": [{"namespace": NS, "name": PLUGIN, "workloads": list(workloads)}],
        "steps": {"observe_window": "1s", "poll_interval": "0.5s", "ready_timeout": "60s", "settle_window": "1s"},
    })


def controller(**spec: Any) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "controller", "image": OLD, "command": ["dra-example-controller"]}
    if spec.pop("gpus", None):
        container["resources"] = {"limits": {"nvidia.com/gpu": "8"}}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": CONTROLLER, "namespace": NS},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": CONTROLLER}}, **spec,
                     "template": {"metadata": {"labels": {"app": CONTROLLER}},
                                  "spec": {"containers": [container, {"name": "sidecar", "image": "busybox:1.36"}]}}}}


@pytest.fixture
def sim() -> Iterator[KubeSim]:
    with KubeSim(pushed=TEST_BUILDS, scenario="gpu-small", k8s_version="1.32", speed=20) as served:
        yield served


def images(kubectl: Kubectl) -> tuple[set[str], set[str]]:
    """The plugin's images (live pods) and the controller's template image."""
    pods = kubectl.json("get", "pods", "-n", NS, "-l", "app.kubernetes.io/component=kubeletplugin")["items"]
    plugin = {p["spec"]["containers"][0]["image"] for p in pods if not p["metadata"].get("deletionTimestamp")}
    deploy = kubectl.json("get", "deployment", CONTROLLER, "-n", NS)
    return plugin, {c["image"] for c in deploy["spec"]["template"]["spec"]["containers"] if c["name"] == "controller"}


def test_controller_first_then_the_plugin_and_back_together(sim: KubeSim, redis_url: str) -> None:
    kubectl = Kubectl(sim.kubeconfig)
    kubectl("apply", "-f", "-", input=json.dumps(controller()))
    kubectl("rollout", "status", f"deployment/{CONTROLLER}", "-n", NS, "--timeout=60s", timeout=90)
    engine = kubesim_engine(sim, redis_url, policy(f"deployment/{CONTROLLER}", f"daemonset/{PLUGIN}"))
    run = engine.request_canary(actor=ALICE, target=f"{NS}/{PLUGIN}", image=NEW, node="gpu-node1").run
    assert [(p.kind, p.name, p.before) for p in run.target.parts] == [("Deployment", CONTROLLER, True)]
    engine.decide(run.id, actor=BOB, approve=True)
    run = engine.advance(run.id)
    assert run.state is RunState.AWAITING_PROMOTION, run.reason
    names = [e["name"] for e in engine.audit(run.id)]
    assert names.index("canary.workload") < names.index("canary.image")  # the controller before the plugin
    assert any(e["name"] == "verify_canary.workload-rolled-out" and e["status"] == "ok" for e in engine.audit(run.id))
    assert images(kubectl)[1] == {NEW}

    engine.decide(run.id, actor=BOB, approve=True)
    run = engine.advance(run.id)
    assert run.state is RunState.DONE, run.reason
    # the plugin's pods name the digest its canary verified (images.pin_digest); the other workloads the tag
    assert images(kubectl) == ({pinned(NEW)}, {NEW})
    sidecar = kubectl.json("get", "deployment", CONTROLLER, "-n", NS)["spec"]["template"]["spec"]["containers"][1]
    assert sidecar["image"] == "busybox:1.36"  # only the container running the driver's image changed


def test_a_controller_that_cannot_roll_out_rolls_the_plugin_back_too(sim: KubeSim, redis_url: str) -> None:
    """The plugin first, the controller after its promotion: the controller's new pod cannot be
    scheduled beside the old one (it holds every GPU of its node; maxUnavailable 0), its rollout
    passes its progress deadline, the promotion fails and the rollback restores the controller,
    then the plugin."""
    kubectl = Kubectl(sim.kubeconfig)
    kubectl("apply", "-f", "-", input=json.dumps(controller(
        gpus=True, progressDeadlineSeconds=10,
        strategy={"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}})))
    kubectl("rollout", "status", f"deployment/{CONTROLLER}", "-n", NS, "--timeout=60s", timeout=90)
    engine = kubesim_engine(sim, redis_url, policy(f"daemonset/{PLUGIN}", f"deployment/{CONTROLLER}:controller"))
    run = engine.request_canary(actor=ALICE, target=f"{NS}/{PLUGIN}", image=NEW, node="gpu-node1").run
    engine.decide(run.id, actor=BOB, approve=True)
    assert engine.advance(run.id).state is RunState.AWAITING_PROMOTION
    assert images(kubectl)[1] == {OLD}  # the controller waits for the plugin's promotion
    engine.decide(run.id, actor=BOB, approve=True)
    run = engine.advance(run.id)
    assert run.state is RunState.ROLLED_BACK, run.reason
    audit = engine.audit(run.id)
    stuck = next(e for e in audit if e["name"] == "promote.workload-rolled-out")
    assert stuck["status"] == "failed" and "has timed out progressing" in stuck["detail"], stuck
    names = [e["name"] for e in audit]
    assert names.index("rollback.workload") < names.index("rollback.template")  # reverse order
    assert images(kubectl) == ({pinned(OLD)}, {OLD})  # the promotion began: the plugin's pre-run digest
    kubectl("rollout", "status", f"deployment/{CONTROLLER}", "-n", NS, "--timeout=60s", timeout=90)


def test_policy_refuses_workloads_without_the_target_and_requests_check_them(sim: KubeSim, redis_url: str) -> None:
    with pytest.raises(ValueError, match="workloads must list the target itself"):
        policy(f"deployment/{CONTROLLER}")
    with pytest.raises(ValueError, match="is not a workload"):
        policy("statefulset/x", f"daemonset/{PLUGIN}")
    engine = kubesim_engine(sim, redis_url, policy(f"daemonset/{PLUGIN}", "deployment/missing"))
    with pytest.raises(Refused, match="Deployment dra-example-driver/missing, listed with"):
        engine.request_canary(actor=ALICE, target=f"{NS}/{PLUGIN}", image=NEW, node="gpu-node1")
    assert engine.runs() == []
