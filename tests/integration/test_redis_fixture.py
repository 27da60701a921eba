"""The test suite's Redis is a real server, shared by the run and emptied for each test."""

from __future__ import annotations

import redis

from bot.storage.embedded import EmbeddedRedis, find_redis_server


def test_redis_is_a_real_server(redis_url: str) -> None:
    """The fixture answers INFO like a real redis-server, over a unix socket, without persistence."""
    client = redis.Redis.from_url(redis_url)
    info = client.info("server")
    assert info["redis_version"] and info["tcp_port"] == 0
    assert client.config_get("save")["save"] == ""
    client.set("left-behind", "1")


def test_each_test_starts_empty(redis_url: str) -> None:
    """What an earlier test wrote is gone."""
    assert redis.Redis.from_url(redis_url).dbsize() == 0


def test_embedded_redis_stops_cleanly() -> None:
    """A second server starts and stops on its own socket; the socket is removed."""
    server = EmbeddedRedis(find_redis_server()).start()
    assert redis.Redis.from_url(server.url).ping()
    server.stop()
    import os

    assert not os.path.exists(server.socket_path)
