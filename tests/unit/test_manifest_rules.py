"""The manifest rules on hand-made DaemonSets: tolerations as the scheduler matches them, the
taints the DaemonSet controller tolerates by itself, and the policy's limit."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from runbooks.inventory.manifests import (
    claimed_twice,
    coverage,
    device_plugin_hostpath,
    fail_on_init_error,
    max_unavailable,
    privilege_escalation,
    tolerations_missing,
)
from runbooks.inventory.models import ContainerFacts, DaemonSet, Manifest, Node, PluginPod, Taint
from runbooks.policy import Policy


def plugin(tolerations: list[dict[str, str]], **fields: object) -> DaemonSet:
    given: dict[str, object] = {"update_strategy": "RollingUpdate", **fields}
    return DaemonSet(namespace="kube-system", name="p", kind="device-plugin", images={},
                     manifest=Manifest(tolerations=tolerations), **given)  # type: ignore[arg-type]


def gpu_node(*taints: Taint) -> Node:
    return Node(name="gpu-node1", ready=True, unschedulable=False, gpu_hardware=True, taints=list(taints))


@pytest.mark.parametrize(("tolerations", "missed"), [
    ([], True),
    ([{"operator": "Exists"}], False),  # no key: every taint
    ([{"key": "k", "operator": "Exists"}], False),  # no effect: every effect
    ([{"key": "k", "operator": "Equal", "value": "v", "effect": "NoSchedule"}], False),
    ([{"key": "k", "operator": "Equal", "value": "other", "effect": "NoSchedule"}], True),
    ([{"key": "k", "operator": "Exists", "effect": "NoExecute"}], True),
])
def test_a_taint_is_missed_unless_a_toleration_matches_it(tolerations: list[dict[str, str]], missed: bool) -> None:
    found = tolerations_missing(plugin(tolerations), [gpu_node(Taint(key="k", value="v", effect="NoSchedule"))])
    assert bool(found) is missed


def test_the_daemonset_controllers_own_tolerations_and_soft_taints_are_no_finding() -> None:
    node = gpu_node(Taint(key="node.kubernetes.io/unschedulable", effect="NoSchedule"),
                    Taint(key="example.com/prefer", effect="PreferNoSchedule"))
    assert tolerations_missing(plugin([]), [node]) == []


def test_max_unavailable_is_judged_against_the_daemonsets_pods() -> None:
    """Percentages round up, as the DaemonSet controller rounds them: 10% of 30 pods is 3, of 31 is 4."""
    assert max_unavailable(plugin([], max_unavailable="10%", desired=30), "2")[0].code == "max-unavailable"  # 3 > 2
    assert max_unavailable(plugin([], max_unavailable="10%", desired=20), "2") == []  # 2
    assert max_unavailable(plugin([], max_unavailable="4", desired=31), "10%") == []  # 4 = 4
    assert max_unavailable(plugin([], max_unavailable="5", desired=31), "10%")[0].code == "max-unavailable"
    assert max_unavailable(plugin([], desired=31), "1") == []  # unset: Kubernetes' default, 1
    assert max_unavailable(plugin([], max_unavailable="5", update_strategy="OnDelete"), "1") == []


@pytest.mark.parametrize("value", ["0", "150%", "many", True])
def test_a_bad_limit_is_refused_when_the_file_is_read(value: object) -> None:
    with pytest.raises(ValidationError, match="is not a count"):
        Policy.model_validate({"inventory": {"max_unavailable": value}})


NVIDIA = "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"
SOCKETS = "/var/lib/kubelet/device-plugins"


def nvidia_plugin(**container: object) -> DaemonSet:
    fields: dict[str, object] = {"name": "plugin", "image": NVIDIA, "mounts": {SOCKETS: "sockets"},
                                 "allow_privilege_escalation": False, "drops_all": True, **container}
    return DaemonSet(namespace="kube-system", name="nvidia", kind="device-plugin", images={},
                     update_strategy="RollingUpdate",
                     manifest=Manifest(priority_class="system-node-critical", host_paths={"sockets": SOCKETS},
                                       containers=[ContainerFacts(**fields)]))  # type: ignore[arg-type]


def test_fail_on_init_error_unset_is_the_plugins_default_and_no_finding() -> None:
    assert fail_on_init_error(nvidia_plugin()) == []
    assert fail_on_init_error(nvidia_plugin(env={"FAIL_ON_INIT_ERROR": "true"})) == []
    assert fail_on_init_error(nvidia_plugin(env={"FAIL_ON_INIT_ERROR": "false"}))[0].code == "fail-on-init-error"
    assert fail_on_init_error(nvidia_plugin(env={"FAIL_ON_INIT_ERROR": "false"}, args=["--fail-on-init-error=true"])) == []


def test_the_charts_feature_discovery_from_the_same_image_is_not_judged_as_the_plugin() -> None:
    gfd = nvidia_plugin(command=["gpu-feature-discovery"], mounts={}, allow_privilege_escalation=None, drops_all=False)
    assert device_plugin_hostpath(gfd) == [] and privilege_escalation(gfd) == [] and claimed_twice([gfd, nvidia_plugin()]) == []


def test_the_kubelets_device_plugin_directory_does_not_follow_its_root_dir() -> None:
    """The kubelet serves kubelet.sock in /var/lib/kubelet/device-plugins whatever its --root-dir
    (pluginapi.KubeletSocket; k0s and MicroK8s ship the upstream kubelet): a plugin mounting the
    device-plugins directory under another root dir never registers, and the finding names the
    canary that moves the volume back."""
    for elsewhere in ("/var/snap/microk8s/common/var/lib/kubelet/device-plugins", "/var/lib/k0s/kubelet/device-plugins",
                      "/var/lib/kubelet/plugins"):
        plugin = nvidia_plugin()
        plugin = plugin.model_copy(update={"manifest": plugin.manifest.model_copy(update={"host_paths": {"sockets": elsewhere}})})
        found = device_plugin_hostpath(plugin)
        assert [f.severity for f in found] == ["fail"] and f"/var/lib/kubelet/device-plugins <- {elsewhere}" in found[0].message
        assert "`canary kube-system/nvidia volume=sockets:/var/lib/kubelet/device-plugins " \
               "node=auto`" in found[0].next_step
    assert device_plugin_hostpath(nvidia_plugin()) == []


def test_gpus_in_the_capacity_make_a_gpu_node_and_coverage_needs_every_plugin() -> None:
    plain = Node(name="gke-gpu-1", ready=True, unschedulable=False, gpu_hardware=False, capacity={"nvidia.com/gpu": 1})
    on_it = nvidia_plugin().model_copy(update={"pods": [PluginPod(name="p", node="gke-gpu-1", phase="Running",
                                                                  ready=True, restarts=0, crashloop=False)]})
    assert coverage([on_it], [plain], every_plugin=True) == []  # no plugin-on-non-gpu-node
    labelled = Node(name="gpu-2", ready=True, unschedulable=False, gpu_hardware=True)
    assert [f.code for f in coverage([on_it], [labelled], every_plugin=True)] == ["gpu-node-without-plugin"]
    assert coverage([on_it], [labelled], every_plugin=False) == []  # another plugin, not a target, may serve it
