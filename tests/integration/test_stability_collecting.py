"""The event collector on kubesim and real Redis: the 1-hour TTL, restarts, 410 Gone."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import pytest

from bot.storage.redis_store import RedisRunStore
from kubesim import KubeSim
from runbooks.cluster.resources import EVENTS
from runbooks.stability.collecting import Collected, Collector
from runbooks.stability.reporting import scope_of
from runbooks.stability.tallying import KUBELET_RESTART, TOTAL, Tally
from tests.report_support import Posts, connector, monitoring_run, policy, wait_until, world


@pytest.fixture
def sim() -> Iterator[KubeSim]:
    """A gpu-small kubesim whose API server keeps events for one hour, as by default."""
    with KubeSim(scenario="gpu-small", k8s_version="1.31", event_ttl="1h") as served:
        yield served


def counted(store: RedisRunStore, run_id: str, reason: str) -> int:
    tally, _ = store.read_tally(run_id)
    entry = tally.reasons.get(reason) if tally else None
    return entry.count if entry else 0


def in_cluster(sim: KubeSim, reason: str) -> list[dict[str, Any]]:
    with connector(sim)(None) as cluster:
        return [e for e in cluster.list_objects(EVENTS) if e.get("reason") == reason]


def test_warnings_expired_from_the_cluster_still_show_in_the_report(sim: KubeSim, redis_url: str) -> None:
    """NodeNotReady early in the window, gone from the cluster after its 1 h TTL, is in the 24 h report."""
    posts = Posts()
    w = world(redis_url, sim, policy(), posts, owner="bot-a", threaded=True)
    try:
        run = monitoring_run(w.store, sim)
        assert w.scheduler.tick() and w.collectors.runs == [run.id]
        wait_until(lambda: w.store.load_collection(run.id).rv != "")
        sim.fault(kind="node-not-ready", node="gpu-node2", duration="5m")
        sim.advance("50s")  # the node lifecycle controller's grace on the stopped heartbeat
        wait_until(lambda: counted(w.store, run.id, "NodeNotReady") >= 2)
        sim.advance("2h")
        assert in_cluster(sim, "NodeNotReady") == [], "the API server forgot them"
        sim.advance("22h")
        assert w.scheduler.run_due() == [(run.id, "24h", "posted")]
    finally:
        w.stop()
    assert posts.titles() == [("thread", f"Stability report (24h) of {run.id}: DEGRADED"),
                              ("oncall", f"Stability report (24h) of {run.id}: DEGRADED")]
    reply = posts.items[0][2]
    assert "NodeNotReady event(s) on gpu-node2" in reply.text and reply.table is not None
    assert reply.table.rows[0][:2] == ["NodeNotReady", "2"] and "gpu-node2" in reply.table.rows[0][2]
    assert [b.label for b in reply.buttons] == ["Request rollback"]
    assert posts.items[1][2].text.startswith("<!subteam^S0ONCALL>")


class Crashing:
    """The store, until the collector's first write after ``arm()``: then the process 'dies'."""

    def __init__(self, store: RedisRunStore) -> None:
        self.store, self.armed = store, False

    def arm(self) -> None:
        self.armed = True

    def load_collection(self, run_id: str) -> Collected:
        return self.store.load_collection(run_id)

    def save_collection(self, run_id: str, **kwargs: Any) -> bool:
        if self.armed:
            raise SystemExit("killed before it stored what it read")
        return self.store.save_collection(run_id, **kwargs)


def test_a_restarted_collector_neither_loses_nor_double_counts(sim: KubeSim, redis_url: str) -> None:
    """Killed before storing, then resumed by another process; then a 410 Gone and a re-list: exact counts."""
    store = RedisRunStore.from_url(redis_url)
    run = monitoring_run(store, sim)
    scope, connect = scope_of(run), connector(sim)
    assert store.acquire_leader("bot-a", dt.timedelta(seconds=30))
    crashing = Crashing(store)
    first = Collector(run_id=run.id, scope=scope, cluster=connect(None), store=crashing, owner="bot-a")  # type: ignore[arg-type]
    first.catch_up()
    sim.fault(kind="kubelet-restart", node="gpu-node1")
    first.catch_up()
    assert counted(store, run.id, KUBELET_RESTART) == 1
    sim.fault(kind="kubelet-restart", node="gpu-node2")
    crashing.arm()
    with pytest.raises(SystemExit):
        first.catch_up()  # read the second restart, died before storing it
    assert counted(store, run.id, KUBELET_RESTART) == 1

    store.release_leader("bot-a")  # as when its lease runs out; bot-b takes over from what was stored
    assert store.acquire_leader("bot-b", dt.timedelta(seconds=30))
    second = Collector(run_id=run.id, scope=scope, cluster=connect(None), store=store, owner="bot-b")
    second.catch_up()
    assert counted(store, run.id, KUBELET_RESTART) == 2
    second.catch_up()
    assert counted(store, run.id, KUBELET_RESTART) == 2, "re-delivered events count once"

    sim.fault(kind="kubelet-restart", node="gpu-node3")
    sim.fault(kind="compact")  # the history since the stored version is gone: 410, then a re-list
    second.catch_up()
    tally, info = store.read_tally(run.id)
    assert counted(store, run.id, KUBELET_RESTART) == 3 and info["relists"] == "1"
    assert isinstance(tally, Tally) and sorted(tally.reasons[KUBELET_RESTART].nodes) == ["gpu-node1", "gpu-node2", "gpu-node3"]
    (hour,) = tally.gpus.values()  # the hour's GPU sample, taken once by whichever process collected first
    assert hour == {"gpu-node1": 8, "gpu-node2": 8, "gpu-node3": 8, TOTAL: 24}, "the run's GPU nodes, cpu-node1 not"
    assert sum(tally.reasons[KUBELET_RESTART].hours.values()) == 3
    assert not store.save_collection(run.id, owner="bot-a", rv="1", tally=Tally(), seen={}, gone=[], info={}), \
        "a process without the lease can no longer store counts"
    store.close()

