"""Replies true in Slack (issue 41): ``rollback`` says what it did and what waits, ``status``
shows the open rollback request as the step and the state, in the thread's words (Approve or
Reject in the thread), as valid Block Kit. Signed commands to the bot ``serve`` builds."""

from __future__ import annotations

from pathlib import Path

from slack_sdk.models.blocks import Block

from kubesim import KubeSim
from runbooks.engine.runs import RunState as S
from tests.e2e.conftest import RunBot
from tests.e2e.runs_support import (
    CANARY,
    buttons,
    eventually,
    posted_ts,
    roots,
    texts,
    thread,
    updates,
)
from tests.e2e.test_serve_process import environment
from tests.e2e.test_serve_startup_checks import refused_at_start
from tests.e2e.test_slack_runs import canary_verified
from tests.fakeslack import Call, FakeSlack


def _answer(bot: RunBot, containing: str) -> str:
    found = eventually(lambda: [c for c in bot.fake.of("response_url") if containing in texts(c)],
                       f"an answer with {containing!r}")
    assert isinstance(found, list)
    call = found[-1]
    assert all(Block.parse(b) is not None for b in call.body.get("blocks", []))  # valid Block Kit
    return texts(call)


def test_slack_rollback_and_status_say_what_waits(run_bot: RunBot) -> None:
    """issue 41: `/upgrade rollback <run>` at the promotion request answers that its rollback request
    is open and decided by Approve or Reject in the thread; `status <run>` and the root message show
    the rollback request as the step and the state, beside the same request waiting for approval."""
    bot = run_bot
    run_id, root_ts = canary_verified(bot)
    bot.slack.command(f"rollback {run_id} reason=flaky", user="U0ANA")
    said = _answer(bot, f"Run {run_id}; ")
    assert "rollback request is open until" in said and "Approve or Reject in the run's thread" in said, said
    assert not said.rstrip().endswith("is awaiting_promotion"), said
    bot.slack.command(f"status {run_id}", user="U0ANA")
    status = _answer(bot, "Progress")
    assert "Waiting for approval: rollback request in the thread" in status, status
    assert "Rollback request (asked at step 4 of 7, Promotion request)" in status, status
    assert "Step 4 of 7: Promotion request" not in status and "waiting for the promotion" not in status, status
    root = eventually(lambda: [c for c in updates(bot.fake, root_ts) if "Rollback request" in texts(c)],
                      "the root message updated")
    assert isinstance(root, list) and "Approve or Reject in the thread" in texts(root[-1])


def test_slack_unknown_verb_gets_did_you_mean(run_bot: RunBot) -> None:
    """issue 41: `/upgrade canery` answers "did you mean canary?" before the list of verbs, ephemeral."""
    run_bot.slack.command("canery kube-system/x", user="U0ANA")
    said = _answer(run_bot, "unknown verb")
    assert "unknown verb 'canery' (did you mean canary?)" in said and "/upgrade canary" in said, said
    assert run_bot.runtime.engine.runs() == []


def test_serve_refuses_a_missing_kubeconfig_as_not_found(cluster: KubeSim, tmp_path: Path, redis_url: str) -> None:
    """issue 41: serve's start-up check of a KUBECONFIG naming no file says "not found" with the
    path, not "Invalid kube-config file"; exit 2, one line, nothing started."""
    missing = tmp_path / "nope" / "kubeconfig"
    with FakeSlack() as fake:
        env = {**environment(fake, cluster, tmp_path, redis_url), "KUBECONFIG": str(missing)}
        proc = refused_at_start(env, tmp_path)
    assert f"{missing} not found" in proc.stderr and "Invalid kube-config" not in proc.stderr, proc.stderr


def test_slack_help_of_a_verb_describes_each_argument(run_bot: RunBot) -> None:
    """issue 41: `/upgrade help approve` says what each argument of the usage line is, as the
    shell's `approve --help` does, from the same table; valid Block Kit, ephemeral."""
    ack = run_bot.slack.command("help approve", user="U0EVE")  # help is answered in the ack itself
    message = ack.message
    assert message["response_type"] == "ephemeral"
    said = texts(Call("ack", "", message, {}, 0.0))
    assert "What I can do" in said, said
    assert "&lt;run&gt;: a run's id" in said and "which request of the run" in said, said


def test_slack_audit_keeps_the_request_and_every_decision(run_bot: RunBot) -> None:
    """issue 41: `/upgrade audit <run>` of a trail longer than its table keeps the request and both
    approvals and names `audit <run> --all`; `--all` typed in Slack shows every entry."""
    bot = run_bot
    run_id, root_ts = canary_verified(bot)
    promotion_ts, promotion = bot.slack.gate(root_ts, 2)
    bot.slack.click("approve", promotion, user="U0LEAD", message_ts=promotion_ts, thread_ts=root_ts)
    bot.wait_state(run_id, S.DONE)
    entries = bot.runtime.engine.audit(run_id)
    assert len(entries) > 40, len(entries)
    bot.slack.command(f"audit {run_id}", user="U0EVE")
    said = _answer(bot, f"Audit of {run_id}")
    assert "requested" in said and "U0LEAD" in said and "decision" in said, said
    assert f"audit {run_id} --all" in said, said
    bot.slack.command(f"audit {run_id} --all", user="U0EVE")
    every = eventually(lambda: [c for c in bot.fake.of("response_url") if f"Audit of {run_id}" in texts(c)][1:],
                       "the whole trail")
    assert isinstance(every, list) and "--all` adds them" not in texts(every[0]), texts(every[0])


def test_slack_node_auto_says_why_in_the_request(run_bot: RunBot) -> None:
    """issue 41: a canary with node=auto names the node it chose and why in its request message
    in the thread (what the approvers read), and in the answer to the one who asked."""
    bot = run_bot
    bot.slack.command(CANARY.replace("node=gpu-node1", "node=auto"), user="U0ANA")
    (root,) = eventually(lambda: roots(bot.fake), "the root message")  # type: ignore[misc]
    _, _ = bot.slack.gate(posted_ts(root))
    request = next(c for c in thread(bot.fake, posted_ts(root)) if "approve" in buttons(c))
    assert "node=auto chose" in texts(request), texts(request)
    assert all(Block.parse(b) is not None for b in request.body.get("blocks", []))
    assert "node=auto chose" in _answer(bot, "requested")


def test_serve_refuses_a_policy_typo_with_did_you_mean(cluster: KubeSim, tmp_path: Path, redis_url: str) -> None:
    """issue 41: serve's start-up check of a policy with `identites:` names the key it looks like."""
    with FakeSlack() as fake:
        env = environment(fake, cluster, tmp_path, redis_url)
        policy = Path(env["UPGRADEBOT_CONFIG"])
        policy.write_text(policy.read_text() + "identites: {accounts: {}}\n")
        proc = refused_at_start(env, tmp_path)
    assert "identites: Extra inputs are not permitted (did you mean identities?)" in proc.stderr, proc.stderr
