"""REDIS_URL may name a Redis Sentinel: ``redis+sentinel://[:password@]host:26379[,host:port…]/<master>[/<db>]``.

A real ``redis-server`` (with a password and the append-only file) and a real Sentinel
watching it: the store finds the master through the Sentinel and everything works on it
(runs, locks, the audit, the persistence check, the leader's lease). A URL that names
no master, or a Sentinel that does not know it, is one clear error.
"""

from __future__ import annotations

import datetime as dt
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.storage.embedded import find_redis_server
from bot.storage.redis_store import RedisRunStore
from runbooks.engine.store import StoreUnavailable
from tests.integration.test_run_store import new_run
from tests.support import free_ports, redis_answers

PASSWORD = "s3ntinel-test-pw"


@pytest.fixture(scope="module")
def sentinel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A master with a password and the append-only file, and a Sentinel watching it as ``mymaster``."""
    home: Path = tmp_path_factory.mktemp("sentinel")
    binary = find_redis_server()
    master, watcher = free_ports(2)
    conf = home / "sentinel.conf"
    conf.write_text(f"port {watcher}\nbind 127.0.0.1\ndir {home}\n"
                    f"sentinel monitor mymaster 127.0.0.1 {master} 1\n"
                    f"sentinel auth-pass mymaster {PASSWORD}\nsentinel down-after-milliseconds mymaster 5000\n")
    procs = [
        subprocess.Popen([binary, "--port", str(master), "--bind", "127.0.0.1", "--dir", str(home),
                          "--appendonly", "yes", "--requirepass", PASSWORD, "--save", ""],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
        subprocess.Popen([binary, str(conf), "--sentinel"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
    ]
    try:
        assert redis_answers(master, password=PASSWORD) and redis_answers(watcher), "the master or Sentinel is down"
        yield watcher
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=10)


def test_the_store_finds_its_master_through_the_sentinel(sentinel: int) -> None:
    url = f"redis+sentinel://:{PASSWORD}@127.0.0.1:{sentinel}/mymaster/0"
    store = RedisRunStore.from_url(url)
    run = store.create(new_run(), audit=[{"run": "x", "kind": "transition", "name": "requested"}])
    assert store.get(run.id) == run and store.lock_holder(run.target.key) == run.id
    assert store.acquire_lease(run.id, "a", dt.timedelta(seconds=30))
    assert store.persistence() == "the append-only file"
    assert PASSWORD not in store.safe_url and "mymaster" in store.safe_url
    assert store.acquire_leader("bot-a", dt.timedelta(seconds=30)) == 1
    store.close()


@pytest.mark.parametrize(("url", "why"), [
    ("redis+sentinel://127.0.0.1:{port}", "name the master"),
    ("redis+sentinel://:" + PASSWORD + "@127.0.0.1:{port}/nomaster/0", "cannot reach Redis"),
    ("redis+sentinel://127.0.0.1:{port}/mymaster/zero", "is not a Redis URL"),
])
def test_a_bad_sentinel_url_is_one_clear_error(sentinel: int, url: str, why: str) -> None:
    with pytest.raises(StoreUnavailable, match=why) as refused:
        RedisRunStore.from_url(url.format(port=sentinel))
    assert PASSWORD not in str(refused.value) and "\n" not in str(refused.value)
