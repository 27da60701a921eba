"""``serve`` as deployed leaves what its start-up built out of the collector's full passes, before
its first request; a process that keeps a watch cache (a worker, read-only ``serve``'s too) collects
young objects in larger batches (issue 39).

Measured with the collector's callbacks through ``bench_ack`` at 5,000 nodes: the front end
held ~110,000 objects after start-up and a full pass over them stopped its HTTP threads for
9-33 ms during the bursts; the commands worker ran a 130 ms full pass over its watch cache every
0.65 s through an inventory flood (14 s of CPU in a 3-minute bench). After: no full pass in the
front end during the bursts, 3.7 s of collection in that worker."""

from __future__ import annotations

import io
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot import processes
from bot.settings import load_settings
from bot.slack import serve as serving
from kubesim import KubeSim
from tests.e2e.test_serve_process import environment
from tests.fakeslack import FakeSlack


@pytest.fixture
def steps(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """What ``serve`` did of the heap, in order, and when its port was opened (``http``); the real
    calls are left out: freezing the heap of the test process would outlive the test."""
    done: list[str] = []
    monkeypatch.setattr(serving, "freeze_heap", lambda: done.append("freeze"))
    monkeypatch.setattr(processes, "keep_cache", lambda: done.append("keep cache"))
    monkeypatch.setattr(serving, "keep_cache", lambda: done.append("keep cache"), raising=False)  # not since issue 63
    real_start = serving.HttpServer.start

    def start(self: serving.HttpServer) -> serving.HttpServer:
        done.append("http")
        return real_start(self)

    monkeypatch.setattr(serving.HttpServer, "start", start)
    yield done


def use_env(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """This process's environment is ``env`` for the test (as a process started with it would see)."""
    for name in set(os.environ) - set(env):
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)


def serve_once(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    use_env(env, monkeypatch)
    stop = threading.Event()
    stop.set()  # started, then stopped at once
    assert serving.serve(load_settings(), host="127.0.0.1", port=0, out=io.StringIO(), stop=stop, drain=1,
                         allow_volatile=True) == 0


def test_serve_as_deployed_freezes_its_start_up_heap_before_its_first_request(
        cluster: KubeSim, tmp_path: Path, redis_url: str, steps: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeSlack() as fake:
        serve_once(environment(fake, cluster, tmp_path, redis_url, UPGRADEBOT_WORKER_PROCESSES="0"), monkeypatch)
    assert steps == ["freeze", "http"], steps


def test_read_only_serve_freezes_its_heap_and_leaves_the_watch_cache_to_its_worker(
        cluster: KubeSim, tmp_path: Path, redis_url: str, steps: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 63: read-only ``serve`` acks and queues as the full one does; its worker keeps the cache."""
    with FakeSlack() as fake:
        env = environment(fake, cluster, tmp_path, redis_url, UPGRADEBOT_WORKER_PROCESSES="0")
        del env["UPGRADEBOT_CONFIG"]
        serve_once(env, monkeypatch)
    assert steps == ["freeze", "http"], steps


def test_serve_given_its_service_leaves_the_collector_alone(cluster: KubeSim, tmp_path: Path, redis_url: str,
                                                            steps: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A test (or an embedding) that builds the service and passes it keeps its process's collector."""
    from tests.e2e.harness import POLICY, settings_for

    with FakeSlack() as fake:
        service = serving.build_service(settings_for(fake, cluster), POLICY)
        stop = threading.Event()
        stop.set()
        try:
            assert serving.serve(settings_for(fake, cluster), host="127.0.0.1", port=0, out=io.StringIO(), stop=stop,
                                 service=service, drain=1) == 0
        finally:
            service.stop_workers(timeout=5)
    assert steps == ["http"], steps


def test_a_worker_freezes_its_start_up_heap_and_keeps_its_cache_before_it_takes_work(
        cluster: KubeSim, tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from bot.jobs import Jobs
    from bot.slack import worker

    done: list[str] = []
    monkeypatch.setattr(worker, "freeze_heap", lambda: done.append("freeze"))
    monkeypatch.setattr(worker, "keep_cache", lambda: done.append("keep cache"))
    real_consume = Jobs.consume

    def consume(self: Jobs, *args: object, **kwargs: object) -> None:
        done.append("consume")
        real_consume(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Jobs, "consume", consume)
    with FakeSlack() as fake:
        use_env(environment(fake, cluster, tmp_path, redis_url), monkeypatch)
        stop = threading.Event()
        stop.set()
        assert worker.work(load_settings(), {"commands", "runs"}, stop=stop, drain=1) == 0
    assert done == ["freeze", "keep cache", "consume"], done


def test_a_read_only_worker_keeps_its_cache_before_it_takes_work(
        cluster: KubeSim, tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 63: read-only ``serve``'s worker (no policy file) answers its inventories from a watch cache."""
    from bot.jobs import Jobs
    from bot.slack import worker

    done: list[str] = []
    monkeypatch.setattr(worker, "freeze_heap", lambda: done.append("freeze"))
    monkeypatch.setattr(worker, "keep_cache", lambda: done.append("keep cache"))
    monkeypatch.setattr(Jobs, "consume", lambda self, *args, **kwargs: done.append("consume"))
    with FakeSlack() as fake:
        env = environment(fake, cluster, tmp_path, redis_url)
        del env["UPGRADEBOT_CONFIG"]
        use_env(env, monkeypatch)
        stop = threading.Event()
        stop.set()
        assert worker.work(load_settings(), {"decisions", "commands", "runs"}, stop=stop, drain=1, read_only=True) == 0
    assert done == ["freeze", "keep cache", "consume"], done
