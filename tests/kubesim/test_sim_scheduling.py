"""The simulated default scheduler: binding, FailedScheduling messages, retries."""

from __future__ import annotations

from _simkit import PODS, condition, create, events, get, small

GPU_PRESENT = {"nvidia.com/gpu.present": "true"}


def _gpu_pod(name: str, gpus: int, selector: dict | None = None) -> dict:
    spec: dict = {"containers": [{"name": "main", "image": "registry.example.com/ml/job:1.0",
                                  "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}
    if selector:
        spec["nodeSelector"] = selector
    return {"metadata": {"name": name, "namespace": "ml-team"}, "spec": spec}


def test_pod_is_bound_where_gpus_are_free():
    """A pod asking 8 GPUs lands on the only GPU node with 8 free and gets the Scheduled event."""
    sim = small()
    create(sim, PODS, _gpu_pod("big", 8))
    pod = get(sim, PODS, "ml-team", "big")
    assert pod["spec"]["nodeName"] == "gpu-node3"
    assert condition(pod, "PodScheduled")["status"] == "True"
    [ev] = events(sim, reason="Scheduled", name="big")
    assert ev["message"] == "Successfully assigned ml-team/big to gpu-node3"
    assert ev["source"]["component"] == "default-scheduler"
    sim.advance(3)
    assert get(sim, PODS, "ml-team", "big")["status"]["phase"] == "Running"


def test_failed_scheduling_insufficient_gpu_message():
    """No node fits: FailedScheduling counts nodes per reason and adds the preemption summary."""
    sim = small()
    create(sim, PODS, _gpu_pod("huge", 6))
    create(sim, PODS, _gpu_pod("huge2", 6, GPU_PRESENT))
    pod = get(sim, PODS, "ml-team", "huge2")
    assert "nodeName" not in pod["spec"]
    expected = ("0/4 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, "
                "3 Insufficient nvidia.com/gpu. preemption: 0/4 nodes are available: "
                "1 Preemption is not helpful for scheduling, 3 No preemption victims found for incoming pod..")
    [ev] = events(sim, reason="FailedScheduling", name="huge2")
    assert ev["message"] == expected and ev["type"] == "Warning"
    assert ev["source"]["component"] == "default-scheduler"
    cond = condition(pod, "PodScheduled")
    assert (cond["status"], cond["reason"], cond["message"]) == ("False", "Unschedulable", expected)


def test_unschedulable_pod_is_retried_periodically_and_when_gpus_free_up():
    """The scheduler retries (the event count grows) and binds once a GPU consumer goes away."""
    sim = small()
    create(sim, PODS, _gpu_pod("huge", 6))
    create(sim, PODS, _gpu_pod("waiting", 6))
    sim.advance(125)
    assert events(sim, reason="FailedScheduling", name="waiting")[0]["count"] >= 3
    sim.store.delete(PODS, "ml-team", "trainer-0")
    sim.advance(3)
    assert get(sim, PODS, "ml-team", "waiting")["spec"]["nodeName"] == "gpu-node1"


def test_untolerated_taint_is_reported():
    """A node that stopped reporting is skipped with its unreachable taint in the message."""
    sim = small()
    sim.controllers["kubelet"].set_node_ready("gpu-node3", False)
    sim.settle()
    create(sim, PODS, _gpu_pod("big", 8))
    [ev] = events(sim, reason="FailedScheduling", name="big")
    assert ev["message"].startswith(
        "0/4 nodes are available: 1 node(s) had untolerated taint {node.kubernetes.io/unreachable: }, "
        "3 Insufficient nvidia.com/gpu. preemption: 0/4 nodes are available: 1 Preemption is not helpful")


def test_daemonset_pods_and_bound_pods_are_left_alone():
    """Pods that already name a node are never touched by the scheduler."""
    sim = small()
    pod = _gpu_pod("pinned", 6)
    pod["spec"]["nodeName"] = "gpu-node1"
    create(sim, PODS, pod)
    assert get(sim, PODS, "ml-team", "pinned")["spec"]["nodeName"] == "gpu-node1"
    assert not events(sim, reason="FailedScheduling") and not events(sim, reason="Scheduled", name="pinned")
