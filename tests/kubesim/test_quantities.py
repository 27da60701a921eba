"""Issue 61 item 2: kubesim reads every quantity as apimachinery's ``resource.ParseQuantity`` does
(``pkg/api/resource/quantity.go``), and a malformed one is the parser's error, never a crash."""

from __future__ import annotations

from fractions import Fraction

import pytest

from kubesim import quantities as q


@pytest.mark.parametrize(("text", "exact"), [
    ("1Ti", 2**40), ("500m", Fraction(1, 2)), ("1e3", 1000), ("1.5Gi", 3 * 2**29), ("2k", 2000),
    ("1E-2", Fraction(1, 100)), ("1e+3", 1000), ("1E", 10**18), ("0.1n", Fraction(1, 10**9)), (".5", Fraction(1, 2)),
    ("1.", 1), ("-2Mi", -2 * 2**20), ("+3", 3), ("007", 7), ("0", 0), ("Ki", 0), (2, 2), (1.5, Fraction(3, 2)),
    ("9Ei", 2**63 - 1), (None, 0),
])
def test_every_form_kubernetes_accepts(text: object, exact: object) -> None:
    """Decimal and binary suffixes, exponents, fractions, signs; a value below a nano-unit is rounded
    up to one; a binary quantity is capped at 2^63-1; a JSON number is read as its text."""
    assert q.parse(text) == exact


def test_milli_and_value_round_up() -> None:
    """``MilliValue()`` and ``Value()`` are ceilings: 0.1m of CPU is 1 millicore, 1.5 is 2."""
    assert (q.milli("0.1m"), q.milli("200"), q.value("1.5"), q.value("1Ti")) == (1, 200_000, 2, 2**40)


@pytest.mark.parametrize(("text", "error"), [
    ("", q.FORMAT_WRONG), ("abc", q.FORMAT_WRONG), ("1.2.3", q.FORMAT_WRONG), ("1x", q.FORMAT_WRONG),
    ("1e3m", q.FORMAT_WRONG), ("1Kii", q.SUFFIX_WRONG), ("1e", q.SUFFIX_WRONG), ("1m3", q.SUFFIX_WRONG),
    ("1TB", q.FORMAT_WRONG), ("1Pb", q.FORMAT_WRONG), (True, q.FORMAT_WRONG),
])
def test_a_malformed_quantity_is_the_parsers_error(text: object, error: str) -> None:
    """``ErrFormatWrong`` (with the regular expression) and ``ErrSuffix``, in the parser's words."""
    with pytest.raises(q.QuantityError) as caught:
        q.parse(text)
    assert str(caught.value) == error
    assert q.FORMAT_WRONG == ("quantities must match the regular expression "
                              "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")


def test_the_first_malformed_quantity_of_a_workload() -> None:
    """A DaemonSet's template with a bad request names the parser's error; a good one, none."""
    ds = {"kind": "DaemonSet", "spec": {"template": {"spec": {"containers": [
        {"name": "c", "resources": {"requests": {"memory": "1Ti", "cpu": "500m"}}}]}}}}
    assert q.first_malformed(ds) is None
    ds["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] = {"memory": "1Kii"}
    assert q.first_malformed(ds) == q.SUFFIX_WRONG


def test_a_nodes_malformed_capacity_is_found_too() -> None:
    """A Node's ``status.capacity`` and ``allocatable`` are quantities as well."""
    assert q.first_malformed({"kind": "Node", "status": {"allocatable": {"cpu": "96", "memory": "1 Gi"}}}) == \
        q.FORMAT_WRONG
    assert q.first_malformed({"kind": "Node", "status": {"capacity": {"cpu": "96"}}}) is None
