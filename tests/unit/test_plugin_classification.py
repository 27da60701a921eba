"""Telling NVIDIA's device plugin from the programs its image also runs (GFD, the MPS control daemon,
config-manager), on the objects NVIDIA publishes (kubesim/manifests/: the Helm chart v0.17.0 and the GPU
operator v26.7.0), and the chart's SYS_ADMIN variant in the privilege finding."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kubesim.installs import HELM_FILES, OPERATOR_FILE, manifest
from runbooks.daemonset.preflight import resolve_container
from runbooks.inventory.manifests import privilege_escalation
from runbooks.inventory.plugins import classify, select_plugins
from runbooks.inventory.reading import daemonset_from
from runbooks.plugin_containers import plugin_container


def daemonsets(name: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in manifest(name) if o["kind"] == "DaemonSet"}


HELM = daemonsets(HELM_FILES["gpu-helm"])
MIG = daemonsets(HELM_FILES["gpu-helm-mig"])
OPERATOR = daemonsets(OPERATOR_FILE)


@pytest.mark.parametrize(("source", "name", "kind"), [
    (HELM, "nvdp-nvidia-device-plugin", "device-plugin"),
    (HELM, "nvdp-nvidia-device-plugin-gpu-feature-discovery", None),
    (HELM, "nvdp-nvidia-device-plugin-mps-control-daemon", None),
    (OPERATOR, "nvidia-device-plugin-daemonset", "device-plugin"),
    (OPERATOR, "gpu-feature-discovery", None),
])
def test_what_the_containers_run_decides_the_kind(source: dict[str, dict[str, Any]], name: str, kind: str | None) -> None:
    """All five run the plugin's image (and the chart's three share its labels): only the plugin is one."""
    assert classify(source[name]) == kind


def test_a_daemonset_labelled_as_gfd_is_not_a_plugin() -> None:
    """A GFD whose command is the image's default (none given) is still told by its labels."""
    gfd = copy.deepcopy(OPERATOR["gpu-feature-discovery"])
    for c in gfd["spec"]["template"]["spec"]["containers"]:
        c.pop("command", None)
    assert classify(gfd) is None


def test_the_helm_install_selects_one_plugin() -> None:
    chosen = select_plugins(list(HELM.values()), [], [])
    assert [(o["metadata"]["name"], kind) for o, kind in chosen.plugins] == [("nvdp-nvidia-device-plugin", "device-plugin")]


@pytest.mark.parametrize(("template", "container"), [
    (OPERATOR["nvidia-device-plugin-daemonset"]["spec"]["template"], "nvidia-device-plugin"),
    (HELM["nvdp-nvidia-device-plugin"]["spec"]["template"], "nvidia-device-plugin-ctr"),
    ({"spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]}}, None),
    ({"spec": {"containers": [{"name": "sidecar", "image": "x", "command": ["config-manager"]}]}}, "sidecar"),
])
def test_the_plugin_container_is_chosen_without_a_name(template: dict[str, Any], container: str | None) -> None:
    """The only container, else the only one that is not GFD, MPS or config-manager; two unknowns: none."""
    containers = template["spec"]["containers"]
    assert plugin_container(containers) == container
    assert resolve_container("", template) == container
    assert resolve_container("config-manager", template) == (
        "config-manager" if any(c["name"] == "config-manager" for c in containers) else None)


def facts(obj: dict[str, Any]):
    return daemonset_from(obj, kind="device-plugin", drivers=[], revision=None)


def test_the_charts_sys_admin_for_mig_is_no_privilege_finding() -> None:
    """migStrategy=mixed: the chart adds SYS_ADMIN on purpose; the hardened default has nothing to find."""
    assert privilege_escalation(facts(MIG["nvdp-nvidia-device-plugin"])) == []
    assert privilege_escalation(facts(HELM["nvdp-nvidia-device-plugin"])) == []


@pytest.mark.parametrize("env", [
    {"name": "CONFIG_FILE", "value": "/config/config.yaml"},  # a config map (config.name or config.map)
    {"name": "DEVICE_LIST_STRATEGY", "value": "volume-mounts"},
])
def test_the_charts_other_reasons_for_sys_admin_are_no_finding(env: dict[str, str]) -> None:
    obj = copy.deepcopy(MIG["nvdp-nvidia-device-plugin"])
    ctr = obj["spec"]["template"]["spec"]["containers"][0]
    ctr["env"] = [e for e in ctr["env"] if e["name"] not in ("MIG_STRATEGY", "NVIDIA_MIG_MONITOR_DEVICES")] + [env]
    assert privilege_escalation(facts(obj)) == []


@pytest.mark.parametrize("change", ["no-reason", "mig-none", "more-capabilities"])
def test_an_unexplained_escalation_is_still_a_finding(change: str) -> None:
    """SYS_ADMIN without MIG, a config map or volume-mounts (or more than SYS_ADMIN) is named."""
    obj = copy.deepcopy(MIG["nvdp-nvidia-device-plugin"])
    ctr = obj["spec"]["template"]["spec"]["containers"][0]
    if change == "no-reason":
        ctr["env"] = [e for e in ctr["env"] if e["name"] != "MIG_STRATEGY"]
    elif change == "mig-none":
        ctr["env"] = [{**e, "value": "none"} if e["name"] == "MIG_STRATEGY" else e for e in ctr["env"]]
    else:
        ctr["securityContext"]["capabilities"]["add"].append("NET_ADMIN")
    found = privilege_escalation(facts(obj))
    assert [f.code for f in found] == ["privilege-escalation"]
    assert "SYS_ADMIN" in found[0].message
