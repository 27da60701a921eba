"""Tests for kubesim.patching: RFC 7386, RFC 6902 and strategic merge patch."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kubesim.patching import (
    MERGE_KEYS,
    PatchError,
    json_merge_patch,
    json_patch,
    strategic_merge_patch,
)

# ----------------------------------------------------------------- strategies
# shared machines can be slow: no deadlines, no "too slow" health check
_settings = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
_keys = st.text(alphabet="abcdefgh", min_size=1, max_size=4)
_scalars = st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=4)
_json = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_keys, inner, max_size=3),
    max_leaves=10,
)
_objects = st.dictionaries(_keys, _json, max_size=4)
# maps of maps of non-null scalars: where SMP and RFC 7386 must agree
_plain = st.recursive(
    st.booleans() | st.integers(-5, 5) | st.text(max_size=4),
    lambda inner: st.dictionaries(_keys, inner, max_size=3),
    max_leaves=8,
)
_plain_objects = st.dictionaries(_keys, _plain, max_size=4)


def _daemonset() -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "x", "namespace": "gpu", "labels": {"app": "x"}},
        "spec": {
            "selector": {"matchLabels": {"app": "x"}},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
            "template": {
                "metadata": {"labels": {"app": "x"}},
                "spec": {
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                    "containers": [
                        {
                            "name": "ctr",
                            "image": "img:v1",
                            "args": ["--fail-on-init-error=false"],
                            "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                            "volumeMounts": [
                                {"name": "dp", "mountPath": "/var/lib/kubelet/device-plugins"},
                                {"name": "cdi", "mountPath": "/var/run/cdi"},
                            ],
                        },
                        {"name": "sidecar", "image": "side:v1"},
                    ],
                    "volumes": [
                        {"name": "dp", "hostPath": {"path": "/var/lib/kubelet/device-plugins"}},
                        {"name": "cdi", "hostPath": {"path": "/var/run/cdi"}},
                    ],
                },
            },
        },
    }


# -------------------------------------------------------------- RFC 7386 merge
@pytest.mark.parametrize(
    ("target", "patch", "expected"),
    [
        ({"a": "b"}, {"a": "c"}, {"a": "c"}),
        ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
        ({"a": "b"}, {"a": None}, {}),
        ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
        ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
        ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
        ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
        ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
        (["a", "b"], ["c", "d"], ["c", "d"]),
        ({"a": "b"}, ["c"], ["c"]),
        ({"a": "foo"}, None, None),
        ({"a": "foo"}, "bar", "bar"),
        ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
        ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
        ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
    ],
)
def test_json_merge_patch_rfc7386_examples(target: Any, patch: Any, expected: Any) -> None:
    """The RFC 7386 appendix A examples produce the documented results."""
    assert json_merge_patch(target, patch) == expected


def test_json_merge_patch_does_not_mutate_inputs() -> None:
    """Neither the target nor the patch is modified, and the result shares nothing."""
    target = {"a": {"b": [1, 2]}, "c": 1}
    patch = {"a": {"d": {"e": 1}}, "c": None}
    before_t, before_p = copy.deepcopy(target), copy.deepcopy(patch)
    result = json_merge_patch(target, patch)
    result["a"]["b"].append(3)
    result["a"]["d"]["e"] = 2
    assert (target, patch) == (before_t, before_p)


def test_json_merge_patch_replaces_lists_wholesale() -> None:
    """Lists are never merged by RFC 7386, even lists of maps with names."""
    ds = _daemonset()
    patch = {"spec": {"template": {"spec": {"containers": [{"name": "ctr", "image": "v2"}]}}}}
    result = json_merge_patch(ds, patch)
    assert result["spec"]["template"]["spec"]["containers"] == [{"name": "ctr", "image": "v2"}]


@_settings
@given(_objects)
def test_json_merge_patch_with_empty_patch_is_identity(target: dict) -> None:
    """Merging ``{}`` into any object returns an equal object."""
    assert json_merge_patch(target, {}) == target


@_settings
@given(_objects, _objects)
def test_json_merge_patch_is_idempotent(target: dict, patch: dict) -> None:
    """Applying the same merge patch twice equals applying it once."""
    once = json_merge_patch(target, patch)
    assert json_merge_patch(once, patch) == once


# ------------------------------------------------------------ RFC 6902 patch
@pytest.mark.parametrize(
    ("target", "ops", "expected"),
    [
        ({"foo": "bar"}, [{"op": "add", "path": "/baz", "value": "qux"}],
         {"baz": "qux", "foo": "bar"}),
        ({"foo": ["bar", "baz"]}, [{"op": "add", "path": "/foo/1", "value": "qux"}],
         {"foo": ["bar", "qux", "baz"]}),
        ({"baz": "qux", "foo": "bar"}, [{"op": "remove", "path": "/baz"}], {"foo": "bar"}),
        ({"foo": ["bar", "qux", "baz"]}, [{"op": "remove", "path": "/foo/1"}],
         {"foo": ["bar", "baz"]}),
        ({"baz": "qux", "foo": "bar"}, [{"op": "replace", "path": "/baz", "value": "boo"}],
         {"baz": "boo", "foo": "bar"}),
        ({"foo": {"bar": "baz", "waldo": "fred"}, "qux": {"corge": "grault"}},
         [{"op": "move", "from": "/foo/waldo", "path": "/qux/thud"}],
         {"foo": {"bar": "baz"}, "qux": {"corge": "grault", "thud": "fred"}}),
        ({"foo": ["all", "grass", "cows", "eat"]},
         [{"op": "move", "from": "/foo/1", "path": "/foo/3"}],
         {"foo": ["all", "cows", "eat", "grass"]}),
        ({"baz": "qux", "foo": ["a", 2, "c"]},
         [{"op": "test", "path": "/baz", "value": "qux"},
          {"op": "test", "path": "/foo/1", "value": 2}],
         {"baz": "qux", "foo": ["a", 2, "c"]}),
        ({"foo": "bar"}, [{"op": "add", "path": "/child", "value": {"grandchild": {}}}],
         {"foo": "bar", "child": {"grandchild": {}}}),
        ({"foo": ["bar"]}, [{"op": "add", "path": "/foo/-", "value": ["abc", "def"]}],
         {"foo": ["bar", ["abc", "def"]]}),
        ({"/": 9, "~1": 10}, [{"op": "test", "path": "/~01", "value": 10},
                              {"op": "replace", "path": "/~1", "value": 1}],
         {"/": 1, "~1": 10}),
        ({"a": {"b": 1}}, [{"op": "copy", "from": "/a", "path": "/c"}],
         {"a": {"b": 1}, "c": {"b": 1}}),
        ({"a": 1}, [{"op": "replace", "path": "", "value": {"b": 2}}], {"b": 2}),
        ({"a": [1, 2]}, [{"op": "add", "path": "/a/2", "value": 3}], {"a": [1, 2, 3]}),
        ({"a": 1}, [{"op": "move", "from": "/a", "path": "/a"}], {"a": 1}),
    ],
)
def test_json_patch_rfc6902_examples(target: Any, ops: list, expected: Any) -> None:
    """The RFC 6902 appendix A operations produce the documented documents."""
    assert json_patch(target, ops) == expected


@pytest.mark.parametrize(
    ("target", "ops"),
    [
        ({"foo": "bar"}, [{"op": "add", "path": "/baz/bat", "value": "qux"}]),
        ({"foo": "bar"}, [{"op": "remove", "path": "/nope"}]),
        ({"foo": "bar"}, [{"op": "replace", "path": "/nope", "value": 1}]),
        ({"foo": "bar"}, [{"op": "test", "path": "/foo", "value": "baz"}]),
        ({"/": 9}, [{"op": "test", "path": "/~01", "value": "10"}]),
        ({"a": "10"}, [{"op": "test", "path": "/a", "value": 10}]),
        ({"a": True}, [{"op": "test", "path": "/a", "value": 1}]),
        ({"foo": "bar"}, [{"op": "frobnicate", "path": "/foo"}]),
        ({"foo": "bar"}, [{"op": "add", "path": "/x"}]),
        ({"foo": "bar"}, [{"op": "add", "value": 1}]),
        ({"foo": [1]}, [{"op": "add", "path": "/foo/5", "value": 1}]),
        ({"foo": [1]}, [{"op": "remove", "path": "/foo/01"}]),
        ({"foo": [1]}, [{"op": "remove", "path": "/foo/-"}]),
        ({"foo": [1]}, [{"op": "replace", "path": "/foo/x", "value": 1}]),
        ({"a": {"b": 1}}, [{"op": "move", "from": "/a", "path": "/a/b/c"}]),
        ({"a": 1}, [{"op": "copy", "from": "/zz", "path": "/b"}]),
        ({"a": 1}, [{"op": "add", "path": "a", "value": 1}]),
        ({"a": 1}, [{"op": "remove", "path": ""}]),
        ({"a": 1}, ["not an op"]),
    ],
)
def test_json_patch_errors_raise_patch_error(target: Any, ops: list) -> None:
    """Missing paths, bad ops, failed tests and bad indexes raise PatchError."""
    with pytest.raises(PatchError):
        json_patch(target, ops)


def test_json_patch_rejects_non_list_operations() -> None:
    """A JSON patch that is not a list of operations is rejected."""
    with pytest.raises(PatchError):
        json_patch({"a": 1}, {"op": "add", "path": "/b", "value": 1})  # type: ignore[arg-type]


def test_json_patch_is_atomic_and_does_not_mutate() -> None:
    """A failing operation leaves the target untouched, as does a successful patch."""
    target = {"a": [1, {"b": 2}]}
    before = copy.deepcopy(target)
    with pytest.raises(PatchError):
        json_patch(target, [{"op": "remove", "path": "/a/0"}, {"op": "remove", "path": "/zz"}])
    value = [1]
    result = json_patch(target, [{"op": "add", "path": "/a/1/c", "value": value}])
    result["a"][1]["c"].append(2)
    assert target == before
    assert value == [1]


def test_json_patch_kubectl_style_label_edit() -> None:
    """Escaped label keys with '/' are addressed through '~1'."""
    node = {"metadata": {"labels": {"nvidia.com/gpu.present": "true"}}}
    ops = [
        {"op": "replace", "path": "/metadata/labels/nvidia.com~1gpu.present", "value": "false"},
        {"op": "add", "path": "/metadata/labels/upgrade~0x", "value": "y"},
    ]
    result = json_patch(node, ops)
    assert result["metadata"]["labels"] == {"nvidia.com/gpu.present": "false", "upgrade~x": "y"}


@_settings
@given(_objects, _keys, _json)
def test_json_patch_add_then_remove_round_trips(target: dict, key: str, value: Any) -> None:
    """Adding a new member and removing it again gives back the original object."""
    target.pop(key, None)
    added = json_patch(target, [{"op": "add", "path": f"/{key}", "value": value}])
    assert json_patch(added, [{"op": "test", "path": f"/{key}", "value": value}]) == added
    assert json_patch(added, [{"op": "remove", "path": f"/{key}"}]) == target


# ------------------------------------------------------ strategic merge patch
def _containers(obj: dict) -> list[dict]:
    return obj["spec"]["template"]["spec"]["containers"]


def test_smp_kubectl_set_image_changes_only_that_image() -> None:
    """What `kubectl set image ds/x ctr=img:v2` sends changes only that container's image."""
    ds = _daemonset()
    ds["spec"]["template"]["spec"]["containers"].pop()  # a single container, as kubectl sees it
    patch = {"spec": {"template": {"spec": {
        "$setElementOrder/containers": [{"name": "ctr"}],
        "containers": [{"image": "img:v2", "name": "ctr"}],
    }}}}
    result = strategic_merge_patch(ds, patch)
    expected = copy.deepcopy(ds)
    expected["spec"]["template"]["spec"]["containers"][0]["image"] = "img:v2"
    assert result == expected


def test_smp_set_image_keeps_other_containers_and_fields() -> None:
    """Setting one image in a multi-container template keeps the other containers intact."""
    ds = _daemonset()
    patch = {"spec": {"template": {"spec": {
        "$setElementOrder/containers": [{"name": "ctr"}, {"name": "sidecar"}],
        "containers": [{"image": "img:v2", "name": "ctr"}],
    }}}}
    result = _containers(strategic_merge_patch(ds, patch))
    assert [c["name"] for c in result] == ["ctr", "sidecar"]
    assert result[0] == {**_containers(ds)[0], "image": "img:v2"}
    assert result[1] == _containers(ds)[1]


def test_smp_set_image_with_partial_element_order_keeps_unnamed_containers() -> None:
    """A $setElementOrder naming only the patched container still keeps the others."""
    ds = _daemonset()
    patch = {"spec": {"template": {"spec": {
        "$setElementOrder/containers": [{"name": "ctr"}],
        "containers": [{"image": "img:v2", "name": "ctr"}],
    }}}}
    result = _containers(strategic_merge_patch(ds, patch))
    assert [(c["name"], c["image"]) for c in result] == [("ctr", "img:v2"), ("sidecar", "side:v1")]


def test_smp_rollout_undo_replaces_template_wholesale() -> None:
    """A ControllerRevision's data with `$patch: replace` replaces the whole template."""
    ds = _daemonset()
    old_template = {
        "metadata": {"labels": {"app": "x"}},
        "spec": {"containers": [{"name": "ctr", "image": "img:v0"}]},
    }
    revision_data = {"spec": {"template": {**old_template, "$patch": "replace"}}}
    result = strategic_merge_patch(ds, revision_data)
    assert result["spec"]["template"] == old_template
    assert result["spec"]["updateStrategy"] == ds["spec"]["updateStrategy"]
    assert result["metadata"] == ds["metadata"]


def test_smp_env_merges_by_name() -> None:
    """Env vars merge by name: changed values update in place, others are kept."""
    ds = _daemonset()
    patch = {"spec": {"template": {"spec": {"containers": [
        {"name": "ctr", "env": [{"name": "B", "value": "20"}]},
    ]}}}}
    env = _containers(strategic_merge_patch(ds, patch))[0]["env"]
    assert env == [{"name": "A", "value": "1"}, {"name": "B", "value": "20"}]


def test_smp_volume_mounts_merge_by_mount_path() -> None:
    """volumeMounts merge by mountPath, so a renamed volume at the same path updates it."""
    ds = _daemonset()
    patch = {"spec": {"template": {"spec": {"containers": [{
        "name": "ctr",
        "volumeMounts": [{"name": "cdi2", "mountPath": "/var/run/cdi", "readOnly": True}],
    }]}}}}
    mounts = _containers(strategic_merge_patch(ds, patch))[0]["volumeMounts"]
    assert mounts == [
        {"name": "dp", "mountPath": "/var/lib/kubelet/device-plugins"},
        {"name": "cdi2", "mountPath": "/var/run/cdi", "readOnly": True},
    ]


def test_smp_null_deletes_keys() -> None:
    """A null value deletes the key; a null for a missing key is simply ignored."""
    ds = _daemonset()
    patch = {"metadata": {"labels": {"app": None, "ghost": None}},
             "spec": {"updateStrategy": {"rollingUpdate": None}}}
    result = strategic_merge_patch(ds, patch)
    assert result["metadata"]["labels"] == {}
    assert result["spec"]["updateStrategy"] == {"type": "RollingUpdate"}


def test_smp_null_inside_list_element_deletes_field() -> None:
    """A null inside a merged list element deletes that field of the element."""
    ds = _daemonset()
    patch = {"spec": {"template": {"spec": {"containers": [{"name": "ctr", "args": None}]}}}}
    assert "args" not in _containers(strategic_merge_patch(ds, patch))[0]


def test_smp_maps_merge_recursively() -> None:
    """Nested maps merge key by key."""
    target = {"metadata": {"labels": {"a": "1"}, "annotations": {"x": "y"}}}
    patch = {"metadata": {"labels": {"b": "2"}}}
    assert strategic_merge_patch(target, patch) == {
        "metadata": {"labels": {"a": "1", "b": "2"}, "annotations": {"x": "y"}}
    }


def test_smp_atomic_lists_are_replaced() -> None:
    """Lists without a merge key (tolerations, args) are replaced wholesale."""
    ds = _daemonset()
    patch = {"spec": {"template": {"spec": {
        "tolerations": [{"operator": "Exists"}],
        "containers": [{"name": "ctr", "args": ["--x"]}],
    }}}}
    result = strategic_merge_patch(ds, patch)
    assert result["spec"]["template"]["spec"]["tolerations"] == [{"operator": "Exists"}]
    assert _containers(result)[0]["args"] == ["--x"]
    assert MERGE_KEYS["tolerations"] is None


def test_smp_finalizers_are_unioned() -> None:
    """finalizers (a primitive list with merge strategy) are unioned without duplicates."""
    target = {"metadata": {"finalizers": ["a", "b"]}}
    result = strategic_merge_patch(target, {"metadata": {"finalizers": ["b", "c"]}})
    assert result["metadata"]["finalizers"] == ["a", "b", "c"]


def test_smp_delete_from_primitive_list() -> None:
    """$deleteFromPrimitiveList removes values and never adds a missing list."""
    target = {"metadata": {"finalizers": ["a", "b", "c"]}, "args": ["1", "2"]}
    patch = {"metadata": {"$deleteFromPrimitiveList/finalizers": ["b", "zz"]},
             "$deleteFromPrimitiveList/args": ["1"],
             "$deleteFromPrimitiveList/command": ["x"]}
    assert strategic_merge_patch(target, patch) == {"metadata": {"finalizers": ["a", "c"]},
                                                    "args": ["2"]}


def test_smp_delete_directive_removes_list_element() -> None:
    """`{"$patch": "delete", name: v}` removes every element with that merge key."""
    ds = _daemonset()
    patch = {"spec": {"template": {"spec": {
        "containers": [{"name": "sidecar", "$patch": "delete"}],
        "volumes": [{"name": "cdi", "$patch": "delete"}],
    }}}}
    result = strategic_merge_patch(ds, patch)
    assert [c["name"] for c in _containers(result)] == ["ctr"]
    assert [v["name"] for v in result["spec"]["template"]["spec"]["volumes"]] == ["dp"]


def test_smp_kubectl_edit_removing_a_container() -> None:
    """What kubectl edit/apply send to drop a container removes just that container."""
    patch = {"spec": {"template": {"spec": {
        "$setElementOrder/containers": [{"name": "ctr"}],
        "containers": [{"$patch": "delete", "name": "sidecar"}],
    }}}}
    result = strategic_merge_patch(_daemonset(), patch)
    assert _containers(result) == [_containers(_daemonset())[0]]


def test_smp_replace_directive_in_list_keeps_only_patch_elements() -> None:
    """A `{"$patch": "replace"}` list element makes the list exactly the other elements."""
    ds = _daemonset()
    patch = {"spec": {"template": {"spec": {"containers": [
        {"$patch": "replace"}, {"name": "only", "image": "o:1"},
    ]}}}}
    assert _containers(strategic_merge_patch(ds, patch)) == [{"name": "only", "image": "o:1"}]
    cleared = strategic_merge_patch(ds, {"metadata": {"ownerReferences": [{"$patch": "replace"}]}})
    assert cleared["metadata"]["ownerReferences"] == []


def test_smp_replace_directive_in_map() -> None:
    """`$patch: replace` in a map makes the map equal the patch map minus the directive."""
    target = {"spec": {"nodeSelector": {"a": "1", "b": "2"}}}
    patch = {"spec": {"nodeSelector": {"$patch": "replace", "c": "3"}}}
    assert strategic_merge_patch(target, patch) == {"spec": {"nodeSelector": {"c": "3"}}}
    assert strategic_merge_patch({"a": 1}, {"$patch": "replace", "b": 2}) == {"b": 2}


def test_smp_delete_directive_in_map_empties_it() -> None:
    """`$patch: delete` in a map empties it (the API server keeps an empty map)."""
    target = {"spec": {"nodeSelector": {"a": "1"}, "x": 1}}
    assert strategic_merge_patch(target, {"spec": {"nodeSelector": {"$patch": "delete"}}}) == {
        "spec": {"nodeSelector": {}, "x": 1}
    }
    assert strategic_merge_patch(target, {"$patch": "delete"}) == {}
    assert strategic_merge_patch(target, {"spec": {"new": {"$patch": "delete"}}}) == target


def test_smp_retain_keys_drops_unlisted_keys() -> None:
    """$retainKeys (kubectl apply switching updateStrategy type) clears unlisted fields."""
    ds = _daemonset()
    patch = {"spec": {"updateStrategy": {"$retainKeys": ["type"], "type": "OnDelete"}}}
    assert strategic_merge_patch(ds, patch)["spec"]["updateStrategy"] == {"type": "OnDelete"}


def test_smp_retain_keys_rejects_patch_fields_outside_the_list() -> None:
    """A patch field missing from $retainKeys is an invalid patch."""
    patch = {"spec": {"updateStrategy": {"$retainKeys": ["type"], "rollingUpdate": {}}}}
    with pytest.raises(PatchError, match="retainKeys"):
        strategic_merge_patch(_daemonset(), patch)


def test_smp_set_element_order_reorders_list() -> None:
    """$setElementOrder sets the order of the merged list, as kubectl apply/edit send it."""
    ds = _daemonset()
    patch = {"spec": {"template": {"spec": {
        "$setElementOrder/containers": [{"name": "sidecar"}, {"name": "ctr"}],
    }}}}
    assert [c["name"] for c in _containers(strategic_merge_patch(ds, patch))] == ["sidecar", "ctr"]
    target = {"metadata": {"finalizers": ["1", "3"]}}
    result = strategic_merge_patch(target, {"metadata": {"$setElementOrder/finalizers": ["3", "2", "1"]}})
    assert result["metadata"]["finalizers"] == ["3", "1"]


def test_smp_set_element_order_must_agree_with_patch_list() -> None:
    """A patch list whose order contradicts $setElementOrder is rejected."""
    target = {"conditions": [{"type": "1"}, {"type": "3"}, {"type": "2"}]}
    patch = {"$setElementOrder/conditions": [{"type": "1"}, {"type": "2"}, {"type": "3"}],
             "conditions": [{"type": "3", "v": 3}, {"type": "1", "v": 1}]}
    with pytest.raises(PatchError, match="doesn't match"):
        strategic_merge_patch(target, patch)


def test_smp_status_conditions_merge_by_type() -> None:
    """A kubelet-style status patch updates one condition and keeps the others."""
    pod = {"status": {"conditions": [
        {"type": "Initialized", "status": "True"},
        {"type": "Ready", "status": "False"},
    ]}}
    patch = {"status": {
        "$setElementOrder/conditions": [{"type": "Initialized"}, {"type": "Ready"}],
        "conditions": [{"type": "Ready", "status": "True"}],
    }}
    assert strategic_merge_patch(pod, patch)["status"]["conditions"] == [
        {"type": "Initialized", "status": "True"},
        {"type": "Ready", "status": "True"},
    ]


def test_smp_owner_references_merge_by_uid() -> None:
    """ownerReferences merge by uid."""
    target = {"metadata": {"ownerReferences": [{"uid": "1", "name": "a"}]}}
    patch = {"metadata": {"ownerReferences": [{"uid": "1", "controller": True}]}}
    assert strategic_merge_patch(target, patch)["metadata"]["ownerReferences"] == [
        {"uid": "1", "name": "a", "controller": True}
    ]


@pytest.mark.parametrize(
    ("original", "patch", "expected"),
    [
        (["1", "2", "3"], ["3", "1"], ["2", "3", "1"]),
        (["1", "2"], ["2", "3"], ["1", "2", "3"]),
        (["a", "b"], ["c"], ["c", "a", "b"]),
    ],
)
def test_smp_orders_merged_lists_like_the_api_server(
    original: list, patch: list, expected: list
) -> None:
    """Patch items keep patch order; server-only items slot in by original position."""
    as_maps = [{"type": v} for v in original]
    patch_maps = [{"type": v} for v in patch]
    assert strategic_merge_patch({"finalizers": original}, {"finalizers": patch}) == {
        "finalizers": expected
    }
    result = strategic_merge_patch({"conditions": as_maps}, {"conditions": patch_maps})
    assert [c["type"] for c in result["conditions"]] == expected


def test_smp_new_element_in_patch_order_and_merge_keys_override() -> None:
    """New elements follow patch order; merge_keys swaps the table (e.g. Service ports)."""
    ds = _daemonset()
    patch = {"spec": {"template": {"spec": {
        "$setElementOrder/containers": [{"name": "ctr"}, {"name": "sidecar"}, {"name": "new"}],
        "containers": [{"name": "new", "image": "n:1"}],
    }}}}
    names = [c["name"] for c in _containers(strategic_merge_patch(ds, patch))]
    assert names == ["ctr", "sidecar", "new"]
    svc = {"spec": {"ports": [{"port": 80, "name": "http"}, {"port": 443, "name": "https"}]}}
    result = strategic_merge_patch(svc, {"spec": {"ports": [{"port": 80, "targetPort": 8080}]}},
                                   merge_keys={"ports": "port"})
    assert result["spec"]["ports"] == [{"port": 80, "name": "http", "targetPort": 8080},
                                       {"port": 443, "name": "https"}]


def test_smp_directives_never_appear_in_result() -> None:
    """Directives and nulls inside values taken as-is from the patch are stripped."""
    patch = {"spec": {"template": {"spec": {
        "$setElementOrder/initContainers": [{"name": "i"}],
        "initContainers": [{"name": "i", "env": [{"name": "X", "$patch": "delete"}], "tty": None}],
        "affinity": {"nodeAffinity": {"$retainKeys": ["x"], "x": {"$patch": "delete"}}},
    }}}}
    result = strategic_merge_patch(_daemonset(), patch)
    spec = result["spec"]["template"]["spec"]
    assert spec["initContainers"] == [{"name": "i", "env": []}]
    assert spec["affinity"] == {"nodeAffinity": {}}
    assert "$" not in repr(result)


def test_smp_does_not_mutate_inputs() -> None:
    """The target and patch are left untouched and the result shares no structure."""
    ds = _daemonset()
    patch = {"spec": {"template": {"spec": {
        "$setElementOrder/containers": [{"name": "ctr"}, {"name": "sidecar"}],
        "containers": [{"name": "ctr", "image": "v2", "env": [{"name": "C", "value": "3"}]}],
    }}}}
    before_ds, before_patch = copy.deepcopy(ds), copy.deepcopy(patch)
    result = strategic_merge_patch(ds, patch)
    _containers(result)[0]["env"].append({"name": "Z"})
    assert (ds, patch) == (before_ds, before_patch)


@pytest.mark.parametrize(
    ("target", "patch", "message"),
    [
        ({"a": {"b": 1}}, {"a": {"$patch": "explode"}}, "unknown patch type"),
        ({"containers": [{"name": "a"}]}, {"containers": [{"image": "x"}]},
         "does not contain declared merge key: name"),
        ({"containers": [{"name": "a"}]}, {"containers": [{"$patch": "delete"}]},
         "merge key"),
        ({"containers": [{"name": "a"}]}, {"containers": [{"$patch": "merge", "name": "a"}]},
         "merging lists"),
        ({"containers": [{"name": "a"}]}, {"containers": [{"$patch": "bogus", "name": "a"}]},
         "unknown patch type"),
        ({"containers": [{"name": "a"}]}, {"containers": ["a"]}, "not identical"),
        ({"finalizers": ["a"]}, {"finalizers": [["a"]]}, "lists of lists"),
        ({"x": [1]}, {"$setElementOrder/x": "nope"}, "setElementOrder"),
        ({"x": [1]}, {"$setElementOrderx": [1]}, "setElementOrder"),
        ({"x": [1]}, {"$retainKeys": "x"}, "retainKeys"),
    ],
)
def test_smp_errors_raise_patch_error(target: dict, patch: dict, message: str) -> None:
    """Bad directives and list elements without their merge key raise PatchError."""
    with pytest.raises(PatchError, match=message):
        strategic_merge_patch(target, patch)


def test_smp_rejects_non_object_patch() -> None:
    """A strategic merge patch must be a JSON object."""
    with pytest.raises(PatchError):
        strategic_merge_patch({"a": 1}, [1])  # type: ignore[arg-type]


@_settings
@given(_objects)
def test_smp_with_empty_patch_is_identity(target: dict) -> None:
    """Applying ``{}`` as a strategic merge patch returns an equal object."""
    assert strategic_merge_patch(target, {}) == target


@_settings
@given(_plain_objects, _plain_objects)
def test_smp_agrees_with_merge_patch_on_plain_maps(target: dict, patch: dict) -> None:
    """Without lists or directives, strategic merge equals RFC 7386 merge."""
    assert strategic_merge_patch(target, patch) == json_merge_patch(target, patch)


@_settings
@given(st.lists(st.sampled_from("abcdef"), unique=True, max_size=5),
       st.lists(st.sampled_from("abcdef"), unique=True, max_size=5))
def test_smp_merge_lists_are_unions_and_idempotent(original: list, patch: list) -> None:
    """A merged list holds exactly the union of names, and re-applying changes nothing."""
    target = {"spec": {"containers": [{"name": n, "image": "old"} for n in original]}}
    smp = {"spec": {"containers": [{"name": n, "image": "new"} for n in patch]}}
    once = strategic_merge_patch(target, smp)
    names = [c["name"] for c in once["spec"]["containers"]]
    assert sorted(names) == sorted(set(original) | set(patch))
    assert all(c["image"] == ("new" if c["name"] in patch else "old")
               for c in once["spec"]["containers"])
    assert strategic_merge_patch(once, smp) == once
