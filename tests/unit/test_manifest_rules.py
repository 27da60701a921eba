"""The manifest rules on hand-made DaemonSets: tolerations as the scheduler matches them, the
taints the DaemonSet controller tolerates by itself, and the policy's limit."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from runbooks.inventory.manifests import max_unavailable, tolerations_missing
from runbooks.inventory.models import DaemonSet, Manifest, Node, Taint
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
    """Percentages round up, as the DaemonSet controller rounds them: 10% of 31 pods is 4."""
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
