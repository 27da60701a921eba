"""Devices in use per node, and ``node=auto``: the canary goes to the least busy node that qualifies,
named in the request before anyone approves."""

from __future__ import annotations

import pytest

from kubesim import KubeSim
from runbooks.cluster import Cluster
from runbooks.engine.approving import Actor
from runbooks.engine.refusals import Refused
from runbooks.engine.runs import RunState
from runbooks.inventory import take_inventory
from runbooks.policy import Policy
from tests.engine_support import kubesim_engine
from tests.support import Kubectl

TARGET = "kube-system/nvidia-device-plugin-daemonset"
NEW = "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"
POLICY = Policy.model_validate({"approvers": {"users": ["U0BOB"]}, "reports": {"after": []},
                                "steps": {"observe_window": "1s", "poll_interval": "0.1s"}})


def test_the_inventory_counts_gpus_requested_and_dra_devices_allocated_per_node(sim: KubeSim) -> None:
    with Cluster.from_kubeconfig(str(sim.kubeconfig)) as cluster:
        found = take_inventory(cluster)
    used = {n.name: (n.in_use, n.devices_in_use) for n in found.nodes}
    # the scenario: a 4-GPU trainer on gpu-node1 and gpu-node2, a DRA claim of one device on gpu-node3
    assert used == {"gpu-node1": ({"nvidia.com/gpu": 4}, 0), "gpu-node2": ({"nvidia.com/gpu": 4}, 0),
                    "gpu-node3": ({}, 1), "cpu-node1": ({}, 0)}


def test_node_auto_picks_the_least_busy_qualifying_node_before_approval(sim: KubeSim, redis_url: str) -> None:
    engine = kubesim_engine(sim, redis_url, POLICY)
    run = engine.request_canary(actor=Actor("U0ALICE"), target=TARGET, image=NEW, node="auto").run
    assert run.node == "gpu-node3" and run.state is RunState.AWAITING_APPROVAL
    [requested] = [e for e in engine.audit(run.id) if e["name"] == "requested"]
    assert "node=auto chose gpu-node3" in requested["detail"] and "1 device in use" in requested["detail"]
    engine.reject(run.id, actor=Actor("U0BOB"))

    Kubectl(sim.kubeconfig)("cordon", "gpu-node3")
    run = engine.request_canary(actor=Actor("U0ALICE"), target=TARGET, image=NEW, node="auto").run
    assert run.node == "gpu-node1"  # busy as gpu-node2; ties go by name
    engine.reject(run.id, actor=Actor("U0BOB"))

    kubectl = Kubectl(sim.kubeconfig)
    for node in ("gpu-node1", "gpu-node2"):
        kubectl("cordon", node)
    with pytest.raises(Refused, match="node=auto found no Ready, schedulable GPU node"):
        engine.request_canary(actor=Actor("U0ALICE"), target=TARGET, image=NEW, node="auto")
