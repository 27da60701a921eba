"""Waves: the policy's wave sizes, the node order over failure domains, the plan's counts."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from runbooks.daemonset.waves import Candidate, at_once, order_nodes, split
from runbooks.policy import Policy

TARGET = "kube-system/nvidia-device-plugin-daemonset"


def target_with(**fields: object) -> Policy:
    return Policy.model_validate({"targets": [{"namespace": "kube-system", "name": "nvidia-device-plugin-daemonset",
                                               **fields}]})


def test_waves_accept_the_shorthand_and_mappings() -> None:
    policy = target_with(waves=[1, "5%", {"nodes": "25%", "soak": "30m", "approve_next": False}, "100%"],
                         spread=["topology.kubernetes.io/zone", "example.com/rack"])
    waves = policy.target(TARGET).waves  # type: ignore[union-attr]
    assert [(w.nodes, w.soak, w.approve_next) for w in waves] == [
        ("1", "0s", True), ("5%", "0s", True), ("25%", "30m", False), ("100%", "0s", True)]
    assert [w.count(199) for w in waves] == [1, 10, 50, 199]


@pytest.mark.parametrize(("waves", "says"), [
    ([1, "5%", "25%"], "the last wave must be 100%"),
    (["5%", "5%", "100%"], "each percent must be larger than the one before"),
    ([10, 5, "100%"], "each count must be larger"),
    (["150%", "100%"], "is not a wave size"),
    ([0, "100%"], "is not a wave size"),
    (["-1", "100%"], "is not a wave size"),
    ([True, "100%"], "is not a wave size"),
    ([{"nodes": 1, "soak": "ten minutes"}, "100%"], "is not a duration"),
    ([{"nodes": 1, "sok": "1m"}, "100%"], "Extra inputs are not permitted"),
])
def test_bad_waves_are_refused_at_start_up(waves: list[object], says: str) -> None:
    with pytest.raises(ValidationError, match=says):
        target_with(waves=waves)


def test_a_bad_spread_label_is_refused() -> None:
    with pytest.raises(ValidationError, match="is not a node label key"):
        target_with(waves=["100%"], spread=["zone name"])


def test_the_order_takes_every_zone_in_turn_then_every_rack_idle_nodes_first() -> None:
    nodes = [Candidate(f"n{i}", (f"zone-{'abc'[i % 3]}", f"rack{(i // 3) % 2}"), busy=i % 5) for i in range(12)]
    order = order_nodes(nodes)
    assert sorted(order) == sorted(c.name for c in nodes) and len(order) == 12
    zone = {c.name: c.domains[0] for c in nodes}
    # every run of three consecutive nodes covers the three zones
    for i in range(0, 12, 3):
        assert {zone[n] for n in order[i:i + 3]} == {"zone-a", "zone-b", "zone-c"}
    # within a zone, each turn takes one node of every rack
    rack = {c.name: c.domains for c in nodes}
    for z in ("zone-a", "zone-b", "zone-c"):
        in_zone = [rack[n][1] for n in order if zone[n] == z]
        assert {*in_zone[:2]} == {*in_zone[2:]} == {"rack0", "rack1"}, in_zone
    assert order == order_nodes(list(reversed(nodes)))  # stable: the input order does not matter


def test_idle_nodes_come_first_without_spread_labels() -> None:
    nodes = [Candidate("busy", (), busy=8), Candidate("idle-b", (), busy=0), Candidate("idle-a", (), busy=0),
             Candidate("half", (), busy=4)]
    assert order_nodes(nodes) == ["idle-a", "idle-b", "half", "busy"]


def test_the_plan_counts_cumulatively_and_leaves_out_empty_waves() -> None:
    policy = target_with(waves=[1, "5%", "25%", "100%"])
    order = [f"gpu-node{i}" for i in range(2, 201)]  # 200 nodes, the canary's left out
    planned = split(order, policy.target(TARGET).waves)  # type: ignore[union-attr]
    assert [len(w["nodes"]) for w in planned] == [1, 9, 40, 149]
    assert [n for w in planned for n in w["nodes"]] == order
    small = split(["a", "b"], policy.target(TARGET).waves)  # type: ignore[union-attr]
    assert [w["nodes"] for w in small] == [["a"], ["b"]]  # 5% and 25% of 2 add nothing after the first
    assert [w["size"] for w in small] == ["1", "100%"]


@pytest.mark.parametrize(("strategy", "total", "expected"), [
    ({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}}, 200, 1),
    ({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "10%"}}, 200, 20),
    ({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "10%"}}, 3, 1),
    ({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "0%", "maxSurge": 1}}, 10, 1),
    ({"type": "OnDelete"}, 200, 1),
    ({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 7}}, 3, 7),
])
def test_at_most_max_unavailable_at_once(strategy: dict[str, object], total: int, expected: int) -> None:
    assert at_once(strategy, total) == expected
