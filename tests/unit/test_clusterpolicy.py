"""The ClusterPolicy fields an operator-native run changes, saves and puts back (issue 60 item 2), on a
ClusterPolicy as the GPU operator's chart v26.7.0 renders it with its defaults
(deployments/gpu-operator/templates/clusterpolicy.yaml and values.yaml: devicePlugin and daemonsets)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from runbooks import clusterpolicy as cp
from runbooks.templates import Edits

POLICY: dict[str, Any] = {
    "apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "cluster-policy"},
    "spec": {
        "daemonsets": {"labels": {"app.kubernetes.io/managed-by": "gpu-operator"}, "priorityClassName": "system-node-critical",
                       "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                       "updateStrategy": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "1"}},
        "devicePlugin": {"enabled": True, "repository": "nvcr.io/nvidia", "image": "k8s-device-plugin",
                         "version": "v0.20.0", "imagePullPolicy": "IfNotPresent",
                         "config": {"name": "device-plugin-config", "default": ""}},
    },
}
NEW = "nvcr.io/nvidia/k8s-device-plugin:v0.19.3"


def merged(obj: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """RFC 7386, as the API server applies a merge patch."""
    out = copy.deepcopy(obj)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def test_an_image_run_writes_the_changed_image_fields_with_ondelete_and_saves_what_was_there() -> None:
    wanted = cp.wanted(POLICY, image=NEW, edits=Edits())
    assert wanted == {"spec.devicePlugin.version": "v0.19.3", "spec.daemonsets.updateStrategy": "OnDelete"}
    saved = cp.saved(POLICY, list(wanted))
    assert saved == {"spec.devicePlugin.version": "v0.20.0", "spec.daemonsets.updateStrategy": "RollingUpdate"}
    changed = merged(POLICY, cp.merge_patch(wanted))
    assert cp.holds(changed, wanted) and changed["spec"]["daemonsets"]["rollingUpdate"] == {"maxUnavailable": "1"}
    assert cp.diff(saved, wanted) == ("- spec.devicePlugin.version: v0.20.0\n+ spec.devicePlugin.version: v0.19.3\n"
                                      "- spec.daemonsets.updateStrategy: RollingUpdate\n"
                                      "+ spec.daemonsets.updateStrategy: OnDelete")


def test_a_rollback_restores_exactly_the_changed_fields_and_keeps_someone_elses_edit() -> None:
    """Absent fields come back absent; an unrelated edit made during the run stays."""
    edits = Edits(env={"FAIL_ON_INIT_ERROR": "false"}, args=["--fail-on-init-error=false"])
    wanted = cp.wanted(POLICY, image="registry.example/mirror/k8s-device-plugin:v0.19.3", edits=edits)
    assert wanted["spec.devicePlugin.repository"] == "registry.example/mirror"
    assert wanted["spec.devicePlugin.env"] == [{"name": "FAIL_ON_INIT_ERROR", "value": "false"}]
    saved = cp.saved(POLICY, list(wanted))
    assert saved["spec.devicePlugin.env"] is None and saved["spec.devicePlugin.args"] is None
    changed = merged(POLICY, cp.merge_patch(wanted))
    changed["spec"]["devicePlugin"]["imagePullPolicy"] = "Always"  # someone else's edit, during the run
    restored = merged(changed, cp.merge_patch(saved))
    assert cp.holds(restored, saved)
    expected = copy.deepcopy(POLICY)
    expected["spec"]["devicePlugin"]["imagePullPolicy"] = "Always"
    assert restored == expected


def test_env_changes_keep_the_other_variables_in_order() -> None:
    policy = merged(POLICY, {"spec": {"devicePlugin": {"env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"},
                                                                {"name": "C", "value": "3"}]}}})
    wanted = cp.wanted(policy, image="", edits=Edits(env={"B": None, "A": "9", "D": "4"}))
    assert wanted["spec.devicePlugin.env"] == [{"name": "A", "value": "9"}, {"name": "C", "value": "3"},
                                               {"name": "D", "value": "4"}]


def test_a_clusterpolicy_naming_the_whole_image_gets_the_whole_image() -> None:
    """imagePath: with neither repository nor version, image is the whole path (kbld's path@digest)."""
    policy = merged(POLICY, {"spec": {"devicePlugin": {"repository": None, "version": None,
                                                       "image": "nvcr.io/nvidia/k8s-device-plugin@sha256:" + "a" * 64}}})
    assert cp.wanted(policy, image=NEW, edits=Edits())["spec.devicePlugin.image"] == NEW


def test_what_the_clusterpolicy_cannot_say_is_refused_by_name() -> None:
    with pytest.raises(cp.NotThroughClusterPolicy, match="limits, priority cannot be changed through"):
        cp.wanted(POLICY, image=NEW, edits=Edits(limits={"memory": "1Gi"}, priority=""))
    with pytest.raises(cp.NotThroughClusterPolicy, match="cannot be written as the ClusterPolicy's repository"):
        cp.wanted(POLICY, image="k8s-device-plugin", edits=Edits())


def test_rendered_when_the_container_runs_the_image_under_ondelete() -> None:
    template = {"spec": {"containers": [{"name": "nvidia-device-plugin", "image": NEW},
                                        {"name": "config-manager", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.20.0"}]}}
    assert cp.renders(template, {"type": "OnDelete"}, container="nvidia-device-plugin", image=NEW)
    assert not cp.renders(template, {"type": "RollingUpdate"}, container="nvidia-device-plugin", image=NEW)
    assert not cp.renders(template, {"type": "OnDelete"}, container="config-manager", image=NEW)
