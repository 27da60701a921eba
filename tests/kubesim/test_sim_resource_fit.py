"""Issue 61 item 2: kubesim's scheduler fits cpu, memory and extended resources for every pod as
kube-scheduler's NodeResourcesFit does, DaemonSet pods included (bound by the scheduler since 1.12),
and a pod that fits nowhere says why as the real scheduler does, per release."""

from __future__ import annotations

import pytest
from _simkit import DAEMONSETS, PODS, condition, create, daemonset, events, get, pods_of, small

from kubesim import resourcefit
from kubesim.scheduling import fit_error, named_nodes

NS, DS = "kube-system", "nvidia-device-plugin-daemonset"


def _ask(sim, **requests: str) -> None:  # type: ignore[no-untyped-def]
    """The plugin DaemonSet's container asks for ``requests``; the pod on gpu-node1 is replaced."""
    def edit(obj):  # type: ignore[no-untyped-def]
        obj["spec"]["updateStrategy"] = {"type": "OnDelete"}
        obj["spec"]["template"]["spec"]["containers"][0]["resources"] = {"requests": dict(requests)}

    sim.store.mutate(DAEMONSETS, NS, DS, edit)
    sim.settle()
    [old] = [p for p in pods_of(sim, NS, "app.kubernetes.io/name", "nvidia-device-plugin")
             if p["spec"].get("nodeName") == "gpu-node1"] or [
        p for p in sim.store.list(PODS, NS) if p["metadata"]["name"].startswith(DS) and p["spec"].get("nodeName") == "gpu-node1"]
    sim.store.delete(PODS, NS, old["metadata"]["name"], grace_seconds=0)
    sim.advance(5)


def _pending(sim) -> dict:  # type: ignore[no-untyped-def]
    return next(p for p in sim.store.list(PODS, NS)
                if p["metadata"]["name"].startswith(DS) and not p["spec"].get("nodeName")
                and not p["metadata"].get("deletionTimestamp"))


@pytest.mark.parametrize(("minor", "resource", "amount", "expected"), [
    (27, "cpu", "200", "0/4 nodes are available: 1 Insufficient cpu. preemption: 0/4 nodes are available: "
                       "1 No preemption victims found for incoming pod, 3 Preemption is not helpful for scheduling.."),
    (32, "cpu", "200", "0/4 nodes are available: 1 Insufficient cpu, 3 node(s) didn't satisfy plugin(s) [NodeAffinity]. "
                       "preemption: 0/4 nodes are available: 1 No preemption victims found for incoming pod, "
                       "3 Preemption is not helpful for scheduling.."),
    (34, "memory", "2Ti", "0/4 nodes are available: 1 Insufficient memory, 3 node(s) didn't satisfy plugin(s) "
                          "[NodeAffinity]. preemption: 0/4 nodes are available: 4 Preemption is not helpful for scheduling.."),
])
def test_a_daemon_pod_larger_than_its_node_stays_pending_with_the_schedulers_words(
        minor: int, resource: str, amount: str, expected: str) -> None:
    """The DaemonSet's new pod for gpu-node1 (96 CPUs, about 1007 GiB) asking 200 CPUs or 2Ti is not
    bound: PodScheduled=False, reason Unschedulable, and a FailedScheduling Warning from
    default-scheduler with the release's message (the other three nodes left out by NodeAffinity's
    PreFilter are named from 1.32; from 1.34 a request above the node's allocatable is not helped by
    preemption)."""
    sim = small(minor)
    _ask(sim, **{resource: amount})
    pod = _pending(sim)
    assert pod["status"]["phase"] == "Pending"
    cond = condition(pod, "PodScheduled")
    assert cond is not None and (cond["status"], cond["reason"], cond["message"]) == ("False", "Unschedulable", expected)
    [ev] = events(sim, reason="FailedScheduling", name=pod["metadata"]["name"])
    assert (ev["type"], ev["message"], ev["source"]["component"]) == ("Warning", expected, "default-scheduler")
    assert get(sim, DAEMONSETS, NS, DS)["status"]["currentNumberScheduled"] == 3  # the pod counts for its node


def test_a_daemon_pod_that_fits_is_bound_by_the_scheduler() -> None:
    """A pod asking what the node has (100m CPU, 1Ti is too much, 1.5Gi is not) is created unbound,
    pinned by node affinity, and bound by default-scheduler with its Scheduled event."""
    sim = small(34)
    _ask(sim, cpu="100m", memory="1.5Gi")
    pod = next(p for p in sim.store.list(PODS, NS) if p["metadata"]["name"].startswith(DS)
               and p["spec"].get("nodeName") == "gpu-node1" and not p["metadata"].get("deletionTimestamp"))
    assert named_nodes(pod["spec"]) == {"gpu-node1"}
    assert condition(pod, "PodScheduled")["status"] == "True"
    [ev] = events(sim, reason="Scheduled", name=pod["metadata"]["name"])
    assert ev["message"] == f"Successfully assigned {NS}/{pod['metadata']['name']} to gpu-node1"
    assert not events(sim, reason="FailedScheduling", name=pod["metadata"]["name"])


def test_cpu_and_memory_are_counted_against_what_running_pods_request() -> None:
    """NodeResourcesFit sums the requests of the pods bound to a node: a DaemonSet asking 60 CPUs
    fits every node of 96 once; a second one asking 60 more fits none of the GPU nodes."""
    sim = small(31)
    for name in ("first", "second"):
        ds = daemonset(name, node_selector={"nvidia.com/gpu.present": "true"})
        ds["spec"]["template"]["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "60"}}
        create(sim, DAEMONSETS, ds)
        sim.advance(2)
    assert all(p["spec"].get("nodeName") for p in pods_of(sim, "default", "app", "first"))
    second = pods_of(sim, "default", "app", "second")
    assert len(second) == 3 and not any(p["spec"].get("nodeName") for p in second)
    assert all("1 Insufficient cpu." in condition(p, "PodScheduled")["message"] for p in second)


def test_init_containers_sidecars_and_overhead_count_as_upstream_counts_them() -> None:
    """``resource.PodRequests``: containers summed, the largest init container (plus the sidecars
    started before it) where larger, sidecars added, overhead added; cpu in millicores."""
    spec = {
        "initContainers": [
            {"name": "sidecar", "restartPolicy": "Always", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
            {"name": "setup", "resources": {"requests": {"cpu": "3", "memory": "1Gi"}}},
        ],
        "containers": [{"name": "a", "resources": {"requests": {"cpu": "1", "memory": "2Gi"}}},
                       {"name": "b", "resources": {"limits": {"cpu": "1e0", "nvidia.com/gpu": "2"}}}],
        "overhead": {"cpu": "250m", "memory": "512Mi"},
    }
    assert resourcefit.pod_requests(spec) == {
        "cpu": 3500 + 250,  # max(1000+1000+500, 3000+500) + overhead
        "memory": 3 * 2**30 + 512 * 2**20,  # max(2Gi+1Gi, 1Gi+1Gi) + overhead
        "nvidia.com/gpu": 2,
    }


def test_fit_reasons_in_fit_go_order() -> None:
    """``fitsRequest``: Too many pods, then cpu, memory, ephemeral-storage, then the scalar ones."""
    alloc = {"cpu": 4000, "memory": 8, "pods": 2, "nvidia.com/gpu": 8}
    reasons, beyond = resourcefit.insufficient({"memory": 9, "cpu": 1000, "nvidia.com/gpu": 1}, alloc,
                                               {"cpu": 3500, "nvidia.com/gpu": 8}, 2)
    assert reasons == ["Too many pods", "Insufficient cpu", "Insufficient memory", "Insufficient nvidia.com/gpu"]
    assert beyond  # 9 bytes of memory asked of a node with 8


def test_the_message_counts_each_reason_of_each_node() -> None:
    """``FitError.Error()``: a reason counted per node that gave it, sorted as strings."""
    said = fit_error(31, 3, [(["Insufficient cpu", "Insufficient memory"], False), (["Insufficient cpu"], False),
                             (["node(s) were unschedulable"], True)], 0)
    assert said == ("0/3 nodes are available: 1 Insufficient memory, 1 node(s) were unschedulable, 2 Insufficient cpu. "
                    "preemption: 0/3 nodes are available: 1 Preemption is not helpful for scheduling, "
                    "2 No preemption victims found for incoming pod..")
