"""The bot on NVIDIA's own installs (issue 58): the Helm chart (plugin, GFD, MPS control daemon,
one selector for the three) and its MIG variant, and the GPU operator's two-container plugin pod."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from kubesim import KubeSim
from runbooks.engine.approving import Actor
from runbooks.engine.runs import RunState
from runbooks.inventory import Inventory
from runbooks.policy import Policy
from tests.engine_support import kubesim_engine
from tests.support import Kubectl

HELM_PLUGIN = "nvidia-device-plugin/nvdp-nvidia-device-plugin"
OPERATOR_NS, OPERATOR_DS = "gpu-operator", "nvidia-device-plugin-daemonset"
RUNNING = "nvcr.io/nvidia/k8s-device-plugin:v0.20.0"
CANARY = "nvcr.io/nvidia/k8s-device-plugin:v0.19.3"
ALICE, BOB = Actor("U0ALICE"), Actor("U0BOB")


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


def test_operator_canary_without_container_changes_the_plugin_container(redis_url: str) -> None:
    """A canary of the operator's plugin named without container=: the request picks
    nvidia-device-plugin (not config-manager, on the same image), the canary passes on gpu-node1,
    and only that container's image changed."""
    pol = Policy.model_validate({"approvers": {"users": ["U0BOB"]}, "reports": {"after": []},
                                 "steps": {"observe_window": "1s", "poll_interval": "0.1s"},
                                 "targets": [f"{OPERATOR_NS}/{OPERATOR_DS}"]})
    with KubeSim(scenario="gpu-operator", k8s_version="1.31", speed=4) as sim:
        engine = kubesim_engine(sim, redis_url, pol)
        run = engine.request_canary(actor=ALICE, target=f"{OPERATOR_NS}/{OPERATOR_DS}", image=CANARY,
                                    node="gpu-node1").run
        assert run.container == "nvidia-device-plugin"
        engine.approve(run.id, actor=BOB)
        run = engine.advance(run.id)
        assert run.state not in (RunState.ROLLED_BACK, RunState.FAILED), (run.state, run.reason)
        canary = [e for e in engine.audit(run.id) if e["name"] == "canary.image"]
        assert canary and canary[0]["status"] == "ok", canary
        kubectl = Kubectl(sim.kubeconfig)
        containers = kubectl.json("get", "daemonset", OPERATOR_DS, "-n", OPERATOR_NS)["spec"]["template"]["spec"][
            "containers"]
        assert {c["name"]: c["image"] for c in containers} == {"nvidia-device-plugin": CANARY,
                                                              "config-manager": RUNNING}
        pods = kubectl.json("get", "pods", "-n", OPERATOR_NS, "-l", "app=nvidia-device-plugin-daemonset")["items"]
        on = {p["spec"]["nodeName"]: {c["name"]: c["image"] for c in p["spec"]["containers"]} for p in pods
              if not p["metadata"].get("deletionTimestamp")}
        assert on["gpu-node1"] == {"nvidia-device-plugin": CANARY, "config-manager": RUNNING}
        assert on["gpu-node2"] == on["gpu-node3"] == {"nvidia-device-plugin": RUNNING, "config-manager": RUNNING}
