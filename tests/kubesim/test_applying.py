"""Field sets, their FieldsV1 encoding and the schema-driven merge of server-side apply."""

from __future__ import annotations

import pytest

from kubesim import applying, schemas

DS = ("apps", "v1", "DaemonSet")


@pytest.fixture(scope="module")
def fm() -> applying.FieldManager:
    return applying.FieldManager(applying.Types(schemas.for_release(33)), *DS, has_status=True)


def ds(containers: list[dict], labels: dict[str, str] | None = None) -> dict:
    return {"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "d", "namespace": "x", **({"labels": labels} if labels else {})},
            "spec": {"selector": {"matchLabels": {"a": "b"}},
                     "template": {"spec": {"containers": containers}}}}


def test_fieldsv1_round_trip_and_paths(fm: applying.FieldManager) -> None:
    obj = ds([{"name": "c", "image": "i", "ports": [{"containerPort": 80, "protocol": "TCP"}]}], {"k": "v"})
    fields = fm.walker.fieldset(obj)
    encoded = applying.encode(fields)
    assert applying.decode(encoded) == fields
    ports = encoded["f:spec"]["f:template"]["f:spec"]["f:containers"]['k:{"name":"c"}']["f:ports"]
    assert ports == {'k:{"containerPort":80,"protocol":"TCP"}': {
        ".": {}, "f:containerPort": {}, "f:protocol": {}}}
    image = next(p for p in fields if p[-1] == ("f", "image"))
    assert applying.path_text(image) == '.spec.template.spec.containers[name="c"].image'
    assert (("f", "spec"), ("f", "selector")) in fields  # atomic: owned whole, not by key


def test_undeclared_field_is_refused(fm: applying.FieldManager) -> None:
    with pytest.raises(applying.ApplyError, match=r"^\.spec\.bogus: field not declared in schema$"):
        fm.walker.fieldset({"spec": {"bogus": 1}})


def test_apply_merges_lists_by_key_and_prunes_what_it_stopped_applying(fm: applying.FieldManager) -> None:
    live = fm.apply(None, ds([{"name": "a", "image": "1"}, {"name": "b", "image": "1"}], {"x": "1"}),
                    "one", "t0", force=False)
    other = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "d"},
             "spec": {"template": {"spec": {"containers": [{"name": "z", "image": "9"}]}}}}
    live = fm.apply(live, other, "two", "t1", force=False)
    assert [c["name"] for c in live["spec"]["template"]["spec"]["containers"]] == ["a", "b", "z"]
    live = fm.apply(live, ds([{"name": "a", "image": "2"}]), "one", "t2", force=False)
    assert live["spec"]["template"]["spec"]["containers"] == [{"name": "a", "image": "2"}, {"name": "z", "image": "9"}]
    assert "labels" not in live["metadata"]  # an emptied map is omitted, as Go's omitempty does


def test_conflicts_name_manager_and_path_and_force_moves_ownership(fm: applying.FieldManager) -> None:
    live = fm.apply(None, ds([{"name": "a", "image": "1"}]), "one", "t0", force=False)
    with pytest.raises(applying.ApplyConflicts) as caught:
        fm.apply(live, ds([{"name": "a", "image": "2"}]), "two", "t1", force=False)
    assert str(caught.value) == (
        'Apply failed with 1 conflict: conflict with "one": .spec.template.spec.containers[name="a"].image')
    forced = fm.apply(live, ds([{"name": "a", "image": "2"}]), "two", "t1", force=True)
    owners = {e["manager"]: applying.decode(e["fieldsV1"]) for e in forced["metadata"]["managedFields"]}
    image = next(p for p in owners["two"] if p[-1] == ("f", "image"))
    assert image not in owners["one"]
    # the same value co-owned is no conflict
    same = fm.apply(forced, ds([{"name": "a", "image": "2"}]), "three", "t2", force=False)
    assert {e["manager"] for e in same["metadata"]["managedFields"]} == {"one", "two", "three"}


def test_update_takes_what_it_changed_and_owns_new_maps(fm: applying.FieldManager) -> None:
    live = fm.apply(None, ds([{"name": "a", "image": "1"}]), "one", "t0", force=False)
    new = ds([{"name": "a", "image": "2"}], {"team": "x"})
    new["metadata"]["managedFields"] = live["metadata"]["managedFields"]
    managed = fm.update(live, new, "kubectl-edit", "t1")
    owners = {e["manager"]: e["fieldsV1"] for e in managed}
    assert owners["kubectl-edit"]["f:metadata"] == {"f:labels": {".": {}, "f:team": {}}}
    assert "f:image" not in owners["one"]["f:spec"]["f:template"]["f:spec"]["f:containers"]['k:{"name":"a"}']
    assert [e["operation"] for e in managed] == ["Apply", "Update"]
    assert fm.update(live, {**new, "metadata": {**new["metadata"], "managedFields": []}}, "m", "t2") == []
