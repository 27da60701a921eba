"""The job queue between the front end and the workers, on the suite's real Redis."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import pytest

from bot.jobs import Jobs, JobsUnavailable
from tests.e2e.runs_support import eventually

WORKER = """
import os, sys, time
from bot.jobs import Jobs
jobs = Jobs.from_url(sys.argv[1], heartbeat_ms=1000)
def handle(lane, kind, payload):
    print(f"start {payload['n']}", flush=True)
    time.sleep(float(payload.get("sleep", 0)))
    print(f"done {payload['n']}", flush=True)
jobs.consume(handle, lanes={"commands"}, threads=1)
time.sleep(3600)
"""


def test_a_message_runs_once_in_the_worker_of_its_lane(redis_url: str) -> None:
    front, worker = Jobs.from_url(redis_url), Jobs.from_url(redis_url)
    seen: list[tuple[str, str, dict[str, Any]]] = []
    worker.consume(lambda lane, kind, payload: seen.append((lane, kind, payload)), lanes={"decisions"}, threads=2)
    try:
        assert front.submit("decisions", "click", {"body": {"trigger_id": "t1"}})
        assert front.submit("commands", "command", {"body": {"text": "help"}})  # nobody takes this lane here
        eventually(lambda: len(seen) == 1, "the click run")
        ((lane, kind, payload),) = seen
        assert (lane, kind, payload["body"]) == ("decisions", "click", {"trigger_id": "t1"})
        assert time.time() - payload["queued_at"] < 10
        time.sleep(0.5)
        assert len(seen) == 1 and front.waiting("commands") == 1
    finally:
        worker.stop(timeout=5)


def test_a_full_lane_takes_no_more(redis_url: str) -> None:
    front = Jobs.from_url(redis_url, backlog=3)
    assert all(front.submit("commands", "command", {"n": n}) for n in range(3))
    assert front.submit("commands", "command", {"n": 3}) is False
    assert front.waiting("commands") == 3
    assert front.submit("decisions", "click", {}) is True  # another lane has room


def test_an_unreachable_redis_is_one_line_without_the_password() -> None:
    with pytest.raises(JobsUnavailable) as caught:
        Jobs.from_url("redis://:hunter2@127.0.0.1:1/0")
    assert "hunter2" not in str(caught.value) and "127.0.0.1:1" in str(caught.value)


def test_the_message_of_a_killed_worker_is_run_by_another(redis_url: str) -> None:
    """SIGKILL in the middle of a message: once the dead worker's heartbeat is old, another worker runs it."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    first = subprocess.Popen([sys.executable, "-c", WORKER, redis_url], stdout=subprocess.PIPE, text=True, env=env)
    second = None
    try:
        front = Jobs.from_url(redis_url)
        assert front.submit("commands", "command", {"n": 1, "sleep": 30})
        assert first.stdout is not None and first.stdout.readline().strip() == "start 1"
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
        second = subprocess.Popen([sys.executable, "-c", WORKER, redis_url], stdout=subprocess.PIPE, text=True,
                                  env=env)
        lines: list[str] = []
        assert second.stdout is not None
        reader = threading.Thread(target=lambda: lines.extend(iter(second.stdout.readline, "")), daemon=True)
        reader.start()
        front.submit("commands", "command", {"n": 2})  # keeps the broker busy, so its upkeep runs
        eventually(lambda: "start 1\n" in lines, "the killed worker's message run again", timeout=60)
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
