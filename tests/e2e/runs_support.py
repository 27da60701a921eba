"""Helpers of the run end-to-end tests: the policy, reading the fake Slack's record, clicking.

A run in Slack is one root message (``chat.postMessage`` without ``thread_ts``), updated
with ``chat.update`` on its ts, and thread messages under it; a gate's message is the
thread message with an ``actions`` block. These helpers find them in the calls the fake
Slack recorded, and send clicks signed as Slack signs them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from handlers.run_views import GATE_KEY, run_of_ref
from runbooks.policy import Policy
from tests.fakeslack import Answer, Call, FakeSlack, block_action, post, slash_command

TARGET = "kube-system/nvidia-device-plugin-daemonset"
NEW = "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"
CANARY = f"canary {TARGET} image={NEW} node=gpu-node1"
RUN_POLICY = {
    "channels": {"C0OPS": {"cluster": "kubesim"}},
    "requesters": {"users": ["U0ANA"], "usergroups": ["S0PLATFORM"]},
    "approvers": {"users": ["U0LEAD"], "usergroups": ["S0LEADS"]},
    "reports": {"after": []},
    "steps": {"observe_window": "1s", "poll_interval": "0.1s", "ready_timeout": "60s"},
    "migrations": {"namespaces": ["ml-team"]},
}
POLICY = Policy.model_validate(RUN_POLICY)


def texts(call: Call) -> str:
    """Every text of a recorded message: its blocks' sections, fields and context."""
    out = [str(call.body.get("text", ""))]
    for block in call.body.get("blocks", []):
        out.append(block.get("text", {}).get("text", ""))
        out += [f["text"] for f in block.get("fields", [])]
        out += [e.get("text", "") for e in block.get("elements", []) if isinstance(e.get("text"), str)]
    return "\n".join(out)


def buttons(call: Call) -> dict[str, str]:
    return {e["action_id"]: e["value"] for b in call.body.get("blocks", []) if b["type"] == "actions"
            for e in b["elements"]}


def roots(fake: FakeSlack) -> list[Call]:
    return [c for c in fake.of("chat.postMessage") if "thread_ts" not in c.body]


def thread(fake: FakeSlack, ts: str) -> list[Call]:
    return [c for c in fake.of("chat.postMessage") if c.body.get("thread_ts") == ts]


def updates(fake: FakeSlack, ts: str) -> list[Call]:
    return [c for c in fake.of("chat.update") if c.body.get("ts") == ts]


def eventually(check: Callable[[], object], what: str, timeout: float = 30.0) -> object:
    """``check()`` once it is truthy; AssertionError naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"not reached within {timeout}s: {what}")


def posted_ts(call: Call) -> str:
    """The ts the fake Slack gave a recorded chat.postMessage."""
    return str(call.answer["ts"])


@dataclass
class SlackClient:
    """Signed commands and clicks to one bot's /slack/events."""

    url: str
    fake: FakeSlack
    kept: Callable[[str, str], bool] | None = None
    """Whether the bot has kept a gate message (ts, button value) as the one its clicks are checked
    against: the message is in the channel a moment before (a click in between is refused as not
    on the gate's message), so :meth:`gate` waits for it when it can tell."""

    def command(self, text: str, *, user: str = "U0ANA", body: bytes | None = None,
                headers: dict[str, str] | None = None) -> Answer:
        body = body or slash_command(text, user=user, response_url=self.fake.response_url(f"c-{user}"))
        return post(self.url + "/slack/events", body, headers=headers)

    def click(self, action: str, value: str, *, user: str, message_ts: str, thread_ts: str) -> Answer:
        body = block_action(action_id=action, value=value, user=user, message_ts=message_ts, thread_ts=thread_ts,
                            response_url=self.fake.response_url(f"a-{user}"))
        return post(self.url + "/slack/events", body)

    def gate(self, root_ts: str, count: int = 1) -> tuple[str, str]:
        """The ``count``-th gate message of the run's thread: (its ts, its buttons' value)."""
        def gates() -> list[Call]:
            return [c for c in thread(self.fake, root_ts) if "approve" in buttons(c)]
        found = eventually(lambda: len(gates()) >= count and gates(), f"gate message {count}")
        assert isinstance(found, list)
        call = found[count - 1]
        ts, value = posted_ts(call), buttons(call)["approve"]
        kept = self.kept
        if kept is not None:
            eventually(lambda: kept(ts, value), f"the bot keeping gate message {count} ({ts})")
        return ts, value


def kept_in(runs: Any) -> Callable[[str, str], bool]:
    """:attr:`SlackClient.kept` read from ``runs`` (an engine or a run store: ``get(run_id)``)."""
    def kept(ts: str, ref: str) -> bool:
        run_id = run_of_ref(ref)
        run = runs.get(run_id) if run_id is not None else None
        return run is not None and run.origin.get(GATE_KEY + ref) == ts
    return kept


def canary_approved(client: SlackClient) -> str:
    """``CANARY`` requested by U0ANA and approved by U0LEAD over Slack; the run's root ts."""
    client.command(CANARY, user="U0ANA")
    (root,) = eventually(lambda: roots(client.fake), "the root message")  # type: ignore[misc]
    root_ts = posted_ts(root)
    gate_ts, value = client.gate(root_ts)
    client.click("approve", value, user="U0LEAD", message_ts=gate_ts, thread_ts=root_ts)
    return root_ts


def shown(call: Call) -> str:
    """A message as a person reads it: its blocks' text (sections, context; a field as
    ``*Label*: value``, one line, where Slack shows two side by side) and its buttons as
    ``[Label]`` on one line (mrkdwn's escapes undone)."""
    lines: list[str] = []
    for block in call.body.get("blocks", []):
        if block["type"] == "actions":
            lines.append(" ".join(f"[{e['text']['text']}]" for e in block["elements"]))
            continue
        parts = [block.get("text", {}).get("text", "")] + [f["text"].replace("*\n", "*: ", 1)
                                                           for f in block.get("fields", [])]
        parts += [e.get("text", "") for e in block.get("elements", []) if isinstance(e.get("text"), str)]
        lines += [line for p in parts if p for line in p.split("\n")]
    text = "\n".join(lines)
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def thread_as_text(fake: FakeSlack, root_ts: str) -> list[str]:
    """The thread as it reads now: the root message, then each thread message, each as last
    edited (``chat.update`` on its ts), in the order they were posted."""
    def latest(call: Call) -> Call:
        edits = updates(fake, posted_ts(call))
        return edits[-1] if edits else call
    (root,) = [c for c in roots(fake) if posted_ts(c) == root_ts]
    return [shown(latest(c)) for c in [root, *thread(fake, root_ts)]]
