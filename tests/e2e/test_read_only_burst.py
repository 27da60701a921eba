"""Issue 40, item 5 (nothing dropped in read-only mode): ``serve`` without a policy file ran
inventories in its own acking process (since issue 63 its worker runs them); a burst of them used to overflow the notice pool
(two threads, 512 queued answers) that tells people the bot is busy, and the answers beyond
were dropped (``upgradebot_commands_total{outcome="unanswered"}``: 4,728 of 12,000 at 50
and 200 at once). Here 600 inventories at 200 at once, against a Slack whose response_url
takes 50 ms to answer (the notice threads keep up with 40 a second): each command gets its
answer, or is told the bot is busy."""

from __future__ import annotations

import re
import signal
import subprocess
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kubesim import KubeSim
from tests.e2e.test_serve_process import SERVE, environment
from tests.fakeslack import Call, FakeSlack, post, slash_command

COMMANDS, AT_ONCE = 600, 200


class SlowResponses(FakeSlack):
    """The fake Slack whose response_url answers 50 ms after it recorded the message."""

    def _record(self, call: Call) -> None:
        super()._record(call)
        if call.method == "response_url":
            time.sleep(0.05)


def answered(fake: FakeSlack) -> set[int]:
    """The commands (by number) answered: at their own response_url, or in the channel with
    their user named (``<@U…> ran `/upgrade inventory```)."""
    done = {int(c.path.rsplit("c", 1)[1]) for c in fake.of("response_url") if re.fullmatch(r"/response/c\d+", c.path)}
    for c in fake.of("chat.postMessage"):
        done.update(int(n) for n in re.findall(r"<@UB(\d+)>", str(c.body)))
    return done


def test_read_only_serve_answers_every_command_of_a_burst(cluster: KubeSim, tmp_path: Path, redis_url: str) -> None:
    """Issue 40, item 5: read-only ``serve``, 600 ``inventory`` commands at 200 at once, each from
    its own user with its own response_url: every one is acked, every one is answered (its
    inventory, or told busy), and ``upgradebot_commands_total{outcome="unanswered"}`` stays 0."""
    with SlowResponses() as fake:
        env = environment(fake, cluster, tmp_path, redis_url)  # queued there for its worker (issue 63)
        del env["UPGRADEBOT_CONFIG"]
        log = tmp_path / "serve.log"
        with log.open("w") as stderr:  # its log read from a file: a full pipe would hold its threads
            proc = subprocess.Popen(SERVE, env=env, stdout=subprocess.PIPE, stderr=stderr, text=True)
        try:
            assert proc.stdout is not None
            url = proc.stdout.readline().strip()

            def command(n: int) -> int:
                body = slash_command("inventory", user=f"UB{n:04d}", response_url=fake.response_url(f"c{n}"))
                return post(url + "/slack/events", body).status

            with ThreadPoolExecutor(max_workers=AT_ONCE) as pool:
                statuses = list(pool.map(command, range(COMMANDS)))
            assert statuses == [200] * COMMANDS
            deadline = time.monotonic() + 180
            while len(answered(fake)) < COMMANDS and time.monotonic() < deadline:
                time.sleep(0.2)
            with urllib.request.urlopen(url + "/metrics", timeout=10) as answer:
                metrics = answer.read().decode()
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=60) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        err = log.read_text()
    missing = sorted(set(range(COMMANDS)) - answered(fake))
    assert not missing, f"{len(missing)} commands never answered, e.g. {missing[:5]}"
    dropped = [line for line in metrics.splitlines() if 'outcome="unanswered"' in line and not line.endswith(" 0.0")]
    assert not dropped, dropped
    assert "Traceback" not in err
