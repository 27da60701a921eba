"""``/readyz`` of ``serve``'s front end follows the consumers of the job queue's lanes
(finding 5 of the security review): a worker process that runs but whose consumer thread
died took nothing off its lane, and the front end still said it was ready."""

from __future__ import annotations

import json
from typing import Any

from bot.jobs import LANES, Jobs
from bot.processes import WorkerProcesses
from bot.settings import Settings
from bot.slack.http import HttpServer
from bot.slack.serve import build_front
from bot.storage.redis_store import RedisRunStore, raw_client
from tests.e2e.harness import POLICY
from tests.e2e.runs_support import eventually
from tests.fakeslack import BOT_TOKEN, SIGNING_SECRET, FakeSlack, get


def test_a_dead_consumer_turns_readyz_not_ready_naming_its_lane(redis_url: str) -> None:
    """Finding 5 of the security review: each lane's consumer notes in Redis that it looks for
    work; the front end is ready while every lane has one, and not ready, naming the lane in
    its checks, once the consumer of ``commands`` is gone (the worker process still running)."""
    raw_client(redis_url).flushdb()
    with FakeSlack() as fake:
        settings = Settings(SLACK_BOT_TOKEN=BOT_TOKEN, SLACK_SIGNING_SECRET=SIGNING_SECRET, SLACK_APP_TOKEN=None,
                            SLACK_API_URL=fake.api_url, REDIS_URL=redis_url, UPGRADEBOT_CONFIG=None)
        store = RedisRunStore.from_url(redis_url)
        front_jobs = Jobs.from_url(redis_url)
        front_jobs.consumer_stale_ms = 2_000
        processes = WorkerProcesses(())  # serve's own workers, here none: the consumer runs in this process
        service = build_front(settings, POLICY, store=store, jobs=front_jobs, workers=processes, readiness_cache=0)
        http = HttpServer(service.wsgi(), port=0, threads=2).start()
        worker = Jobs.from_url(redis_url)
        try:
            answer = get(http.url + "/readyz")
            assert answer.status == 503 and "commands" in json.loads(answer.body)["checks"]["consumers"], \
                "no consumer yet: not ready"
            worker.consume(lambda lane, kind, payload: None, lanes=set(LANES), threads=1)
            eventually(lambda: get(http.url + "/readyz").status == 200, "ready once every lane has a consumer")
            consumer: Any = worker._worker.consumers["commands"]  # type: ignore[union-attr]
            consumer.stop()  # as if it had died: the worker process goes on, its other lanes too
            consumer.join(timeout=10)
            assert worker.dead_lanes() == ["commands"]
            answer = eventually(lambda: (lambda a: a if a.status == 503 else None)(get(http.url + "/readyz")),
                                "not ready once the commands consumer is silent", timeout=15)
            checks = json.loads(answer.body)["checks"]
            assert "commands" in checks["consumers"] and "decisions" not in checks["consumers"], checks
            assert {k: v for k, v in checks.items() if k != "consumers"} == {"redis": "ok", "slack": "ok",
                                                                             "workers": "ok"}
        finally:
            worker.stop(timeout=5)
            http.stop(timeout=5)
            service.stop_workers(timeout=5)
            processes.stop(timeout=1)
            store.close()


def test_readyz_with_outside_workers_waits_for_their_first_heartbeat(redis_url: str) -> None:
    """Issue 40, item 4 (readiness that means ready): a front end with no worker processes of its
    own (``UPGRADEBOT_WORKER_PROCESSES=0``, the workers run elsewhere) answers /readyz 503 naming
    the lanes until a worker's consumers have beaten once through Redis, then 200."""
    raw_client(redis_url).flushdb()
    with FakeSlack() as fake:
        settings = Settings(SLACK_BOT_TOKEN=BOT_TOKEN, SLACK_SIGNING_SECRET=SIGNING_SECRET, SLACK_APP_TOKEN=None,
                            SLACK_API_URL=fake.api_url, REDIS_URL=redis_url, UPGRADEBOT_CONFIG=None,
                            UPGRADEBOT_WORKER_PROCESSES=0)
        store = RedisRunStore.from_url(redis_url)
        service = build_front(settings, POLICY, store=store, jobs=Jobs.from_url(redis_url), workers=None,
                              readiness_cache=0)
        http = HttpServer(service.wsgi(), port=0, threads=2).start()
        worker = Jobs.from_url(redis_url)
        try:
            answer = get(http.url + "/readyz")
            checks = json.loads(answer.body)["checks"]
            assert answer.status == 503 and all(lane in checks["consumers"] for lane in LANES), checks
            assert "workers" not in checks, "no worker processes of its own to check"
            worker.consume(lambda lane, kind, payload: None, lanes=set(LANES), threads=1)
            eventually(lambda: get(http.url + "/readyz").status == 200, "ready once the outside worker has beaten")
            assert json.loads(get(http.url + "/readyz").body)["checks"]["consumers"] == "ok"
        finally:
            worker.stop(timeout=5)
            http.stop(timeout=5)
            service.stop_workers(timeout=5)
            store.close()
