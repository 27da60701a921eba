"""On-call hears of a halted run, and of a rollback the bot starts by itself, once."""

from __future__ import annotations

import datetime as dt

from bot.slack.metrics import Metrics
from bot.slack.pacing import Pacer
from bot.slack.threads import SlackThreads
from bot.slack.web import SlackWeb, make_client
from kubesim import KubeSim
from runbooks.engine.runs import Run, RunState, Target
from tests.e2e.harness import settings_for
from tests.e2e.runs_support import texts
from tests.fakeslack import FakeSlack

NOW = dt.datetime(2026, 1, 5, 9, 0, tzinfo=dt.UTC)


def a_run(state: RunState, **progress: str) -> Run:
    return Run(id="r-0halt0ed", target=Target(cluster="prod", namespace="kube-system", name="nvidia-device-plugin"),
               image="nvcr.io/nvidia/k8s-device-plugin:v0.17.0", container="ctr", node="gpu-node1",
               requester="U0ANA", state=state, reason="the canary stopped on an unexpected error (AttributeError: x)",
               created_at=NOW, updated_at=NOW, progress=dict(progress), version=3,
               origin={"surface": "shell", "channel": ""})


def test_a_halted_run_and_a_rollback_by_itself_are_told_to_oncall_once(fake_slack: FakeSlack, cluster: KubeSim) -> None:
    web = SlackWeb(make_client(settings_for(fake_slack, cluster), metrics=Metrics()), Metrics())
    pacer = Pacer(0.0)
    told: dict[str, str] = {}

    def set_origin(run_id: str, **refs: str) -> Run:
        told.update(refs)
        return a_run(RunState.HALTED)

    threads = SlackThreads(web=web, pacer=pacer, set_origin=set_origin, oncall="C0ONCALL", mention="S0ONCALL")
    halted = a_run(RunState.HALTED, halted_at=NOW.isoformat())
    threads.on_state(halted)
    threads.on_state(halted)  # the same halt again (a second observer call): told once
    auto = a_run(RunState.ROLLING_BACK, auto_rollback="halted for more than 15m: rolling back now")
    threads.on_state(auto)
    (first, second) = fake_slack.wait_for("chat.postMessage", 2)
    pacer.close()
    assert {first.body["channel"], second.body["channel"]} == {"C0ONCALL"}
    assert "Run r-0halt0ed halted" in texts(first) and "<!subteam^S0ONCALL>" in texts(first)
    assert "AttributeError" in texts(first)
    assert "rolling back by itself" in texts(second) and "halted for more than 15m" in texts(second)
    assert set(told) == {f"oncall|halted|{NOW.isoformat()}", "oncall|auto_rollback"}
    assert len(fake_slack.of("chat.postMessage")) == 2


def test_a_gate_message_whose_post_failed_is_sent_again_by_the_next_reconcile(
    fake_slack: FakeSlack, cluster: KubeSim,
) -> None:
    """Slack refuses the gate message once: the Approve/Reject buttons go out at the next sweep's
    reconcile, and their ts is kept with the run."""
    from runbooks.engine.runs import Gate, GateKind

    web = SlackWeb(make_client(settings_for(fake_slack, cluster), metrics=Metrics()), Metrics())
    pacer = Pacer(0.0)
    kept: dict[str, str] = {}
    gate = Gate(kind=GateKind.PROMOTION, opened_at=NOW, expires_at=NOW + dt.timedelta(hours=1), requested_by="U0ANA")
    run = a_run(RunState.AWAITING_PROMOTION).model_copy(update={
        "gate": gate, "origin": {"surface": "slack", "channel": "C0OPS", "ts": "1700000000.000100"}})

    def set_origin(run_id: str, **refs: str) -> Run:
        kept.update(refs)
        return run

    threads = SlackThreads(web=web, pacer=pacer, set_origin=set_origin)
    fake_slack.fail_once("chat.postMessage")
    threads.on_gate(run, gate)
    assert pacer.wait_idle(10) and kept == {}  # the post failed: nothing is known of it
    assert threads.reconcile([run]) == 1
    assert pacer.wait_idle(10)
    posted = [c for c in fake_slack.of("chat.postMessage") if c.answer.get("ok")]
    assert len(posted) == 1 and any(b["type"] == "actions" for b in posted[0].body["blocks"])
    assert list(kept) == [next(iter(kept))] and next(iter(kept)).startswith("gate|r-0halt0ed|promotion|")
    pacer.close()
