"""``upgradebot serve`` killed in the middle of a run and started again: the run goes on, in the same message."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import yaml

from bot.storage.redis_store import RedisRunStore
from kubesim import KubeSim
from runbooks.engine.runs import RunState
from tests.e2e.harness import USERGROUPS
from tests.e2e.runs_support import (
    RUN_POLICY,
    SlackClient,
    canary_approved,
    eventually,
    kept_in,
    roots,
    texts,
    updates,
)
from tests.fakeslack import BOT_TOKEN, SIGNING_SECRET, FakeSlack
from tests.support import reap

SERVE = [sys.executable, "-m", "bot", "serve", "--host", "127.0.0.1", "--port", "0", "--drain", "5",
         "--allow-volatile-redis"]  # the suite's Redis keeps nothing on disk


def start(env: dict[str, str], log: Path) -> tuple[subprocess.Popen[str], str]:
    """Start ``upgradebot serve``; its log (stderr) goes to ``log``, to be shown if a check fails."""
    with log.open("a") as stderr:
        proc = subprocess.Popen(SERVE, env=env, stdout=subprocess.PIPE, stderr=stderr, text=True)
    assert proc.stdout is not None
    url = proc.stdout.readline().strip()
    assert url.startswith("http://127.0.0.1:"), log.read_text()[-3000:]
    return proc, url


def test_restart_mid_run_updates_the_same_root_message(redis_url: str, tmp_path: Path) -> None:
    """Killed right after the canary step, a new serve process resumes the run and updates the same root."""
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump(RUN_POLICY))
    store = RedisRunStore.from_url(redis_url)
    with FakeSlack(usergroups=USERGROUPS) as fake, KubeSim(scenario="gpu-small", k8s_version="1.31", speed=20) as sim:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBE", "UPGRADEBOT", "SLACK", "REDIS"))}
        env.update(HOME=str(tmp_path), KUBECONFIG=str(sim.kubeconfig), UPGRADEBOT_CONFIG=str(policy),
                   SLACK_BOT_TOKEN=BOT_TOKEN, SLACK_SIGNING_SECRET=SIGNING_SECRET, SLACK_API_URL=fake.api_url,
                   REDIS_URL=redis_url, UPGRADEBOT_SLACK_PACE="0.01")
        first, url = start({**env, "UPGRADEBOT_TEST_KILL_AT": "after:canary_rolling"}, tmp_path / "first.log")
        second = None
        try:
            root_ts = canary_approved(SlackClient(url, fake, kept=kept_in(store)))
            assert first.wait(timeout=60) == -signal.SIGKILL
            (run,) = store.list_runs()
            assert run.state is RunState.CANARY_ROLLING and run.origin["ts"] == root_ts

            second_log = tmp_path / "second.log"
            second, _ = start(env, second_log)
            eventually(lambda: store.get(run.id).state is RunState.AWAITING_PROMOTION, "resumed to the promotion request",  # type: ignore[union-attr]
                       timeout=60)
            eventually(lambda: any("waiting for the promotion" in texts(c) for c in updates(fake, root_ts)),
                       "the same root message updated after the restart")
            assert len(roots(fake)) == 1
            second.send_signal(signal.SIGTERM)
            assert second.wait(timeout=30) == 0, second_log.read_text()[-3000:]
        finally:
            reap(first, second)
            store.close()
