"""``upgradebot serve`` as a process: first line the URL, signed commands answered, SIGTERM exits 0."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import yaml

from kubesim import KubeSim
from tests.e2e.runs_support import eventually
from tests.fakeslack import BOT_TOKEN, SIGNING_SECRET, FakeSlack, get, post, slash_command
from tests.support import free_ports

SERVE = [sys.executable, "-m", "bot", "serve", "--host", "127.0.0.1", "--port", "0", "--drain", "10",
         "--allow-volatile-redis"]  # the suite's Redis keeps nothing on disk


def environment(fake: FakeSlack, sim: KubeSim, tmp_path: Path, redis_url: str, **extra: str) -> dict[str, str]:
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump({"channels": {"C0OPS": {"cluster": "kubesim"}}, "approvers": {"users": ["U0LEAD"]}}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBE", "UPGRADEBOT", "SLACK"))}
    env.update(HOME=str(tmp_path), KUBECONFIG=str(sim.kubeconfig), UPGRADEBOT_CONFIG=str(policy),
               SLACK_BOT_TOKEN=BOT_TOKEN, SLACK_SIGNING_SECRET=SIGNING_SECRET, SLACK_API_URL=fake.api_url, REDIS_URL=redis_url, **extra)
    return env


@dataclass
class Served:
    """A running ``upgradebot serve``: the process and the URL it printed first."""

    proc: subprocess.Popen[str]
    url: str

    def stop(self, timeout: float = 20) -> str:
        """SIGTERM, then its stderr once it has exited (the rest of its output when merged)."""
        self.proc.send_signal(signal.SIGTERM)
        out, err = self.proc.communicate(timeout=timeout)
        return out if err is None else err


@contextlib.contextmanager
def served(env: dict[str, str], *args: str, command: list[str] = SERVE, merged: bool = False) -> Iterator[Served]:
    """``serve`` started with ``env`` (and ``args``), killed if the test did not stop it; ``merged``:
    its stderr on the same pipe as its stdout, as a terminal or ``kubectl logs`` shows them."""
    proc = subprocess.Popen([*command, *args], env=env, stdout=subprocess.PIPE, text=True,
                            stderr=subprocess.STDOUT if merged else subprocess.PIPE)
    try:
        assert proc.stdout is not None
        yield Served(proc, proc.stdout.readline().strip())
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_serve_answers_and_stops_on_sigterm(cluster: KubeSim, tmp_path: Path, redis_url: str) -> None:
    """The served process answers a signed help in its ack and has its workers answer a queued
    command, answers the probes, and exits 0 on SIGTERM."""
    with FakeSlack() as fake, served(environment(fake, cluster, tmp_path, redis_url)) as bot:
        url = bot.url
        assert url.startswith("http://127.0.0.1:"), url
        assert get(url + "/healthz").status == 200
        body = slash_command("help", response_url=fake.response_url())
        message = post(url + "/slack/events", body).message
        assert any("/upgrade inventory" in block["text"]["text"] for block in message["blocks"] if "text" in block)
        body = slash_command("runs", response_url=fake.response_url())
        assert post(url + "/slack/events", body).status == 200
        fake.wait_for("response_url")  # a worker took it off the queue and answered
        # ready once each lane's consumer has beaten (a worker may still be starting)
        eventually(lambda: get(url + "/readyz").status == 200, "serve ready", timeout=60)
        err = bot.stop()
    assert bot.proc.returncode == 0, err
    assert "stopping" in err and BOT_TOKEN not in err and SIGNING_SECRET not in err


def test_the_first_line_serve_prints_is_the_url_before_any_log_line(cluster: KubeSim, tmp_path: Path,
                                                                   redis_url: str) -> None:
    """Issue 64 item 6: docs/slack.md and docs/operations.md promise that the first line ``serve``
    prints is the URL it listens on, then where Slack's requests go. Read as an operator reads it,
    stdout and stderr together (a terminal, ``kubectl logs``) with the INFO log lines of a start
    (Redis's persistence, the worker processes): the URL comes first all the same."""
    with FakeSlack() as fake:
        env = environment(fake, cluster, tmp_path, redis_url, LOG_LEVEL="INFO")
        with served(env, merged=True) as bot:
            assert re.fullmatch(r"http://127\.0\.0\.1:\d+", bot.url), bot.url
            assert bot.proc.stdout is not None
            assert bot.proc.stdout.readline().strip() == f"Slack requests on POST {bot.url}/slack/events"
            assert get(bot.url + "/healthz").status == 200
            rest = bot.stop()
    assert bot.proc.returncode == 0, rest
    assert "stopping" in rest


def test_serve_without_signing_secret_refuses(cluster: KubeSim, tmp_path: Path, redis_url: str) -> None:
    """Over HTTP the signing secret is required: exit 2 with a one-line reason."""
    with FakeSlack() as fake:
        env = environment(fake, cluster, tmp_path, redis_url)
        del env["SLACK_SIGNING_SECRET"]
        proc = subprocess.run(SERVE, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()] and "SLACK_SIGNING_SECRET" in proc.stderr


def test_serve_refuses_a_bot_token_as_app_token(cluster: KubeSim, tmp_path: Path, redis_url: str) -> None:
    """SLACK_APP_TOKEN selects Socket Mode and must be an app-level token: exit 2 otherwise."""
    with FakeSlack() as fake:
        env = environment(fake, cluster, tmp_path, redis_url, SLACK_APP_TOKEN="xoxb-not-an-app-token")
        proc = subprocess.run(SERVE, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "app-level token (xapp-" in proc.stderr and "xoxb-not" not in proc.stderr


def test_socket_mode_failure_is_one_line(cluster: KubeSim, tmp_path: Path, redis_url: str) -> None:
    """When Slack refuses the Socket Mode connection, serve exits 2 with the reason, no traceback."""
    with FakeSlack() as fake:
        env = environment(fake, cluster, tmp_path, redis_url, SLACK_APP_TOKEN="xapp-1-A0APP-0000-test")
        proc = subprocess.run(SERVE, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "cannot open the Socket Mode connection" in proc.stderr.splitlines()[-1]
    assert "Traceback" not in proc.stderr and "xapp-1-A0APP" not in proc.stderr


def test_serve_without_a_policy_file_is_read_only_and_says_so(cluster: KubeSim, tmp_path: Path,
                                                              redis_url: str) -> None:
    """No UPGRADEBOT_CONFIG: nobody is trusted to request or approve, so serve answers help and
    inventory only; its first log line and /readyz say so; a canary is refused (by its worker,
    issue 63), nothing stored."""
    with FakeSlack() as fake:
        env = environment(fake, cluster, tmp_path, redis_url)  # its requests' way to its worker
        del env["UPGRADEBOT_CONFIG"]
        with served(env) as bot:
            assert bot.proc.stderr is not None
            first_log = bot.proc.stderr.readline()
            assert "read-only: no policy file" in first_log, first_log
            ready = get(bot.url + "/readyz")
            assert b'"mode": "read-only"' in ready.body
            body = slash_command("canary kube-system/nvidia-device-plugin-daemonset "
                                 "image=nvcr.io/nvidia/k8s-device-plugin:v0.17.0 node=gpu-node1",
                                 response_url=fake.response_url("canary"))
            assert post(bot.url + "/slack/events", body).status == 200
            (answer,) = fake.wait_for("response_url")
            assert "this bot is read-only" in answer.body["text"]
            err = bot.stop()
    assert bot.proc.returncode == 0, err
    assert "Traceback" not in err


def test_log_format_json_gives_one_json_object_a_line_with_user_and_verb(cluster: KubeSim, tmp_path: Path,
                                                                         redis_url: str) -> None:
    with FakeSlack() as fake:
        env = environment(fake, cluster, tmp_path, redis_url, LOG_FORMAT="json", LOG_LEVEL="INFO")
        with served(env) as bot:
            body = slash_command("help", response_url=fake.response_url())
            assert post(bot.url + "/slack/events", body).message["response_type"] == "ephemeral"
            err = bot.stop()
    assert bot.proc.returncode == 0, err
    records = [json.loads(line) for line in err.splitlines()]  # every line is JSON
    command = next(r for r in records if r["message"].startswith("command help"))
    assert (command["user"], command["verb"], command["level"]) == ("U0ANA", "help", "INFO")
    assert all({"time", "level", "logger", "message"} <= set(r) for r in records)


def test_serve_in_a_pod_refuses_to_start_its_own_redis(cluster: KubeSim, tmp_path: Path) -> None:
    """In a pod (KUBERNETES_SERVICE_HOST set) a Redis of the bot's own would die with the pod: REDIS_URL is required."""
    with FakeSlack() as fake:
        env = environment(fake, cluster, tmp_path, "unused", KUBERNETES_SERVICE_HOST="10.96.0.1")
        del env["REDIS_URL"]
        proc = subprocess.run(SERVE, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()] and "REDIS_URL is not set" in proc.stderr
    assert not (tmp_path / ".local" / "state" / "upgradebot").exists()


def test_metrics_on_their_own_port(cluster: KubeSim, tmp_path: Path, redis_url: str) -> None:
    """--metrics-port: /metrics there only, so an ingress publishing the main port never shows it."""
    (metrics_port,) = free_ports(1)
    with FakeSlack() as fake:
        env = environment(fake, cluster, tmp_path, redis_url)
        with served(env, "--metrics-port", str(metrics_port)) as bot:
            assert get(bot.url + "/metrics").status == 404
            scraped = get(f"http://127.0.0.1:{metrics_port}/metrics")
            assert scraped.status == 200 and b"upgradebot_" in scraped.body
            assert post(f"http://127.0.0.1:{metrics_port}/slack/events", slash_command("help")).status == 405
            err = bot.stop()
    assert bot.proc.returncode == 0, err


EXITING = """
import atexit, logging, sys
from bot.slack.serve import exit_leaving_work

class Module:
    def __del__(self):  # runs in the interpreter's teardown, not after os._exit
        sys.stderr.write("torn down\\n")

held = Module()
logging.basicConfig(level=logging.INFO, format="%(message)s")
atexit.register(lambda: sys.stderr.write("exit handlers ran\\n"))
sys.stdout.write("the last line, not yet flushed")
logging.getLogger("upgradebot.serve").info("stopped")
sys.exit(exit_leaving_work(3, sys.stdout))
"""


def test_a_stopped_process_exits_without_the_interpreters_teardown() -> None:
    """Issue 35: once serve (or a worker) has stopped, tearing down the interpreter's ~2,000
    modules took 0.3 s of CPU (1-2 s on a loaded node) before the process exited, for memory the
    OS frees anyway. It exits at once with its code, its output and its log flushed and its exit
    handlers run (the kubernetes client deletes its certificate files in one)."""
    proc = subprocess.run([sys.executable, "-c", EXITING], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout == "the last line, not yet flushed", proc.stdout
    assert proc.stderr == "stopped\nexit handlers ran\n", proc.stderr
