"""The store is durable or the bot says so; during a Redis outage every command gets an answer.

``serve`` refuses a Redis that keeps nothing on disk (neither AOF nor RDB snapshots)
unless ``--allow-volatile-redis`` is given: a Redis restart would lose every run and
leave a DaemonSet half-upgraded with nothing to resume. While Redis does not answer, a
slash command is still answered ("state store unavailable, nothing was done") instead of
an HTTP 200 and silence.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.slack.http import HttpServer
from bot.slack.serve import build_service
from bot.storage.embedded import EmbeddedRedis
from bot.storage.redis_store import RedisRunStore
from kubesim import KubeSim
from tests.e2e.harness import POLICY, settings_for
from tests.e2e.test_serve_process import SERVE, environment
from tests.fakeslack import FakeSlack, post, slash_command

STRICT = [a for a in SERVE if a != "--allow-volatile-redis"]


@pytest.fixture
def persistent_redis() -> Iterator[EmbeddedRedis]:
    """A redis-server of its own with the append-only file on."""
    with EmbeddedRedis(persistent=True) as server:
        yield server


def serve_until_first_line(env: dict[str, str], *extra: str) -> tuple[int | None, str, str]:
    """Start serve; return (exit code or None if it is serving, first stdout line, stderr so far)."""
    proc = subprocess.Popen([*STRICT, *extra], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline().strip()
        if first.startswith("http://"):
            proc.terminate()
            _, err = proc.communicate(timeout=20)
            return None, first, err
        _, err = proc.communicate(timeout=60)
        return proc.returncode, first, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_serve_refuses_a_redis_without_persistence(cluster: KubeSim, tmp_path: Path, redis_url: str) -> None:
    """The test suite's Redis keeps nothing on disk: serve exits 2 with one line naming the flag."""
    with FakeSlack() as fake:
        code, _, err = serve_until_first_line(environment(fake, cluster, tmp_path, redis_url))
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "persist" in err and "--allow-volatile-redis" in err


def test_serve_takes_a_volatile_redis_when_told_and_a_persistent_one_without(
    cluster: KubeSim, tmp_path: Path, redis_url: str, persistent_redis: EmbeddedRedis,
) -> None:
    with FakeSlack() as fake:
        code, first, err = serve_until_first_line(environment(fake, cluster, tmp_path, redis_url),
                                                  "--allow-volatile-redis")
        assert code is None and first.startswith("http://"), err
        assert "no persistence" in err  # said in the log, since it was allowed
        code, first, err = serve_until_first_line(environment(fake, cluster, tmp_path, persistent_redis.url))
        assert code is None and first.startswith("http://"), err


def test_a_command_during_a_redis_outage_is_answered(fake_slack: FakeSlack, cluster: KubeSim) -> None:
    """Redis stops after the bot started: the next command gets "state store unavailable, nothing
    was done" on its response_url, not silence."""
    server = EmbeddedRedis().start()
    store = RedisRunStore.from_url(server.url)
    service = build_service(settings_for(fake_slack, cluster), POLICY, idempotency=store, readiness_cache=0)
    http = HttpServer(service.wsgi(), port=0, threads=4).start()
    try:
        server.stop()
        body = slash_command("help", response_url=fake_slack.response_url())
        assert "What I can do" in post(http.url + "/slack/events", body).message["text"]  # it needs no store
        body = slash_command("runs", response_url=fake_slack.response_url())
        assert post(http.url + "/slack/events", body).status == 200
        (answer,) = fake_slack.wait_for("response_url")
        assert "state store unavailable, nothing was done" in answer.body["text"].lower()
    finally:
        http.stop()
        service.stop_workers(timeout=5)
        store.close()
