"""Quotas of long commands shared by every worker process and replica (real Redis).

Each worker process used to count in its own memory, so with two worker processes (or two
replicas) a user had twice the quota. The counts now live in Redis as leases: a running
command holds a slot, renewed while it runs; a worker that dies (SIGKILL) stops renewing,
and its slots go free once the lease runs out.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from bot.storage.redis_store import RedisRunStore, connect
from bot.workers import Quotas


@pytest.fixture
def stores(redis_url: str) -> Iterator[list[RedisRunStore]]:
    """Two processes' own connections to one Redis."""
    opened = [RedisRunStore.from_url(redis_url), RedisRunStore.from_url(redis_url)]
    yield opened
    for store in opened:
        store.close()


def test_two_processes_share_one_users_quota(stores: list[RedisRunStore]) -> None:
    one, two = (Quotas(per_user=2, per_channel=3, shared=s) for s in stores)
    assert one.take("U1", "C1") is None and two.take("U1", "C1") is None
    assert one.take("U1", "C2") == "user" and two.take("U1", "C2") == "user"  # 2 running, wherever they run
    assert two.take("U2", "C1") is None
    assert one.take("U3", "C1") == "channel"  # C1 has 3 running: U1 twice (one and two), U2 (two)
    assert one.take("U3", None) is None  # a direct message counts against the user only
    one.give("U1", "C1")
    assert two.take("U1", "C2") is None and two.take("U3", "C1") is None
    for quotas in (one, two):
        quotas.close()


def test_a_dead_workers_slots_go_free_once_its_lease_runs_out(stores: list[RedisRunStore]) -> None:
    dead = Quotas(per_user=1, per_channel=4, shared=stores[0], lease=1.0)
    alive = Quotas(per_user=1, per_channel=4, shared=stores[1], lease=1.0)
    assert dead.take("U1", "C1") is None
    dead.close()  # SIGKILL: nothing counted out, nothing renewed
    assert alive.take("U1", "C1") == "user"
    time.sleep(1.3)
    assert alive.take("U1", "C1") is None
    alive.close()


def test_a_running_command_keeps_its_slot_past_the_lease(stores: list[RedisRunStore]) -> None:
    running = Quotas(per_user=1, per_channel=4, shared=stores[0], lease=0.9)
    other = Quotas(per_user=1, per_channel=4, shared=stores[1], lease=0.9)
    assert running.take("U1", "C1") is None
    time.sleep(2.5)  # almost three leases: renewed meanwhile
    assert other.take("U1", "C1") == "user"
    running.give("U1", "C1")
    assert other.take("U1", "C1") is None
    running.close()
    other.close()


def test_without_redis_each_process_still_counts_its_own() -> None:
    url = "redis://127.0.0.1:1/0"  # nobody listens there
    store = RedisRunStore(connect(url, decode=True), url=url)
    quotas = Quotas(per_user=1, per_channel=4, shared=store)
    assert quotas.take("U1", "C1") is None  # Redis away: counted in this process, not refused
    assert quotas.take("U1", "C1") == "user"
    quotas.give("U1", "C1")
    assert quotas.take("U1", "C1") is None
    quotas.close()
    store.close()


def test_the_renewer_outlives_a_renewal_that_fails() -> None:
    """A renewal that raises (a Redis error the store does not translate) is logged; the next renews."""
    calls: list[str] = []

    class Flaky:
        def take_slot(self, sets: object, token: str, lease: float) -> int:
            return 0

        def renew_slot(self, sets: object, token: str, lease: float) -> int:
            calls.append("renew")
            if len(calls) == 1:
                raise RuntimeError("READONLY You can't write against a read only replica.")
            return 1

        def give_slot(self, sets: object, token: str) -> None:
            calls.append("give")

    quotas = Quotas(per_user=1, per_channel=1, shared=Flaky(), lease=0.3)
    assert quotas.take("U1", "C1") is None
    deadline = time.monotonic() + 5
    while calls.count("renew") < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert calls.count("renew") >= 3, calls
    quotas.give("U1", "C1")
    assert "give" in calls
    quotas.close()


def test_a_read_refused_by_the_shared_quota_keeps_no_place_among_the_long_reads(stores: list[RedisRunStore]) -> None:
    """Finding 3 of the security review: the long reads a process runs (``reads``) count only
    what runs; one that another process's slots refuse leaves its place free."""
    one = Quotas(per_user=1, per_channel=4, shared=stores[0], reads=1)
    two = Quotas(per_user=1, per_channel=4, shared=stores[1], reads=1)
    assert one.take("U1", None, read=True) is None
    assert two.take("U1", None, read=True) == "user"  # U1's slot is held in the first process
    assert two.take("U2", None, read=True) is None
    assert two.take("U3", None, read=True) == "busy"
    for quotas in (one, two):
        quotas.close()
