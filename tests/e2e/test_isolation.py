"""One user cannot freeze the bot: decisions have workers of their own, long commands have
quotas per user and per channel, and SIGTERM cancels long reads and ends within the drain.

Found on main before: 8 ``verify … window=<long>`` commands filled the 8 workers that
also served Approve, Reject and Request rollback, so safety actions went unanswered for
the whole window, and SIGTERM did not stop the process until they finished.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from bot.workers import Quotas, long_reads
from kubesim import KubeSim
from runbooks.engine.runs import RunState
from runbooks.policy import Policy
from tests.e2e.conftest import RunBot
from tests.e2e.runs_support import TARGET, eventually
from tests.e2e.test_serve_process import SERVE, environment, served
from tests.e2e.test_slack_runs import requested
from tests.fakeslack import FakeSlack, post, slash_command

LONG_VERIFY = f"verify {TARGET} window=30m"


def test_fifty_long_verifies_do_not_delay_an_approve(run_bot: RunBot) -> None:
    bot = run_bot
    run_id, root_ts = requested(bot)
    gate_ts, value = bot.slack.gate(root_ts)
    for number in range(50):
        body = slash_command(LONG_VERIFY, user="U0BEN", response_url=bot.fake.response_url(f"v{number}"))
        assert bot.slack.command("", body=body).status == 200
    limited = eventually(lambda: len([c for c in bot.fake.of("response_url")
                                      if "already has 2 long command(s) running" in c.body.get("text", "")]) >= 48,
                         "48 of the 50 refused by the per-user quota")
    assert limited

    started = time.monotonic()
    assert bot.slack.click("approve", value, user="U0LEAD", message_ts=gate_ts, thread_ts=root_ts).status == 200
    eventually(lambda: bot.runtime.engine.get(run_id).gate.outcome == "approved",  # type: ignore[union-attr]
               "the Approve decided", timeout=2.0)
    assert time.monotonic() - started < 2.0
    assert bot.service.workers.pending == 2  # the two verifies still watch their window
    bot.wait_state(run_id, RunState.AWAITING_PROMOTION)


def test_quotas_per_user_and_per_channel() -> None:
    quotas = Quotas(per_user=2, per_channel=3)
    assert quotas.take("U1", "C1") is None and quotas.take("U1", "C1") is None
    assert quotas.take("U1", "C2") == "user"
    assert quotas.take("U2", "C1") is None
    assert quotas.take("U3", "C1") == "channel"
    assert quotas.take("U3", None) is None  # a direct message counts against the user only
    quotas.give("U1", "C1")
    assert quotas.take("U3", "C1") is None and quotas.take("U1", "C2") is None


def test_sigterm_cancels_a_long_verify_and_exits_within_the_drain(cluster: KubeSim, tmp_path: Path,
                                                                   redis_url: str) -> None:
    with FakeSlack() as fake:
        env = environment(fake, cluster, tmp_path, redis_url)
        with served(env, "--drain", "20", "--allow-volatile-redis", command=SERVE[:-3]) as bot:
            cluster.call(lambda sim: sim.reads.clear())
            body = slash_command(LONG_VERIFY, response_url=fake.response_url("verify"))
            assert post(bot.url + "/slack/events", body).status == 200

            def verifying() -> bool:  # a worker took the verify: it reads the DaemonSet, then watches its window
                return any(f"/daemonsets/{TARGET.split('/')[1]}" in r["path"] for r in cluster.reads())

            eventually(verifying, "the verify reading the DaemonSet", timeout=60)
            stopped = time.monotonic()
            err = bot.stop(timeout=30)
            took = time.monotonic() - stopped
            (answer,) = fake.wait_for("response_url")
    assert bot.proc.returncode == 0, err
    assert took < 10, took
    assert "verify was cancelled: the bot is shutting down" in answer.body["text"]
    assert "Traceback" not in err


@pytest.mark.parametrize("longest", ["0s", "25h", "soon"])
def test_the_longest_wait_is_itself_bounded(longest: str) -> None:
    """``limits.longest_wait`` defaults to 30m; 0s, more than a day or a non-duration is refused."""
    assert Policy().limits.longest_wait == "30m"
    with pytest.raises(ValueError, match="longest_wait"):
        Policy.model_validate({"limits": {"longest_wait": longest}})


def test_long_reads_take_all_but_the_reserved_threads() -> None:
    """Finding 3 of the security review: a process runs at most its command threads but the
    reserved ones of long reads, whoever asks (``"busy"`` beyond); requests are not counted
    against it, and a read given back frees its place."""
    assert [long_reads(n, 2) for n in (8, 4, 2, 1)] == [6, 2, 1, 1] and long_reads(8, 0) == 8
    quotas = Quotas(per_user=2, per_channel=4, reads=2)
    assert quotas.take("U1", None, read=True) is None and quotas.take("U2", None, read=True) is None
    assert quotas.take("U3", None, read=True) == "busy"
    assert quotas.take("U3", "C1") is None  # a request (canary) still runs
    assert quotas.take("U1", None, read=True) == "busy"
    quotas.give("U2", None, read=True)
    assert quotas.take("U4", "C1", read=True) is None
    assert quotas.take("U5", None, read=True) == "busy"
