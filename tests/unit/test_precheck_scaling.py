"""The canary's class and compatibility checks at 5,000 nodes (issue 39: the canary phase used
3x the promotion's CPU): the nodes a promotion reaches are gathered once per check, not once per
node of the inventory, which made each check quadratic in the nodes."""

from __future__ import annotations

import datetime as dt

import pytest

from runbooks.daemonset import preflight
from runbooks.engine.commands import step_settings_of
from runbooks.engine.runs import Run, Target
from runbooks.inventory import DaemonSet, DraInfo, Inventory, KubernetesInfo, Node, PluginPod
from runbooks.policy import Policy

NODES = 5000


def inventory_of(count: int) -> Inventory:
    nodes = [Node(name=f"gpu-{i:05d}", ready=True, unschedulable=False, gpu_hardware=True,
                  capacity={"nvidia.com/gpu": 8}, allocatable={"nvidia.com/gpu": 8}) for i in range(count)]
    pods = [PluginPod(name=f"plugin-{i}", node=f"gpu-{i:05d}", phase="Running", ready=True, restarts=0,
                      crashloop=False, images={"plugin": "nvcr.io/nvidia/k8s-device-plugin:v0.16.2"})
            for i in range(count)]
    ds = DaemonSet(namespace="kube-system", name="nvidia-device-plugin-daemonset", kind="device-plugin",
                   images={"plugin": "nvcr.io/nvidia/k8s-device-plugin:v0.16.2"}, update_strategy="RollingUpdate",
                   desired=count, current=count, updated=count, ready=count, available=count, pods=pods)
    return Inventory(
        taken_at=dt.datetime(2026, 1, 1, tzinfo=dt.UTC), context="prod", server="https://k8s",
        gpu_resources=["nvidia.com/gpu"], kubernetes=KubernetesInfo(version="v1.31.4", minor=31),
        dra=DraInfo(feature_gate="enabled", stage="BETA"), nodes=nodes, daemonsets=[ds])


def test_the_nodes_a_promotion_reaches_are_gathered_once_per_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """issue 39: class_checks and compatibility_checks on 5,000 nodes each gather the nodes the
    target's pods run on once (they did it for every node: 10,000 gatherings of 5,000 pods)."""
    gathered: list[int] = []
    real = preflight._plugin_nodes

    def counted(inventory: Inventory, run: Run) -> set[str]:
        gathered.append(1)
        return real(inventory, run)

    monkeypatch.setattr(preflight, "_plugin_nodes", counted)
    now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    run = Run(id="r-1", target=Target(cluster="prod", namespace="kube-system", name="nvidia-device-plugin-daemonset"),
              image="nvcr.io/nvidia/k8s-device-plugin:v0.17.0", container="plugin", node="gpu-00001",
              requester="U0A", created_at=now, updated_at=now)
    inventory, settings = inventory_of(NODES), step_settings_of(Policy.model_validate({}))
    classes = preflight.class_checks(inventory, run, settings)
    verdicts = preflight.compatibility_checks(inventory, run, settings)
    assert len(gathered) == 2
    # no GFD labels: one class of unknown GPUs, which the canary node covers; a verdict on it
    assert [c.status for c in classes] == ["pass"] and verdicts
