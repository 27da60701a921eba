"""Changes beyond the image: the words of a canary request, what they make of a pod template,
and the diff the request shows."""

from __future__ import annotations

import pytest

from handlers.arguments import UsageError
from handlers.runs import parse_canary
from runbooks.templates import Edits, Toleration, apply, diff, parse_edits, problems, same

TARGET = "kube-system/nvidia-device-plugin-daemonset"
TEMPLATE = {
    "metadata": {"labels": {"name": "nvidia-device-plugin-ds"}},
    "spec": {
        "containers": [{"name": "ctr", "image": "reg.io/plugin:1", "env": [{"name": "FAIL_ON_INIT_ERROR", "value": "false"},
                                                                          {"name": "KEEP", "value": "1"}],
                        "securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}},
                       {"name": "sidecar", "image": "reg.io/sidecar:1"}],
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    },
}


def edits(text: str) -> Edits:
    return parse_canary([TARGET, "node=gpu-node1", *text.split()]).edits


def test_every_kind_of_change_lands_on_the_named_container_and_its_pod_only() -> None:
    change = edits("env=FAIL_ON_INIT_ERROR=true env=KEEP- env=NEW=x args=--mig-strategy=single,--pass-device-specs "
                   "limits=cpu=200m,memory=512Mi requests=cpu=100m security=allowPrivilegeEscalation=false,"
                   "capabilities.drop=ALL pod-security=runAsNonRoot=true priority=system-node-critical "
                   "toleration=example.com/maint=yes:NoExecute toleration=nvidia.com/gpu:NoSchedule-")
    out = apply(TEMPLATE, "ctr", "reg.io/plugin:2", change)
    ctr, sidecar = out["spec"]["containers"]
    assert ctr["image"] == "reg.io/plugin:2" and sidecar == TEMPLATE["spec"]["containers"][1]
    assert ctr["env"] == [{"name": "FAIL_ON_INIT_ERROR", "value": "true"}, {"name": "NEW", "value": "x"}]
    assert ctr["args"] == ["--mig-strategy=single", "--pass-device-specs"]
    assert ctr["resources"] == {"limits": {"cpu": "200m", "memory": "512Mi"}, "requests": {"cpu": "100m"}}
    assert ctr["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"add": ["SYS_ADMIN"], "drop": ["ALL"]}}
    assert out["spec"]["securityContext"] == {"runAsNonRoot": True}
    assert out["spec"]["priorityClassName"] == "system-node-critical"
    assert out["spec"]["tolerations"] == [{"key": "example.com/maint", "operator": "Equal", "value": "yes", "effect": "NoExecute"}]
    assert TEMPLATE["spec"]["containers"][0]["image"] == "reg.io/plugin:1"  # the input is left alone


def test_removals_and_the_diff_shows_only_what_changes() -> None:
    change = edits("args=- priority=- env=KEEP-")
    with_args = apply(TEMPLATE, "ctr", "reg.io/plugin:1", edits("args=--x priority=high"))
    out = apply(with_args, "ctr", "reg.io/plugin:1", change)
    assert "args" not in out["spec"]["containers"][0] and "priorityClassName" not in out["spec"]
    shown = diff(TEMPLATE, apply(TEMPLATE, "ctr", "reg.io/plugin:1", edits("env=FAIL_ON_INIT_ERROR=true")))
    assert shown.splitlines() == ["     - name: FAIL_ON_INIT_ERROR", "-      value: 'false'",
                                  "+      value: 'true'", "     - name: KEEP"]
    assert diff(TEMPLATE, TEMPLATE) == ""
    assert same(apply(TEMPLATE, "ctr", "reg.io/plugin:1", Edits()), TEMPLATE)


def test_what_cannot_be_removed_is_said() -> None:
    change = edits("env=MISSING- toleration=example.com/x:NoSchedule-")
    assert problems(TEMPLATE, "ctr", change) == [
        "env MISSING is not set on container ctr: nothing to remove",
        "the template has no toleration example.com/x:NoSchedule: nothing to remove"]
    assert problems(TEMPLATE, "nope", change) == ["the pod template has no container 'nope'"]


def test_tolerations_read_as_kubectl_taint_writes_them() -> None:
    assert parse_edits({}, {"toleration": ["*"]}).tolerate == [Toleration()]
    assert parse_edits({}, {"toleration": ["k:NoSchedule"]}).tolerate == [Toleration(key="k", effect="NoSchedule")]
    assert str(Toleration(key="k", operator="Equal", value="v", effect="NoExecute")) == "k=v:NoExecute"


@pytest.mark.parametrize(("words", "says"), [
    ("env=1BAD=x", "'1BAD' is not an environment variable name"),
    ("env=NAME", "env=NAME needs a value: env=NAME=value, or env=NAME- to remove it"),
    ("limits=cpu=lots", "'lots' is not a quantity for cpu"),
    ("limits=cpu", "use limits=cpu=200m,memory=512Mi"),
    ("security=privileged=maybe", "security: privileged is true or false"),
    ("security=hostNetwork=true", "security: hostNetwork is not one of"),
    ("security=capabilities.drop=all", "capabilities joined by +"),
    ("pod-security=seccompProfile.type=Strict", "seccompProfile.type is one of RuntimeDefault"),
    ("priority=Not_A_Class", "'Not_A_Class' is not a PriorityClass name"),
    ("toleration=k:Sometimes", "'Sometimes' is not a taint effect"),
    ("toleration=:NoSchedule", "use key[=value][:Effect]"),
])
def test_a_bad_change_is_a_usage_error_with_its_reason(words: str, says: str) -> None:
    with pytest.raises(UsageError, match=says.replace("+", r"\+").replace("[", r"\[").replace("(", r"\(")) as caught:
        edits(words)
    assert "\n" not in caught.value.reason and caught.value.usage.startswith("canary ")


def test_image_may_be_left_out_only_when_something_else_changes() -> None:
    with pytest.raises(UsageError, match="image= is required"):
        parse_canary([TARGET, "node=gpu-node1"])
    assert parse_canary([TARGET, "node=gpu-node1", "env=A=1"]).image == ""
    assert parse_canary([TARGET, "node=gpu-node1", "image=reg.io/p:2"]).edits.empty


def test_a_variable_listed_twice_is_written_once_and_removed_whole() -> None:
    doubled = {"spec": {"containers": [{"name": "ctr", "image": "i", "env": [
        {"name": "A", "value": "1"}, {"name": "B", "value": "2"}, {"name": "A", "value": "3"}]}]}}
    set_a = apply(doubled, "ctr", "i", edits("env=A=9"))["spec"]["containers"][0]["env"]
    assert set_a == [{"name": "A", "value": "9"}, {"name": "B", "value": "2"}]
    removed = apply(doubled, "ctr", "i", edits("env=A-"))["spec"]["containers"][0]["env"]
    assert removed == [{"name": "B", "value": "2"}]


@pytest.mark.parametrize(("words", "says"), [
    ("env=.=x", "is not an environment variable name"),
    ("args=a,,b", "an empty argument"),
    ("toleration=k==v:NoSchedule", "is not a taint value"),
    ("security=runAsUser=²", "runAsUser is a number"),
])
def test_what_the_api_server_would_refuse_is_refused_before_anyone_is_asked(words: str, says: str) -> None:
    with pytest.raises(UsageError, match=says):
        edits(words)
