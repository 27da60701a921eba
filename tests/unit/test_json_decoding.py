"""The API server's JSON decoded (issue 39): pages, objects and watch events, from bytes."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from runbooks.cluster.decoding import (
    NotDecoded,
    decode_event,
    decode_json,
    decode_object,
    decode_page,
)

POD = {"metadata": {"name": "p1", "namespace": "ns", "labels": {"app": "x"},
                    "managedFields": [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}]},
       "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i:1"}]},
       "status": {"phase": "Running"}}


def page(**fields: object) -> bytes:
    return json.dumps({"apiVersion": "v1", "kind": "PodList", **fields}).encode()


def test_a_page_is_its_items_as_dicts_and_where_the_list_goes_on() -> None:
    """issue 39: a page's items are the objects as sent, less metadata.managedFields; its
    continue token and resourceVersion are read from the list's metadata."""
    decoded = decode_page(page(metadata={"resourceVersion": "42", "continue": "abc"}, items=[POD, POD]))
    assert (decoded.token, decoded.resource_version) == ("abc", "42")
    expected = {**POD, "metadata": {k: v for k, v in POD["metadata"].items() if k != "managedFields"}}
    assert decoded.objects == [expected, expected]


@pytest.mark.parametrize("body", [page(), page(items=None, metadata={}), page(items=[], metadata={"continue": ""})])
def test_an_empty_or_last_page(body: bytes) -> None:
    """issue 39: no items (absent or null) is an empty page; no continue token ends the list."""
    decoded = decode_page(body)
    assert (decoded.objects, decoded.token, decoded.resource_version) == ([], "", "")


@pytest.mark.parametrize("body", [b"<html>502 Bad Gateway</html>", b"", b"[1, 2]", page(items=[1, 2]),
                                  page(items={"a": 1}), page(metadata={"continue": 7})])
def test_a_body_that_is_not_a_list_page_is_refused(body: bytes) -> None:
    """issue 39: HTML, nothing, or JSON of another shape is NotDecoded (a ValueError) with a reason."""
    with pytest.raises(NotDecoded) as caught:
        decode_page(body)
    assert isinstance(caught.value, ValueError) and str(caught.value)


def test_objects_and_write_answers() -> None:
    """issue 39: one object is a dict (managedFields kept: a get answers with the whole object);
    a write's answer may be any JSON; anything else is NotDecoded."""
    assert decode_object(json.dumps(POD).encode()) == POD
    assert decode_json(b"[1]") == [1]
    for body in (b"[1]", b"not json"):
        with pytest.raises(NotDecoded):
            decode_object(body)


def test_watch_events() -> None:
    """issue 39: a watch line is {type, object}, the object as a list item is; an ERROR's Status
    is kept whole; a line that is not an event is NotDecoded."""
    event = decode_event(json.dumps({"type": "MODIFIED", "object": POD}).encode())
    assert event["type"] == "MODIFIED" and "managedFields" not in event["object"]["metadata"]
    assert event["object"]["spec"] == POD["spec"]
    status = {"kind": "Status", "code": 410, "message": "too old"}
    assert decode_event(json.dumps({"type": "ERROR", "object": status}).encode()) == {"type": "ERROR", "object": status}
    for line in (b"{", b"[]", b'{"type": "ADDED", "object": [1]}'):
        with pytest.raises(NotDecoded):
            decode_event(line)


FULL_POD = {
    "metadata": {"name": "plugin-x", "namespace": "kube-system", "uid": "u-1", "labels": {"controller-revision-hash": "abc"},
                 "ownerReferences": [{"uid": "ds-1", "controller": True, "kind": "DaemonSet"}],
                 "annotations": {"big": "x" * 1000}, "managedFields": [{"manager": "kubelet"}]},
    "spec": {"nodeName": "gpu-node1", "volumes": [{"name": "v", "hostPath": {"path": "/var"}}],
             "containers": [{"name": "plugin", "image": "nvcr.io/p:v1", "env": [{"name": "A", "value": "1"}],
                             "resources": {"limits": {"nvidia.com/gpu": "2"}, "requests": {"cpu": "100m"}}}],
             "resourceClaims": [{"name": "gpu", "resourceClaimName": "claim-a"},
                                {"name": "old", "source": {"resourceClaimName": "claim-b"}}]},
    "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "message": "no fit"}],
               "containerStatuses": [{"name": "plugin", "restartCount": 3, "imageID": "nvcr.io/p@sha256:" + "0" * 64,
                                      "state": {"waiting": {"reason": "CrashLoopBackOff"}}}],
               "resourceClaimStatuses": [{"name": "t", "resourceClaimName": "plugin-x-t-1"}]},
}


def test_a_page_decoded_as_shapes_reads_what_the_dicts_read() -> None:
    """issue 39: a list page decoded as :class:`PodShape` (the fields no reader reads skipped) gives
    the inventory the same plugin pod and the same use of GPUs and claims as the pod decoded as a
    dict (a watch cache's, read by the dict's own reader); nodes and slices likewise, a slice's
    devices counted without their attributes."""
    from runbooks.cluster.decoding import NodeShape, PodShape, SliceShape
    from runbooks.inventory import reading
    from runbooks.inventory.pod_use import pod_use

    decoded = decode_page(page(metadata={"continue": "next"}, items=[FULL_POD]), item=PodShape)
    assert decoded.token == "next" and len(decoded.objects) == 1
    shape = decoded.objects[0]
    assert isinstance(shape, PodShape)
    assert reading.pod_from(shape) == reading.pod_from(FULL_POD)
    assert reading.pod_from(shape).model_dump() == {
        "name": "plugin-x", "node": "gpu-node1", "phase": "Pending", "ready": False, "restarts": 3,
        "crashloop": True, "waiting_reason": "CrashLoopBackOff", "images": {"plugin": "nvcr.io/p:v1"},
        "image_ids": {"plugin": "nvcr.io/p@sha256:" + "0" * 64},
        "revision_hash": "abc", "registered": None, "uid": "u-1", "deleting": False, "started": {},
        "unschedulable": None}
    use = pod_use(shape, ("nvidia.com/gpu",))
    assert use == pod_use(FULL_POD, ("nvidia.com/gpu",))
    assert use is not None and use.requests == {"nvidia.com/gpu": 2} and use.unschedulable == "no fit"
    assert use.claims == ["claim-a", "claim-b", "plugin-x-t-1"]

    node = {"metadata": {"name": "gpu-node1", "labels": {"nvidia.com/gpu.present": "true"}},
            "spec": {"unschedulable": True, "taints": [{"key": "k", "effect": "NoSchedule"}]},
            "status": {"capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "7"},
                       "conditions": [{"type": "Ready", "status": "True"}], "images": [{"names": ["a"]}],
                       "nodeInfo": {"kubeletVersion": "v1.31.13", "osImage": "Ubuntu"}}}
    nodes = decode_page(page(items=[node]), item=NodeShape).objects
    assert reading.node_from(nodes[0], ("nvidia.com/gpu",)) == reading.node_from(node, ("nvidia.com/gpu",))
    assert reading.node_from(nodes[0], ("nvidia.com/gpu",)).allocatable == {"nvidia.com/gpu": 7}

    devices = [{"name": f"gpu-{i}", "basic": {"attributes": {"index": {"int": i}}}} for i in range(8)]
    slices = [{"metadata": {"name": "s1", "creationTimestamp": "2026-12-07T12:00:00Z",
                            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "gpu-node1", "uid": "n"}],
                            "managedFields": [{"manager": "gpu-kubelet-plugin", "time": "2026-12-07T12:00:09Z"}]},
               "spec": {"driver": "gpu.example.com", "nodeName": "gpu-node1",
                        "pool": {"name": "p", "generation": 2, "resourceSliceCount": 1}, "devices": devices}},
              {"metadata": {"name": "s0"}, "driverName": "gpu.example.com", "nodeName": "gpu-node2",
               "namedResources": {"instances": devices[:2]}}]
    typed = decode_page(page(items=slices), item=SliceShape).objects
    assert [reading.slice_from(s) for s in typed] == [reading.slice_from(s) for s in slices]
    assert [(s.devices, s.pool) for s in map(reading.slice_from, typed)] == [(8, "p"), (2, "gpu-node2")]
    first = reading.slice_from(typed[0])  # who published it, and when (issue 59: registration seen in the API)
    assert (first.owner_node, first.generation, first.slice_count) == ("gpu-node1", 2, 1)
    assert (first.created, first.written) == (dt.datetime(2026, 12, 7, 12, tzinfo=dt.UTC),
                                              dt.datetime(2026, 12, 7, 12, 0, 9, tzinfo=dt.UTC))


@pytest.mark.parametrize("obj", [
    {}, {"metadata": {}, "spec": {}, "status": {}},
    {"metadata": {"name": "p", "ownerReferences": [{"uid": "u"}], "deletionTimestamp": "2026-01-01T00:00:00Z"},
     "spec": {"containers": [{"name": "c"}], "taints": [{"key": "k", "value": "v", "effect": "NoExecute"}]},
     "status": {"phase": "Running", "containerStatuses": [{"state": {"running": {}}}],
                "conditions": [{"type": "Ready", "status": "True"}]}},
    {"spec": {"resourceClaims": [{"name": "x", "resourceClaimTemplateName": "t"}]}, "status": {"phase": "Pending"}},
])
def test_sparse_objects_read_the_same_as_shapes_and_as_dicts(obj: dict[str, object]) -> None:
    """issue 39: what an object lacks reads the same from its shape as from its dict (pods, nodes, slices)."""
    from runbooks.cluster.decoding import NodeShape, PodShape, SliceShape
    from runbooks.inventory import reading
    from runbooks.inventory.pod_use import pod_use

    pod, = decode_page(page(items=[obj]), item=PodShape).objects
    assert reading.pod_from(pod) == reading.pod_from(obj) and reading.owner_uids(pod) == reading.owner_uids(obj)
    assert pod_use(pod, ("nvidia.com/gpu",)) == pod_use(obj, ("nvidia.com/gpu",))
    node, = decode_page(page(items=[obj]), item=NodeShape).objects
    assert reading.node_from(node, ("nvidia.com/gpu",)) == reading.node_from(obj, ("nvidia.com/gpu",))
    found, = decode_page(page(items=[obj]), item=SliceShape).objects
    assert reading.slice_from(found) == reading.slice_from(obj)


UNBOUND = {  # a DaemonSet's new pod the scheduler could not place (kube-controller-manager pins it by affinity)
    "metadata": {"name": "plugin-y", "namespace": "kube-system", "uid": "u-2"},
    "spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-node1"]}]}]}}},
        "containers": [{"name": "plugin", "image": "nvcr.io/p:v2"}]},
    "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                                   "message": "0/4 nodes are available: 1 Insufficient cpu."}]},
}


def test_an_unbound_daemon_pod_is_read_on_the_node_it_is_pinned_to() -> None:
    """issue 61 item 2: a pod without ``spec.nodeName`` is the plugin pod of the node its
    ``metadata.name`` affinity term names (``GetTargetNodeName``), and the scheduler's message of
    its ``PodScheduled=False``/``Unschedulable`` condition is kept, from a shape as from a dict."""
    from runbooks.cluster.decoding import PodShape
    from runbooks.inventory import reading

    shape, = decode_page(page(items=[UNBOUND]), item=PodShape).objects
    for pod in (reading.pod_from(shape), reading.pod_from(UNBOUND)):
        assert (pod.node, pod.unschedulable) == ("gpu-node1", "0/4 nodes are available: 1 Insufficient cpu.")
    scheduled = {**UNBOUND, "status": {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated", "message": "gated"}]}}
    assert reading.pod_from(scheduled).unschedulable is None
