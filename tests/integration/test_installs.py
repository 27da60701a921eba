"""The bot on NVIDIA's own installs (issue 58): the Helm chart (plugin, GFD, MPS control daemon,
one selector for the three) and its MIG variant, and the GPU operator's two-container plugin pod (its canary,
which goes through the ClusterPolicy since issue 60, is in test_operator_runs.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from kubesim import KubeSim
from runbooks.inventory import Inventory

HELM_PLUGIN = "nvidia-device-plugin/nvdp-nvidia-device-plugin"
OPERATOR_NS, OPERATOR_DS = "gpu-operator", "nvidia-device-plugin-daemonset"


@pytest.fixture(scope="module")
def helm() -> Iterator[KubeSim]:
    with KubeSim(scenario="gpu-helm", k8s_version="1.31") as sim:
        yield sim


@pytest.fixture(scope="module")
def helm_inventory(helm: KubeSim, inventory_of: Callable[..., Inventory]) -> Inventory:
    return inventory_of(helm)


def test_helm_inventory_lists_the_plugin_and_not_gfd_or_the_mps_daemon(helm_inventory: Inventory) -> None:
    """The chart's three DaemonSets run the plugin's image under one selector: the inventory
    lists the plugin only, each of its three pods registered, and no finding about the others."""
    assert [(ds.ref, ds.kind) for ds in helm_inventory.daemonsets] == [(HELM_PLUGIN, "device-plugin")]
    pods = helm_inventory.daemonsets[0].pods
    assert sorted(p.node for p in pods) == ["gpu-node1", "gpu-node2", "gpu-node3"]
    assert all(p.registered is True for p in pods), [(p.name, p.registered) for p in pods]
    assert not [f for f in helm_inventory.findings if "feature-discovery" in f.object or "mps" in f.object]
    assert [f.code for f in helm_inventory.findings if f.severity in ("warn", "fail")] == []


def test_helm_mig_variant_has_no_privilege_finding(inventory_of: Callable[..., Inventory]) -> None:
    """With migStrategy=mixed the chart adds SYS_ADMIN to the plugin on purpose: no
    privilege-escalation finding, and the plugin is still the only plugin listed."""
    with KubeSim(scenario="gpu-helm-mig", k8s_version="1.31") as sim:
        inv = inventory_of(sim)
    assert [ds.ref for ds in inv.daemonsets] == [HELM_PLUGIN]
    assert [f.code for f in inv.findings if f.code == "privilege-escalation"] == []


def test_operator_inventory_lists_its_plugin_not_gfd(inventory_of: Callable[..., Inventory]) -> None:
    """The operator's gpu-feature-discovery runs the plugin's image too: not a device plugin."""
    with KubeSim(scenario="gpu-operator", k8s_version="1.31") as sim:
        inv = inventory_of(sim)
    assert [(ds.ref, ds.kind) for ds in inv.daemonsets] == [(f"{OPERATOR_NS}/{OPERATOR_DS}", "device-plugin")]
    assert all(p.registered is True for p in inv.daemonsets[0].pods)
