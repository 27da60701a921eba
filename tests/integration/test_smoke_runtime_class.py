"""The smoke pod's RuntimeClass (issue 58, item 4) on kubesim ``gpu-small``: on a cluster where
``nvidia`` is not the default runtime, NVIDIA's README (k8s-device-plugin v0.20.0) defines a
RuntimeClass ``nvidia`` and GPU pods must name it. With ``steps.smoke_test.runtime_class: nvidia``,
or without it when the plugin's own pods run with a RuntimeClass, the smoke pod carries that
class (kubectl's watch is the referee) and passes; a configured class the cluster does not have
is refused at request time in one line, before anything is stored or changed."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import pytest

from handlers.runs import parse_canary
from kubesim import KubeSim
from runbooks.cluster import Cluster
from runbooks.daemonset.steps import DaemonSetSteps
from runbooks.engine.approving import Actor
from runbooks.engine.clocks import ClusterClock
from runbooks.engine.refusals import Refused
from runbooks.engine.steps import CheckStatus
from runbooks.policy import Policy
from tests.engine_support import kubesim_engine
from tests.integration.stepkit import FAST, SPEED, harness
from tests.support import Kubectl, PodWatch

STEPS = DaemonSetSteps()
NS, DS = "kube-system", "nvidia-device-plugin-daemonset"
SAMPLE = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0"
SMOKE_NS = "upgradebot-smoke"
README_CLASS = "apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata:\n  name: nvidia\nhandler: nvidia\n"
"""The RuntimeClass of NVIDIA/k8s-device-plugin's README.md at v0.20.0, as it prints it."""


@pytest.fixture
def sim() -> Iterator[KubeSim]:
    with KubeSim(scenario="gpu-small", speed=SPEED) as s:
        Kubectl(s.kubeconfig)("apply", "-f", "-", input=f"apiVersion: v1\nkind: Namespace\nmetadata: {{name: {SMOKE_NS}}}\n")
        yield s


def smoke_pods(watch: PodWatch) -> list[dict[str, Any]]:
    return [e["object"] for e in watch.stop() if e.get("type") == "ADDED"]


def run_smoke(sim: KubeSim, smoke: dict[str, Any]) -> tuple[Any, list[dict[str, Any]]]:
    """Canary then verify_canary with ``smoke`` as steps.smoke_test: the smoke-test check and the smoke pods kubectl saw."""
    watch = PodWatch(sim.kubeconfig, SMOKE_NS, "app.kubernetes.io/component=smoke-test")
    h = harness(sim, settings=dataclasses.replace(FAST, smoke_test=smoke))
    assert STEPS.canary(h.ctx).ok
    check = next(c for c in STEPS.verify_canary(h.ctx).checks if c.name == "smoke-test")
    return check, smoke_pods(watch)


def test_a_configured_runtime_class_is_carried_by_the_smoke_pod_which_passes(sim: KubeSim) -> None:
    Kubectl(sim.kubeconfig)("apply", "-f", "-", input=README_CLASS)
    check, pods = run_smoke(sim, {"image": SAMPLE, "timeout": 1.0, "runtime_class": "nvidia"})
    assert check.status is CheckStatus.PASS, check.detail
    assert check.evidence["runtime_class"] == "nvidia" and "runtime class nvidia" in check.detail
    assert [p["spec"].get("runtimeClassName") for p in pods] == ["nvidia"]


def test_without_one_configured_the_smoke_pod_takes_the_plugins_own_runtime_class(sim: KubeSim) -> None:
    kubectl = Kubectl(sim.kubeconfig)
    kubectl("apply", "-f", "-", input=README_CLASS)
    kubectl("-n", NS, "patch", "daemonset", DS, "--type=merge",
            "-p", json.dumps({"spec": {"template": {"spec": {"runtimeClassName": "nvidia"}}}}))
    kubectl("-n", NS, "rollout", "status", f"daemonset/{DS}", "--timeout=60s", timeout=90)
    check, pods = run_smoke(sim, {"image": SAMPLE, "timeout": 1.0})
    assert check.status is CheckStatus.PASS, check.detail
    assert [p["spec"].get("runtimeClassName") for p in pods] == ["nvidia"]


def test_a_plugin_without_a_runtime_class_gives_a_smoke_pod_without_one(sim: KubeSim) -> None:
    check, pods = run_smoke(sim, {"image": SAMPLE, "timeout": 1.0})
    assert check.status is CheckStatus.PASS, check.detail
    assert [p["spec"].get("runtimeClassName") for p in pods] == [None] and "runtime_class" not in check.evidence


def test_a_configured_runtime_class_the_cluster_lacks_is_refused_at_request_time(sim: KubeSim, redis_url: str) -> None:
    kubectl = Kubectl(sim.kubeconfig)
    before = kubectl.json("-n", NS, "get", "daemonset", DS)
    policy = Policy.model_validate({
        "approvers": {"users": ["U0BOB"]}, "reports": {"after": []}, "targets": [f"{NS}/{DS}"],
        "steps": {"observe_window": "1s", "poll_interval": "0.1s", "ready_timeout": "60s",
                  "smoke_test": {"image": SAMPLE, "runtime_class": "nvidia"}}})
    engine = kubesim_engine(sim, redis_url, policy,
                            clock=ClusterClock(Cluster.from_kubeconfig(sim.kubeconfig).server_time))
    args = parse_canary([f"{NS}/{DS}", "node=gpu-node1", "image=nvcr.io/nvidia/k8s-device-plugin:v0.17.0"])
    with pytest.raises(Refused) as refused:
        engine.request_canary(actor=Actor("U0ALICE"), target=args.target, image=args.image, node=args.node,
                              edits=args.edits)
    said = str(refused.value)
    assert len(said.splitlines()) == 1, said
    assert 'RuntimeClass "nvidia" not found' in said and "steps.smoke_test.runtime_class" in said, said
    assert engine.runs(limit=5) == []
    after = kubectl.json("-n", NS, "get", "daemonset", DS)
    assert after["metadata"]["generation"] == before["metadata"]["generation"]
    assert kubectl("get", "pods", "-n", SMOKE_NS, "-o", "name").strip() == ""


def test_a_dra_drivers_smoke_pods_carry_the_runtime_class_too() -> None:
    """The DRA smoke test's pod and its ``-hold`` pod are made by one body: both name the class."""
    from runbooks.daemonset.dra_smoke import pod_body

    body = pod_body({"image": SAMPLE, "runtime_class": "nvidia"}, name="gpu-smoke-test-abc123", node="gpu-node1",
                    template="gpu-smoke-test-abc123", v1alpha2=False)
    assert body["spec"]["runtimeClassName"] == "nvidia"
    assert "runtimeClassName" not in pod_body({"image": SAMPLE, "runtime_class": None}, name="x", node=None,
                                              template="x", v1alpha2=False)["spec"]
