"""The API server's JSON decoded (issue 39): pages, objects and watch events, from bytes."""

from __future__ import annotations

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
