"""The objects ``migrate`` plans (item 2 of issue 38), from workloads as a real API server returns
them: what the server set is left out, a Job's generated selector too, and a pinned pod's node
becomes a required node affinity ANDed into each affinity term it already has."""

from __future__ import annotations

from typing import Any

from runbooks.dra.migrating import plan

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
UID = "6f1c1c0e-0000-4000-8000-000000000001"


def _container() -> dict[str, Any]:
    return {"name": "train", "image": "registry.example.com/ml/trainer:2.1.0",
            "resources": {"limits": {"nvidia.com/gpu": "1"}}}


def _meta(name: str) -> dict[str, Any]:
    return {"name": name, "namespace": "ml-team", "uid": UID, "resourceVersion": "42",
            "creationTimestamp": "2026-01-01T00:00:00Z", "managedFields": [{"manager": "kubectl"}],
            "annotations": {LAST_APPLIED: "{}", "team": "ml"}}


def test_a_jobs_generated_selector_and_labels_are_left_for_the_server_to_make_again() -> None:
    """A Job read back carries the selector and labels the server generated; applied again they are
    refused (a selector not generated for the new Job), so the plan leaves them out."""
    labels = {"batch.kubernetes.io/controller-uid": UID, "controller-uid": UID, "batch.kubernetes.io/job-name": "j",
              "job-name": "j", "team": "ml"}
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": _meta("j"),
           "spec": {"selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": UID}},
                    "template": {"metadata": {"labels": labels},
                                 "spec": {"restartPolicy": "Never", "containers": [_container()]}}},
           "status": {"active": 1}}
    _, objects = plan(job, "Job", version="v1", device_class="gpu.example.com", resources=("nvidia.com/gpu",))
    new = objects[-1]
    assert "selector" not in new["spec"] and new["spec"]["template"]["metadata"]["labels"] == {"team": "ml"}
    assert new["metadata"] == {"name": "j", "namespace": "ml-team", "annotations": {"team": "ml"}}
    assert "status" not in new


def test_a_pinned_pods_node_is_anded_into_each_affinity_term_it_has() -> None:
    """spec.nodeName goes; each required term gains ``kubernetes.io/hostname In [node]`` (terms are
    ORed, expressions ANDed), so the pod may only go back to its node; owner references go too."""
    term = {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {**_meta("p"), "ownerReferences": [{"kind": "ReplicaSet", "name": "rs", "controller": True}]},
           "spec": {"nodeName": "gpu-node2", "containers": [_container()],
                    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [term, {"matchFields": [{"key": "metadata.name", "operator": "In",
                                                                      "values": ["gpu-node2"]}]}]}}}}}
    _, objects = plan(pod, "Pod", version="v1", device_class="gpu.example.com", resources=("nvidia.com/gpu",))
    spec = objects[-1]["spec"]
    pin = {"key": "kubernetes.io/hostname", "operator": "In", "values": ["gpu-node2"]}
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert "nodeName" not in spec
    assert terms == [{"matchExpressions": [{"key": "gpu", "operator": "Exists"}, pin]},
                     {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-node2"]}],
                      "matchExpressions": [pin]}]
    assert "ownerReferences" not in objects[-1]["metadata"]
    assert pod["spec"]["nodeName"] == "gpu-node2"  # the workload read is left as it was
