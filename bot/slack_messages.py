"""Every sentence the Slack surface says of its own, one function each.

As bolt-python keeps ``error_token_required()`` and friends in one module: wording and
translations are changed here only. Sentences of the router and the engine come in the
reply (``handlers/messages.py``, ``runbooks/engine/refusals.py``); these are Slack's framing
around them, and the start-up errors of ``upgradebot serve``. Texts are mrkdwn.
"""

from __future__ import annotations

import datetime as dt

TONE_MARK = {"info": "", "ok": ":white_check_mark: ", "warn": ":warning: ", "error": ":x: "}


def tone_mark(tone: str) -> str:
    return TONE_MARK.get(tone, "")


def usage_heading(count: int) -> str:
    return "*Usage:*" if count == 1 else "*Commands:*"


def continued_in_thread(count: int) -> str:
    return f"_… {count} more block(s) in the thread_"


def cut_short() -> str:
    return "_… cut short: the full text did not fit in one message_"


def requested_by(user_ref: str, command: str) -> str:
    return f"{user_ref} ran `{command}`"


def not_in_channel(channel_ref: str) -> str:
    return (f"I cannot post in {channel_ref}: invite me first (`/invite @upgradebot`), "
            "then run the command again. Nothing was started.")


def delivery_failed(reason: str) -> str:
    return f"I could not post the answer ({reason}); nothing was started twice, try again in a minute."


def busy() -> str:
    return "I am busy with other commands right now; nothing was started, try again in a minute."


def click_failed(reference: str) -> str:
    return f"Your click could not be handled (reference {reference}); nothing was decided, try again or tell the bot's owners."


def no_decisions() -> str:
    return "Approvals are not enabled on this bot; nothing was decided."


def decided(user_ref: str, approve: bool, at: dt.datetime) -> str:
    what = "Approved" if approve else "Rejected"
    return f"{what} by {user_ref} at {at.astimezone(dt.UTC):%Y-%m-%d %H:%M:%S} UTC"


# ----------------------------------------------------------------- start-up errors
def error_token_required() -> str:
    return "SLACK_BOT_TOKEN is not set: copy the Bot User OAuth Token (xoxb-…) from the app's OAuth & Permissions page"


def error_signing_secret_required() -> str:
    return ("SLACK_SIGNING_SECRET is not set: copy the Signing Secret from the app's Basic Information page "
            "(or set SLACK_APP_TOKEN to use Socket Mode)")


def error_app_token_invalid() -> str:
    return "SLACK_APP_TOKEN must be an app-level token (xapp-…) with the connections:write scope"


def error_socket_mode_failed(reason: str) -> str:
    return (f"cannot open the Socket Mode connection ({reason}): check SLACK_APP_TOKEN "
            "and that Socket Mode is enabled for the app")


def warning_auth_test_failed(reason: str) -> str:
    return f"Slack auth.test failed ({reason}): /readyz answers 503 until it succeeds"
