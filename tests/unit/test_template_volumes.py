"""``volume=<name>:<hostPath>``: a canary that moves a hostPath volume of the pod template (the
device-plugin directory mounted from the wrong place), parsed, checked against the template,
applied, shown as a diff, and refused in one line when it cannot be made."""

from __future__ import annotations

import pytest

from handlers.arguments import UsageError
from handlers.runs import parse_canary
from runbooks.templates import Edits, apply, diff, problems

TARGET = "kube-system/nvidia-device-plugin-daemonset"
K0S = "/var/lib/k0s/kubelet/device-plugins"
TEMPLATE = {
    "metadata": {"labels": {"name": "nvidia-device-plugin-ds"}},
    "spec": {
        "containers": [{"name": "ctr", "image": "reg.io/plugin:1",
                        "volumeMounts": [{"name": "device-plugin", "mountPath": "/var/lib/kubelet/device-plugins"},
                                         {"name": "config", "mountPath": "/config"}]}],
        "volumes": [{"name": "device-plugin", "hostPath": {"path": "/var/lib/kubelet/device-plugins", "type": ""}},
                    {"name": "config", "configMap": {"name": "plugin-config"}},
                    {"name": "cdi", "hostPath": {"path": "/var/run/cdi", "type": "DirectoryOrCreate"}}],
    },
}


def edits(text: str) -> Edits:
    return parse_canary([TARGET, "node=gpu-node1", *text.split()]).edits


def test_a_volume_word_moves_that_hostpath_only_and_keeps_its_type() -> None:
    change = edits(f"volume=device-plugin:{K0S}")
    assert change.volumes == {"device-plugin": K0S} and not change.empty
    out = apply(TEMPLATE, "ctr", "reg.io/plugin:1", change)
    assert out["spec"]["volumes"][0] == {"name": "device-plugin", "hostPath": {"path": K0S, "type": ""}}
    assert out["spec"]["volumes"][1:] == TEMPLATE["spec"]["volumes"][1:]
    assert out["spec"]["containers"] == TEMPLATE["spec"]["containers"]  # the mount inside the container stays
    assert TEMPLATE["spec"]["volumes"][0]["hostPath"]["path"] == "/var/lib/kubelet/device-plugins"  # input untouched
    assert problems(TEMPLATE, "ctr", change) == []


def test_the_request_shows_the_path_before_and_after() -> None:
    change = edits(f"volume=device-plugin:{K0S} volume=cdi:/run/cdi")
    assert change.summary() == f"volume device-plugin hostPath {K0S}; volume cdi hostPath /run/cdi"
    shown = diff(TEMPLATE, apply(TEMPLATE, "ctr", "reg.io/plugin:1", change))
    assert "-      path: /var/lib/kubelet/device-plugins" in shown.splitlines()
    assert f"+      path: {K0S}" in shown.splitlines()
    assert "-      path: /var/run/cdi" in shown.splitlines() and "+      path: /run/cdi" in shown.splitlines()


def test_a_volume_the_template_lacks_or_that_is_no_hostpath_is_said() -> None:
    assert problems(TEMPLATE, "ctr", edits("volume=sockets:/var/lib/kubelet/device-plugins")) == [
        "the pod template has no volume sockets (its volumes: device-plugin, config, cdi)"]
    assert problems(TEMPLATE, "ctr", edits("volume=config:/etc/plugin")) == [
        "volume config is a configMap volume, not a hostPath: only a hostPath's path can be changed"]


@pytest.mark.parametrize(("words", "says"), [
    ("volume=device-plugin", "volume=device-plugin: use volume=<name>:<hostPath>"),
    ("volume=:/var/lib/kubelet/device-plugins", "volume=:/var/lib/kubelet/device-plugins: use volume=<name>:<hostPath>"),
    ("volume=device-plugin:var/lib/kubelet/device-plugins", "is not an absolute path"),
    ("volume=device-plugin:/var/lib/../kubelet/device-plugins", "is not a clean path"),
    ("volume=device-plugin:/var/lib//kubelet", "is not a clean path"),
    ("volume=device-plugin:/var/lib/kubelet/device-plugins/", "is not a clean path"),
    ("volume=device-plugin:/var/lib/./kubelet", "is not a clean path"),
    ("volume=device-plugin:/var/lib/kubelet:x", "is not a clean path"),
    ("volume=Device_Plugin:/var/lib/kubelet/device-plugins", "'Device_Plugin' is not a volume name"),
    (f"volume=device-plugin:{K0S} volume=device-plugin:/var/lib/kubelet/device-plugins",
     "volume device-plugin given twice"),
])
def test_a_bad_volume_word_is_a_usage_error_with_its_reason(words: str, says: str) -> None:
    with pytest.raises(UsageError, match=says.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")) as caught:
        edits(words)
    assert "\n" not in caught.value.reason and "volume=<name>:<hostPath>" in caught.value.usage


def test_a_volume_change_alone_needs_no_image() -> None:
    args = parse_canary([TARGET, "node=gpu-node1", f"volume=device-plugin:{K0S}"])
    assert args.image == "" and args.edits.volumes == {"device-plugin": K0S}
    assert args.edits.change == args.edits  # what two runs (stages) compare keeps the volume
