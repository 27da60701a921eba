"""Issue 40, item 1 (fencing, the Slack part): a run owner starved right before it posts a gate
message posts nothing twice once it runs again.

Two or three replicas are processes (:mod:`tests.gate_replica`) on one Redis, one kubesim and
one fake Slack, each with the run's Slack thread as ``serve`` wires it. The canary request is
approved; replica A drives the canary. The moment A has stored the promotion request (the
run is ``awaiting_promotion``, its gate message queued on A's pacer, not yet sent), A stops
itself (SIGSTOP). Its 2 s lease runs out; the other replicas take the run over and their
sweeps post the gate message that never went out. Then A is resumed (SIGCONT) with the
post still queued. The fake Slack records every call: one root message, one promotion
request with Approve / Reject (on the code before issue 40, A posted its own copy when
resumed, and two sweeping replicas each posted one).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from slack_sdk import WebClient

from bot.slack.metrics import Metrics
from bot.slack.pacing import Pacer
from bot.slack.threads import SlackThreads
from bot.slack.web import SlackWeb
from bot.storage.redis_store import RedisRunStore
from kubesim import KubeSim
from runbooks.cluster import Cluster
from runbooks.daemonset.steps import DaemonSetSteps
from runbooks.engine.actors import Actor
from runbooks.engine.commands import Engine
from runbooks.engine.runs import Run, RunState
from runbooks.policy import Policy
from tests.fakeslack import BOT_TOKEN, Call, FakeSlack
from tests.run_replica import POLICY
from tests.starving import Starvation, end_replicas

LEASE = "2"
ROOT = Path(__file__).resolve().parents[2]
TARGET = "kube-system/nvidia-device-plugin-daemonset"
NEW = "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[KubeSim]:
    with KubeSim(scenario="gpu-small", k8s_version="1.31", speed=4, kubeconfig=tmp_path / "kubeconfig") as served:
        yield served


def replica(redis_url: str, sim: KubeSim, slack: FakeSlack, owner: str, run_id: str, log: Path,
            *mode: str) -> subprocess.Popen[str]:
    with log.open("a") as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "tests.gate_replica", redis_url, str(sim.kubeconfig),
                                 slack.api_url, owner, LEASE, run_id, *mode], cwd=ROOT, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=stderr, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready", log.read_text()[-3000:]
    return proc


def roots(slack: FakeSlack) -> list[Call]:
    return [c for c in slack.of("chat.postMessage") if "thread_ts" not in c.body]


def updates(slack: FakeSlack, ts: str) -> list[Call]:
    return [c for c in slack.of("chat.update") if c.body.get("ts") == ts]


def gates(slack: FakeSlack, kind: str = "promotion") -> list[Call]:
    """The messages posted with an Approve button for a ``kind`` request."""
    return [c for c in slack.of("chat.postMessage") for b in c.body.get("blocks", []) if b.get("type") == "actions"
            if any(e.get("action_id") == "approve" and f"|{kind}|" in e.get("value", "") for e in b.get("elements", []))]


def front_end(store: RedisRunStore, sim: KubeSim, slack: FakeSlack) -> tuple[Engine, Pacer]:
    """The engine of the process that took the request, its observer the run's Slack thread."""
    engine: Engine | None = None

    def set_origin(run_id: str, **refs: str) -> Run:
        assert engine is not None
        return engine.set_origin(run_id, **refs)

    threads = SlackThreads(web=SlackWeb(WebClient(token=BOT_TOKEN, base_url=slack.api_url), Metrics()),
                           pacer=Pacer(0.0), set_origin=set_origin)
    engine = Engine(store=store, steps=DaemonSetSteps(), policy=Policy.model_validate(POLICY), observer=threads,
                    connect=lambda context: Cluster.from_kubeconfig(sim.kubeconfig, context))
    return engine, threads.pacer


@pytest.mark.parametrize("replicas", [2, 3], ids=["two-replicas", "three-replicas"])
def test_a_run_owner_stopped_before_its_gate_post_does_not_post_it_again_when_resumed(
    sim: KubeSim, redis_url: str, tmp_path: Path, starvation: Starvation, replicas: int
) -> None:
    """Issue 40 item 1 (gate messages fenced): A stops right after storing the promotion request,
    its gate message still queued, past its 2 s lease; the other replicas (one or two) take the
    run over and their sweeps post the missing gate message; A is SIGCONTed and its pacer sends
    what it had queued. Each post of the run's thread is claimed in Redis, atomically with the
    check that it is not recorded yet, right before the Slack call: Slack gets one root message
    and one promotion request, in the root's thread, its ts recorded with the run."""
    store = RedisRunStore.from_url(redis_url)
    procs: list[subprocess.Popen[str]] = []
    with FakeSlack() as slack:
        try:
            requested, pacer = front_end(store, sim, slack)  # the request's root message and its gate message go out
            run_id = requested.request_canary(actor=Actor("U0ALICE"), target=TARGET, image=NEW, node="gpu-node1",
                                              origin={"surface": "slack", "channel": "C0OPS"}).run.id
            requested.approve(run_id, actor=Actor("U0BOB"))
            assert pacer.close(30)
            assert len(roots(slack)) == 1 and len(gates(slack, "canary")) == 1
            a = replica(redis_url, sim, slack, "bot-a", run_id, tmp_path / "a.log", "drive", "transition:awaiting_promotion")
            procs.append(a)
            assert a.stdin is not None
            a.stdin.write("go\n")
            a.stdin.flush()
            starvation.wait_stopped(a.pid)
            assert gates(slack) == [], "A posted its gate message before it stopped"
            for name in "bc"[: replicas - 1]:
                procs.append(replica(redis_url, sim, slack, f"bot-{name}", run_id, tmp_path / f"{name}.log", "sweep"))

            def gate_recorded() -> bool:
                run = store.get(run_id)
                return run is not None and any(k.startswith("gate|") for k in run.origin) and bool(gates(slack))

            starvation.resume_when(a.pid, gate_recorded)
            assert a.wait(timeout=120) == 0
        finally:
            end_replicas(procs, tmp_path)
        run = store.get(run_id)
        store.close()
        assert len(gates(slack, "canary")) == 1
        assert run is not None and run.state is RunState.AWAITING_PROMOTION
        (root,) = roots(slack)
        posted = gates(slack)
        assert len(posted) == 1, f"{len(posted)} promotion requests were posted"
        assert posted[0].body.get("thread_ts") == root.answer["ts"] == run.origin["ts"]
        assert posted[0].answer["ts"] in run.origin.values()


@pytest.mark.parametrize("replicas", [2, 3], ids=["two-replicas", "three-replicas"])
def test_a_decider_stopped_before_it_rewrites_the_gate_message_does_not_rewrite_it_again(
    sim: KubeSim, redis_url: str, tmp_path: Path, starvation: Starvation, replicas: int
) -> None:
    """Issue 40 item 1 (the decision's update once): replica A decides U0CAROL's Approve on the
    canary request and stops right after the decision is stored, before it rewrites the
    clicked message; the other replicas' sweeps (one or two) find the gate closed, its message
    still showing its buttons, and rewrite it; A is SIGCONTed and goes on as the click listener
    does. The rewrite is one claimed effect, whoever makes it: the request's message gets one
    ``chat.update`` (on the code before issue 40: A's own rewrite, its thread's, and each sweep's)."""
    store = RedisRunStore.from_url(redis_url)
    procs: list[subprocess.Popen[str]] = []
    with FakeSlack() as slack:
        try:
            requested, pacer = front_end(store, sim, slack)
            run = requested.request_canary(actor=Actor("U0ALICE"), target=TARGET, image=NEW, node="gpu-node1",
                                           origin={"surface": "slack", "channel": "C0OPS"}).run
            assert pacer.close(30)
            (gate,) = gates(slack, "canary")
            (button,) = [e["value"] for b in gate.body["blocks"] if b.get("type") == "actions"
                         for e in b["elements"] if e.get("action_id") == "approve"]
            gate_ts, root_ts = gate.answer["ts"], roots(slack)[0].answer["ts"]
            a = replica(redis_url, sim, slack, "bot-a", run.id, tmp_path / "a.log", "decide", "transition:canary_rolling")
            procs.append(a)
            assert a.stdin is not None
            a.stdin.write(f"{button} {gate_ts} {root_ts}\n")
            a.stdin.flush()
            starvation.wait_stopped(a.pid)
            assert updates(slack, gate_ts) == [], "A rewrote the request's message before it stopped"
            for name in "bc"[: replicas - 1]:
                procs.append(replica(redis_url, sim, slack, f"bot-{name}", run.id, tmp_path / f"{name}.log",
                                     "reconcile"))

            def rewritten() -> bool:
                stored = store.get(run.id)
                return stored is not None and f"gate|{button}|closed" in stored.origin and bool(updates(slack, gate_ts))

            starvation.resume_when(a.pid, rewritten)
            assert a.wait(timeout=120) == 0
        finally:
            end_replicas(procs, tmp_path)
        stored = store.get(run.id)
        store.close()
        assert stored is not None and stored.state is RunState.CANARY_ROLLING
        done = updates(slack, gate_ts)
        assert len(done) == 1, f"the request's message was rewritten {len(done)} times"
        assert "Approved by <@U0CAROL>" in str(done[0].body.get("text", "")) + str(done[0].body.get("blocks"))
