"""``repair`` on kubesim ``gpu-small``: after a node reboots, the pods asking for its GPUs that
its kubelet admitted before the device plugin was back failed with UnexpectedAdmissionError;
once the plugin is healthy, a repair run lists them in its request (the bare one listed only),
and once approved deletes exactly those with a controller, which recreates them. kubesim's log
of requests shows it touched nothing else."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from handlers.run_views import gate_message
from handlers.runs import parse_repair
from kubesim import KubeSim
from runbooks.cluster import Cluster
from runbooks.daemonset.repairing import RepairSteps
from runbooks.engine.approving import Actor
from runbooks.engine.clocks import ClusterClock
from runbooks.engine.commands import Engine
from runbooks.engine.refusals import Refused
from runbooks.engine.runs import RunKind, RunState
from runbooks.policy import Policy
from tests.engine_support import kubesim_engine
from tests.integration.test_drain_kubesim import apply, trainer
from tests.support import Kubectl

S = RunState
TARGET = "kube-system/nvidia-device-plugin-daemonset"
ML = "ml-team"
ALICE, BOB = Actor("U0ALICE"), Actor("U0BOB")
POLICY = Policy.model_validate({
    "approvers": {"users": ["U0BOB"]}, "reports": {"after": []},
    "steps": {"observe_window": "1s", "poll_interval": "0.1s", "ready_timeout": "60s"}, "targets": [TARGET],
})


@pytest.fixture
def sim() -> Iterator[KubeSim]:
    with KubeSim(scenario="gpu-small", k8s_version="1.31", speed=4) as served:
        yield served


def engine_on(sim: KubeSim, redis_url: str) -> Engine:
    return kubesim_engine(sim, redis_url, POLICY, clock=ClusterClock(Cluster.from_kubeconfig(sim.kubeconfig).server_time),
                          kinds={RunKind.REPAIR: RepairSteps()})


def pods(kubectl: Kubectl) -> dict[str, dict[str, Any]]:
    return {p["metadata"]["name"]: p for p in kubectl.json("get", "pods", "-n", ML)["items"]}


def stuck(kubectl: Kubectl) -> set[str]:
    return {n for n, p in pods(kubectl).items() if p["status"].get("reason") == "UnexpectedAdmissionError"}


def test_after_a_node_reboot_repair_deletes_the_stuck_pods_with_a_controller_and_nothing_else(
        sim: KubeSim, redis_url: str) -> None:
    kubectl = Kubectl(sim.kubeconfig)
    apply(kubectl, trainer("trainer-a", "gpu-node1"))
    kubectl("rollout", "status", "deployment/trainer-a", "-n", ML, "--timeout=60s", timeout=90)
    engine = engine_on(sim, redis_url)
    with pytest.raises(Refused, match="nothing to repair on the nodes of kube-system/nvidia-device-plugin-daemonset"):
        engine.request_repair(actor=ALICE, target=TARGET)

    sim.fault(kind="node-reboot", node="gpu-node1")
    failed = stuck(kubectl)
    assert "trainer-0" in failed and len(failed) == 2  # the bare trainer and trainer-a's pod
    [deployed] = [n for n in failed if n.startswith("trainer-a-")]
    kubectl("rollout", "status", "deployment/trainer-a", "-n", ML, "--timeout=60s", timeout=90)  # a new pod runs
    for _ in range(100):  # the plugin registers again, the node's GPUs are offered again
        allocatable = kubectl.json("get", "node", "gpu-node1")["status"]["allocatable"]
        if allocatable.get("nvidia.com/gpu") == "8":
            break
        time.sleep(0.05)

    waiter = trainer("waiter", "gpu-node2")  # 5 GPUs where the bare trainer-1 holds 4 of 8: Pending, not stuck
    waiter["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "5"
    apply(kubectl, waiter)
    for _ in range(100):
        if any(n.startswith("waiter-") and p["status"].get("phase") == "Pending" for n, p in pods(kubectl).items()):
            break
        time.sleep(0.05)
    [pending] = [n for n in pods(kubectl) if n.startswith("waiter-")]

    args = parse_repair([TARGET])
    before = len(sim.mutations())
    run = engine.request_repair(actor=ALICE, target=args.target).run
    assert run.kind is RunKind.REPAIR and run.state is S.AWAITING_APPROVAL and run.gate is not None
    assert [p["name"] for p in run.change["delete"]] == [deployed]
    assert sorted(p["name"] for p in run.change["listed"]) == sorted(["trainer-0", pending])
    text = gate_message(run, run.gate).text
    assert f"delete 1 stuck pod (ml-team/{deployed} (ReplicaSet trainer-a-" in text
    assert "listed only, left as they are: ml-team/trainer-0 (no controller)" in text
    asked = sim.mutations()[before:]  # the request read, and asked the server with a dry run of the deletion
    assert [(m["verb"], m["path"], m["dryRun"]) for m in asked] == [("delete", f"/api/v1/namespaces/{ML}/pods/{deployed}", True)]
    before = len(sim.mutations())

    engine.approve(run.id, actor=BOB)
    run = engine.advance(run.id)
    assert run.state is S.DONE, run.reason
    written = [(m["verb"], m["path"]) for m in sim.mutations()[before:] if not m["dryRun"]]
    assert written == [("delete", f"/api/v1/namespaces/{ML}/pods/{deployed}")]
    now = pods(kubectl)
    assert deployed not in now and "trainer-0" in now and pending in now  # the bare and the pending pods are left
    running = [n for n, p in now.items() if n.startswith("trainer-a-") and p["status"].get("phase") == "Running"]
    assert len(running) == 1
    checks = {e["name"]: e["status"] for e in engine.audit(run.id) if e["name"].startswith("verify.")}
    assert checks == {"verify.stuck-pods-deleted": "ok", "verify.workloads-running": "ok"}


def test_repair_waits_for_a_healthy_plugin(sim: KubeSim, redis_url: str) -> None:
    """Right after the reboot the node's GPUs are not offered again yet: a pod recreated now
    would fail once more, so the request is refused until the plugin is back."""
    engine = engine_on(sim, redis_url)
    sim.fault(kind="node-reboot", node="gpu-node2")
    with pytest.raises(Refused, match="is not healthy on gpu-node2 yet"):
        engine.request_repair(actor=ALICE, target=TARGET)
