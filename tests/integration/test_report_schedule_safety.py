"""Issue 40, item 6 (no pickle anywhere): nothing the report scheduler reads from Redis is code.

The schedule is recomputed from the runs each tick; APScheduler's Redis job store, which
unpickled its jobs, is gone. A pickled object written where the scheduler (or an older
version's job store) looks is never unpickled: it is logged once, skipped, and the real
reports are still posted once.
"""

from __future__ import annotations

import logging
import os
import pickle
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from bot.storage.layout import Keys
from kubesim import KubeSim
from tests.report_support import Posts, monitoring_run, policy, world


@pytest.fixture(scope="module")
def sim() -> Iterator[KubeSim]:
    """A quiet gpu-small kubesim (the reports here only read it)."""
    with KubeSim(scenario="gpu-small", k8s_version="1.31") as served:
        yield served


class Payload:
    """Unpickling this runs a shell command that creates ``marker`` (what an attacker's job would do)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return os.system, (f"touch {shlex.quote(str(self.marker))}",)


def warnings_about(caplog: pytest.LogCaptureFixture, key: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and key in r.getMessage()]


def test_a_pickled_job_in_redis_is_never_run_and_the_reports_still_post_once(
    sim: KubeSim, redis_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 40 item 6: a pickled object whose unpickling would run a command is written into
    the old job store (``scheduler:jobs``, due now in ``scheduler:times``), a run record, the
    runs index, the leader's fencing token and the real report's record. The leader never runs
    it (no marker file); each foreign entry is logged once over several ticks and skipped; the
    24 h report is posted once, in the thread and to on-call."""
    caplog.set_level(logging.INFO)
    marker = tmp_path / "ran"
    evil = pickle.dumps(Payload(marker))
    raw = redis.Redis.from_url(redis_url)
    posts = Posts()
    w = world(redis_url, sim, policy("24h"), posts, owner="bot-a")
    try:
        run = monitoring_run(w.store, sim)
        raw.hset(Keys.scheduler_jobs, f"report:{run.id}:24h", evil)  # as an older version's job store kept it
        raw.zadd(Keys.scheduler_times, {f"report:{run.id}:24h": 0})
        assert w.scheduler.run_due() == []
        assert w.scheduler.run_due() == []
        assert not marker.exists(), "the old job store's pickled job was unpickled: its command ran"
        raw.hset(Keys.run("r-evil"), mapping={"version": "0", "state": "monitoring", "json": evil})
        raw.sadd(Keys.active, "r-evil")
        raw.set(Keys.leader_epoch, evil)
        raw.hset(Keys.report(run.id, "24h"), "job", evil)
        assert w.scheduler.run_due() == []
        assert w.scheduler.run_due() == []
        sim.advance("24h")
        assert w.scheduler.run_due() == [(run.id, "24h", "posted")]
        assert w.scheduler.run_due() == []
    finally:
        w.stop()
        raw.close()
    assert not marker.exists(), "a pickled entry was unpickled: its command ran"
    assert len(warnings_about(caplog, Keys.scheduler_jobs)) == 1
    assert len(warnings_about(caplog, Keys.run("r-evil"))) == 1
    assert len(warnings_about(caplog, Keys.leader_epoch)) == 1
    assert posts.titles() == [("thread", f"Stability report (24h) of {run.id}: STABLE"),
                              ("oncall", f"Stability report (24h) of {run.id}: STABLE")]
    assert w.store.get(run.id).state.value == "done"  # type: ignore[union-attr]


@pytest.mark.parametrize("foreign", ["a string without expiry", "a hash"])
def test_a_foreign_leader_key_is_replaced_not_obeyed_forever(
    sim: KubeSim, redis_url: str, foreign: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 40 item 6: the leader key holding what no bot writes (no expiry, or another type)
    does not stop every bot from ever leading, nor fail its tick: it is logged once and taken over."""
    raw = redis.Redis.from_url(redis_url)
    if foreign == "a hash":
        raw.hset(Keys.leader, "x", pickle.dumps(Payload(Path("/nonexistent/never"))))
    else:
        raw.set(Keys.leader, "someone")
    posts = Posts()
    w = world(redis_url, sim, policy("24h"), posts, owner="bot-a")
    try:
        run = monitoring_run(w.store, sim)
        assert w.scheduler.tick() and w.scheduler.tick()
        sim.advance("24h")
        assert w.scheduler.run_due() == [(run.id, "24h", "posted")]
    finally:
        w.stop()
        raw.close()
    assert len(warnings_about(caplog, Keys.leader + " ")) == 1
    assert len(posts.items) == 2
