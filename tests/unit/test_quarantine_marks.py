"""The quarantine's affinity term is merged with the template's own required node affinity without
changing what the owners' terms mean, and taken out again leaving exactly what was there (issue 61,
item 5)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runbooks.daemonset.quarantine_marks import (
    BadMark,
    has_term,
    label_key,
    with_term,
    without_term,
)

KEY = label_key("kube-system", "nvidia-device-plugin-daemonset")
Q = {"key": KEY, "operator": "DoesNotExist"}


def test_the_key_is_in_the_bots_label_domain_one_per_target() -> None:
    assert KEY == "kube-system.quarantine.upgradebot.io/nvidia-device-plugin-daemonset"
    with pytest.raises(BadMark, match="longer than a label name may be"):
        label_key("kube-system", "x" * 64)


def test_no_affinity_gets_a_term_of_its_own_and_loses_it_again() -> None:
    added = with_term(None, KEY)
    assert added == {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [Q]}]}}}
    assert without_term(added, KEY) is None


def test_every_term_of_the_owners_gains_the_expression_and_the_rest_is_left_alone() -> None:
    owners = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []},
              "nodeAffinity": {
                  "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": {}}],
                  "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                      {"matchExpressions": [{"key": "a", "operator": "In", "values": ["1"]}]},
                      {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}}}
    before = copy.deepcopy(owners)
    added = with_term(owners, KEY)
    assert owners == before  # not changed in place
    terms = added["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": "a", "operator": "In", "values": ["1"]}, Q]},
                     {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}],
                      "matchExpressions": [Q]}]
    assert {k: v for k, v in added.items() if k != "nodeAffinity"} == {"podAntiAffinity": before["podAntiAffinity"]}
    assert has_term(added, KEY) and not has_term(owners, KEY)
    assert with_term(added, KEY) == added  # once is enough
    assert without_term(added, KEY) == owners


_expr = st.fixed_dictionaries({"key": st.sampled_from(["a", "b", "c"]), "operator": st.sampled_from(["Exists",
                                                                                                    "DoesNotExist"])})
_term = st.fixed_dictionaries({"matchExpressions": st.lists(_expr, min_size=1, max_size=3, unique_by=lambda e: e["key"])})


@given(st.one_of(st.none(), st.lists(_term, min_size=1, max_size=3).map(
    lambda terms: {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}})))
def test_taking_the_term_out_gives_back_what_was_there(affinity: dict[str, Any] | None) -> None:
    assert without_term(with_term(affinity, KEY), KEY) == affinity
