"""Issue 38 from Slack end to end: ``apply-migration … canary=1`` runs its duplicate once the
migration request is approved with a click, then posts the switch request, whose approval
migrates the workload; ``claims`` answers in the thread with the broken claims and their fixes."""

from __future__ import annotations

from runbooks.engine.runs import RunState
from tests.e2e.conftest import RunBot
from tests.e2e.runs_support import eventually, posted_ts, roots, texts
from tests.e2e.test_slack_migrations import _trainer
from tests.support import Kubectl


def test_a_migration_canary_then_its_switch_from_slack(run_bot: RunBot) -> None:
    """The request names the duplicate; approved, the duplicate runs and the switch request is
    posted in the thread; approved by a click, the run ends done with the original migrated."""
    bot = run_bot
    _trainer(bot)
    bot.slack.command("apply-migration ml-team/trainer class=gpu.example.com canary=1", user="U0ANA")
    (root,) = eventually(lambda: roots(bot.fake), "the run's root message")  # type: ignore[misc]
    root_ts = posted_ts(root)
    gate_ts, value = bot.slack.gate(root_ts)
    (run,) = bot.runtime.engine.runs()
    assert run.change["canary"]["name"] == "trainer-upgradebot-canary"
    bot.slack.click("approve", value, user="U0LEAD", message_ts=gate_ts, thread_ts=root_ts)
    bot.wait_state(run.id, RunState.AWAITING_PROMOTION)
    switch_ts, switch = bot.slack.gate(root_ts, count=2)
    posted = [c for c in bot.fake.of("chat.postMessage") if posted_ts(c) == switch_ts]
    assert posted and "switch Deployment ml-team/trainer to DRA: its canary trainer-upgradebot-canary" in \
        texts(posted[0])
    assert bot.kubeconfig is not None
    kubectl = Kubectl(bot.kubeconfig)
    assert kubectl.json("get", "deployment", "trainer-upgradebot-canary", "-n", "ml-team")["spec"]["replicas"] == 1
    bot.slack.click("approve", switch, user="U0LEAD", message_ts=switch_ts, thread_ts=root_ts)
    bot.wait_state(run.id, RunState.DONE)
    assert kubectl.run("get", "deployment", "trainer-upgradebot-canary", "-n", "ml-team", check=False).returncode == 1


def test_claims_from_slack(run_bot: RunBot) -> None:
    """``claims`` on gpu-small: its pending claim that no pod names, with the fix."""
    bot = run_bot
    bot.slack.command("claims", user="U0EVE")  # reading needs no rights
    said = eventually(lambda: [c for c in bot.fake.of("chat.postMessage") if "pending-gpu" in texts(c)],
                      "the broken claims")
    assert "pending-without-pod" in texts(said[0]) and "delete it if nothing is meant to use it" in \
        texts(said[0])  # type: ignore[index]
