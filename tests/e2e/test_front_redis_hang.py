"""``serve`` acks Slack within Slack's 3 s when Redis hangs (finding 10 of the security review).

Found before: with ``redis-server`` stopped (SIGSTOP: it accepts connections and answers
nothing), every slash command's ack waited for the client's 10 s socket timeout; Slack
gives up after 3 s and sends the request again."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

from bot.jobs import ACK_DEADLINE, NAMESPACE, Jobs, JobsBusy
from bot.storage.embedded import EmbeddedRedis
from bot.storage.redis_store import raw_client
from handlers import messages as msg
from kubesim import KubeSim
from tests.e2e.harness import USERGROUPS
from tests.e2e.runs_support import SlackClient, eventually
from tests.e2e.test_serve_restart import start
from tests.e2e.test_serve_workers import environment, front_answers
from tests.fakeslack import FakeSlack
from tests.support import reap


def queued_texts(url: str) -> list[str]:
    """The text of each command waiting on the commands lane."""
    return sorted(json.loads(raw)["args"][1]["body"]["text"]
                  for raw in raw_client(url).hvals(f"{NAMESPACE}:commands.msgs"))


def test_a_hanging_redis_gets_a_busy_answer_within_slacks_3_seconds_and_nothing_queued_late(tmp_path: Path) -> None:
    """Finding 10 of the security review: while Redis hangs, three slash commands at once are
    each acked in under 3 s and told ephemerally that the bot is busy (in the ack); once Redis resumes,
    none of them is in the queue (a write that reached Redis after its deadline is not
    applied) and a later command is queued as usual."""
    log = tmp_path / "serve.log"
    with EmbeddedRedis() as redis_server, FakeSlack(usergroups=USERGROUPS) as fake, \
            KubeSim(scenario="gpu-small", k8s_version="1.31") as sim:
        env = {**environment(fake, sim, tmp_path, redis_server.url), "UPGRADEBOT_WORKER_PROCESSES": "0"}
        serve, url = start(env, log)
        redis_pid = redis_server._proc.pid  # type: ignore[union-attr]
        try:
            eventually(lambda: front_answers(url), "Slack and Redis answer (no worker: no consumer)")
            client = SlackClient(url, fake)
            assert client.command("runs", user="U0ANA").status == 200
            assert queued_texts(redis_server.url) == ["runs"]
            answers: dict[str, float] = {}
            os.kill(redis_pid, signal.SIGSTOP)
            try:
                told: dict[str, dict[str, object]] = {}

                def command(user: str) -> None:
                    answer = client.command("status", user=user)
                    answers[user] = answer.seconds if answer.status == 200 else float(answer.status)
                    told[user] = answer.message  # the refusal is in the ack itself

                threads = [threading.Thread(target=command, args=(user,)) for user in ("U0A1", "U0A2", "U0A3")]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join(timeout=30)
                assert len(answers) == 3 and all(s < 3.0 for s in answers.values()), (answers, log.read_text()[-2000:])
                assert [(m["text"], m["response_type"]) for m in told.values()] == [(msg.BUSY, "ephemeral")] * 3, told
                assert not fake.of("response_url"), "told twice"
            finally:
                os.kill(redis_pid, signal.SIGCONT)
            assert raw_client(redis_server.url).ping()  # what the stopped server had received is handled first
            assert client.command("inventory", user="U0ANA").status == 200
            eventually(lambda: "inventory" in queued_texts(redis_server.url), "a later command queued")
            assert queued_texts(redis_server.url) == ["inventory", "runs"], "none of the busy ones queued late"
            serve.send_signal(signal.SIGTERM)
            assert serve.wait(timeout=30) == 0, log.read_text()[-3000:]
        finally:
            os.kill(redis_pid, signal.SIGCONT)
            reap(serve)


def test_a_write_sent_to_a_hanging_redis_is_not_applied_when_it_resumes() -> None:
    """Finding 10 of the security review: the front end's submissions (deadline 2 s, the lane's
    depth just read, so each goes straight to its write) to a stopped Redis each give up with
    ``JobsBusy`` within the deadline, in one write or waiting for it; when Redis resumes and
    runs the writes it had received, they store nothing: the only job queued is the one
    before the stop, and the next submission is stored."""
    with EmbeddedRedis() as redis_server:
        jobs = Jobs.from_url(redis_server.url, deadline=ACK_DEADLINE)
        writes: list[int] = []
        write = jobs.broker._write
        jobs.broker._commit._write = lambda items: (writes.append(len(items)), write(items))[1]
        assert jobs.submit("commands", "command", {"n": 0})
        redis_pid = redis_server._proc.pid  # type: ignore[union-attr]
        outcomes: dict[int, tuple[str, float]] = {}
        os.kill(redis_pid, signal.SIGSTOP)
        try:
            def submit(n: int) -> None:
                started = time.monotonic()
                try:
                    jobs.submit("commands", "command", {"n": n})
                    outcomes[n] = ("queued", time.monotonic() - started)
                except JobsBusy:
                    outcomes[n] = ("busy", time.monotonic() - started)

            threads = [threading.Thread(target=submit, args=(n,)) for n in range(1, 5)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=30)
        finally:
            os.kill(redis_pid, signal.SIGCONT)
        assert sorted(outcomes) == [1, 2, 3, 4] and {o for o, _ in outcomes.values()} == {"busy"}, outcomes
        assert all(s < ACK_DEADLINE + 0.3 for _, s in outcomes.values()), outcomes
        assert len(writes) >= 2, f"a write reached the stopped Redis: {writes}"
        redis = raw_client(redis_server.url)
        assert redis.ping()  # the stopped server handles what it had received first
        assert [json.loads(m)["args"][1]["n"] for m in redis.hvals(f"{NAMESPACE}:commands.msgs")] == [0]
        assert redis.llen(f"{NAMESPACE}:commands") == 1
        assert jobs.submit("commands", "command", {"n": 5})
        assert redis.llen(f"{NAMESPACE}:commands") == 2
        jobs.stop(timeout=1)
