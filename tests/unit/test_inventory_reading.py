"""Pure parts of the inventory: quantities, ages, claim states, selectors, findings."""

from __future__ import annotations

import datetime as dt

import pytest

from runbooks.cluster.resources import choose_dra_versions, sort_dra_versions
from runbooks.inventory import findings, plugins, reading
from runbooks.inventory.models import DaemonSet, DraInfo, Node, PluginPod

NOW = dt.datetime(2026, 1, 2, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (119, "119s"), (120, "2m"), (125, "2m5s"), (600, "10m"), (3 * 3600, "3h"),
     (3 * 3600 + 60, "3h1m"), (8 * 3600, "8h"), (47 * 3600, "47h"), (48 * 3600, "2d"),
     (50 * 3600, "2d2h"), (8 * 86400, "8d"), (800 * 86400, "2y70d"), (-5, "<invalid>")],
)
def test_human_duration_matches_kubectl(seconds: int, text: str) -> None:
    """Ages are printed as apimachinery's HumanDuration prints them."""
    assert reading.human_duration(dt.timedelta(seconds=seconds)) == text


@pytest.mark.parametrize(("value", "number"), [("8", 8), ("0", 0), ("1k", 1000), ("2Ki", 2048), ("1500m", 1), ("x", 0)])
def test_quantity_reads_whole_numbers(value: str, number: int) -> None:
    """Extended-resource quantities become whole numbers; garbage becomes 0."""
    assert reading.quantity(value) == number


@pytest.mark.parametrize(
    ("claim", "v1alpha2", "state"),
    [
        ({}, False, "pending"),
        ({"status": {"allocation": {}}}, False, "allocated"),
        ({"status": {"allocation": {}, "reservedFor": [{"name": "p"}]}}, False, "allocated,reserved"),
        ({"metadata": {"deletionTimestamp": "x"}}, False, "deleted"),
        ({"metadata": {"deletionTimestamp": "x"}, "status": {"allocation": {}}}, False, "deleted,allocated"),
        ({"metadata": {"deletionTimestamp": "x"}, "status": {"allocation": {}}}, True, "deleted,allocated,deallocating"),
    ],
)
def test_claim_state_as_kubectl_prints_it(claim: dict, v1alpha2: bool, state: str) -> None:
    """The STATE column follows kubectl's resourceClaimState for every API version."""
    assert reading.claim_state(claim, v1alpha2=v1alpha2) == state


def test_claims_of_pod_reads_every_shape() -> None:
    """Claims named directly, through ``source`` (≤1.30) and generated from templates are found."""
    pod = {
        "spec": {"resourceClaims": [{"name": "a", "resourceClaimName": "direct"},
                                    {"name": "b", "source": {"resourceClaimName": "old-style"}},
                                    {"name": "c", "resourceClaimTemplateName": "tpl"}]},
        "status": {"resourceClaimStatuses": [{"name": "c", "resourceClaimName": "pod-c-abcde"}]},
    }
    assert reading.claims_of_pod(pod) == ["direct", "old-style", "pod-c-abcde"]


def test_selector_string_covers_expressions() -> None:
    """A DaemonSet selector becomes the labelSelector query the API server parses."""
    selector = {"matchLabels": {"b": "2", "a": "1"},
                "matchExpressions": [{"key": "c", "operator": "In", "values": ["x", "y"]},
                                     {"key": "d", "operator": "DoesNotExist"}]}
    assert reading.selector_string(selector) == "a=1,b=2,c in (x,y),!d"


def test_device_class_driver_from_cel_and_resource_class() -> None:
    """A DeviceClass's driver comes from its CEL selector; a ResourceClass names it."""
    dc = reading.class_from({"metadata": {"name": "g"}, "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.example.com'"}}]}}, "DeviceClass")
    rc = reading.class_from({"metadata": {"name": "g"}, "driverName": "gpu.example.com"}, "ResourceClass")
    assert dc.drivers == rc.drivers == ["gpu.example.com"]


def test_dra_version_preference() -> None:
    """Each DRA kind is read in the newest served version that has it: v1 > v1beta2 > … > v1alpha2."""
    served = {"v1beta1": ["DeviceClass", "ResourceSlice"], "v1": ["DeviceClass"], "v1alpha9": ["DeviceClass"]}
    chosen = choose_dra_versions(served)
    assert chosen["DeviceClass"].version == "v1"
    assert chosen["ResourceSlice"].version == "v1beta1"
    assert sort_dra_versions(["v1beta1", "v1alpha9", "v1"]) == ["v1", "v1beta1", "v1alpha9"]


def _pod(node: str, *, ready: bool = True, crashloop: bool = False, image: str = "img:1") -> PluginPod:
    return PluginPod(name=f"p-{node}", node=node, phase="Running", ready=ready, restarts=0,
                     crashloop=crashloop, images={"c": image})


def _ds(pods: list[PluginPod]) -> DaemonSet:
    return DaemonSet(namespace="kube-system", name="dp", kind="device-plugin", images={"c": "img:1"},
                     update_strategy="RollingUpdate", pods=pods)


def _node(name: str, cap: int, alloc: int) -> Node:
    return Node(name=name, ready=True, unschedulable=False, gpu_hardware=True,
                capacity={"nvidia.com/gpu": cap}, allocatable={"nvidia.com/gpu": alloc})


def test_node_findings_distinguish_unregistered_from_partial() -> None:
    """Allocatable 0 on a GPU node is 'not registered' (fail); 0 < allocatable < capacity is a warning."""
    found = findings.node_findings(
        [_node("a", 8, 0), _node("b", 8, 6), _node("c", 8, 8)], [_ds([_pod("a"), _pod("b"), _pod("c")])], [],
        ["nvidia.com/gpu"],
    )
    assert [(f.code, f.object, f.severity) for f in found] == [
        ("plugin-not-registered", "node/a", "fail"), ("capacity-above-allocatable", "node/b", "warn")]


def test_gate_unknown_is_info_and_disabled_without_objects_is_quiet() -> None:
    """An unknown gate is reported as info; a disabled gate only matters when DRA objects exist."""
    assert [f.code for f in findings.gate_findings(DraInfo(feature_gate="unknown"), [], [], [])] == ["dra-gate-unknown"]
    assert findings.gate_findings(DraInfo(feature_gate="disabled"), [], [], []) == []


def test_log_budget_covers_every_daemonset_then_suspects() -> None:
    """Beyond the budget, one Ready pod per DaemonSet is read, then the most suspect pods."""
    healthy = [(_pod(f"n{i}"), plugins.LogRead("ns/a", "ns", f"a{i}", ["c"], "device-plugin")) for i in range(10)]
    other = [(_pod(f"m{i}"), plugins.LogRead("ns/b", "ns", f"b{i}", ["c"], "dra-kubelet-plugin")) for i in range(10)]
    sick = [(_pod("s", ready=False, crashloop=True), plugins.LogRead("ns/a", "ns", "sick", ["c"], "device-plugin"))]
    chosen = plugins.choose_logs(healthy + other + sick, {}, budget=3)
    assert {read.pod for _, read in chosen} == {"a0", "b0", "sick"}
