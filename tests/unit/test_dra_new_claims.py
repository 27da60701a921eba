"""dra-new-claims: a claim made during the step, left pending while a pod waits for it, fails the
check with the scheduler's words; older claims, young ones and claims nobody waits for do not."""

from __future__ import annotations

import datetime as dt

from runbooks.daemonset.checks import dra_new_claims
from runbooks.engine.steps import CheckStatus
from runbooks.inventory import ResourceClaim

SINCE = dt.datetime(2026, 1, 5, 9, 0, tzinfo=dt.UTC)
END = SINCE + dt.timedelta(minutes=5)


def claim(name: str, *, created: dt.datetime, state: str = "pending", waiting: tuple[str, ...] = ("job-0",)) -> ResourceClaim:
    return ResourceClaim(namespace="ml-team", name=name, state=state, created=created, waiting_pods=list(waiting))


def test_a_new_claim_left_pending_with_a_pod_waiting_fails_with_the_schedulers_words() -> None:
    stuck = claim("job-0-gpu-abcde", created=SINCE + dt.timedelta(minutes=1))
    check = dra_new_claims([stuck], SINCE, end_time=END, grace=60, drivers=["gpu.example.com"],
                           scheduling={"ml-team/job-0": "0/4 nodes are available: 4 cannot allocate all claims."})
    assert check.status is CheckStatus.FAIL
    assert "ml-team/job-0-gpu-abcde" in check.detail and "cannot allocate all claims" in check.detail


def test_old_young_allocated_and_unwaited_claims_pass() -> None:
    claims = [
        claim("from-before", created=SINCE - dt.timedelta(hours=1)),
        claim("too-young", created=END - dt.timedelta(seconds=10)),
        claim("allocated", created=SINCE + dt.timedelta(minutes=1), state="allocated,reserved"),
        claim("nobody-waits", created=SINCE + dt.timedelta(minutes=1), waiting=()),
    ]
    check = dra_new_claims(claims, SINCE, end_time=END, grace=60, drivers=["gpu.example.com"], scheduling={})
    assert check.status is CheckStatus.PASS, check.detail
    assert dra_new_claims(None, SINCE, end_time=END, grace=60, drivers=[], scheduling={}).status is CheckStatus.SKIP
