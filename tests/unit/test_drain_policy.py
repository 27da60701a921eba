"""Drain: the policy's shapes, a budget's 429 told apart from an overloaded server, and
which nodes a failed wave's checks name."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from runbooks.cluster.wrapping import error_for_status
from runbooks.daemonset.draining import failed_nodes
from runbooks.engine.steps import Check, CheckStatus
from runbooks.errors import Action, DisruptionRefused, ServerBusy
from runbooks.policy import Policy

TARGET = "kube-system/nvidia-device-plugin-daemonset"


def drain_of(value: object) -> object:
    policy = Policy.model_validate({"targets": [{"namespace": "kube-system", "name": "nvidia-device-plugin-daemonset",
                                                 "drain": value}]})
    return policy.target(TARGET).drain  # type: ignore[union-attr]


def test_drain_true_takes_the_defaults_and_false_or_none_is_off() -> None:
    assert drain_of(True) is not None and drain_of(True).timeout == "10m"  # type: ignore[union-attr]
    assert drain_of(True).keep_failed_cordoned is False  # type: ignore[union-attr]
    assert drain_of(False) is None and drain_of(None) is None
    custom = drain_of({"timeout": "90s", "keep_failed_cordoned": True})
    assert custom.timeout == "90s" and custom.keep_failed_cordoned  # type: ignore[union-attr]


@pytest.mark.parametrize(("value", "says"), [
    ({"timeout": "2s"}, "too short"),
    ({"timeout": "soon"}, "is not a duration"),
    ({"grace": "30s"}, "Extra inputs are not permitted"),
    ("yes", "valid dictionary"),
])
def test_bad_drain_settings_are_refused_when_the_file_is_read(value: object, says: str) -> None:
    with pytest.raises(ValidationError, match=says):
        drain_of(value)


def test_a_budgets_429_is_a_refused_disruption_in_the_budgets_words() -> None:
    action = Action("create", "pods/eviction", "ml-team", "trainer-1-abc")
    body = json.dumps({"kind": "Status", "status": "Failure", "code": 429, "reason": "TooManyRequests",
                       "message": "Cannot evict pod as it would violate the pod's disruption budget.",
                       "details": {"causes": [{"reason": "DisruptionBudget",
                                               "message": "The disruption budget trainer needs 2 healthy pods and "
                                                          "has 2 currently"}]}})
    error = error_for_status(429, body, {}, action=action, context="prod")
    assert isinstance(error, DisruptionRefused) and error.retryable
    assert error.detail == "The disruption budget trainer needs 2 healthy pods and has 2 currently"
    assert "overloaded" not in str(error) and str(error).startswith("cannot create pods/eviction ml-team/trainer-1-abc")
    busy = error_for_status(429, json.dumps({"kind": "Status", "message": "too many requests"}), {"Retry-After": "3"},
                            action=action, context="prod")
    assert type(busy) is ServerBusy and busy.retry_after == 3.0


def test_a_failed_wave_keeps_the_nodes_its_checks_name_in_their_evidence_or_all_of_them() -> None:
    """The checks' scope lists every node of the wave: only their evidence says where they failed."""
    wave = ["gpu-node1", "gpu-node2", "gpu-node4"]
    scope = "gpu-node1, gpu-node2, gpu-node4"
    checks = [Check(name="rollout", status=CheckStatus.PASS, scope=scope, evidence={"behind": []}),
              Check(name="pods-ready", status=CheckStatus.FAIL, scope=scope, evidence={"nodes": {"gpu-node2": "not Ready"}}),
              Check(name="other-nodes-unchanged", status=CheckStatus.FAIL, scope="gpu-node7",
                    evidence={"nodes": {"gpu-node7": "image changed"}})]  # a later wave's node: not a candidate
    assert failed_nodes(checks, wave) == ["gpu-node2"]
    registered = Check(name="plugin-registered", status=CheckStatus.FAIL, scope=scope,
                       evidence={"missing": ["gpu-node4"], "unread": {}})
    assert failed_nodes([registered], wave) == ["gpu-node4"]
    assert failed_nodes([Check(name="events", status=CheckStatus.FAIL, scope="all nodes")], wave) == wave
