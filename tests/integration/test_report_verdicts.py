"""Verdicts on kubesim: a plugin that crash-loops or stops registering during monitoring, a quiet cluster.

The plugin goes bad *after* the promotion (someone sets a ``-crash`` or ``-silent`` image with
kubectl, as a bad follow-up change would), the collector gathers the events, and
``upgradebot report <run> --json`` judges: exit 1 with the nodes named, or 0 when stable.
"""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bot.shell import cli
from handlers import report as report_verb
from handlers.access import StaticDirectory
from handlers.clicks import Click, EngineDecisions
from handlers.report import present
from handlers.routing import Caller, Deps
from handlers.run_views import REQUEST_ROLLBACK
from kubesim import KubeSim
from runbooks.cluster import Cluster
from runbooks.engine.runs import GateKind, RunState
from runbooks.stability.reports import StabilityReport
from tests.report_support import CTR, DS, NS, Posts, World, connector, monitoring_run, policy, world
from tests.support import TEST_BUILDS, Kubectl, at_once

POLICY = "approvers: {users: [U0BOB]}\noncall: {channel: C0ONCALL, mention: S0ONCALL}\nreports: {after: [24h, 48h]}\n"


@pytest.fixture
def sim() -> Iterator[KubeSim]:
    with KubeSim(pushed=TEST_BUILDS, scenario="gpu-small", k8s_version="1.31") as served:
        yield served


@pytest.fixture
def bot(sim: KubeSim, redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    """The report machinery of a bot (collectors read the cluster when told), and the shell's environment."""
    config = tmp_path / "policy.yaml"
    config.write_text(POLICY)
    for name, value in {"REDIS_URL": redis_url, "KUBECONFIG": str(sim.kubeconfig), "UPGRADEBOT_CONFIG": str(config),
                        "HOME": str(tmp_path)}.items():
        monkeypatch.setenv(name, value)
    w = world(redis_url, sim, policy(), Posts(), owner="bot-a")
    yield w
    w.stop()


def report(run_id: str) -> tuple[int, dict[str, Any]]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(["report", run_id, "--json"], out=out, err=err)
    assert not err.getvalue(), err.getvalue()
    return code, json.loads(out.getvalue())


def break_plugin(sim: KubeSim, bot: World, tag: str) -> str:
    """A run in monitoring, then its plugin's image changed to ``tag`` and 5 minutes pass, collected."""
    run = monitoring_run(bot.store, sim)
    assert bot.scheduler.tick()
    bot.collectors.catch_up()
    Kubectl(sim.kubeconfig)("set", "image", f"daemonset/{DS}", "-n", NS, f"{CTR}=nvcr.io/nvidia/k8s-device-plugin:v0.17.0-{tag}")
    sim.advance("5m")
    bot.collectors.catch_up()
    return run.id


def test_a_quiet_cluster_is_stable(sim: KubeSim, bot: World) -> None:
    """Nothing happens during monitoring: `report` exits 0, verdict stable, no findings."""
    run = monitoring_run(bot.store, sim)
    assert bot.scheduler.tick()
    bot.collectors.catch_up()
    sim.advance("1h")
    code, data = report(run.id)
    assert (code, data["verdict"], data["findings"]) == (0, "stable", [])
    assert data["collection"]["collected"] and [n["gpus_now"] for n in data["nodes"]] == ["8/8"] * 3
    out = io.StringIO()
    assert cli.main(["report", run.id], out=out) == 0
    assert f"Stability report of {run.id}: STABLE" in out.getvalue() and "Request rollback" not in out.getvalue()


def test_a_crash_looping_plugin_fails_the_report_naming_its_node(sim: KubeSim, bot: World) -> None:
    """A -crash image rolled onto a node: failing, CrashLoopBackOff and BackOff events on that node."""
    run_id = break_plugin(sim, bot, "crash")
    code, data = report(run_id)
    assert code == 1 and data["verdict"] == "failing"
    down = next(f for f in data["findings"] if f["code"] == "plugin-down")
    assert len(down["nodes"]) == 1 and "CrashLoopBackOff" in down["text"]
    backoff = next(e for e in data["events"] if e["reason"] == "BackOff")
    assert [n["name"] for n in backoff["nodes"]] == down["nodes"]
    assert any(f["code"] == "events-BackOff" and f["severity"] == "degraded" for f in data["findings"])


def test_a_plugin_that_stops_registering_fails_the_report_naming_the_nodes(sim: KubeSim, bot: World) -> None:
    """A -silent image everywhere: no GPU is allocatable any more, every node named; Request rollback
    opens a rollback request that still needs an approver."""
    run_id = break_plugin(sim, bot, "silent")
    code, data = report(run_id)
    assert code == 1 and data["verdict"] == "failing"
    drop = next(f for f in data["findings"] if f["code"] == "gpu-capacity-dropped")
    assert drop["nodes"] == ["gpu-node1", "gpu-node2", "gpu-node3"]
    assert {(d["node"], d["field"], d["now"]) for d in data["capacity_drops"]} >= {("gpu-node1", "allocatable", 0)}

    button = present(StabilityReport.model_validate(data)).buttons[0]
    assert (button.label, button.action_id, button.value) == ("Request rollback", REQUEST_ROLLBACK, run_id)
    decisions = EngineDecisions(engine=bot.engine, policy=bot.engine.policy, directory=StaticDirectory())
    decided = decisions.decide(Click(action=button.action_id, value=button.value, user="U0CAROL"))
    run = bot.engine.get(run_id)
    reply = decided.reply
    assert decided.accepted and reply is not None
    assert reply.tone == "warn" and "an approver must approve it" in reply.text
    assert run.state is RunState.MONITORING and run.gate is not None and run.gate.kind is GateKind.ROLLBACK


def test_identical_reports_at_once_read_the_cluster_once(sim: KubeSim, bot: World) -> None:
    """Ten ``report <run>`` at once (a channel asking after a noisy night): one read of the
    cluster and the tally, ten answers; the next request, once it is done, reads anew."""
    run = monitoring_run(bot.store, sim)
    opened: list[str | None] = []

    def counting(context: str | None) -> Cluster:
        opened.append(context)
        time.sleep(0.3)  # a large cluster's read takes a while: the others arrive meanwhile
        return connector(sim)(context)

    deps = Deps(policy=policy(), connect=counting, engine=bot.engine, read_tally=bot.store.read_tally)
    results = at_once([lambda: report_verb.COMMAND.handle(run.id, deps, Caller(user="U0ANA"))] * 10)
    assert len(results) == 10 and len(opened) == 1, f"{len(opened)} reads"
    assert all(r is results[0] for r in results) and deps.in_flight.shared == 9
    report_verb.COMMAND.handle(run.id, deps, Caller(user="U0ANA"))
    assert len(opened) == 2, "nothing is kept once the report is made"
