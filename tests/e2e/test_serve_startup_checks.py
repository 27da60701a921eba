"""What ``upgradebot serve`` checks before it starts anything (findings 1 and 13 of the security review).

A Slack secret or token that is missing, empty or not of Slack's shape, or a kubeconfig
that does not load, stops ``serve`` with exit 2 and one line on stderr, before a worker
process is started or a port opened; and ``/readyz`` says whether the cluster answers.

Each refused value is checked on :func:`bot.slack.serve.serve` in this process (its refusal,
its one line, nothing logged, no worker, no port); one value of each variable also in a
real ``serve`` process, for what the process does with any refusal (exit 2, that line alone
on stderr). A process per value spent a second each starting Python (issue 35).
"""

from __future__ import annotations

import inspect
import io
import json
import logging
import os
import subprocess
import tempfile
import threading
from pathlib import Path

import pytest

from bot.settings import SettingsError, load_settings
from bot.slack.http import Readiness, WebApp
from bot.slack.metrics import Metrics
from bot.slack.serve import build_service, serve
from kubesim import KubeSim
from tests.e2e.harness import POLICY, settings_for
from tests.e2e.runs_support import eventually
from tests.e2e.test_serve_process import SERVE, environment, served
from tests.fakeslack import BOT_TOKEN, SIGNING_SECRET, FakeSlack, get, post, slash_command

BAD_SECRETS = {
    "empty-signing-secret": ("SLACK_SIGNING_SECRET", ""),
    "blank-signing-secret": ("SLACK_SIGNING_SECRET", "   "),
    "signing-secret-with-a-space": ("SLACK_SIGNING_SECRET", "0123456789abcdef 0123456789abcdef"),
    "short-signing-secret": ("SLACK_SIGNING_SECRET", "s3kr1tval"),
    "bot-token-as-signing-secret": ("SLACK_SIGNING_SECRET", "xoxb-1234567890-0987654321-abcdefabcdef"),
    "empty-bot-token": ("SLACK_BOT_TOKEN", ""),
    "user-token-as-bot-token": ("SLACK_BOT_TOKEN", "xoxp-1234567890-0987654321-abcdefabcdef"),
    "bot-token-with-a-newline": ("SLACK_BOT_TOKEN", "xoxb-1234567890-0987654321\nabcdefabcdef"),
    "bare-bot-token-prefix": ("SLACK_BOT_TOKEN", "xoxb-"),
    "empty-app-token": ("SLACK_APP_TOKEN", ""),
    "app-token-with-a-space": ("SLACK_APP_TOKEN", "xapp-1-A0APP-1 fakeapptoken"),
}


def refused_at_start(env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """``serve`` run to its end with ``env``; asserts it said one line, exit 2, and started no worker
    (a worker process gets a metrics directory under ``TMPDIR`` and logs "started the … worker")."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    proc = subprocess.run(SERVE, env={**env, "TMPDIR": str(scratch), "LOG_LEVEL": "INFO"},
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "worker" not in proc.stderr, proc.stderr
    assert not list(scratch.glob("upgradebot-metrics-*")), "a worker process was started"
    assert proc.stdout == "", "no port was opened"
    return proc


def refused_in_process(env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                       caplog: pytest.LogCaptureFixture) -> str:
    """What ``serve``'s process does up to its refusal, here: the settings from ``env``, then
    :func:`serve` (a stop already set: were it to start, it would stop at once and return 0);
    asserts the refusal is one line, nothing was logged before it, no worker was started (its
    metrics directory under the temporary directory) and no port opened. The line the CLI
    prints (:func:`refused_at_start` runs the process for one value of each variable)."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    for name in set(os.environ) - set(env):
        monkeypatch.delenv(name)
    for name, value in {**env, "LOG_LEVEL": "INFO"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    stop, out = threading.Event(), io.StringIO()
    stop.set()
    caplog.set_level(logging.INFO)
    with pytest.raises(SettingsError) as refused:
        serve(load_settings(), host="127.0.0.1", port=0, out=out, stop=stop, drain=1, allow_volatile=True)
    line = str(refused.value)
    assert len(line.strip().splitlines()) == 1, line
    assert not [r.getMessage() for r in caplog.records if r.name.startswith("upgradebot")], caplog.text
    assert not list(scratch.glob("upgradebot-metrics-*")), "a worker process was started"
    assert out.getvalue() == "", "no port was opened"
    return line


IN_A_PROCESS = {"empty-signing-secret", "user-token-as-bot-token", "app-token-with-a-space", "garbage"}
"""One refused value of each variable (and of the kubeconfig) also checked in a real ``serve`` process."""


@pytest.mark.parametrize("name", list(BAD_SECRETS), ids=list(BAD_SECRETS))
def test_finding_1_serve_refuses_a_secret_or_token_not_of_slacks_shape(
        name: str, cluster: KubeSim, tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """Finding 1 of the security review: an empty SLACK_SIGNING_SECRET let serve start with no
    signature checked. Every Slack secret or token that is set but empty, blank, with whitespace,
    too short or of another kind stops serve: exit 2, one line naming the variable, never its
    value, and no worker started (exit 2 and stderr seen in a real process for one value of each)."""
    variable, value = BAD_SECRETS[name]
    with FakeSlack() as fake:
        env = {**environment(fake, cluster, tmp_path, redis_url), variable: value}
        said = (refused_at_start(env, tmp_path).stderr if name in IN_A_PROCESS
                else refused_in_process(env, tmp_path, monkeypatch, caplog))
    assert variable in said, said
    for part in value.split():
        if len(part) > 5:
            assert part not in said, "the value is never shown"


def test_finding_13_serve_without_a_bot_token_starts_no_worker(cluster: KubeSim, tmp_path: Path,
                                                               redis_url: str) -> None:
    """Finding 13 of the security review: serve without SLACK_BOT_TOKEN started both worker
    processes before it failed, with 4 lines on stderr. Now one line, before any worker."""
    with FakeSlack() as fake:
        env = environment(fake, cluster, tmp_path, redis_url)
        del env["SLACK_BOT_TOKEN"]
        proc = refused_at_start(env, tmp_path)
    assert "SLACK_BOT_TOKEN is not set" in proc.stderr


@pytest.mark.parametrize("kubeconfig", ["garbage", "not-yaml", "missing", "no-such-context"])
def test_finding_13_serve_refuses_a_kubeconfig_that_does_not_load(
        kubeconfig: str, cluster: KubeSim, tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """Finding 13 of the security review: serve started on a garbage kubeconfig and /readyz said
    ready. The kubeconfig (each context the policy's channels name) must load: exit 2, one line
    (exit 2 and stderr seen in a real process for the garbage one)."""
    path = tmp_path / "kubeconfig"
    if kubeconfig == "garbage":
        path.write_text("just some words\n")
    elif kubeconfig == "not-yaml":
        path.write_text("clusters: [unclosed\n")
    elif kubeconfig == "no-such-context":
        path.write_text(cluster.kubeconfig.read_text().replace("name: kubesim", "name: elsewhere")
                        .replace("cluster: kubesim", "cluster: elsewhere")
                        .replace("current-context: kubesim", "current-context: elsewhere"))
    with FakeSlack() as fake:
        env = {**environment(fake, cluster, tmp_path, redis_url), "KUBECONFIG": str(path)}
        said = (refused_at_start(env, tmp_path).stderr if kubeconfig in IN_A_PROCESS
                else refused_in_process(env, tmp_path, monkeypatch, caplog))
    assert "kubeconfig" in said.lower() or "context" in said, said


def test_finding_13_readyz_pings_the_cluster(cluster: KubeSim, tmp_path: Path, redis_url: str) -> None:
    """Finding 13 of the security review: /readyz never looked at the cluster. It now asks the
    API server's /version (a short timeout, cached like the other checks): ok against kubesim,
    and "failed: …" naming the cluster when the kubeconfig loads but its server does not
    answer. The cluster is reported, not required: the replica stays in rotation to tell
    people the cluster does not answer (the workers' consumers are still required)."""
    with FakeSlack() as fake, served(environment(fake, cluster, tmp_path, redis_url)) as bot:
        ready = eventually(lambda: (a := get(bot.url + "/readyz")).status == 200 and a, "serve ready", timeout=60)
        assert json.loads(ready.body)["checks"]["cluster"] == "ok"  # type: ignore[attr-defined]
        err = bot.stop()
    assert bot.proc.returncode == 0, err

    dead = tmp_path / "dead-kubeconfig"
    dead.write_text(cluster.kubeconfig.read_text().replace(cluster.url, "https://127.0.0.1:1"))
    with FakeSlack() as fake, served({**environment(fake, cluster, tmp_path, redis_url), "KUBECONFIG": str(dead)}) as bot:
        answer = eventually(lambda: (a := get(bot.url + "/readyz")).status == 200 and a, "serve ready", timeout=60)
        checks = json.loads(answer.body)["checks"]  # type: ignore[attr-defined]
        assert checks["cluster"].startswith("failed: "), checks
        assert checks["redis"] == "ok" and checks["slack"] == "ok", checks
        err = bot.stop()
    assert bot.proc.returncode == 0, err


def test_finding_1_a_valid_secret_still_refuses_unsigned_requests(cluster: KubeSim, tmp_path: Path,
                                                                  redis_url: str) -> None:
    """Finding 1 of the security review, the other side: with a valid signing secret serve starts,
    and an unsigned command or one signed with another secret is refused 401 while a signed one
    is answered."""
    with FakeSlack() as fake, served(environment(fake, cluster, tmp_path, redis_url)) as bot:
        body = slash_command("help", response_url=fake.response_url())
        assert post(bot.url + "/slack/events", body, signed=False).status == 401
        assert post(bot.url + "/slack/events", body, secret="f" * 32).status == 401
        answer = post(bot.url + "/slack/events", body)
        assert answer.status == 200 and "What I can do" in answer.message["text"]  # help: answered in the ack
        err = bot.stop()
    assert bot.proc.returncode == 0, err
    assert BOT_TOKEN not in err and SIGNING_SECRET not in err


@pytest.mark.parametrize("secret", [None, ""], ids=["none", "empty"])
def test_finding_1_the_slack_endpoint_cannot_be_built_without_a_signing_secret(secret: str | None) -> None:
    """Finding 1 of the security review, defence in depth: the HTTP front once took a missing or
    empty secret as "check no signature". Its Slack endpoint now cannot be built without one
    (the probes alone, as on --metrics-port, need none)."""
    readiness, metrics = Readiness({}), Metrics()
    with pytest.raises(SettingsError, match="SLACK_SIGNING_SECRET"):
        WebApp(slack=lambda environ, start_response: [], readiness=readiness, metrics=metrics, signing_secret=secret)
    probes = WebApp(slack=None, readiness=readiness, metrics=metrics)
    assert probes.secret == b""


def test_finding_1_an_empty_signing_secret_is_refused_where_the_front_is_built(cluster: KubeSim) -> None:
    """Finding 1 of the security review: build_service (what serve and every worker build) refuses
    a signing secret that is set but empty, as serve does at start."""
    with FakeSlack() as fake, pytest.raises(SettingsError, match="SLACK_SIGNING_SECRET is set but empty"):
        build_service(settings_for(fake, cluster, SLACK_SIGNING_SECRET=""), POLICY)


def test_building_the_front_never_walks_the_call_stack(cluster: KubeSim, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 35: Bolt names an app it is not given a name from ``inspect.stack()``, which reads the
    source of every frame: 47 ms of CPU at each start of serve and of each worker. The front end
    names its app, so nothing reads the stack while it is built."""
    def walked(*args: object, **kwargs: object) -> None:
        raise AssertionError("inspect.stack() called while the front end was built")

    monkeypatch.setattr(inspect, "stack", walked)
    with FakeSlack() as fake:
        service = build_service(settings_for(fake, cluster), POLICY)
        service.stop_workers(timeout=5)
    assert service.app.name == "upgradebot"
