"""The stability report's metric view judged GPU by GPU (the second re-run of the attack
classes, F1): a GPU whose series vanished since the promotion is named and makes the report
degraded, a new XID on a GPU that had no value at the promotion is not let pass, and a GPU's
vanished ECC count hides no new errors on another."""

from __future__ import annotations

from runbooks.stability.metric_view import ECC, XID, metric_findings, view_of


def promoted(values: dict[str, dict[str, float]]) -> dict[str, object]:
    return {"metrics_promoted": {"values": values}}


def test_a_vanished_gpu_hides_no_new_ecc_errors_and_is_named() -> None:
    """S1: GPU 0 at 0 and GPU 1 at 5 double-bit errors at the promotion; GPU 1 gone and GPU 0 at 3
    now: 3 new errors (failing) and GPU 1 not measured (degraded), never "0 new"."""
    view = view_of(promoted({ECC: {"n1/0": 0.0, "n1/1": 5.0}, XID: {"n1/0": 0.0, "n1/1": 0.0}}), nodes=["n1"],
                   hourly={}, now={ECC: {"n1/0": 3.0}, XID: {"n1/0": 0.0}})
    [row] = view.nodes
    assert row.ecc_new == 3.0 and row.vanished == ["n1 GPU 1"], row
    codes = {f.code: f for f in metric_findings(view)}
    assert codes["ecc-errors"].severity == "failing" and "n1 (3 double-bit ECC errors)" in codes["ecc-errors"].text
    assert codes["gpu-metrics-vanished"].severity == "degraded" and "n1 GPU 1" in codes["gpu-metrics-vanished"].text


def test_an_xid_on_a_gpu_without_a_value_at_the_promotion_is_not_let_pass() -> None:
    """S2: GPU 1 vanished and a GPU 2 absent at the promotion shows XID 79: a new XID, and GPU 1
    not measured."""
    view = view_of(promoted({XID: {"n1/0": 0.0, "n1/1": 0.0}}), nodes=["n1"], hourly={},
                   now={XID: {"n1/0": 0.0, "n1/2": 79.0}})
    [row] = view.nodes
    assert row.xid_new == 1 and row.xid_codes == ["n1 GPU 2: XID 79 (no value at the promotion)"], row
    assert row.vanished == ["n1 GPU 1"]
    assert {f.code for f in metric_findings(view, unknown="warn")} == {"xid-errors", "gpu-metrics-vanished"}
    assert "gpu-metrics-not-measured" in {f.code for f in metric_findings(view)}  # no ECC recorded: not judged


def test_a_reset_ecc_count_counts_what_it_holds_now_as_new() -> None:
    view = view_of(promoted({ECC: {"n1/0": 5.0}}), nodes=["n1"], hourly={}, now={ECC: {"n1/0": 2.0}})
    assert view.nodes[0].ecc_new == 2.0


def test_a_node_whose_gpus_all_vanished_makes_the_report_degraded_not_stable() -> None:
    """Third re-run (N1): every GPU of n1 gone (its exporter exports nothing now), n2 still there:
    n1's GPUs are named vanished and the report is degraded; when no node exports the checks at
    all now, the same. Prometheus not answering is not a vanishing."""
    start = promoted({ECC: {"n1/0": 0.0, "n1/1": 5.0, "n2/0": 0.0}, XID: {"n1/0": 0.0, "n1/1": 0.0, "n2/0": 0.0}})
    view = view_of(start, nodes=["n1", "n2"], hourly={}, now={ECC: {"n2/0": 0.0}, XID: {"n2/0": 0.0}})
    n1 = view.nodes[0]
    assert n1.vanished == ["n1 GPU 0", "n1 GPU 1"] and n1.xid_new is None and n1.ecc_new is None, n1
    assert {f.code: f.severity for f in metric_findings(view)} == {"gpu-metrics-vanished": "degraded"}
    nothing = view_of(start, nodes=["n1", "n2"], hourly={}, now={})
    assert [r.vanished for r in nothing.nodes] == [["n1 GPU 0", "n1 GPU 1"], ["n2 GPU 0"]]
    silent = view_of(start, nodes=["n1", "n2"], hourly={}, now=None, error="connection refused")
    assert not any(r.vanished for r in silent.nodes) and metric_findings(silent, unknown="warn") == []
    [finding] = metric_findings(silent)  # verify.unknown: fail: not measured is no pass
    assert finding.code == "gpu-metrics-not-measured" and "connection refused" in finding.text


def test_ecc_errors_on_a_gpu_without_a_value_at_the_promotion_count() -> None:
    """Third re-run (N2): a GPU that appeared since the promotion with 4 double-bit errors."""
    view = view_of(promoted({ECC: {"n1/0": 0.0, "n1/1": 5.0}}), nodes=["n1"], hourly={},
                   now={ECC: {"n1/0": 0.0, "n1/1": 5.0, "n1/2": 4.0}})
    assert view.nodes[0].ecc_new == 4.0


def test_what_the_hourly_samples_saw_counts_in_the_rows() -> None:
    """Third re-run (N3): a reset to 0 then 5 new errors, or XID 79 cleared by a GPU reset and
    raised again, seen hour by hour, are new in the row too, not lost between the promotion and now."""
    start = promoted({ECC: {"n1/0": 5.0}, XID: {"n1/0": 79.0}})
    hourly = {"2026-12-07T01:00:00+00:00": {ECC: {"n1/0": 0.0}, XID: {"n1/0": 0.0}}}
    view = view_of(start, nodes=["n1"], hourly=hourly, now={ECC: {"n1/0": 5.0}, XID: {"n1/0": 79.0}})
    row = view.nodes[0]
    assert row.ecc_new == 5.0 and row.xid_codes == ["n1 GPU 0: XID 79"], row


def test_a_value_that_is_not_a_number_is_not_measured_and_breaks_no_report() -> None:
    """Third re-run (N7): NaN or infinity from Prometheus crashed the report's findings."""
    for bad in (float("nan"), float("inf")):
        view = view_of(promoted({ECC: {"n1/0": 0.0}}), nodes=["n1"], hourly={}, now={ECC: {"n1/0": bad}})
        assert view.nodes[0].vanished == ["n1 GPU 0"]
        assert [f.code for f in metric_findings(view, unknown="warn")] == ["gpu-metrics-vanished"]


def test_what_was_not_measured_is_no_pass() -> None:
    """Fourth re-run: a node without values at the promotion (its exporter restarting as the
    plugin rolled), nothing recorded at all, or Prometheus silent now: the report says what was
    not measured and, with ``verify.unknown: fail``, is degraded, never stable; the hourly samples
    still count when Prometheus does not answer now, and are never taken as the baseline."""
    start = promoted({XID: {"n1/0": 0.0}, ECC: {"n1/0": 0.0}})
    late = view_of(start, nodes=["n1", "n2"], hourly={}, now={XID: {"n1/0": 0.0, "n2/0": 79.0},
                                                              ECC: {"n1/0": 0.0, "n2/0": 10.0}})
    assert "XIDs on n2 not measured: no values at the promotion" in late.gaps, late.gaps
    assert [f.code for f in metric_findings(late)] == ["gpu-metrics-not-measured"]
    assert metric_findings(late, unknown="warn") == []
    hourly = {"2026-12-07T01:00:00+00:00": {XID: {"n1/0": 79.0}, ECC: {"n1/0": 10.0}}}
    silent_now = view_of(start, nodes=["n1"], hourly=hourly, now=None, error="connection refused")
    assert {f.code for f in metric_findings(silent_now)} == {"xid-errors", "ecc-errors", "gpu-metrics-not-measured"}
    nothing = view_of({}, nodes=["n1"], hourly=hourly, now={XID: {"n1/0": 79.0}})
    assert nothing.nodes[0].xid_new is None and nothing.gaps[0].startswith("no GPU metrics were recorded")


def test_the_ecc_check_is_found_by_what_it_reads_not_its_name() -> None:
    """Fourth re-run: a policy naming its ECC check ``dbe`` recorded it under that name, and the
    report judged no ECC at all."""
    start = {"metrics_promoted": {"values": {"dbe": {"n1/0": 0.0}, XID: {"n1/0": 0.0}},
                                  "queries": {"dbe": 'max by (Hostname, gpu) (DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{})'}}}
    view = view_of(start, nodes=["n1"], hourly={}, now={ECC: {"n1/0": 3.0}, XID: {"n1/0": 0.0}})
    assert view.nodes[0].ecc_new == 3.0 and [f.code for f in metric_findings(view)] == ["ecc-errors"]



def test_a_gpu_whose_last_xid_was_not_0_at_the_promotion_is_not_measured() -> None:
    """Fifth re-run: XID 79 at the promotion and 79 now: the gauge cannot show it was raised
    again, so the GPU is not said clean; with ``verify.unknown: fail`` the report is degraded."""
    view = view_of(promoted({XID: {"n1/0": 79.0}, ECC: {"n1/0": 0.0}}), nodes=["n1"], hourly={},
                   now={XID: {"n1/0": 79.0}, ECC: {"n1/0": 0.0}})
    assert any(g.startswith("XIDs on n1 GPU 0 not measured: its last XID at the promotion was not 0")
               for g in view.gaps), view.gaps
    assert [f.code for f in metric_findings(view)] == ["gpu-metrics-not-measured"]
