"""Metric checks judged per node against the node's own value before the run (issue 37, item 3).

A source of values stands in for Prometheus here: it is what the check is handed (a
:class:`~runbooks.metrics.MetricSource`); the real Prometheus is in
``tests/integration/test_metric_checks.py``.
"""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from runbooks.engine.steps import CheckStatus
from runbooks.metrics import MetricsUnavailable
from runbooks.metrics.comparing import PodComparison, PodGroup
from runbooks.metrics.judging import MetricWatch, PodScope, render
from runbooks.metrics.probing import SeriesLabels
from runbooks.metrics.spec import (
    DEFAULT_CHECKS,
    XID_COUNT_CHECK,
    Condition,
    MetricCheckSpec,
    PrometheusPolicy,
)
from runbooks.policy import Policy


class Answers:
    """Each query answers the next of ``answers`` (a dict of values, or an exception); the
    probe's questions (``count by (...)``) are answered by ``exported``: the nodes whose exporter
    exports what is asked (every node in scope unless told), but for DCGM_EXP_XID_ERRORS_COUNT,
    which NVIDIA's counters CSVs comment out (and the XID check used here reads)."""

    def __init__(self, *answers: dict[str, float] | Exception,
                 exported: dict[str, float] | None = None) -> None:
        self.answers = list(answers)
        self.exported = {"gpu-node1": 1.0, "gpu-node2": 1.0} if exported is None else exported
        self.queries: list[str] = []

    def vector(self, promql: str) -> dict[str, float]:
        if promql.startswith("count by ("):
            if "exported_pod" in promql or "(DCGM_EXP_XID_ERRORS_COUNT{" in promql:
                return {}
            return dict(self.exported)
        self.queries.append(promql)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return dict(answer)


XID = MetricCheckSpec(name="xids", query='sum by ($node_label) (XIDS{$node_label=~"$nodes"})',
                      condition="result <= baseline", unit="XIDs")
"""A count of XIDs per node (a user's own metric), compared with the node's own count before the run."""


def watch(source: Answers, spec: MetricCheckSpec = XID, before: dict[str, float] | None = None,
          nodes: tuple[str, ...] = ("gpu-node1", "gpu-node2")) -> MetricWatch:
    baseline = {"values": {spec.name: before or {}}}
    return MetricWatch(source, [spec], list(nodes), window=30, scope="all nodes", baseline=baseline,
                       elapsed=lambda: 0.0)


def test_a_new_xid_fails_naming_the_node_and_the_count() -> None:
    """Issue 37 item 3: XIDs above the node's count before the run fail, naming node and value."""
    check = watch(Answers({"gpu-node1": 0, "gpu-node2": 3}), before={"gpu-node1": 0, "gpu-node2": 1}).checks()[0]
    assert check.status is CheckStatus.FAIL and check.scope == "gpu-node2"
    assert check.detail.startswith("gpu-node2: 3 XIDs (before the run 1 XID): not result <= baseline"), check.detail


def test_the_built_in_xid_check_fails_on_a_gpu_whose_last_xid_changed_naming_gpu_and_code() -> None:
    """Issue 56 item 3: dcgm-exporter's default exports only DCGM_FI_DEV_XID_ERRORS, the code of
    each GPU's last XID: a GPU whose code changed to one that is not 0 raised an XID (named with
    its code); a code unchanged since before the run, or 0, is no new XID."""
    before = {"gpu-node1/0": 0, "gpu-node1/1": 48, "gpu-node2/0": 0}
    fine = watch(Answers({"gpu-node1/0": 0, "gpu-node1/1": 48, "gpu-node2/0": 0}), DEFAULT_CHECKS[0], before)
    assert fine.checks()[0].status is CheckStatus.PASS
    bad = watch(Answers({"gpu-node1/0": 0, "gpu-node1/1": 48, "gpu-node2/0": 79}), DEFAULT_CHECKS[0], before)
    check = bad.checks()[0]
    assert check.status is CheckStatus.FAIL and check.scope == "gpu-node2", check
    assert check.detail.startswith("gpu-node2 GPU 0: last XID 79 (before the run last XID 0)"), check.detail
    assert 'max by (Hostname, gpu) (DCGM_FI_DEV_XID_ERRORS{Hostname=~"gpu-node1|gpu-node2"})' in bad.source.queries[0]


def test_series_that_vanish_after_the_baseline_are_unknown_never_a_pass() -> None:
    """Issue 57 finding 1: Prometheus answering no series for a node that had them before the run
    (its workloads evicted, its exporter dead) is ``unknown`` naming the node, for every check."""
    for spec, before in ((XID, {"gpu-node1": 0.0}), (DEFAULT_CHECKS[1], {"gpu-node1": 0.0}),
                         (DEFAULT_CHECKS[2], {"gpu-node1": 70.0})):
        check = watch(Answers({}), spec, before, nodes=("gpu-node1",)).checks()[0]
        assert check.status is CheckStatus.UNKNOWN, (spec.name, check)
        assert "gpu-node1 had series before the run and has none now" in check.detail, check.detail


def test_a_field_the_exporter_does_not_export_makes_its_check_unknown_with_the_reason() -> None:
    """Issue 56 item 2: the ECC field is commented out in dcgm-exporter's counters CSVs: a node
    whose exporter does not export it cannot fail the ECC check, which is ``unknown`` saying so."""
    source = Answers({}, exported={})
    check = watch(source, DEFAULT_CHECKS[1], nodes=("gpu-node2",)).checks()[0]
    assert check.status is CheckStatus.UNKNOWN
    assert ("dcgm-exporter on gpu-node2 exports no DCGM_FI_DEV_ECC_DBE_VOL_TOTAL: add it to the exporter's counters"
            in check.detail), check.detail


def test_the_failure_limit_tolerates_that_many_failed_measurements() -> None:
    """Issue 37 item 3: ``failure_limit: 1`` lets one bad measurement pass, not two."""
    spec = XID.model_copy(update={"failure_limit": 1})
    once = watch(Answers({"gpu-node1": 2}, {"gpu-node1": 0}), spec, before={"gpu-node1": 0}, nodes=("gpu-node1",))
    once.tick()
    assert once.checks()[0].status is CheckStatus.PASS
    twice = watch(Answers({"gpu-node1": 2}), spec, before={"gpu-node1": 0}, nodes=("gpu-node1",))
    twice.tick()
    assert twice.checks()[0].status is CheckStatus.FAIL


def test_no_answer_is_unknown_with_the_reason_and_a_later_answer_makes_up_for_it() -> None:
    """Issue 37 item 3: the source not answering at the end is ``unknown`` with its reason."""
    down = MetricsUnavailable("http://prom:9090 did not answer: Connection refused")
    check = watch(Answers({"gpu-node1": 0}, down), before={"gpu-node1": 0}, nodes=("gpu-node1",))
    check.tick()
    verdict = check.checks()[0]
    assert verdict.status is CheckStatus.UNKNOWN and "Connection refused" in verdict.detail
    back = watch(Answers(down, {"gpu-node1": 0}), before={"gpu-node1": 0}, nodes=("gpu-node1",))
    back.tick()
    assert back.checks()[0].status is CheckStatus.PASS


def test_utilisation_is_compared_with_half_the_nodes_own_baseline() -> None:
    """Issue 37 item 3: workload GPU utilisation must stay at least half what the node had before."""
    util = DEFAULT_CHECKS[2]
    fine = watch(Answers({"gpu-node1": 40.0}), util, before={"gpu-node1": 70.0}).checks()[0]
    assert fine.status is CheckStatus.PASS, fine
    assert "gpu-node2" not in fine.detail or "no workload" in fine.detail
    idle = watch(Answers({}), util, before={}).checks()[0]
    assert idle.status is CheckStatus.UNKNOWN and "no workload used a GPU" in idle.detail, idle
    dropped = watch(Answers({"gpu-node1": 0.0}), util, before={"gpu-node1": 70.0}).checks()[0]
    assert dropped.status is CheckStatus.FAIL
    assert dropped.detail.startswith("gpu-node1: 0% workload GPU utilisation (before the run 70% workload"), dropped.detail


def test_placeholders_render_the_nodes_the_node_and_the_window() -> None:
    """Issue 37 item 3: ``$nodes`` is an escaped regex of the scope, ``$node`` one node, ``$window`` seconds."""
    query = 'max_over_time(X{Hostname=~"$nodes"}[$window]) + Y{Hostname="$node"}'
    assert render(query, nodes=["b.example", "a"], window=30, node="a") == (
        'max_over_time(X{Hostname=~"a|b\\\\.example"}[30s]) + Y{Hostname="a"}')
    source = Answers({"gpu-node1": 1.0})
    per_node = MetricCheckSpec(name="temp", query='T{$node_label="$node"}', condition="result < 90")
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
    assert Condition.parse("result >= baseline * 0.5").judge(40, 80) is True
    assert Condition.parse("result >= baseline * 0.5").judge(39, 80) is False
    assert Condition.parse("result == 0").judge(0, None) is True
    assert Condition.parse("result <= baseline").judge(3, None) is None
    either = Condition.parse("result == baseline or result == 0")
    assert (either.judge(0, None), either.judge(48, 48), either.judge(79, 48), either.judge(79, None)) == (
        True, True, False, None)
    assert Condition.parse("result < 1").judge(float("nan"), None) is False
    assert PrometheusPolicy(url="https://prom.monitoring.svc:9090/").url == "https://prom.monitoring.svc:9090"


def test_outside_a_run_the_values_at_the_windows_start_are_the_baseline() -> None:
    """Issue 37 item 3: ``upgradebot verify`` (no run, no recorded values) compares each node with
    its own value when the window began: an XID during the window fails, none passes."""
    grew = MetricWatch(Answers({"gpu-node1": 2}, {"gpu-node1": 3}, exported={"gpu-node1": 1}), [XID], ["gpu-node1"],
                       window=30, scope="all nodes", baseline=None, elapsed=lambda: 0.0)
    verdict = grew.checks()[0]
    assert verdict.status is CheckStatus.FAIL and verdict.detail.startswith("gpu-node1: 3 XIDs (before the run 2 XIDs)")
    same = MetricWatch(Answers({"gpu-node1": 2}, exported={"gpu-node1": 1}), [XID], ["gpu-node1"], window=30,
                       scope="all nodes", baseline=None, elapsed=lambda: 0.0)
    assert same.checks()[0].status is CheckStatus.PASS


def test_pods_and_namespace_render_the_pods_in_scope_or_any_pod() -> None:
    """Issue 38 item 1: ``$pods`` is an escaped regex of the pods in scope and ``$namespace`` their
    namespace; without a scope (``verify``) both match any pod, as ``pod!=""`` did."""
    query = 'U{namespace=~"$namespace", pod=~"$pods", Hostname=~"$nodes"}'
    assert render(query, nodes=["n1"], window=5) == 'U{namespace=~".+", pod=~".+", Hostname=~"n1"}'
    scoped = render(query, nodes=["n1"], window=5, pods=PodScope("ml-team", ("b-1.x", "a-0")))
    assert scoped == 'U{namespace=~"ml-team", pod=~"a-0|b-1\\\\.x", Hostname=~"n1"}'
    labelled = render(DEFAULT_CHECKS[2].query, nodes=["n1"], window=5,
                      labels=SeriesLabels("hostname", "exported_pod", "exported_namespace"))
    assert labelled == ('avg by (hostname) (DCGM_FI_DEV_GPU_UTIL{hostname=~"n1", exported_namespace=~".+", '
                        'exported_pod=~".+"})')


class PodValues:
    """Prometheus as the pods' series would answer: each pod (``pod -> (node, value)``) counts
    towards its node's mean when the query's ``$pods`` names it."""

    def __init__(self, pods: dict[str, tuple[str, float]]) -> None:
        self.pods = pods

    def vector(self, promql: str) -> dict[str, float]:
        named = re.search(r'pod=~"([^"]*)"', promql)
        asked = set(named.group(1).split("|")) if named else set(self.pods)
        by_node: dict[str, list[float]] = {}
        for pod, (node, value) in self.pods.items():
            if pod in asked:
                by_node.setdefault(node, []).append(value)
        return {node: sum(v) / len(v) for node, v in by_node.items()}


def comparison(source: Answers | PodValues, spec: MetricCheckSpec) -> PodComparison:
    canary = PodGroup(PodScope("ml", ("c-0",)), ("gpu-node1",))
    original = PodGroup(PodScope("ml", ("o-0", "o-1")), ("gpu-node2", "gpu-node3"))
    return PodComparison(source, [XID, spec], canary, original, window=10, elapsed=lambda: 0.0)


def test_a_canary_is_judged_against_the_originals_pods_with_their_value_as_baseline() -> None:
    """Issue 38 item 1: a check over ``$pods`` measures the canary's pods, then the original's (the
    mean of their nodes' values), and the condition takes the original's value as ``baseline``;
    checks over nodes (XID) are not compared here."""
    util = DEFAULT_CHECKS[2]
    held = comparison(PodValues({"c-0": ("gpu-node1", 60.0), "o-0": ("gpu-node2", 70.0), "o-1": ("gpu-node3", 90.0)}),
                      util)
    [check] = held.checks()
    assert check.status is CheckStatus.PASS and check.evidence["canary"] == 60.0 and check.evidence["original"] == 80.0
    low = comparison(PodValues({"c-0": ("gpu-node1", 30.0), "o-0": ("gpu-node2", 70.0), "o-1": ("gpu-node3", 90.0)}),
                     util)
    [check] = low.checks()
    assert check.status is CheckStatus.FAIL
    assert check.detail.startswith("the canary's pods 30% workload GPU utilisation, the original's 80%"), check.detail


def test_a_canary_without_series_fails_only_at_the_windows_end_and_a_silent_source_is_unknown() -> None:
    """Issue 38 item 1: the canary's pods having no series while the original's have fails the
    check at the window's end (not at a first measurement a scrape may not have caught up with);
    Prometheus not answering makes it ``unknown`` with the reason."""
    util = DEFAULT_CHECKS[2]
    watch = comparison(Answers({}, {"gpu-node2": 70.0}), util)
    [neither] = comparison(Answers({}), util).checks()
    assert neither.status is CheckStatus.UNKNOWN and "no series for the canary's pods nor the original's" in neither.detail
    watch.tick()
    assert watch.sides[0].failures == 0
    [check] = watch.checks()
    assert check.status is CheckStatus.FAIL and check.detail.startswith("no series for the canary's pods"), check.detail
    [down] = comparison(Answers(MetricsUnavailable("connection refused")), util).checks()
    assert down.status is CheckStatus.UNKNOWN and "connection refused" in down.detail


def test_a_gpu_whose_series_vanish_while_its_node_still_answers_is_unknown() -> None:
    """A second attack run (N1): the vanished-series rule held per node, so a node was measured
    if any one GPU answered: GPU 1's series dropped while GPU 0's stayed passed the XID check on
    "7 series". Each GPU that had series before the run and has none now is named, and the check
    is ``unknown``; the ECC errors are judged per GPU, so a vanished GPU's count hides no new
    errors on another (before: GPU 0 at 0 and GPU 1 at 5 summed 5; GPU 1 gone and GPU 0 at 3 gave
    3 <= 5, a pass with three new double-bit errors)."""
    before = {"gpu-node1/0": 0.0, "gpu-node1/1": 0.0}
    xid = watch(Answers({"gpu-node1/0": 0.0}), DEFAULT_CHECKS[0], before, nodes=("gpu-node1",)).checks()[0]
    assert xid.status is CheckStatus.UNKNOWN, xid
    assert "gpu-node1 GPU 1 had series before the run and has none now" in xid.detail, xid.detail
    ecc = DEFAULT_CHECKS[1]
    assert "gpu)" in ecc.query  # per GPU
    masked = watch(Answers({"gpu-node1/0": 3.0}), ecc, {"gpu-node1/0": 0.0, "gpu-node1/1": 5.0}, nodes=("gpu-node1",))
    check = masked.checks()[0]
    assert check.status is CheckStatus.FAIL and check.detail.startswith("gpu-node1 GPU 0: 3 double-bit ECC errors"), check


def test_a_canary_whose_pods_answer_on_only_some_of_their_nodes_is_unknown() -> None:
    """A second attack run (N6): the canary's value was the mean over the nodes that answered, so
    a canary on two nodes, one without series, was judged on half its pods as if on all. And its
    second re-run (F2): a pod without series beside one that has them on the same node was hidden
    in that node's mean."""
    util = DEFAULT_CHECKS[2]
    original = PodGroup(PodScope("ml", ("o-0",)), ("gpu-node3",))
    two_nodes = PodGroup(PodScope("ml", ("c-0", "c-1")), ("gpu-node1", "gpu-node2"))
    half = PodComparison(PodValues({"c-0": ("gpu-node1", 80.0), "o-0": ("gpu-node3", 80.0)}), [util], two_nodes,
                         original, window=10, elapsed=lambda: 0.0)
    [check] = half.checks()
    assert check.status is CheckStatus.UNKNOWN, check
    assert "no series for the canary's pods on gpu-node2: only part of them was measured" in check.detail, check.detail
    one_node = PodGroup(PodScope("ml", ("c-0", "c-1")), ("gpu-node1",))
    hidden = PodComparison(PodValues({"c-0": ("gpu-node1", 90.0), "o-0": ("gpu-node3", 80.0)}), [util], one_node,
                           original, window=10, elapsed=lambda: 0.0)
    [check] = hidden.checks()
    assert check.status is CheckStatus.UNKNOWN, check
    assert "no series for the canary's pod(s) c-1: only part of them was measured" in check.detail, check.detail


def test_the_xid_count_fails_on_a_rise_between_measurements_and_ecc_on_any_change() -> None:
    """The second re-run (F4, F3): the XID count slides over the exporter's window, so an XID that
    arrives as an older one leaves keeps it level with the value before the run: a rise from one
    measurement to the next fails. The volatile ECC count going down (a reset, with new errors
    since) or up is a change, and fails; duplicate series of a GPU are not added up (``max``)."""
    count = next(spec for spec in (*DEFAULT_CHECKS, XID_COUNT_CHECK) if spec.windowed)
    slid = watch(Answers({"gpu-node1/0": 0.0}, {"gpu-node1/0": 1.0}), count, {"gpu-node1/0": 1.0}, nodes=("gpu-node1",))
    slid.tick()
    check = slid.checks()[0]
    assert check.status is CheckStatus.FAIL, check
    assert "gpu-node1 GPU 0: 1 XID(s) in the exporter's window (up from 0 XID(s) in the exporter's window at the " \
           "measurement before)" in check.detail, check.detail
    ecc = DEFAULT_CHECKS[1]
    assert ecc.query.startswith("max by ($node_label, gpu)") and ecc.condition == "result == baseline"
    reset = watch(Answers({"gpu-node1/0": 3.0}), ecc, {"gpu-node1/0": 5.0}, nodes=("gpu-node1",)).checks()[0]
    assert reset.status is CheckStatus.FAIL, reset


def test_nodes_a_per_node_query_does_not_ask_are_said_so() -> None:
    """The second re-run (F5): a ``$node`` query runs for 50 nodes at most; the others are
    ``unknown`` as not asked, not as "no series"."""
    nodes = tuple(f"node-{i:02}" for i in range(55))
    per_node = MetricCheckSpec(name="temp", query='T{$node_label="$node"}', condition="result < 90")
    source = Answers({}, exported=dict.fromkeys(nodes, 1.0))
    source.answers = [{n: 40.0} for n in nodes[:50]] * 3
    check = watch(source, per_node, nodes=nodes).checks()[0]
    assert check.status is CheckStatus.UNKNOWN, check
    assert "node-50 was not asked: a $node query runs for 50 nodes at most (use $nodes)" in check.detail, check.detail


def test_an_original_pod_without_series_of_its_own_is_unknown_not_a_lower_bar() -> None:
    """Third re-run (N6): the original's busy pod without series and an idle one left the bar at
    the idle one's value, so a canary at 6% passed against 10%."""
    util = DEFAULT_CHECKS[2]
    canary = PodGroup(PodScope("ml", ("c-0",)), ("gpu-node1",))
    original = PodGroup(PodScope("ml", ("o-a", "o-b")), ("gpu-node3",))
    low_bar = PodComparison(PodValues({"c-0": ("gpu-node1", 6.0), "o-b": ("gpu-node3", 10.0)}), [util], canary,
                            original, window=10, elapsed=lambda: 0.0)
    [check] = low_bar.checks()
    assert check.status is CheckStatus.UNKNOWN, check
    assert "no series for the original's pod(s) o-a" in check.detail, check.detail
