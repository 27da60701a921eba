"""Stability reports in Slack end to end: ``serve``'s wiring, the fake Slack, kubesim, real Redis.

A run in monitoring whose plugin stops registering; its report fires on schedule (the wall
clock: ``reports.after`` of a few seconds) into the run's thread and the on-call channel
with a "Request rollback" button and its chart (a PNG uploaded with ``files.uploadV2``); a signed click on it opens a rollback request in the
thread that still needs an approver; ``/upgrade report <run>`` answers in the channel.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bot.runtime import build_runtime
from bot.slack.http import HttpServer
from bot.slack.serve import build_slack_service
from kubesim import KubeSim
from runbooks.engine.runs import GateKind
from runbooks.policy import Policy
from tests.e2e.harness import settings_for
from tests.e2e.runs_support import (
    RUN_POLICY,
    SlackClient,
    buttons,
    eventually,
    posted_ts,
    texts,
    thread,
)
from tests.fakeslack import FakeSlack
from tests.report_support import CTR, DS, NS, monitoring_run
from tests.support import TEST_BUILDS, Kubectl

POLICY = Policy.model_validate({**RUN_POLICY, "reports": {"after": ["3s"]},
                                "oncall": {"channel": "C0ONCALL", "mention": "S0ONCALL"}})
ROOT_TS = "1700000000.000100"


@pytest.fixture
def sim() -> Iterator[KubeSim]:
    with KubeSim(pushed=TEST_BUILDS, scenario="gpu-small", k8s_version="1.31", speed=20) as served:
        yield served


def test_a_failing_report_in_slack_offers_a_rollback_request(fake_slack: FakeSlack, redis_url: str, sim: KubeSim) -> None:
    """The scheduled report lands in the thread and on-call (mentioning the group); Request rollback
    opens a rollback request with Approve / Reject; `report <run>` answers in the channel."""
    settings = settings_for(fake_slack, sim, REDIS_URL=redis_url, UPGRADEBOT_SLACK_PACE=0.01)
    runtime = build_runtime(settings, POLICY)
    service = build_slack_service(settings, runtime, readiness_cache=0)
    run = monitoring_run(runtime.store, sim, origin={"surface": "slack", "channel": "C0OPS", "ts": ROOT_TS})
    Kubectl(sim.kubeconfig)("set", "image", f"daemonset/{DS}", "-n", NS, f"{CTR}=nvcr.io/nvidia/k8s-device-plugin:v0.17.0-silent")
    runtime.start()
    http = HttpServer(service.wsgi(), port=0, threads=8).start()
    slack = SlackClient(http.url, fake_slack)
    try:
        def reports() -> list[object]:
            return [c for c in fake_slack.of("chat.postMessage") if str(c.body.get("text", "")).startswith("Stability report (3s)")]

        posted = eventually(lambda: len(reports()) == 2 and reports(), "the report in the thread and on-call")
        assert isinstance(posted, list)
        in_thread, oncall = sorted(posted, key=lambda c: c.body["channel"] != "C0OPS")
        assert in_thread.body["thread_ts"] == ROOT_TS and oncall.body["channel"] == "C0ONCALL"
        assert "FAILING" in texts(in_thread) and "<!subteam^S0ONCALL>" in texts(oncall)
        assert buttons(oncall) == {"request_rollback": run.id}
        assert "stays in monitoring" in texts(oncall) and runtime.engine.get(run.id).state.value == "monitoring"
        def uploaded() -> list[dict[str, object]]:
            return [f for f in fake_slack.files.values() if f.get("channel")]
        charts = eventually(lambda: len(uploaded()) == 2 and uploaded(), "the two charts uploaded")
        assert isinstance(charts, list) and {f["channel"] for f in charts} == {"C0OPS", "C0ONCALL"}
        for chart in charts:  # a PNG, in the report's thread (the run's, or the on-call message's)
            assert bytes(chart["data"])[:8] == b"\x89PNG\r\n\x1a\n" and chart["filename"] == f"stability-{run.id}-3s.png"
        assert next(f for f in charts if f["channel"] == "C0OPS")["thread_ts"] == ROOT_TS

        slack.click("request_rollback", run.id, user="U0CAT", message_ts=posted_ts(oncall), thread_ts=posted_ts(oncall))
        eventually(lambda: (g := runtime.engine.get(run.id).gate) is not None and g.kind is GateKind.ROLLBACK,
                   "the rollback request opened")
        gate = eventually(lambda: [c for c in thread(fake_slack, ROOT_TS) if "approve" in buttons(c)], "Approve / Reject")
        assert isinstance(gate, list) and "Rollback request" in texts(gate[0])
        assert runtime.engine.get(run.id).state.value == "monitoring", "it still needs an approver"

        slack.command(f"report {run.id}", user="U0EVE")
        answer = eventually(lambda: [c for c in fake_slack.of("chat.postMessage") if c.body["channel"] == "C0OPS"
                                     and str(c.body.get("text", "")).startswith(f"Stability report of {run.id}")],
                            "the on-demand report")
        assert isinstance(answer, list) and "FAILING" in texts(answer[0])
        for call in fake_slack.of("chat.postMessage"):
            blocks = call.body.get("blocks", [])
            assert len(blocks) <= 50 and all(len(b.get("text", {}).get("text", "")) <= 3000 for b in blocks)
    finally:
        http.stop(timeout=5)
        service.stop_workers(timeout=10)
        runtime.stop(timeout=30)


def test_serve_fires_a_report_on_the_clock_of_the_cluster_that_stamped_its_promotion(
        fake_slack: FakeSlack, redis_url: str) -> None:
    """Issue 40: a run's report times are the API server's (``promote_started_at`` is its ``Date``),
    so ``serve``'s scheduler reads that clock: with the cluster's clock an hour ahead of the bot's
    (kubesim advanced), the 3 s report posts within seconds, not an hour late."""
    with KubeSim(pushed=TEST_BUILDS, scenario="gpu-small", k8s_version="1.31") as ahead:
        ahead.advance("1h")
        settings = settings_for(fake_slack, ahead, REDIS_URL=redis_url, UPGRADEBOT_SLACK_PACE=0.01)
        runtime = build_runtime(settings, POLICY)
        build_slack_service(settings, runtime, readiness_cache=0)
        monitoring_run(runtime.store, ahead, origin={"surface": "slack", "channel": "C0OPS", "ts": ROOT_TS})
        runtime.start()
        try:
            eventually(lambda: [c for c in fake_slack.of("chat.postMessage")
                                if str(c.body.get("text", "")).startswith("Stability report (3s)")],
                       "the report posted on the cluster's clock", timeout=30)
        finally:
            runtime.stop(timeout=30)
