"""Issue 40, item 1 (fencing, the report part): a leader starved past its lease posts nothing more.

Two replicas are two processes (:mod:`tests.report_replica`) on one Redis, driving their
report schedulers on kubesim's clock. The leader is stopped (SIGSTOP) the moment its
report reaches Slack, before it records it, and kept stopped until the other replica has
taken the lease over and acted; then it is resumed (SIGCONT). Slack is the fake Slack
server, which records every call: each report is posted once in the run's thread and
once to on-call.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from bot.storage.redis_store import RedisRunStore
from kubesim import KubeSim
from runbooks.engine.runs import RunState
from tests.fakeslack import FakeSlack
from tests.report_support import monitoring_run, wait_until
from tests.starving import Starvation, end_replicas

LEASE = "2"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sim() -> Iterator[KubeSim]:
    """A quiet gpu-small kubesim (the reports here only read it)."""
    with KubeSim(scenario="gpu-small", k8s_version="1.31") as served:
        yield served


class StoppingSlack(FakeSlack):
    """The fake Slack, which stops the process given to :meth:`stop_at` (through the test's
    :class:`~tests.starving.Starvation`) when its first message starting with ``text``
    arrives (the message lands; the poster has not yet read Slack's answer, let alone
    recorded it)."""

    def stop_at(self, text: str, pid: int, starvation: Starvation) -> None:
        self._stop_text, self._stop_pid, self._starvation, self.stopped = text, pid, starvation, False

    def answer(self, method: str, body: Mapping[str, Any], headers: Mapping[str, str]) -> dict[str, Any]:
        if (method == "chat.postMessage" and not getattr(self, "stopped", True)
                and str(body.get("text", "")).startswith(self._stop_text)):
            self._starvation.stop(self._stop_pid)
            self.stopped = True
        return super().answer(method, body, headers)


def replica(redis_url: str, sim: KubeSim, slack: FakeSlack, owner: str, log: Path, *after: str) -> subprocess.Popen[str]:
    with log.open("a") as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "tests.report_replica", redis_url, str(sim.kubeconfig),
                                 slack.api_url, owner, LEASE, *after], cwd=ROOT, stdout=subprocess.PIPE,
                                stderr=stderr, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready", log.read_text()[-3000:]
    return proc


def posted(slack: FakeSlack, after: str) -> list[str]:
    """Where each ``after`` report message went: ``thread`` (under the run's root) or ``oncall``."""
    return ["thread" if c.body.get("thread_ts") else "oncall" for c in slack.of("chat.postMessage")
            if str(c.body.get("text", "")).startswith(f"Stability report ({after})")]


def test_a_leader_stopped_past_its_lease_mid_post_does_not_post_again_when_resumed(
    sim: KubeSim, redis_url: str, tmp_path: Path, starvation: Starvation
) -> None:
    """Issue 40 item 1 (starvation): replica A leads; its 1 h report reaches Slack's thread and A is
    SIGSTOPped there, past its 2 s lease; B takes the lease (a newer fencing token) and posts
    what A had not claimed; A is SIGCONTed: it records its thread message but, its token stale,
    posts nothing more. Then the 2 h report. Each report: one thread message, one on-call
    message; the run ends done."""
    store = RedisRunStore.from_url(redis_url)
    procs: list[subprocess.Popen[str]] = []
    with StoppingSlack() as slack:
        try:
            run = monitoring_run(store, sim)
            a = replica(redis_url, sim, slack, "bot-a", tmp_path / "a.log", "1h", "2h")
            procs.append(a)
            wait_until(lambda: store.leader() == "bot-a")
            procs.append(replica(redis_url, sim, slack, "bot-b", tmp_path / "b.log", "1h", "2h"))
            slack.stop_at("Stability report (1h)", a.pid, starvation)
            sim.advance("1h")
            starvation.wait_stopped(a.pid, timeout=60)
            # A's lease ran out while it was stopped: B leads and posted what A had not claimed
            starvation.resume_when(a.pid, lambda: store.leader() == "bot-b" and "oncall" in posted(slack, "1h"),
                                   timeout=60)
            wait_until(lambda: store.report_record(run.id, "1h").get("posted_at"), timeout=60)
            sim.advance("1h")
            wait_until(lambda: store.get(run.id).state is RunState.DONE, timeout=60)  # type: ignore[union-attr]
        finally:
            store.close()
            end_replicas(procs, tmp_path, timeout=30)
        assert sorted(posted(slack, "1h")) == ["oncall", "thread"], "the 1 h report was posted more than once"
        assert sorted(posted(slack, "2h")) == ["oncall", "thread"], "the 2 h report was posted more than once"
