"""The smoke test in a namespace whose Pod Security level refuses the smoke pod (issue 62): on
kubesim, as on a real kube-apiserver, ``pod-security.kubernetes.io/enforce=restricted`` refuses a
GPU pod without a hardened securityContext; the smoke-test check fails quoting Pod Security's own
message and never reads as missing RBAC (the bot here is the cluster admin)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from kubesim import KubeSim
from runbooks.daemonset.steps import DaemonSetSteps
from runbooks.engine.steps import CheckStatus
from tests.integration.stepkit import FAST, SPEED, harness
from tests.support import Kubectl

STEPS = DaemonSetSteps()
SAMPLE = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0"
SMOKE_NS = "upgradebot-smoke"


@pytest.fixture
def sim() -> Iterator[KubeSim]:
    with KubeSim(scenario="gpu-small", speed=SPEED) as s:
        Kubectl(s.kubeconfig)("apply", "-f", "-", input=(
            f"apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {SMOKE_NS}\n  labels:\n"
            "    pod-security.kubernetes.io/enforce: restricted\n"))
        yield s


def test_a_restricted_namespace_fails_the_smoke_test_quoting_pod_security(sim: KubeSim) -> None:
    h = harness(sim, settings=dataclasses.replace(FAST, smoke_test={"image": SAMPLE, "timeout": 1.0}))
    assert STEPS.canary(h.ctx).ok
    check = next(c for c in STEPS.verify_canary(h.ctx).checks if c.name == "smoke-test")
    assert check.status is CheckStatus.FAIL, check.detail
    assert "Pod Security admission" in check.detail
    assert 'is forbidden: violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false (container ' \
        '"smoke" must set securityContext.allowPrivilegeEscalation=false)' in check.detail
    assert "RBAC" not in check.detail and "Role" not in check.detail
    assert check.evidence["cleaned_up"] is False  # nothing was created
