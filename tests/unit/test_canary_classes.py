"""One canary per hardware class (issue 36, item 3), the pure parts: ``node=a,b`` is read as
several node names, a run's canary nodes, the policy's ``canary.per_class``, and waves whose
first wave holds a node of every class."""

from __future__ import annotations

import datetime as dt

import pytest

from runbooks import validation
from runbooks.daemonset.waves import Candidate, order_nodes, split
from runbooks.engine.commands import step_settings_of
from runbooks.engine.runs import Run, Target
from runbooks.policy import Policy, Wave


def test_node_lists_are_names_joined_by_commas() -> None:
    """One name or several joined by commas; an empty name, a name twice or a bad name is refused."""
    assert validation.node_names("gpu-node1") == "gpu-node1"
    assert validation.node_names("gpu-node1,gpu-node3") == "gpu-node1,gpu-node3"
    for bad, says in (("gpu-node1,,gpu-node3", "empty name"), ("gpu-node1,gpu-node1", "names a node twice"),
                      ("gpu-node1,GPU_3", "node")):
        with pytest.raises(ValueError, match=says):
            validation.node_names(bad)


def test_a_run_lists_its_canary_nodes() -> None:
    now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    run = Run(id="r-1", target=Target(cluster="kubesim", namespace="kube-system", name="p"), image="i:1", container="c",
              node="gpu-node2,gpu-node4", requester="U0A", created_at=now, updated_at=now)
    assert run.canary_nodes == ["gpu-node2", "gpu-node4"]
    assert run.model_copy(update={"node": "gpu-node1"}).canary_nodes == ["gpu-node1"]


def test_per_class_is_off_by_default_and_reaches_the_steps() -> None:
    """canary.per_class defaults to false and is handed to the steps' settings."""
    assert not step_settings_of(Policy.model_validate({})).canary_per_class
    assert step_settings_of(Policy.model_validate({"canary": {"per_class": True}})).canary_per_class


def test_the_first_wave_holds_every_class_even_when_its_size_says_one() -> None:
    """With the class as the widest domain, a first wave of 1 grows to one node per class; the
    later waves keep their cumulative sizes."""
    candidates = [Candidate("a1", ("A100",)), Candidate("a2", ("A100",), busy=4), Candidate("a3", ("A100",)),
                  Candidate("h1", ("H100",)), Candidate("h2", ("H100",)), Candidate("u1", ("",))]
    order = order_nodes(candidates)
    waves = split(order, [Wave(nodes="1"), Wave(nodes="50%"), Wave(nodes="100%")], first_at_least=3)
    assert [(w["size"], len(w["nodes"])) for w in waves] == [("1", 3), ("100%", 3)]  # 50% (3) adds nothing: left out
    first = waves[0]["nodes"]
    assert sorted(first) == ["a1", "h1", "u1"]
    assert sorted(n for w in waves for n in w["nodes"]) == sorted(c.name for c in candidates)
    assert split(order, [Wave(nodes="1"), Wave(nodes="100%")])[0]["nodes"] == [order[0]]  # without: as before
