"""What matters among events, and the bounded, deduplicated tally of a run (pure)."""

from __future__ import annotations

import json
from typing import Any

from runbooks.stability.collecting import Counting
from runbooks.stability.tallying import KUBELET_RESTART, MAX_KEYS, MAX_REASONS, Scope, Tally

SCOPE = Scope(namespace="kube-system", daemonset="nvidia-device-plugin-daemonset",
              nodes=frozenset({"gpu-node1", "gpu-node2"}), gpu_resources=("nvidia.com/gpu",),
              drivers=("gpu.example.com", "k8s-device-plugin"), since="2025-01-06T09:00:00")
AT = "2025-01-06T10:00:00Z"


def event(reason: str, *, uid: str = "u1", count: int = 1, kind: str = "Pod", name: str = "trainer-0",
          namespace: str = "ml-team", host: str | None = "gpu-node1", message: str = "", type: str = "Warning",
          first: str = AT, last: str | None = None) -> dict[str, Any]:
    return {"metadata": {"uid": uid, "name": f"{name}.{uid}", "namespace": namespace or "default"},
            "involvedObject": {"kind": kind, "name": name, "namespace": namespace},
            "reason": reason, "message": message, "type": type, "count": count,
            "source": {"component": "kubelet", **({"host": host} if host else {})},
            "firstTimestamp": first, "lastTimestamp": last or first}


def test_scheduling_failures_matter_only_for_lack_of_a_gpu_resource() -> None:
    """FailedScheduling counts when it says Insufficient nvidia.com/gpu, not for lack of cpu."""
    assert SCOPE.matters(event("FailedScheduling", host=None, message="0/4 nodes: 3 Insufficient nvidia.com/gpu"))
    assert SCOPE.matters(event("FailedScheduling", host=None, message="0/4 nodes: 4 Insufficient cpu")) is None


def test_pod_trouble_matters_on_gpu_nodes_and_for_the_plugins_own_pods() -> None:
    """BackOff on a GPU node or of a plugin pod matters; on a cpu node of another pod it does not."""
    assert SCOPE.matters(event("BackOff", host="gpu-node2"))
    plugin = SCOPE.matters(event("BackOff", host=None, namespace="kube-system", name="nvidia-device-plugin-daemonset-x1"))
    assert plugin is not None and plugin.object == "pod/kube-system/nvidia-device-plugin-daemonset-x1"
    assert SCOPE.matters(event("BackOff", host="cpu-node1")) is None
    assert SCOPE.matters(event("UnexpectedAdmissionError", host="cpu-node1")), "admission errors matter anywhere"


def test_warnings_naming_the_driver_matter_and_normal_events_do_not() -> None:
    """A Warning whose message names the driver counts; a Normal 'Pulled …k8s-device-plugin' does not."""
    assert SCOPE.matters(event("PluginFailed", host="cpu-node1", message="gpu.example.com: device lost"))
    assert SCOPE.matters(event("Pulled", type="Normal", message="image k8s-device-plugin:v0.17.0 present")) is None


def test_a_kubelet_restart_of_a_gpu_node_is_tallied_as_such() -> None:
    """The kubelet's Starting event of a GPU node becomes KubeletRestart; of another node nothing."""
    seen = SCOPE.matters(event("Starting", kind="Node", name="gpu-node2", namespace="", host="gpu-node2", type="Normal"))
    assert seen is not None and seen.reason == KUBELET_RESTART and seen.object == "node/gpu-node2"
    assert SCOPE.matters(event("Starting", kind="Node", name="cpu-node1", namespace="", host="cpu-node1")) is None


def test_redelivered_events_count_once_and_recurrences_by_their_difference() -> None:
    """The same uid and count adds nothing; count 1 -> 4 adds 3; a deletion forgets the uid."""
    counting = Counting(SCOPE)
    counting.apply("ADDED", event("BackOff", count=1))
    counting.apply("ADDED", event("BackOff", count=1))
    counting.apply("MODIFIED", event("BackOff", count=4, last="2025-01-06T10:05:00Z"))
    counting.apply("MODIFIED", event("BackOff", count=2))
    entry = counting.tally.reasons["BackOff"]
    assert (entry.count, entry.first, entry.last, counting.tally.events) == (4, "2025-01-06T10:00:00", "2025-01-06T10:05:00", 1)
    assert entry.nodes == {"gpu-node1": 4} and entry.objects == {"pod/ml-team/trainer-0": 4}
    counting.apply("DELETED", event("BackOff", count=4))
    assert counting.seen == {} and counting.take_changes() == ({}, {"u1"})


def test_events_older_than_the_window_do_not_count() -> None:
    """Last seen before the promotion: nothing; began before and recurred in the window: once."""
    counting = Counting(SCOPE)
    counting.apply("ADDED", event("BackOff", uid="old", count=9, first="2025-01-06T08:00:00Z", last="2025-01-06T08:30:00Z"))
    counting.apply("ADDED", event("BackOff", uid="again", count=9, first="2025-01-06T08:00:00Z", last="2025-01-06T09:10:00Z"))
    assert counting.tally.reasons["BackOff"].count == 1
    counting.apply("MODIFIED", event("BackOff", uid="old", count=10, first="2025-01-06T08:00:00Z", last="2025-01-06T09:20:00Z"))
    assert counting.tally.reasons["BackOff"].count == 2


def test_the_tally_is_bounded_however_many_nodes_objects_and_reasons() -> None:
    """Beyond the caps events count as 'other': the JSON stays small."""
    counting = Counting(Scope(namespace="x", daemonset="y", nodes=frozenset(), drivers=("drv",), since=""))
    for i in range(5_000):
        counting.apply("ADDED", event(f"Reason{i % (MAX_REASONS + 8)}", uid=f"u{i}", host=f"node{i}", name=f"pod{i}",
                                      message=f"drv failed {i}"))
    tally = counting.tally
    assert len(tally.reasons) == MAX_REASONS and tally.total == 5_000 and tally.other > 0
    assert all(len(r.nodes) <= MAX_KEYS and len(r.samples) <= 3 for r in tally.reasons.values())
    first = tally.reasons["Reason0"]
    assert first.count == sum(first.nodes.values()) + first.other_nodes
    text = json.dumps(tally.to_dict())
    assert len(text) < 100_000
    assert Tally.from_dict(json.loads(text)).to_dict() == tally.to_dict()
