"""Each inventory finding, caused in kubesim the way it happens on a real cluster."""

from __future__ import annotations

import json
from collections.abc import Callable

from kubesim import KubeSim
from runbooks.inventory import Inventory

DEVICE_PLUGIN = "kube-system/nvidia-device-plugin-daemonset"
DRA_PLUGIN = "dra-example-driver/dra-example-driver-kubeletplugin"
IMAGE = "nvcr.io/nvidia/k8s-device-plugin"
GPU_NODES = ("gpu-node1", "gpu-node2", "gpu-node3")


def set_plugin_image(kubectl, tag: str) -> None:
    kubectl("-n", "kube-system", "set", "image", "daemonset/nvidia-device-plugin-daemonset",
            f"nvidia-device-plugin-ctr={IMAGE}:{tag}")


def plugin_pods(inv: Inventory, ref: str = DEVICE_PLUGIN):
    ds = inv.daemonset(ref)
    assert ds is not None
    return ds.pods


def findings_of(inv: Inventory, code: str):
    return [f for f in inv.findings if f.code == code]


def test_plugin_that_never_registers_fails_every_gpu_node(
    fresh_cluster: KubeSim, kubectl_for, inventory_of: Callable[..., Inventory], settle_until
) -> None:
    """A plugin image that runs but never registers: every GPU node has GPU labels and 0 allocatable."""
    set_plugin_image(kubectl_for(fresh_cluster), "v0.15.0-silent")
    settle_until(fresh_cluster, lambda: all(
        p.ready and p.images["nvidia-device-plugin-ctr"].endswith("-silent") for p in plugin_pods(inventory_of(fresh_cluster))))
    inv = inventory_of(fresh_cluster)
    found = findings_of(inv, "plugin-not-registered")
    assert sorted(f.object for f in found) == [f"node/{n}" for n in GPU_NODES]
    assert all(f.severity == "fail" for f in found) and inv.failed
    assert "allocatable 0" in found[0].message and "kubectl -n kube-system logs" in found[0].next_step
    assert all(p.registered is False and p.ready for p in plugin_pods(inv))


def test_capacity_above_allocatable_warns(fresh_cluster: KubeSim, kubectl_for, inventory_of: Callable[..., Inventory]) -> None:
    """A node that reports fewer allocatable GPUs than its capacity (unhealthy devices) is a warning."""
    kubectl_for(fresh_cluster)(
        "patch", "node", "gpu-node2", "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": {"allocatable": {"nvidia.com/gpu": "6"}}}))
    inv = inventory_of(fresh_cluster)
    found = findings_of(inv, "capacity-above-allocatable")
    assert [(f.object, f.severity) for f in found] == [("node/gpu-node2", "warn")]
    assert "capacity 8 but allocatable 6" in found[0].message
    assert not findings_of(inv, "plugin-not-registered")


def test_crash_looping_plugin_fails(
    fresh_cluster: KubeSim, kubectl_for, inventory_of: Callable[..., Inventory], settle_until
) -> None:
    """A crashing plugin image: its pod is reported in CrashLoopBackOff, unregistered, on its node."""
    set_plugin_image(kubectl_for(fresh_cluster), "v0.15.0-crash")
    settle_until(fresh_cluster, lambda: any(p.crashloop for p in plugin_pods(inventory_of(fresh_cluster))))
    inv = inventory_of(fresh_cluster)
    crashing = [p for p in plugin_pods(inv) if p.crashloop]
    found = findings_of(inv, "plugin-crashloop")
    assert len(found) == 1 and found[0].severity == "fail" and found[0].object == f"daemonset/{DEVICE_PLUGIN}"
    assert crashing[0].node in found[0].message and "v0.15.0-crash" in found[0].message
    assert crashing[0].registered is False and crashing[0].restarts > 0
    assert "--previous" in found[0].next_step


def test_mixed_plugin_versions_warn(
    fresh_cluster: KubeSim, kubectl_for, inventory_of: Callable[..., Inventory], settle_until
) -> None:
    """OnDelete, a new image and one deleted pod: the plugin runs two versions across nodes."""
    kubectl = kubectl_for(fresh_cluster)
    kubectl("-n", "kube-system", "patch", "daemonset", "nvidia-device-plugin-daemonset", "--type=merge",
            "-p", '{"spec":{"updateStrategy":{"type":"OnDelete","rollingUpdate":null}}}')
    set_plugin_image(kubectl, "v0.15.0")
    pod = next(p for p in plugin_pods(inventory_of(fresh_cluster)) if p.node == "gpu-node1")
    kubectl("-n", "kube-system", "delete", "pod", pod.name, "--wait=false")
    settle_until(fresh_cluster, lambda: any(
        p.node == "gpu-node1" and p.ready and p.images["nvidia-device-plugin-ctr"].endswith(":v0.15.0")
        for p in plugin_pods(inventory_of(fresh_cluster))))
    inv = inventory_of(fresh_cluster)
    found = findings_of(inv, "mixed-plugin-versions")
    assert len(found) == 1 and found[0].severity == "warn"
    assert "v0.15.0 on 1 node (gpu-node1)" in found[0].message
    assert "v0.14.2 on 2 nodes (gpu-node2, gpu-node3)" in found[0].message
    assert not inv.failed
    assert inv.daemonset(DEVICE_PLUGIN).update_strategy == "OnDelete"  # type: ignore[union-attr]


def test_class_without_running_kubelet_plugin_fails(
    fresh_cluster: KubeSim, kubectl_for, inventory_of: Callable[..., Inventory], settle_until
) -> None:
    """The DRA driver's kubelet plugin removed while its DeviceClass stays: the class is flagged."""
    kubectl_for(fresh_cluster)("-n", "dra-example-driver", "delete", "daemonset", "dra-example-driver-kubeletplugin")
    settle_until(fresh_cluster, lambda: inventory_of(fresh_cluster).daemonset(DRA_PLUGIN) is None)
    inv = inventory_of(fresh_cluster)
    found = findings_of(inv, "class-without-plugin")
    assert [(f.object, f.severity) for f in found] == [("deviceclass/gpu.example.com", "fail")]
    assert "no kubelet plugin of gpu.example.com is running" in found[0].message


def test_pending_claim_with_waiting_pod_warns(
    fresh_cluster: KubeSim, kubectl_for, inventory_of: Callable[..., Inventory], settle_until
) -> None:
    """A pod that uses the pending claim and cannot be scheduled: the claim is pending while it waits."""
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "waiter", "namespace": "ml-team"},
        "spec": {
            "nodeSelector": {"pool": "does-not-exist"},
            "resourceClaims": [{"name": "gpu", "resourceClaimName": "pending-gpu"}],
            "containers": [{"name": "main", "image": "registry.example.com/ml/trainer:2.1.0",
                            "resources": {"claims": [{"name": "gpu"}]}}],
        },
    }
    kubectl_for(fresh_cluster)("apply", "-f", "-", input=json.dumps(pod))
    fresh_cluster.advance("30s")
    inv = inventory_of(fresh_cluster)
    found = findings_of(inv, "claim-pending")
    assert [(f.object, f.severity) for f in found] == [("resourceclaim/ml-team/pending-gpu", "warn")]
    assert "waiter" in found[0].message
    claim = next(c for c in inv.claims if c.name == "pending-gpu")
    assert claim.state == "pending" and claim.waiting_pods == ["waiter"]


def test_dra_gate_off_with_dra_objects_fails(fresh_cluster: KubeSim, inventory_of: Callable[..., Inventory]) -> None:
    """The DRA feature gate switched off while classes, slices and claims exist is a failure."""
    fresh_cluster.fault(kind="feature-gate", name="DynamicResourceAllocation", enabled=False)
    inv = inventory_of(fresh_cluster)
    assert inv.dra.feature_gate == "disabled"
    found = findings_of(inv, "dra-gate-disabled")
    assert [(f.object, f.severity) for f in found] == [("cluster", "fail")]
    assert "2 ResourceClaim(s)" in found[0].message


def test_gate_unknown_when_metrics_forbidden(fresh_cluster: KubeSim, inventory_of: Callable[..., Inventory]) -> None:
    """With /metrics forbidden the gate is 'unknown', reported as info, not as a failure."""
    fresh_cluster.fault(kind="forbid", path="/metrics")
    inv = inventory_of(fresh_cluster)
    assert (inv.dra.feature_gate, inv.dra.stage) == ("unknown", None)
    assert [(f.code, f.severity) for f in inv.findings] == [("dra-gate-unknown", "warn")]
    assert not inv.failed


def test_targets_limit_the_daemonsets_and_missing_ones_warn(
    cluster: KubeSim, inventory_of: Callable[..., Inventory]
) -> None:
    """Configured targets (plus the DRA plugins classes need) are inspected; a missing target warns."""
    inv = inventory_of(cluster, targets=[DRA_PLUGIN, "kube-system/nope"])
    assert [d.ref for d in inv.daemonsets] == [DRA_PLUGIN]
    assert [(f.code, f.object) for f in inv.findings] == [("target-missing", "daemonset/kube-system/nope")]
    inv = inventory_of(cluster, targets=[DEVICE_PLUGIN])
    assert [d.ref for d in inv.daemonsets] == [DEVICE_PLUGIN, DRA_PLUGIN]
    assert inv.findings == []
