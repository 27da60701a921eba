"""Which pods hold a ResourceClaim (attack finding 2): a pod that exists and has not finished,
one being deleted included (its containers may still use the devices until the kubelet stops
them); a finished pod does not (the resourceclaim controller drops its reservation itself)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from runbooks.dra.claims import diagnose, live_holders

NOW = dt.datetime(2026, 1, 2, tzinfo=dt.UTC)


def _pod(name: str, uid: str, *, phase: str = "Running", deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "uid": uid}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T23:59:00Z"
    return {"metadata": meta, "status": {"phase": phase}}


def _claim(*uids: tuple[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": "c", "namespace": "ml-team", "uid": "u-c", "resourceVersion": "7",
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "status": {"reservedFor": [{"resource": "pods", "name": n, "uid": u} for n, u in uids]}}


def test_a_pod_being_deleted_holds_its_claim_and_a_finished_one_does_not() -> None:
    claim = _claim(("a", "1"), ("b", "2"), ("c", "3"), ("gone", "4"))
    pods = [_pod("a", "1"), _pod("b", "2", deleting=True), _pod("c", "3", phase="Succeeded")]
    assert live_holders(claim, pods) == ["a", "b (being deleted)"]


def test_a_claim_held_by_a_terminating_pod_and_reserved_for_a_gone_one_is_kept() -> None:
    claim = _claim(("b", "2"), ("gone", "4"))
    found = diagnose(claim, pods=[_pod("b", "2", deleting=True)], nodes=set(), slices=None, now=NOW)
    assert found is not None and (found.reason, found.deletable) == ("reserved-for-missing-pods", False)
    assert found.holders == ["b (being deleted)"] and found.fix.startswith("kept: it is in use by b (being deleted)")


def test_a_claim_reserved_only_for_a_finished_pod_is_deletable_and_says_so() -> None:
    claim = _claim(("done", "5"))
    found = diagnose(claim, pods=[_pod("done", "5", phase="Succeeded")], nodes=set(), slices=None, now=NOW)
    assert found is not None and found.deletable and found.holders == []
    assert "done (Succeeded)" in found.detail
