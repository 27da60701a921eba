"""The promotion :mod:`bench.bench_ack` runs while it times the full ``serve``'s acks: the bot's own
canary, approved, then its promotion, approved; hurried once the bursts are over; the run's saves
read from the bot's metrics."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bot.storage.redis_store import RedisRunStore
    from tests.fakeslack import FakeSlack

SECRET = "bench-signing-secret-0123456789"
TARGET = "kube-system/nvidia-device-plugin-daemonset"
NEW = "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"


def click_approve(fake: FakeSlack, url: str, count: int, store: RedisRunStore, state: str) -> None:
    """Approve, as U0LEAD, the ``count``-th request the bot posted with an Approve button, once the
    run is stored in ``state`` with that message recorded as its gate's (``origin``): the bot records a
    message's ts once Slack has answered the post, and a click on a message not yet recorded is refused
    as another's (a click the bench sent in between, on a loaded machine, left the bench waiting for a
    promotion that never started)."""
    from tests.fakeslack import block_action, post

    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        gates = [c for c in fake.of("chat.postMessage") for b in c.body.get("blocks", []) if b["type"] == "actions"
                 for e in b["elements"] if e.get("action_id") == "approve"]
        runs = store.list_runs()
        if len(gates) >= count and runs and runs[0].state.value == state and \
                str(gates[count - 1].answer["ts"]) in runs[0].origin.values():
            call = gates[count - 1]
            value = next(e["value"] for b in call.body["blocks"] if b["type"] == "actions" for e in b["elements"]
                         if e.get("action_id") == "approve")
            body = block_action(action_id="approve", value=value, user="U0LEAD", message_ts=str(call.answer["ts"]),
                                thread_ts=call.body.get("thread_ts"), response_url=fake.response_url("approve"))
            assert post(url + "/slack/events", body, secret=SECRET).status == 200
            return
        time.sleep(0.2)
    raise SystemExit(f"the bot posted no request number {count} to approve")


def promotion_running(fake: FakeSlack, url: str, store: RedisRunStore, nodes: int) -> str:
    """The bot's own canary on gpu-node1, approved, then its promotion, approved; the run's id
    once it promotes."""
    from tests.fakeslack import post, slash_command

    started = time.perf_counter()
    body = slash_command(f"canary {TARGET} image={NEW} node=gpu-node1", response_url=fake.response_url("canary"))
    assert post(url + "/slack/events", body, secret=SECRET).status == 200
    click_approve(fake, url, 1, store, "awaiting_approval")
    click_approve(fake, url, 2, store, "awaiting_promotion")
    deadline = time.monotonic() + 2400  # the canary and its verify at 5,000 nodes: minutes, more on a loaded machine
    while time.monotonic() < deadline:
        runs = store.list_runs()
        if runs and runs[0].state.value == "promoting":
            print(f"a promotion of {TARGET} on {nodes} nodes is running "
                  f"(canary and its verify took {time.perf_counter() - started:.0f} s)")
            return runs[0].id
        if runs and not runs[0].active:
            raise SystemExit(f"the run ended {runs[0].state.value} before its promotion")
        time.sleep(0.5)
    raise SystemExit("the promotion did not start")


def hurry(kubeconfig: Path, max_unavailable: str) -> None:
    """The rest of the promotion sped up: the DaemonSet's ``maxUnavailable`` raised (kubectl patch)."""
    from tests.support import Kubectl

    ns, name = TARGET.split("/")
    value: int | str = int(max_unavailable) if max_unavailable.isdigit() else max_unavailable  # 5 or "5%"
    patch = json.dumps({"spec": {"updateStrategy": {"rollingUpdate": {"maxUnavailable": value}}}})
    Kubectl(kubeconfig)("patch", "daemonset", name, "-n", ns, "--type=merge", "-p", patch)
    print(f"the rest of the promotion sped up: {name}'s maxUnavailable is now {max_unavailable}", flush=True)


def promotion_ended(store: RedisRunStore, run_id: str, *, timeout: float = 3600.0) -> str:
    """The run's state once it is no longer active (or still active after ``timeout`` seconds:
    ``promoting``, which :func:`main` counts as a miss)."""
    deadline = time.monotonic() + timeout
    while True:
        run = store.get(run_id, whole=False)
        if run is None or not run.active or time.monotonic() > deadline:
            return "gone" if run is None else run.state.value
        time.sleep(1.0)


TARGET_SAVE = 16 * 1024
"""The largest a run save may send, but the one that records the canary's baseline."""


def save_sizes(bot_url: str) -> int:
    """Print the run saves ``serve`` and its workers made (``upgradebot_run_save_bytes``: what each
    sent to Redis); 1 when more than one sent over :data:`TARGET_SAVE` (a run sends its canary's
    baseline once, ~1.8 MB at 5,000 nodes; every other save sends what changed: a save over a
    version another process wrote once sent the baseline again)."""
    lines = metrics_lines(bot_url)
    buckets = sorted((float(m.group(1)), float(m.group(2))) for line in lines
                     if (m := re.match(r'upgradebot_run_save_bytes_bucket\{le="([0-9.e+]+)"\} ([0-9.e+]+)$', line)))
    count = next((float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith("upgradebot_run_save_bytes_count ")),
                 0.0)
    over = count - next((n for le, n in buckets if le == TARGET_SAVE), 0.0)
    rest = next((le for le, n in buckets if n >= count - 1), None)  # every save but the largest is at most this
    print(f"run saves (upgradebot_run_save_bytes, serve and its workers): {count:.0f}; over "
          f"{TARGET_SAVE // 1024} KiB: {over:.0f} (target: at most 1, the canary's baseline, sent once)"
          + (f"; all but the largest at most {rest / 1024:.0f} KiB" if rest is not None and count > 1 else ""),
          flush=True)
    return int(over > 1)


def metrics_lines(bot_url: str) -> list[str]:
    """The lines of the bot's ``/metrics`` (serve's and its workers')."""
    import urllib.request

    with urllib.request.urlopen(bot_url + "/metrics", timeout=10) as answer:
        return answer.read().decode().splitlines()


def unanswered_count(bot_url: str) -> float:
    """The bot's ``upgradebot_commands_total{outcome="unanswered"}`` (0 when never counted)."""
    lines = metrics_lines(bot_url)
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines
               if line.startswith("upgradebot_commands_total{") and 'outcome="unanswered"' in line)
