"""The thread of a run as people read it: one message per step, edited in place, the request
with its buttons always the newest message, checked against a reviewed snapshot.

``UPGRADEBOT_UPDATE_SNAPSHOTS=1`` rewrites the snapshot; review the diff before committing it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from runbooks.engine.runs import RunState
from tests.e2e.conftest import RunBot
from tests.e2e.runs_support import buttons, eventually, posted_ts, thread, thread_as_text, updates
from tests.e2e.test_slack_runs import canary_verified, requested

S = RunState
SNAPSHOT = Path(__file__).parent / "snapshots" / "canary_promotion_thread.txt"
MAX_MESSAGES = 8
MAX_LINES = 15


def normalized(text: str, run_id: str) -> str:
    """What changes from one run to the next (ids, times, pod names, hashes) as placeholders."""
    text = text.replace(run_id, "<run>")
    text = re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", "<time>", text)
    text = re.sub(r"nvidia-device-plugin-daemonset-[a-z0-9]{5}\b", "<plugin-pod>", text)
    return re.sub(r"\b[0-9a-f]{10}\b", "<hash>", text)


def test_a_canary_and_promotion_reads_in_eight_messages(run_bot: RunBot) -> None:
    bot = run_bot
    run_id, root_ts = requested(bot)
    gate_ts, value = bot.slack.gate(root_ts)
    assert "approve" in buttons(thread(bot.fake, root_ts)[-1]), "the canary request is the newest message"
    bot.slack.click("approve", value, user="U0CAT", message_ts=gate_ts, thread_ts=root_ts)
    bot.wait_state(run_id, S.AWAITING_PROMOTION)
    promotion_ts, promotion = bot.slack.gate(root_ts, 2)
    eventually(bot.idle, "the canary's messages sent")
    last = thread(bot.fake, root_ts)[-1]
    assert posted_ts(last) == promotion_ts and "approve" in buttons(last), "the promotion's Approve is last"
    assert not updates(bot.fake, promotion_ts), "nothing rewrote the request before it was decided"
    at_promotion = thread_as_text(bot.fake, root_ts)

    bot.slack.click("approve", promotion, user="U0LEAD", message_ts=promotion_ts, thread_ts=root_ts)
    bot.wait_state(run_id, S.DONE)
    eventually(bot.idle, "everything sent")
    final = thread_as_text(bot.fake, root_ts)
    assert len(final) <= MAX_MESSAGES, f"{len(final)} messages"
    for message in at_promotion + final:
        assert len(message.splitlines()) <= MAX_LINES, message
    assert "Step 4 of 7: Promotion request" in at_promotion[0]
    assert "an approver other than <@U0ANA>" in at_promotion[0]

    rendered = "\n\n".join(["# when the promotion request opened", *at_promotion, "# when the run was done", *final])
    rendered = normalized(rendered, run_id) + "\n"
    if os.environ.get("UPGRADEBOT_UPDATE_SNAPSHOTS"):
        SNAPSHOT.write_text(rendered)
    assert rendered == SNAPSHOT.read_text(), "the thread differs from the reviewed snapshot (see the module doc)"


def test_details_answers_the_step_trail_to_the_clicker(run_bot: RunBot) -> None:
    bot = run_bot
    run_id, root_ts = canary_verified(bot, approver="U0CAT")
    eventually(bot.idle, "the canary's messages sent")
    verify = next(c for c in thread(bot.fake, root_ts) if buttons(c).get("details") == f"{run_id}|verify_canary")
    before, edits, posts = len(bot.fake.of("response_url")), len(bot.fake.of("chat.update")), len(thread(bot.fake, root_ts))
    bot.slack.click("details", f"{run_id}|verify_canary", user="U0EVE", message_ts=posted_ts(verify),
                    thread_ts=root_ts)
    answer = bot.fake.wait_for("response_url", before + 1)[before]
    assert answer.body["response_type"] == "ephemeral"
    body = str(answer.body)
    assert "Verify the canary of" in body and "verify_canary.events-backoff" in body and "canary.image" not in body
    assert bot.state(run_id) is S.AWAITING_PROMOTION, "a Details click decides nothing"
    assert len(bot.fake.of("chat.update")) == edits and len(thread(bot.fake, root_ts)) == posts
