"""REDIS_URL may name a Redis Cluster: ``redis+cluster://[:password@]host:port[,host:port…]``.

A real three-node cluster (``redis-server --cluster-enabled yes``, the slots split three
ways): every key of the bot is in one slot (the ``{upgradebot}`` hash tag), so each Lua
script and transaction runs on one node, and the whole store works on it: runs with their
lock and audit, leases, claims, event collections, report claims, the leader's fencing token.
"""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import time
from collections.abc import Iterator

import pytest
import redis

from bot.storage.embedded import find_redis_server
from bot.storage.redis_store import RedisRunStore
from runbooks.engine.runs import RunState
from runbooks.stability.tallying import Tally
from tests.integration.test_run_store import new_run
from tests.support import free_ports, redis_answers

SLOTS = ((0, 5460), (5461, 10922), (10923, 16383))


def _cluster_state(client: redis.Redis) -> str:
    info = client.execute_command("CLUSTER", "INFO").decode()
    return info.split("cluster_state:")[1].split()[0]


@pytest.fixture(scope="module")
def cluster_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    home = tmp_path_factory.mktemp("cluster")
    binary, ports = find_redis_server(), free_ports(len(SLOTS), bus=True)
    procs = []
    for port in ports:
        os.makedirs(home / str(port))
        procs.append(subprocess.Popen(
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes", "--cluster-config-file",
             "nodes.conf", "--dir", str(home / str(port)), "--appendonly", "yes", "--save", ""],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    try:
        for port, proc in zip(ports, procs, strict=True):
            if not redis_answers(port):
                raise AssertionError(f"the cluster node on port {port} does not answer (exit code {proc.poll()})")
        clients = [redis.Redis(host="127.0.0.1", port=p, socket_timeout=3, socket_connect_timeout=1) for p in ports]
        for client, (first, last) in zip(clients, SLOTS, strict=True):
            client.execute_command("CLUSTER", "ADDSLOTS", *range(first, last + 1))
        for client in clients[1:]:
            client.execute_command("CLUSTER", "MEET", "127.0.0.1", ports[0])
        for _ in range(200):
            if all(_cluster_state(c) == "ok" for c in clients):
                break
            time.sleep(0.1)
        else:  # fail now, rather than a client retrying against a cluster that is down
            dead = [p.args[2] for p in procs if p.poll() is not None]
            raise AssertionError(f"the test cluster did not form (nodes that exited: {dead})")
        yield f"redis+cluster://127.0.0.1:{ports[0]},127.0.0.1:{ports[1]}"
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=10)


def test_the_whole_store_works_on_a_cluster(cluster_url: str) -> None:
    store = RedisRunStore.from_url(cluster_url)
    run = store.create(new_run("team/cluster-plugin"), audit=[{"run": "x", "kind": "transition", "name": "requested"}])
    assert store.lock_holder(run.target.key) == run.id and [r.id for r in store.list_runs()] == [run.id]
    assert store.acquire_lease(run.id, "a", dt.timedelta(seconds=30)) and store.lease_owner(run.id) == "a"
    done = store.save(run.model_copy(update={"state": RunState.REJECTED}), audit=[{"run": run.id, "name": "end"}],
                      lease_owner="a")
    assert done.version == run.version + 1 and store.lock_holder(run.target.key) is None
    assert [e["name"] for e in store.audit(run.id)] == ["requested", "end"]
    assert store.claim_once("delivery-1", dt.timedelta(seconds=30)) and not store.claim_once(
        "delivery-1", dt.timedelta(seconds=30))
    assert store.acquire_leader("bot-a", dt.timedelta(seconds=30))
    store.save_collection(run.id, owner="bot-a", rv="42", tally=Tally(), seen={"uid-1": 1}, gone=set(),
                          info={"since": "now"})
    assert store.load_collection(run.id).rv == "42"
    assert store.claim_report_post(run.id, "24h", where="thread", owner="bot-a", token=1, now=dt.datetime.now(dt.UTC),
                                   grace=dt.timedelta(minutes=10), lease=dt.timedelta(seconds=30)) == "claimed"
    store.record_report_post(run.id, "24h", where="thread", ts="1.0", verdict="stable")
    assert store.report_record(run.id, "24h")["thread"] == "1.0"
    assert store.persistence() == "the append-only file"
    assert store.drop_retired_schedule() == 0
    assert store.migrate_keys() == 0
    store.close()


def test_an_unreachable_cluster_is_one_clear_error() -> None:
    from runbooks.engine.store import StoreUnavailable

    with pytest.raises(StoreUnavailable, match=r"cannot reach Redis at redis\+cluster://:\*\*\*@127.0.0.1:1"):
        RedisRunStore.from_url("redis+cluster://:secret@127.0.0.1:1")
