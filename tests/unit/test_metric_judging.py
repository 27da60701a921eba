"""Metric checks judged per node against the node's own value before the run (issue 37, item 3).

A source of values stands in for Prometheus here: it is what the check is handed (a
:class:`~runbooks.metrics.MetricSource`); the real Prometheus is in
``tests/integration/test_metric_checks.py``.
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from runbooks.engine.steps import CheckStatus
from runbooks.metrics import MetricsUnavailable
from runbooks.metrics.comparing import PodComparison, PodGroup
from runbooks.metrics.judging import MetricWatch, PodScope, render
from runbooks.metrics.spec import DEFAULT_CHECKS, Condition, MetricCheckSpec, PrometheusPolicy
from runbooks.policy import Policy


class Answers:
    """Each query answers the next of ``answers`` (a dict of values, or an exception)."""

    def __init__(self, *answers: dict[str, float] | Exception) -> None:
        self.answers = list(answers)
        self.queries: list[str] = []

    def vector(self, promql: str) -> dict[str, float]:
        self.queries.append(promql)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return dict(answer)


XID = DEFAULT_CHECKS[0]


def watch(source: Answers, spec: MetricCheckSpec = XID, before: dict[str, float] | None = None) -> MetricWatch:
    baseline = {"values": {spec.name: before or {}}}
    return MetricWatch(source, [spec], ["gpu-node1", "gpu-node2"], window=30, scope="all nodes", baseline=baseline,
                       elapsed=lambda: 0.0)


def test_a_new_xid_fails_naming_the_node_and_the_count() -> None:
    """Issue 37 item 3: XIDs above the node's count before the run fail, naming node and value."""
    check = watch(Answers({"gpu-node1": 0, "gpu-node2": 3}), before={"gpu-node1": 0, "gpu-node2": 1}).checks()[0]
    assert check.status is CheckStatus.FAIL and check.scope == "gpu-node2"
    assert check.detail.startswith("gpu-node2: 3 XIDs (before the run 1 XID): not result <= baseline"), check.detail


def test_the_failure_limit_tolerates_that_many_failed_measurements() -> None:
    """Issue 37 item 3: ``failure_limit: 1`` lets one bad measurement pass, not two."""
    spec = XID.model_copy(update={"failure_limit": 1})
    once = watch(Answers({"gpu-node1": 2}, {"gpu-node1": 0}), spec, before={"gpu-node1": 0})
    once.tick()
    assert once.checks()[0].status is CheckStatus.PASS
    twice = watch(Answers({"gpu-node1": 2}), spec, before={"gpu-node1": 0})
    twice.tick()
    assert twice.checks()[0].status is CheckStatus.FAIL


def test_no_answer_is_unknown_with_the_reason_and_a_later_answer_makes_up_for_it() -> None:
    """Issue 37 item 3: the source not answering at the end is ``unknown`` with its reason."""
    down = MetricsUnavailable("http://prom:9090 did not answer: Connection refused")
    check = watch(Answers({"gpu-node1": 0}, down), before={"gpu-node1": 0})
    check.tick()
    verdict = check.checks()[0]
    assert verdict.status is CheckStatus.UNKNOWN and "Connection refused" in verdict.detail
    back = watch(Answers(down, {"gpu-node1": 0}), before={"gpu-node1": 0})
    back.tick()
    assert back.checks()[0].status is CheckStatus.PASS


def test_utilisation_is_compared_with_half_the_nodes_own_baseline() -> None:
    """Issue 37 item 3: workload GPU utilisation must stay at least half what the node had before."""
    util = DEFAULT_CHECKS[2]
    fine = watch(Answers({"gpu-node1": 40.0}), util, before={"gpu-node1": 70.0}).checks()[0]
    assert fine.status is CheckStatus.PASS
    dropped = watch(Answers({"gpu-node1": 0.0}), util, before={"gpu-node1": 70.0}).checks()[0]
    assert dropped.status is CheckStatus.FAIL
    assert dropped.detail.startswith("gpu-node1: 0% workload GPU utilisation (before the run 70% workload"), dropped.detail


def test_placeholders_render_the_nodes_the_node_and_the_window() -> None:
    """Issue 37 item 3: ``$nodes`` is an escaped regex of the scope, ``$node`` one node, ``$window`` seconds."""
    query = 'max_over_time(X{Hostname=~"$nodes"}[$window]) + Y{Hostname="$node"}'
    assert render(query, nodes=["b.example", "a"], window=30, node="a") == (
        'max_over_time(X{Hostname=~"a|b\\\\.example"}[30s]) + Y{Hostname="a"}')
    source = Answers({"gpu-node1": 1.0})
    per_node = MetricCheckSpec(name="temp", query='T{Hostname="$node"}', condition="result < 90")
    watch(source, per_node).checks()
    assert source.queries == ['T{Hostname="gpu-node1"}', 'T{Hostname="gpu-node2"}']


@pytest.mark.parametrize("bad", [
    {"verify": {"metrics": [{"name": "x", "query": "up", "condition": "result ~ 3"}]}},
    {"verify": {"metrics": [{"name": "X!", "query": "up", "condition": "result == 0"}]}},
    {"prometheus": {"url": "http://user:pw@prom:9090"}},
    {"prometheus": {"url": "prom:9090"}},
    {"prometheus": {"url": "http://prom:9090", "bearer_token_file": "token"}},
])
def test_the_policy_refuses_bad_metric_checks_and_prometheus_settings(bad: dict[str, object]) -> None:
    """Issue 37 item 3: a condition that does not parse, a bad name, credentials in the URL, a
    relative token file are policy errors at start-up."""
    with pytest.raises(ValidationError):
        Policy.model_validate(bad)


def test_conditions_compare_with_numbers_or_the_baseline() -> None:
    assert Condition.parse("result >= baseline * 0.5").bound(80) == 40
    assert Condition.parse("result == 0").bound(None) == 0
    assert Condition.parse("result <= baseline").bound(None) is None
    assert PrometheusPolicy(url="https://prom.monitoring.svc:9090/").url == "https://prom.monitoring.svc:9090"


def test_outside_a_run_the_values_at_the_windows_start_are_the_baseline() -> None:
    """Issue 37 item 3: ``upgradebot verify`` (no run, no recorded values) compares each node with
    its own value when the window began: an XID during the window fails, none passes."""
    grew = MetricWatch(Answers({"gpu-node1": 2}, {"gpu-node1": 3}), [XID], ["gpu-node1"], window=30,
                       scope="all nodes", baseline=None, elapsed=lambda: 0.0)
    verdict = grew.checks()[0]
    assert verdict.status is CheckStatus.FAIL and verdict.detail.startswith("gpu-node1: 3 XIDs (before the run 2 XIDs)")
    same = MetricWatch(Answers({"gpu-node1": 2}), [XID], ["gpu-node1"], window=30, scope="all nodes", baseline=None,
                       elapsed=lambda: 0.0)
    assert same.checks()[0].status is CheckStatus.PASS


def test_pods_and_namespace_render_the_pods_in_scope_or_any_pod() -> None:
    """Issue 38 item 1: ``$pods`` is an escaped regex of the pods in scope and ``$namespace`` their
    namespace; without a scope (``verify``) both match any pod, as ``pod!=""`` did."""
    query = 'U{namespace=~"$namespace", pod=~"$pods", Hostname=~"$nodes"}'
    assert render(query, nodes=["n1"], window=5) == 'U{namespace=~".+", pod=~".+", Hostname=~"n1"}'
    scoped = render(query, nodes=["n1"], window=5, pods=PodScope("ml-team", ("b-1.x", "a-0")))
    assert scoped == 'U{namespace=~"ml-team", pod=~"a-0|b-1\\\\.x", Hostname=~"n1"}'


def comparison(source: Answers, spec: MetricCheckSpec) -> PodComparison:
    canary = PodGroup(PodScope("ml", ("c-0",)), ("gpu-node1",))
    original = PodGroup(PodScope("ml", ("o-0", "o-1")), ("gpu-node2", "gpu-node3"))
    return PodComparison(source, [XID, spec], canary, original, window=10, elapsed=lambda: 0.0)


def test_a_canary_is_judged_against_the_originals_pods_with_their_value_as_baseline() -> None:
    """Issue 38 item 1: a check over ``$pods`` measures the canary's pods, then the original's (the
    mean of their nodes' values), and the condition takes the original's value as ``baseline``;
    checks over nodes (XID) are not compared here."""
    util = DEFAULT_CHECKS[2]
    held = comparison(Answers({"gpu-node1": 60.0}, {"gpu-node2": 70.0, "gpu-node3": 90.0}), util)
    [check] = held.checks()
    assert check.status is CheckStatus.PASS and check.evidence["canary"] == 60.0 and check.evidence["original"] == 80.0
    low = comparison(Answers({"gpu-node1": 30.0}, {"gpu-node2": 70.0, "gpu-node3": 90.0}), util)
    [check] = low.checks()
    assert check.status is CheckStatus.FAIL
    assert check.detail.startswith("the canary's pods 30% workload GPU utilisation, the original's 80%"), check.detail


def test_a_canary_without_series_fails_only_at_the_windows_end_and_a_silent_source_is_unknown() -> None:
    """Issue 38 item 1: the canary's pods having no series while the original's have fails the
    check at the window's end (not at a first measurement a scrape may not have caught up with);
    Prometheus not answering makes it ``unknown`` with the reason."""
    util = DEFAULT_CHECKS[2]
    watch = comparison(Answers({}, {"gpu-node2": 70.0}), util)
    watch.tick()
    assert watch.sides[0].failures == 0
    [check] = watch.checks()
    assert check.status is CheckStatus.FAIL and check.detail.startswith("no series for the canary's pods"), check.detail
    [down] = comparison(Answers(MetricsUnavailable("connection refused")), util).checks()
    assert down.status is CheckStatus.UNKNOWN and "connection refused" in down.detail
