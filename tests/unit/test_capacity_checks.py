"""GPU capacity is judged per node against that node's own state before the change.

A node already degraded when the baseline was taken is said so and never blamed on the
upgrade; one that recovered since passes; only a node that has fewer GPUs than it had
before (at the end, or at any moment of the window) fails.
"""

from __future__ import annotations

import datetime as dt

from runbooks.daemonset.baselines import Baseline, NodeBaseline
from runbooks.daemonset.checks import gpu_capacity
from runbooks.engine.steps import CheckStatus
from runbooks.inventory.models import Node

GPU = "nvidia.com/gpu"


def baseline(**allocatable: int) -> Baseline:
    nodes = {name: NodeBaseline(name=name, capacity={GPU: 8}, allocatable={GPU: value})
             for name, value in allocatable.items()}
    return Baseline(taken_at=dt.datetime(2026, 1, 1, tzinfo=dt.UTC), daemonset="kube-system/p", kind="device-plugin",
                    gpu_resources=[GPU], nodes=nodes)


def nodes(**allocatable: int) -> dict[str, Node]:
    return {name: Node(name=name, ready=True, unschedulable=False, gpu_hardware=True, capacity={GPU: 8},
                       allocatable={GPU: value}) for name, value in allocatable.items()}


def test_a_node_degraded_before_the_run_is_reported_not_blamed() -> None:
    check = gpu_capacity(["a", "b"], nodes(a=8, b=0), {}, baseline(a=8, b=0), [GPU], everywhere=True)
    assert check.status is CheckStatus.PASS
    assert "already degraded before the run: b (nvidia.com/gpu 0 of 8 allocatable)" in check.detail


def test_a_node_that_recovered_since_the_baseline_passes() -> None:
    check = gpu_capacity(["a"], nodes(a=8), {}, baseline(a=0), [GPU], everywhere=True)
    assert check.status is CheckStatus.PASS


def test_fewer_gpus_than_before_fails_at_the_end_or_during_the_window() -> None:
    assert gpu_capacity(["a"], nodes(a=4), {}, baseline(a=8), [GPU], everywhere=True).status is CheckStatus.FAIL
    dipped = gpu_capacity(["a"], nodes(a=8), {"a": {GPU: 2}}, baseline(a=8), [GPU], everywhere=True)
    assert dipped.status is CheckStatus.FAIL and "dropped to 2" in dipped.detail
