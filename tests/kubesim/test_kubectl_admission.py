"""Device admission after a kubelet restart or a node reboot, refereed by the real kubectl.

A restarted kubelet admits its node's pods again before the device plugin has registered:
since kubernetes#118559 was fixed, pods whose containers run are let be; after a reboot
(kubernetes#125579) none runs, and a pod asking for ``nvidia.com/gpu`` fails admission with
``UnexpectedAdmissionError`` and stays Failed, while its ReplicaSet makes a new pod that runs
once the plugin is back."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from kubesim import KubeSim
from tests.kubesim.test_kubectl import wait_for
from tests.support import TEST_BUILDS, Kubectl

pytestmark = pytest.mark.conformance
MESSAGE = ("Allocate failed due to no healthy devices present; cannot allocate unhealthy devices nvidia.com/gpu, "
           "which is unexpected")


@pytest.fixture
def sim() -> Iterator[KubeSim]:
    with KubeSim(pushed=TEST_BUILDS, scenario="gpu-small", k8s_version="1.31", speed=10.0) as served:
        yield served


def _statuses(kubectl: Kubectl) -> dict[str, str]:
    lines = kubectl("get", "pods", "-n", "ml-team", "--no-headers").splitlines()
    return {line.split()[0]: line.split()[2] for line in lines}


def test_a_kubelet_restart_leaves_running_gpu_pods_alone(sim: KubeSim) -> None:
    kubectl = Kubectl(sim.kubeconfig)
    sim.fault(kind="kubelet-restart", node="gpu-node1")
    time.sleep(0.5)
    assert _statuses(kubectl)["trainer-0"] == "Running"


def test_after_a_reboot_gpu_pods_fail_admission_and_their_replicaset_replaces_them(sim: KubeSim) -> None:
    kubectl = Kubectl(sim.kubeconfig)
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "trainer-a", "namespace": "ml-team"},
                  "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "trainer-a"}},
                           "template": {"metadata": {"labels": {"app": "trainer-a"}}, "spec": {
                               "nodeSelector": {"kubernetes.io/hostname": "gpu-node1"},
                               "containers": [{"name": "t", "image": "registry.example.com/ml/trainer:2",
                                               "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}}
    kubectl("apply", "-f", "-", input=json.dumps(deployment))
    kubectl("rollout", "status", "deployment/trainer-a", "-n", "ml-team", "--timeout=60s", timeout=90)
    before = {n for n, s in _statuses(kubectl).items() if n.startswith("trainer-a-")}
    sim.fault(kind="node-reboot", node="gpu-node1")
    failed = wait_for(lambda: [n for n, s in _statuses(kubectl).items() if s == "UnexpectedAdmissionError"], timeout=10)
    assert sorted(failed) == sorted(["trainer-0", *before])
    described = kubectl("describe", "pod", "trainer-0", "-n", "ml-team")
    assert "Status:           Failed" in described and "Reason:           UnexpectedAdmissionError" in described
    assert f"Message:          Pod was rejected: {MESSAGE}" in described
    events = kubectl("get", "events", "-n", "ml-team", "--field-selector", "reason=UnexpectedAdmissionError", "-o", "json")
    assert {e["involvedObject"]["name"] for e in json.loads(events)["items"]} == set(failed)
    kubectl("rollout", "status", "deployment/trainer-a", "-n", "ml-team", "--timeout=60s", timeout=90)
    now = _statuses(kubectl)
    assert [n for n in now if n.startswith("trainer-a-") and now[n] == "Running" and n not in before]
    assert all(now[n] == "UnexpectedAdmissionError" for n in before)  # the failed pod stays until someone deletes it
