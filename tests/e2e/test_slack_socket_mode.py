"""``serve`` in Socket Mode end to end: envelopes over a real WebSocket (:mod:`tests.fakesocket`),
what Slack does to connections injected mid-run, one replica and two, one of them killed.

The story each time: ``inventory``, ``canary``, Approve, the canary and its verify, Approve of
the promotion, the promotion and its verify, the stability report two seconds later. While it
runs Slack sends ``disconnect`` (``warning``), then ``disconnect`` (``refresh_requested``),
and a connection is cut without a word; one click's ack is lost on the way, so Slack sends that
envelope again. Every envelope must be acknowledged within 3 s, no command or click lost, and
none applied twice: kubesim's request log and the fake Web API's calls show it.
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from slack_bolt import App
from slack_sdk import WebClient

from bot.runtime import build_runtime
from bot.slack.metrics import Metrics
from bot.slack.serve import build_slack_service, serve
from bot.slack.socket_mode import Backoff, SocketMode
from bot.storage.redis_store import RedisRunStore
from kubesim import KubeSim
from runbooks.engine.runs import RunState
from runbooks.policy import Policy
from tests.e2e.harness import USERGROUPS, settings_for
from tests.e2e.runs_support import (
    CANARY,
    RUN_POLICY,
    buttons,
    eventually,
    posted_ts,
    roots,
    texts,
    thread,
)
from tests.fakeslack import BOT_TOKEN, SIGNING_SECRET, FakeSlack, get, message_problems
from tests.fakesocket import APP_TOKEN, FakeSocketMode, click_payload, command_payload

S = RunState
SOCKET_POLICY = {**RUN_POLICY, "reports": {"after": ["2s"]}}
ACK_LIMIT = 3.0

pytestmark = pytest.mark.slow


@dataclass
class Story:
    sock: FakeSocketMode
    fake: FakeSlack
    sim: KubeSim
    store: RedisRunStore

    def command(self, text: str, user: str = "U0ANA") -> str:
        return self.sock.deliver("slash_commands", command_payload(
            text, user=user, response_url=self.fake.response_url(f"c-{user}")))

    def click(self, value: str, *, user: str, message_ts: str, thread_ts: str, lose_first_ack: bool = False) -> str:
        return self.sock.deliver("interactive", click_payload(
            "approve", value, user=user, message_ts=message_ts, thread_ts=thread_ts,
            response_url=self.fake.response_url(f"a-{user}")), lose_first_ack=lose_first_ack)

    def run(self) -> Any:
        found = eventually(lambda: self.store.list_runs(), "the run stored")
        assert isinstance(found, list) and len(found) == 1, found
        return found[0]

    def wait_state(self, run_id: str, state: RunState, timeout: float = 90) -> None:
        try:
            eventually(lambda: (r := self.store.get(run_id)) is not None and r.state is state,
                       f"run {run_id} {state.value}", timeout=timeout)
        except AssertionError as exc:
            now = self.store.get(run_id)
            raise AssertionError(f"{exc}; it is {now.state.value if now else '-'}: {now.reason if now else ''}") from None

    def gate(self, root_ts: str, count: int) -> tuple[str, str]:
        def gates() -> list[Any]:
            return [c for c in thread(self.fake, root_ts) if "approve" in buttons(c)]
        found = eventually(lambda: len(gates()) >= count and gates(), f"request {count}", timeout=60)
        assert isinstance(found, list)
        return posted_ts(found[count - 1]), buttons(found[count - 1])["approve"]


def tell(story: Story, disruption: str) -> None:
    """Slack does ``disruption`` to one open connection, and the bot has a connection again after."""
    before = story.sock.hellos
    number = getattr(story.sock, disruption)()
    if disruption != "drop":  # warning / refresh_requested: the new connection opens before the old one closes
        eventually(lambda: story.sock.hellos > before, f"a new connection after {disruption}", timeout=20)
        assert number in story.sock.open_at_hello[before], "the old connection was still open when the new one came"
    eventually(lambda: story.sock.hellos > before and story.sock.connections, f"connected again after {disruption}",
               timeout=30)


def play(story: Story, *, disrupt: bool = True, after_approval: Any = None) -> str:
    """The whole story; the run's id."""
    sock, fake = story.sock, story.fake
    inventory = story.command("inventory")
    eventually(lambda: [c for c in fake.of("chat.postMessage") if "Inventory" in texts(c)], "the inventory posted")
    sock.wait_acked(inventory)
    if disrupt:
        tell(story, "warn")
    story.command(CANARY)
    run = story.run()
    root_ts = str(eventually(lambda: (story.store.get(run.id) or run).origin.get("ts"), "the run's root message"))
    gate_ts, value = story.gate(root_ts, 1)
    if disrupt:
        tell(story, "refresh")
    # the click's first ack never reaches Slack: the envelope comes again, retry_attempt 1
    click = story.click(value, user="U0CAT", message_ts=gate_ts, thread_ts=root_ts, lose_first_ack=True)
    if after_approval is not None:  # while the canary runs: not after the retry's second or more
        after_approval()
    eventually(lambda: len([a for a in sock.acks if a.envelope_id == click]) == 2, "the click retried and acked",
               timeout=15)
    if disrupt:
        eventually(lambda: story.store.get(run.id).state is not S.AWAITING_APPROVAL, "the canary started")
        tell(story, "drop")
    story.wait_state(run.id, S.AWAITING_PROMOTION)
    promotion_ts, promotion = story.gate(root_ts, 2)
    story.click(promotion, user="U0LEAD", message_ts=promotion_ts, thread_ts=root_ts)
    story.wait_state(run.id, S.DONE)
    eventually(lambda: [c for c in fake.of("chat.postMessage") if str(c.body.get("text", "")).startswith("Stability report")],
               "the report posted")
    return str(run.id)


def check_once(story: Story, run_id: str) -> None:
    """Nothing lost, nothing done twice, every envelope acknowledged in time."""
    sock, fake = story.sock, story.fake
    for envelope in {s.envelope_id for s in sock.sends}:
        assert sock.acked(envelope), f"envelope {envelope} never acknowledged"
    slow = [a for a in sock.acks if a.latency > ACK_LIMIT]
    assert not slow, f"acks over {ACK_LIMIT}s: {slow}"
    audit = story.store.audit(run_id)
    assert [e["actor"] for e in audit if e["kind"] == "decision"] == ["U0CAT", "U0LEAD"], "each click decided once"
    assert len(roots(fake)) == 2, "the inventory reply and the run's root message, once each"
    reports = [c for c in fake.of("chat.postMessage") if str(c.body.get("text", "")).startswith("Stability report")]
    assert len(reports) == 1 and reports[0].body["thread_ts"] == posted_ts(roots(fake)[1]), "the report, once"
    inventories = [c for c in fake.of("chat.postMessage") if "Inventory" in texts(c) and "thread_ts" not in c.body]
    assert len(inventories) == 1
    deleted = [m for m in story.sim.mutations() if m["verb"] == "delete" and "/pods/" in m["path"]
               and int(m["code"]) < 400 and not m["dryRun"]]
    assert len(deleted) == 1, f"the canary's pod deleted once: {deleted}"
    patched = [m for m in story.sim.mutations() if m["verb"] == "patch" and "/daemonsets/" in m["path"]
               and int(m["code"]) < 400 and not m["dryRun"]]
    assert 0 < len(patched) <= 4, f"the DaemonSet changed as one run changes it: {patched}"


@pytest.fixture
def world(request: pytest.FixtureRequest, redis_url: str) -> Iterator[tuple[FakeSocketMode, FakeSlack, KubeSim]]:
    """Slack over Socket Mode and a kubesim ``request.param`` times as fast as the wall clock (20
    unless a test says): the reports follow its clock (the promotion's time is the API server's)."""
    speed = getattr(request, "param", 20)
    with FakeSocketMode(grace=1.0) as sock, FakeSlack(usergroups=USERGROUPS, socket_mode=sock) as fake, \
            KubeSim(scenario="gpu-small", k8s_version="1.31", speed=speed) as sim:
        yield sock, fake, sim


def test_the_story_over_socket_mode_survives_what_slack_does(world: tuple[FakeSocketMode, FakeSlack, KubeSim],
                                                             redis_url: str) -> None:
    sock, fake, sim = world
    settings = settings_for(fake, sim, REDIS_URL=redis_url, UPGRADEBOT_SLACK_PACE=0.01, SLACK_APP_TOKEN=APP_TOKEN,
                            UPGRADEBOT_SWEEP_INTERVAL=1)
    policy = Policy.model_validate(SOCKET_POLICY)
    runtime = build_runtime(settings, policy)
    service = build_slack_service(settings, runtime, readiness_cache=0)
    stop, out = threading.Event(), io.StringIO()
    server = threading.Thread(target=serve, kwargs={"settings": settings, "host": "127.0.0.1", "port": 0, "out": out,
                                                    "stop": stop, "service": service, "runtime": runtime, "drain": 5})
    server.start()
    story = Story(sock, fake, sim, RedisRunStore.from_url(redis_url))
    try:
        sock.wait_connections(1)
        url = eventually(lambda: out.getvalue().split("\n", 1)[0].strip(), "serve's address")
        assert get(f"{url}/readyz").status == 200
        run_id = play(story)
        check_once(story, run_id)
        metrics = service.metrics.exposition()[0].decode()
        for reason in ("warning", "refresh_requested", "dropped"):
            assert f'upgradebot_socket_mode_reconnects_total{{outcome="connected",reason="{reason}"}}' in metrics, reason
        assert 'upgradebot_socket_mode_envelopes_total{retry="yes",type="interactive"} 1.0' in metrics
        assert "upgradebot_socket_mode_ack_seconds_count" in metrics and "upgradebot_socket_mode_connected 1.0" in metrics
        assert 'upgradebot_slack_duplicates_total{kind="action"} 1.0' in metrics, "the retried click, dropped"
        burst = [story.command("help", user=f"U0B{i:03}") for i in range(100)]  # a burst: the acks never wait
        for envelope in burst:
            acked = sock.wait_acked(envelope)
            assert acked.latency < ACK_LIMIT
            # help's answer is the ack's own payload, an ephemeral message Slack accepts (issue 39)
            assert acked.payload["response_type"] == "ephemeral" and "What I can do" in acked.payload["text"]
            assert not message_problems(acked.payload), message_problems(acked.payload)
        hellos = sock.hellos
        sock.drop()
        eventually(lambda: sock.hellos > hellos and get(f"{url}/readyz").status == 200, "ready again once reconnected",
                   timeout=30)
    finally:
        stop.set()
        server.join(timeout=60)
        story.store.close()
    assert not server.is_alive()


# ------------------------------------------------------------------ two replicas, as processes
SERVE = [sys.executable, "-m", "bot", "serve", "--host", "127.0.0.1", "--port", "0", "--drain", "5",
         "--allow-volatile-redis"]


def parent_of(pid: int) -> int | None:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    return next((int(line.split()[1]) for line in status.splitlines() if line.startswith("PPid:")), None)


def start(env: dict[str, str], *logs: Path) -> list[subprocess.Popen[str]]:
    """One ``serve`` per log, all started before the first is waited for (each prints its address once up)."""
    procs = []
    for log in logs:
        with log.open("a") as stderr:
            procs.append(subprocess.Popen(SERVE, env=env, stdout=subprocess.PIPE, stderr=stderr, text=True))
    try:
        for proc, log in zip(procs, logs, strict=True):
            assert proc.stdout is not None
            assert proc.stdout.readline().startswith("http://127.0.0.1:"), log.read_text()[-2000:]
    except BaseException:
        for proc in procs:
            proc.kill()
            proc.wait()
        raise
    return procs


@pytest.mark.parametrize(("kill", "world"), [(False, 20), (True, 4)], ids=["two-replicas", "one-killed-mid-run"],
                         indirect=["world"])  # at 4x the canary still runs when the retried click is acked
def test_two_replicas_over_socket_mode(world: tuple[FakeSocketMode, FakeSlack, KubeSim], redis_url: str,
                                       tmp_path: Path, kill: bool) -> None:
    sock, fake, sim = world
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump(SOCKET_POLICY))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBE", "UPGRADEBOT", "SLACK", "REDIS"))}
    env.update(HOME=str(tmp_path), KUBECONFIG=str(sim.kubeconfig), UPGRADEBOT_CONFIG=str(policy),
               SLACK_BOT_TOKEN=BOT_TOKEN, SLACK_SIGNING_SECRET=SIGNING_SECRET, SLACK_API_URL=fake.api_url,
               SLACK_APP_TOKEN=APP_TOKEN, REDIS_URL=redis_url, UPGRADEBOT_SLACK_PACE="0.01",
               UPGRADEBOT_SWEEP_INTERVAL="1")
    procs = start(env, tmp_path / "replica-1.log", tmp_path / "replica-2.log")
    story = Story(sock, fake, sim, RedisRunStore.from_url(redis_url))
    try:
        sock.wait_connections(2)
        killed: list[subprocess.Popen[str]] = []

        def kill_one() -> None:
            """SIGKILL the replica driving the canary (its pid is in the run's lease): the other
            takes the run over, and Slack's envelopes go to its connection alone."""
            (run,) = story.store.list_runs()
            try:
                owner = str(eventually(lambda: story.store.lease_owner(run.id), "the canary driven", timeout=10))
            except AssertionError:  # the canary already waits for its promotion: kill either
                owner = ""
            pid = owner.split("/")[1] if owner.count("/") >= 2 else ""
            parent = parent_of(int(pid)) if pid.isdigit() else None  # the lease is a worker's, serve its parent
            driving = next((p for p in procs if p.pid == parent), procs[0])
            driving.send_signal(signal.SIGKILL)
            assert driving.wait(timeout=10) == -signal.SIGKILL
            killed.append(driving)
            eventually(lambda: len(sock.connections) == 1, "the killed replica's connection gone")

        run_id = play(story, disrupt=not kill, after_approval=kill_one if kill else None)
        check_once(story, run_id)
        served = {s.connection for s in sock.sends}
        assert len(served) >= 2, "the envelopes were spread over the replicas' connections"
        assert len(killed) == kill
        running = [p for p in procs if p not in killed]
        for proc in running:  # stopped together, as a rollout stops the old replicas: each exits 0
            proc.send_signal(signal.SIGTERM)
        assert [proc.wait(timeout=40) for proc in running] == [0] * len(running)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        story.store.close()
        for log in sorted(tmp_path.glob("replica-*.log")):
            sys.stderr.write(f"--- {log.name}\n{log.read_text()[-3000:]}")


def test_a_refused_reconnect_backs_off_and_connects_once_slack_accepts(
        world: tuple[FakeSocketMode, FakeSlack, KubeSim]) -> None:
    """Slack refuses an eleventh connection (``too_many_websockets``): the client counts the failed
    attempts, waits longer each time, and is connected again once Slack has room."""
    sock, fake, _ = world
    app = App(signing_secret=SIGNING_SECRET, token_verification_enabled=False,
              client=WebClient(token=BOT_TOKEN, base_url=fake.api_url))
    metrics = Metrics()
    handler = SocketMode(app, app_token=APP_TOKEN, metrics=metrics, ping_interval=0.5, backoff=Backoff(base=0.2))
    try:
        handler.connect()
        sock.wait_connections(1)
        assert all(sock.open_url(APP_TOKEN)["ok"] for _ in range(9)) and not sock.open_url(APP_TOKEN)["ok"], \
            "Slack's limit: 10 connections (URLs handed out count until used)"
        sock.refused.clear()
        sock.refuse_next(3)
        sock.drop()
        eventually(lambda: handler.client.backoff.failures >= 2, "reconnects refused", timeout=20)
        assert sock.refused and set(sock.refused) == {"too_many_websockets"}
        exposition = metrics.exposition()[0].decode()
        assert 'upgradebot_socket_mode_reconnects_total{outcome="failed",reason="dropped"}' in exposition
        eventually(lambda: handler.client.is_connected() and sock.connections, "connected once Slack has room",
                   timeout=30)
        assert handler.client.backoff.failures == 0
    finally:
        handler.close()


def test_a_connection_dropped_without_a_word_is_dialled_again_before_the_next_ping(
        world: tuple[FakeSocketMode, FakeSlack, KubeSim]) -> None:
    """Issue 35: a connection Slack drops without a word was noticed by slack_sdk's monitor, at
    the next ping (every 3 s), and the replica received nothing until then. The end of the
    stream is looked for between pings too: with pings a minute apart, it dials again at once."""
    sock, fake, _ = world
    app = App(signing_secret=SIGNING_SECRET, token_verification_enabled=False,
              client=WebClient(token=BOT_TOKEN, base_url=fake.api_url))
    metrics = Metrics()
    handler = SocketMode(app, app_token=APP_TOKEN, metrics=metrics, ping_interval=60)
    try:
        handler.connect()
        sock.wait_connections(1)
        hellos = sock.hellos
        sock.drop()
        eventually(lambda: sock.hellos > hellos and handler.client.is_connected(), "dialled again", timeout=20)
        exposition = metrics.exposition()[0].decode()
        assert 'upgradebot_socket_mode_reconnects_total{outcome="connected",reason="dropped"} 1.0' in exposition
    finally:
        handler.close()
