"""Issue 63, deliverable 1: read-only ``serve`` (no policy file) takes the full one's path: it acks
and queues on Redis, and a worker process of its own runs the inventories.

Found measuring acks on main: read-only ``serve`` ran ``take_inventory`` in the process that acks
(30-39 % of its samples, the first call building a watch cache with a full list), and its p99 ack
was 8-16x the bare Bolt app's at 50-200 users."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from bot.jobs import NAMESPACE
from bot.storage.redis_store import raw_client
from kubesim import KubeSim
from tests.e2e.runs_support import eventually
from tests.e2e.test_serve_restart import start
from tests.e2e.test_serve_workers import alive, children_of, environment
from tests.fakeslack import FakeSlack, get, post, slash_command
from tests.support import reap


def test_read_only_serve_hands_inventory_to_its_worker(redis_url: str, tmp_path: Path) -> None:
    """The worker stopped (SIGSTOP), an inventory is acked at once and waits on the commands lane:
    the acking process does not take it; once the worker runs again, its answer arrives. A canary
    is told the bot is read-only, by the worker too; SIGTERM stops serve and its worker."""
    log = tmp_path / "serve.log"
    redis = raw_client(redis_url)
    with FakeSlack() as fake, KubeSim(scenario="gpu-small", k8s_version="1.31") as sim:
        env = environment(fake, sim, tmp_path, redis_url)
        del env["UPGRADEBOT_CONFIG"]
        serve, url = start(env, log)
        try:
            (worker,) = eventually(lambda: children_of(serve.pid) or None, "read-only serve's worker")
            ready = eventually(lambda: (a := get(url + "/readyz")).status == 200 and a, "ready once its worker beats")
            assert b'"mode": "read-only"' in ready.body
            ready_log = log.read_text()
            assert "read-only: no policy file" in ready_log, ready_log[-3000:]
            worker_pid = int(worker)
            eventually(lambda: "worker taking" in log.read_text(), "the worker consuming", timeout=60)
            fake.clear()
            worker_was = children_of(serve.pid)
            os.kill(worker_pid, signal.SIGSTOP)
            try:
                answer = post(url + "/slack/events", slash_command("inventory", response_url=fake.response_url("inv")))
                assert (answer.status, answer.body) == (200, b""), answer.body[:300]
                assert redis.llen(f"{NAMESPACE}:commands") == 1, "queued for the worker, not run by serve"
                assert not fake.of("response_url") and not fake.of("chat.postMessage")
            finally:
                os.kill(worker_pid, signal.SIGCONT)
            eventually(lambda: fake.of("chat.postMessage") or fake.of("response_url"), "the worker's inventory",
                       timeout=60)
            assert children_of(serve.pid) == worker_was
            canary = slash_command("canary kube-system/nvidia-device-plugin-daemonset "
                                   "image=nvcr.io/nvidia/k8s-device-plugin:v0.17.0 node=gpu-node1",
                                   response_url=fake.response_url("canary"))
            assert post(url + "/slack/events", canary).status == 200
            said = eventually(lambda: [c for c in fake.of("response_url") if c.path.endswith("/canary")] or None,
                              "the canary refused")
            assert "this bot is read-only" in said[0].body["text"]
            serve.send_signal(signal.SIGTERM)
            assert serve.wait(timeout=40) == 0, log.read_text()[-3000:]
            eventually(lambda: not alive(worker_pid), "the worker stopped with serve", timeout=10)
        finally:
            reap(serve)
            redis.close()
    assert "Traceback" not in log.read_text()
