"""The GPU operator's ClusterPolicy reconcile in kubesim (kubesim.gpuoperator, kubesim.operatorrender), in process:
the scenario's objects, the rendering against the hand-rendered file, and what an edit of the ClusterPolicy or of
an owned DaemonSet does, each change waited on through the simulation's own queue (settle), never on time."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from _simkit import DAEMONSETS, PODS

from kubesim import gpuoperator as op
from kubesim.crds import CRDS
from kubesim.installs import OPERATOR_FILE, manifest
from kubesim.scenarios import build
from kubesim.simulation import Simulation

NS, PLUGIN, GFD = "gpu-operator", "nvidia-device-plugin-daemonset", "gpu-feature-discovery"
RUNNING, NEXT = "nvcr.io/nvidia/k8s-device-plugin:v0.20.0", "nvcr.io/nvidia/k8s-device-plugin:v0.19.3"


@pytest.fixture
def sim() -> Simulation:
    return build(scenario="gpu-operator")


def _ds(sim: Simulation, name: str = PLUGIN) -> dict[str, Any]:
    ds = sim.store.get(DAEMONSETS, NS, name)
    assert ds is not None
    return ds


def _images(ds: dict[str, Any]) -> dict[str, str]:
    spec = ds["spec"]["template"]["spec"]
    return {c["name"]: c["image"] for c in (*spec.get("initContainers", []), *spec["containers"])}


def _policy(sim: Simulation) -> dict[str, Any]:
    policy = sim.store.get(op.CLUSTER_POLICIES, "", "cluster-policy")
    assert policy is not None
    return policy


def _edit_policy(sim: Simulation, change: Any) -> None:
    """A client's update of the ClusterPolicy's spec (through the store's PUT, as ``kubectl edit`` ends)."""
    policy = copy.deepcopy(_policy(sim))  # the store's object is live: a client's copy
    change(policy["spec"])
    sim.store.replace(sim.store.storage_type(op.CLUSTER_POLICIES), policy)
    sim.settle()


def _edit_ds(sim: Simulation, change: Any, name: str = PLUGIN) -> None:
    ds = copy.deepcopy(_ds(sim, name))
    change(ds)
    sim.store.replace(sim.store.storage_type(DAEMONSETS), ds)
    sim.settle()


def _first(sim: Simulation, generation: int) -> dict[str, Any]:
    """The operator's first reconcile of the ClusterPolicy's ``generation`` (later ones, caused by its DaemonSets'
    status updates, find them identical)."""
    return next(r for r in sim.controllers["gpu-operator"].reconciles if r["generation"] == generation)


def _plugin_pods(sim: Simulation) -> dict[str, str]:
    """node -> image of the live plugin pod's nvidia-device-plugin container."""
    return {p["spec"]["nodeName"]: _images(p | {"spec": {"template": {"spec": p["spec"]}}})["nvidia-device-plugin"]
            for p in sim.store.list(PODS, NS) if p["metadata"]["name"].startswith(PLUGIN)
            and not p["metadata"].get("deletionTimestamp")}


def test_rendering_the_charts_cluster_policy_gives_the_hand_rendered_daemonsets() -> None:
    """The operator's transforms over its assets, for the chart's ClusterPolicy, give exactly the DaemonSets of
    gpu-operator-v26.7.0.yaml (rendered by hand from object_controls.go), plus what only a live ClusterPolicy
    gives: the controller reference and the hash annotation."""
    policy = op.cluster_policy()
    policy["metadata"]["uid"] = "0000"
    by_hand = {o["metadata"]["name"]: o for o in manifest(OPERATOR_FILE) if o["kind"] == "DaemonSet"}
    for name in op.OPERANDS:
        got = op.desired(policy, name)
        meta = got["metadata"]
        assert meta.pop("ownerReferences") == [{"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy",
                                                "name": "cluster-policy", "uid": "0000", "controller": True,
                                                "blockOwnerDeletion": True}]
        assert meta["annotations"].pop(op.HASH_ANNOTATION).isdigit()
        if not meta["annotations"]:
            del meta["annotations"]
        assert got == by_hand[name], name


def test_the_scenario_serves_the_crd_and_the_policy_and_its_owned_daemonsets(sim: Simulation) -> None:
    """The CRD is established; cluster-policy is ready; both DaemonSets are controlled by it and carry the hash of
    their rendering, so the operator's first reconcile (at start) finds them identical and changes nothing."""
    crd = sim.store.get(CRDS, "", "clusterpolicies.nvidia.com")
    assert crd is not None and {c["type"] for c in crd["status"]["conditions"]} == {"NamesAccepted", "Established"}
    policy = _policy(sim)
    assert policy["status"]["state"] == "ready" and policy["status"]["namespace"] == NS
    for name in op.OPERANDS:
        ds = _ds(sim, name)
        assert ds["metadata"]["ownerReferences"][0]["uid"] == policy["metadata"]["uid"]
        assert ds["metadata"]["annotations"][op.HASH_ANNOTATION] == op.desired(policy, name)["metadata"][
            "annotations"][op.HASH_ANNOTATION]
        assert ds["metadata"]["generation"] == 1
    first = sim.controllers["gpu-operator"].reconciles
    assert [(r["daemonsets"], r["state"]) for r in first] == [({PLUGIN: "identical", GFD: "identical"}, "ready")]


def test_a_new_version_in_the_policy_rolls_both_daemonsets_and_ends_ready(sim: Simulation) -> None:
    """devicePlugin.version is the plugin's image and GFD's config-manager containers' (they run the plugin's
    image): both DaemonSets are updated (new hash, generation 2), the rollout replaces every pod one node at a time,
    and the policy is notReady until it is done, then ready."""
    before = {n: _ds(sim, n)["metadata"]["annotations"][op.HASH_ANNOTATION] for n in op.OPERANDS}
    _edit_policy(sim, lambda spec: spec["devicePlugin"].update(version="v0.19.3"))
    assert _first(sim, 2)["daemonsets"] == {PLUGIN: "updated", GFD: "updated"}
    assert _policy(sim)["status"]["state"] == "notReady"
    for name in op.OPERANDS:
        ds = _ds(sim, name)
        assert ds["metadata"]["generation"] == 2
        assert ds["metadata"]["annotations"][op.HASH_ANNOTATION] != before[name]
    assert set(_images(_ds(sim)).values()) == {NEXT, "nvcr.io/nvidia/gpu-operator:v26.7.0"}
    assert _images(_ds(sim, GFD))["gpu-feature-discovery"] == RUNNING  # spec.gfd.version is its own
    assert _images(_ds(sim, GFD))["config-manager"] == NEXT
    sim.advance(600)
    assert _plugin_pods(sim) == dict.fromkeys(("gpu-node1", "gpu-node2", "gpu-node3"), NEXT)
    assert _policy(sim)["status"]["state"] == "ready"
    assert sim.controllers["gpu-operator"].reconciles[-1]["state"] == "ready"


def test_on_delete_from_the_policy_holds_the_pods_until_each_is_deleted(sim: Simulation) -> None:
    """spec.daemonsets.updateStrategy OnDelete: the DaemonSets switch to OnDelete; a new version then changes the
    template but no pod; a pod deleted comes back on the new version; the policy is notReady (pods on an old
    revision) until every pod is replaced."""
    _edit_policy(sim, lambda spec: spec["daemonsets"].update(updateStrategy="OnDelete"))
    assert _ds(sim)["spec"]["updateStrategy"] == {"type": "OnDelete"}
    sim.advance(60)
    assert _policy(sim)["status"]["state"] == "ready"
    _edit_policy(sim, lambda spec: spec["devicePlugin"].update(version="v0.19.3"))
    sim.advance(120)
    assert _plugin_pods(sim) == dict.fromkeys(("gpu-node1", "gpu-node2", "gpu-node3"), RUNNING)
    assert _policy(sim)["status"]["state"] == "notReady"
    assert "states not ready: [state-device-plugin gpu-feature-discovery]" in str(_policy(sim)["status"]["conditions"])
    canary = next(p for p in sim.store.list(PODS, NS) if p["metadata"]["name"].startswith(PLUGIN)
                  and p["spec"]["nodeName"] == "gpu-node1")
    sim.store.delete(sim.store.storage_type(PODS), NS, canary["metadata"]["name"], grace_seconds=0)
    sim.advance(60)
    assert _plugin_pods(sim) == {"gpu-node1": NEXT, "gpu-node2": RUNNING, "gpu-node3": RUNNING}
    assert _policy(sim)["status"]["state"] == "notReady"


def test_rolling_update_max_unavailable_from_the_policy(sim: Simulation) -> None:
    """rollingUpdate.maxUnavailable "2" and "50%" become the DaemonSets' int and percentage."""
    _edit_policy(sim, lambda spec: spec["daemonsets"].update(rollingUpdate={"maxUnavailable": "2"}))
    assert _ds(sim)["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"] == 2
    _edit_policy(sim, lambda spec: spec["daemonsets"].update(rollingUpdate={"maxUnavailable": "50%"}))
    assert _ds(sim, GFD)["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"] == "50%"


def test_env_and_args_from_the_policy_reach_the_plugin_container(sim: Simulation) -> None:
    """devicePlugin.env: a variable the operator sets already takes the new value in place, a new one is appended;
    devicePlugin.args replace the container's args."""
    _edit_policy(sim, lambda spec: spec["devicePlugin"].update(
        env=[{"name": "FAIL_ON_INIT_ERROR", "value": "false"}, {"name": "EXTRA", "value": "1"}], args=["--x"]))
    ctr = _ds(sim)["spec"]["template"]["spec"]["containers"][0]
    env = [(e["name"], e.get("value")) for e in ctr["env"]]
    assert env[1] == ("FAIL_ON_INIT_ERROR", "false") and env[-1] == ("EXTRA", "1")
    assert ctr["args"] == ["--x"]


def test_a_direct_image_edit_stays_until_the_policy_changes(sim: Simulation) -> None:
    """The operator compares the desired hash with the stored annotation, never the live spec: a direct image
    change of its DaemonSet triggers a reconcile (an owned DaemonSet's event) that finds it 'identical' and leaves
    it; the next ClusterPolicy change, even one unrelated to the image, replaces the whole DaemonSet and the image
    goes back to the policy's."""
    operator = sim.controllers["gpu-operator"]
    seen = len(operator.reconciles)

    def set_image(ds: dict[str, Any]) -> None:
        ds["spec"]["template"]["spec"]["containers"][0]["image"] = NEXT

    _edit_ds(sim, set_image)
    assert operator.reconciles[seen]["daemonsets"][PLUGIN] == "identical"
    assert _images(_ds(sim))["nvidia-device-plugin"] == NEXT
    _edit_policy(sim, lambda spec: spec["devicePlugin"].update(env=[{"name": "EXTRA", "value": "1"}]))
    assert _first(sim, 2)["daemonsets"][PLUGIN] == "updated"
    assert _images(_ds(sim))["nvidia-device-plugin"] == RUNNING


def test_removing_the_hash_annotation_is_reverted_at_once(sim: Simulation) -> None:
    """An edit of the owned DaemonSet that drops nvidia.com/last-applied-hash: the reconcile it triggers sees no
    hash and rewrites the DaemonSet, the direct change with it."""
    def edit(ds: dict[str, Any]) -> None:
        del ds["metadata"]["annotations"][op.HASH_ANNOTATION]
        ds["spec"]["template"]["spec"]["containers"][0]["image"] = NEXT

    operator = sim.controllers["gpu-operator"]
    seen = len(operator.reconciles)
    _edit_ds(sim, edit)
    ds = _ds(sim)
    assert op.HASH_ANNOTATION in ds["metadata"]["annotations"]
    assert _images(ds)["nvidia-device-plugin"] == RUNNING
    assert operator.reconciles[seen]["generation"] == 1 and operator.reconciles[seen]["daemonsets"][PLUGIN] == "updated"


def test_a_metadata_or_status_edit_of_the_policy_does_not_reconcile(sim: Simulation) -> None:
    """GenerationChangedPredicate: a label added to the ClusterPolicy moves no generation: no reconcile."""
    operator = sim.controllers["gpu-operator"]
    seen = len(operator.reconciles)
    policy = copy.deepcopy(_policy(sim))
    policy["metadata"]["labels"]["team"] = "ml"
    sim.store.replace(sim.store.storage_type(op.CLUSTER_POLICIES), policy)
    sim.settle()
    assert _policy(sim)["metadata"]["generation"] == 1
    assert len(operator.reconciles) == seen


def test_disabling_the_plugin_deletes_its_daemonset_and_enabling_creates_it(sim: Simulation) -> None:
    _edit_policy(sim, lambda spec: spec["devicePlugin"].update(enabled=False))
    assert sim.store.get(DAEMONSETS, NS, PLUGIN) is None
    assert sim.store.get(DAEMONSETS, NS, GFD) is not None
    _edit_policy(sim, lambda spec: spec["devicePlugin"].update(enabled=True))
    ds = _ds(sim)
    assert ds["metadata"]["generation"] == 1 and op.HASH_ANNOTATION in ds["metadata"]["annotations"]
    assert _first(sim, 2)["daemonsets"][PLUGIN] == "deleted" and _first(sim, 3)["daemonsets"][PLUGIN] == "created"


def test_a_policy_the_operator_cannot_render_is_not_ready_and_changes_nothing(sim: Simulation) -> None:
    """A repository without a version (gpuv1.ImagePath refuses it): the reconcile fails, the status says so
    (ReconcileFailed), the DaemonSets stay as they were."""
    before = _ds(sim)["metadata"]["resourceVersion"]
    _edit_policy(sim, lambda spec: spec["devicePlugin"].update(version=""))
    status = _policy(sim)["status"]
    assert status["state"] == "notReady"
    error = next(c for c in status["conditions"] if c["type"] == "Error")
    assert error["reason"] == "ReconcileFailed"
    assert error["message"].startswith("Failed to reconcile state-device-plugin: invalid image specification")
    assert _ds(sim)["metadata"]["resourceVersion"] == before


def test_the_policy_is_checked_against_its_crds_schema(sim: Simulation) -> None:
    """The API server validates a ClusterPolicy against the CRD's schema: an updateStrategy outside its enum and a
    version of the wrong type are refused (422, kube-openapi's wording), nothing stored; an undeclared field is
    pruned; a default of the schema is set where its object is given (devicePlugin.mps.root)."""
    from kubesim.errors import ApiError

    res = sim.store.storage_type(op.CLUSTER_POLICIES)
    for change, said in (({"daemonsets": {"updateStrategy": "Sometimes"}},
                          'spec.daemonsets.updateStrategy: Unsupported value: "Sometimes": supported values: '
                          '"RollingUpdate", "OnDelete"'),
                         ({"devicePlugin": {"version": 20}},
                          'spec.devicePlugin.version: Invalid value: "integer": spec.devicePlugin.version in body must '
                          'be of type string: "integer"')):
        policy = copy.deepcopy(_policy(sim))
        for key, value in change.items():
            policy["spec"][key].update(value)
        with pytest.raises(ApiError) as refused:
            sim.store.replace(res, policy)
        assert refused.value.code == 422
        assert refused.value.message == f'ClusterPolicy.nvidia.com "cluster-policy" is invalid: {said}'
    assert _policy(sim)["metadata"]["generation"] == 1
    policy = copy.deepcopy(_policy(sim))
    policy["spec"]["devicePlugin"].update(mps={}, colour="blue")
    stored = sim.store.replace(res, policy)
    assert "colour" not in stored["spec"]["devicePlugin"]
    assert stored["spec"]["devicePlugin"]["mps"] == {"root": "/run/nvidia/mps"}
