"""Manifest findings on kubesim: every mistake planted in ``gpu-unsafe`` (named deltas on NVIDIA's
v0.14.2 static manifest, :mod:`kubesim.plugin_manifest`) is reported with its severity, the
objects or nodes concerned and the fix; ``gpu-small``, the same manifest with its admin's two
edits (a GPU nodeSelector, FAIL_ON_INIT_ERROR=true), reports none of them (no false positive)."""

from __future__ import annotations

import pytest

from handlers import inventory as inventory_handler
from kubesim import KubeSim
from runbooks.cluster import Cluster
from runbooks.inventory import take_inventory
from runbooks.inventory.models import Finding
from runbooks.policy import Policy

MANIFEST_CODES = {"fail-on-init-error", "priority-class", "device-plugin-hostpath", "tolerations-missing",
                  "gpu-node-without-plugin", "plugin-on-non-gpu-node", "privilege-escalation",
                  "resource-claimed-twice", "max-unavailable"}
MAIN, LEGACY = "daemonset/kube-system/nvidia-device-plugin-daemonset", "daemonset/kube-system/nvidia-device-plugin-legacy"


def by_code(findings: list[Finding]) -> dict[str, list[Finding]]:
    out: dict[str, list[Finding]] = {}
    for f in findings:
        out.setdefault(f.code, []).append(f)
    return out


@pytest.mark.parametrize("version", ["1.27", "1.31", "1.34"])
def test_gpu_small_has_no_manifest_finding(version: str) -> None:
    with KubeSim(scenario="gpu-small", k8s_version=version) as sim:
        found = take_inventory(Cluster.from_kubeconfig(sim.kubeconfig), max_unavailable="1").findings
    assert not [f for f in found if f.code in MANIFEST_CODES], found


def test_every_planted_mistake_of_gpu_unsafe_is_reported_with_its_fix() -> None:
    with KubeSim(scenario="gpu-unsafe", k8s_version="1.31") as sim:
        policy = Policy.model_validate({"inventory": {"max_unavailable": "1"}})
        found = inventory_handler.handle(inventory_handler.InventoryRequest(), policy=policy,
                                         connect=lambda context: Cluster.from_kubeconfig(sim.kubeconfig, context)).findings
    codes = by_code(found)
    assert set(codes) >= MANIFEST_CODES, sorted(set(codes))
    one = {code: codes[code][0] for code in MANIFEST_CODES}
    assert {c: f.severity for c, f in one.items()} == {
        "fail-on-init-error": "warn", "priority-class": "warn", "device-plugin-hostpath": "fail",
        "tolerations-missing": "warn", "gpu-node-without-plugin": "warn", "plugin-on-non-gpu-node": "warn",
        "privilege-escalation": "warn", "resource-claimed-twice": "fail", "max-unavailable": "warn"}
    assert [f.object for f in codes["fail-on-init-error"]] == [MAIN, LEGACY]  # NVIDIA's static manifest sets false
    assert "FAIL_ON_INIT_ERROR 'false'" in one["fail-on-init-error"].message
    assert one["fail-on-init-error"].next_step.startswith(
        "`canary kube-system/nvidia-device-plugin-daemonset env=FAIL_ON_INIT_ERROR=true node=auto`")
    assert [f.object for f in codes["priority-class"]] == [MAIN]
    assert "priority=system-node-critical" in one["priority-class"].next_step
    assert [f.object for f in codes["device-plugin-hostpath"]] == [LEGACY]
    assert "/var/lib/kubelet/device-plugins <- /var/lib/kubelet/plugins" in one["device-plugin-hostpath"].message
    assert {f.object for f in codes["tolerations-missing"]} == {MAIN, LEGACY}
    assert "example.com/maintenance=planned:NoSchedule of GPU node(s) gpu-node3: no plugin pod runs on gpu-node3" in \
        one["tolerations-missing"].message
    assert "toleration=example.com/maintenance=planned:NoSchedule" in one["tolerations-missing"].next_step
    assert one["gpu-node-without-plugin"].object == "node/gpu-node3"
    assert one["plugin-on-non-gpu-node"].object == LEGACY and "cpu-node1" in one["plugin-on-non-gpu-node"].message
    assert [f.object for f in codes["privilege-escalation"]] == [MAIN]  # the legacy one keeps the manifest's securityContext
    assert "security=allowPrivilegeEscalation=false,capabilities.drop=ALL" in one["privilege-escalation"].next_step
    assert "both advertise nvidia.com/gpu on node(s) gpu-node1, gpu-node2" in one["resource-claimed-twice"].message
    assert [f.object for f in codes["max-unavailable"]] == [MAIN]
    assert "maxUnavailable 2 (2 of 2 pods at once), above the policy's limit 1 (1)" in one["max-unavailable"].message
    assert '"maxUnavailable": 1' in one["max-unavailable"].next_step
    assert all(f.next_step and f.message for f in found)


def test_the_policy_limit_and_a_percentage_are_read_against_the_nodes() -> None:
    with KubeSim(scenario="gpu-unsafe", k8s_version="1.31") as sim:
        cluster = Cluster.from_kubeconfig(sim.kubeconfig)
        assert not by_code(take_inventory(cluster, max_unavailable="100%").findings).get("max-unavailable")
        assert by_code(take_inventory(cluster, max_unavailable="50%").findings).get("max-unavailable")
        assert not by_code(take_inventory(cluster).findings).get("max-unavailable")  # no limit given: not judged
