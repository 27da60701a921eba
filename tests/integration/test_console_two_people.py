"""Two people, two consoles (issue 64 item 2): Alice asks in her console, Bob approves in his
with the number his console shows, and Alice's console then shows the request approved and the
run moving on. Each console is what ``upgradebot console`` builds (its own runtime, engine and
store client) on one real Redis and one kubesim, driven through the console's input loop; the
tests wait for what a console prints, never on the wall clock."""

from __future__ import annotations

import io
import queue
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from bot.console import Chat, build_chat
from bot.demo.world import SimulatedClock
from bot.runtime import build_runtime
from bot.settings import Settings
from bot.storage.redis_store import RedisRunStore
from kubesim import KubeSim
from runbooks.cluster import Cluster
from runbooks.policy import Policy

TARGET = "kube-system/nvidia-device-plugin-daemonset"
IMAGE = "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"
POLICY = Policy.model_validate({
    "requesters": {"users": ["U0ALICE"]}, "approvers": {"users": ["U0BOB"]}, "reports": {"after": []},
    "identities": {"accounts": {"alice": "U0ALICE", "bob": "U0BOB"}}, "shell": {"approvals": True},
    "steps": {"observe_window": "5s", "settle_window": "5s", "poll_interval": "1s"},
})
WITHIN = 90.0
"""A bound on waiting for a console to print what it must: the waits end when it prints it."""


class Screen(io.StringIO):
    """What a console printed, with a wait for a pattern to appear (woken by each write)."""

    def __init__(self) -> None:
        super().__init__()
        self.changed = threading.Condition()

    def write(self, text: str) -> int:
        with self.changed:
            written = super().write(text)
            self.changed.notify_all()
        return written

    def wait_for(self, pattern: str, *, after: int = 0) -> re.Match[str]:
        """The first match of ``pattern`` printed from offset ``after`` on, once it is printed."""
        found: list[re.Match[str]] = []

        def seen() -> bool:
            match = re.search(pattern, self.getvalue()[after:], re.MULTILINE)
            found[:] = [match] if match else []
            return bool(match)

        with self.changed:
            if not self.changed.wait_for(seen, timeout=WITHIN):
                raise AssertionError(f"the console never printed {pattern!r}; it printed:\n{self.getvalue()}")
        return found[0]


class Keyboard:
    """The console's input: the lines a test types, read by ``Chat.loop`` as from stdin."""

    def __init__(self) -> None:
        self.lines: queue.Queue[str | None] = queue.Queue()

    def __iter__(self) -> Iterator[str]:
        while (line := self.lines.get()) is not None:
            yield line + "\n"

    def type(self, line: str) -> None:
        self.lines.put(line)


@contextmanager
def console(sim: KubeSim, redis_url: str, user: str) -> Iterator[tuple[Chat, Screen, Keyboard]]:
    """``upgradebot console`` as ``user``: its own runtime on the shared Redis and kubesim, its
    input loop in a thread of its own; ``/quit`` and the runtime stopped when the block ends."""

    def connect(context: str | None) -> Cluster:
        return Cluster.from_kubeconfig(sim.kubeconfig, context)

    screen, keys = Screen(), Keyboard()
    runtime = build_runtime(Settings(), POLICY, store=RedisRunStore.from_url(redis_url), connect=connect,
                            clock=SimulatedClock(sim))
    chat = build_chat(runtime, out=screen, user=user, account=user[3:].lower(), watch=True)
    runtime.start(sweep=False)
    loop = threading.Thread(target=chat.loop, args=(keys,), kwargs={"prompt": False}, daemon=True)
    loop.start()
    try:
        yield chat, screen, keys
    finally:
        keys.type("/quit")
        loop.join(timeout=30)
        runtime.stop(timeout=10)


@pytest.fixture
def fast_sim() -> Iterator[KubeSim]:
    """A gpu-small kubesim of its own, its clock 20 times as fast as the wall clock (as the demo's)."""
    with KubeSim(scenario="gpu-small", k8s_version="1.31", speed=20) as served:
        yield served


def test_bob_approves_in_his_console_and_alice_sees_it_in_hers(fast_sim: KubeSim, redis_url: str) -> None:
    """Alice asks in her console; Bob, whose console starts after she asked, sees the request
    numbered in his and approves it with that number; Alice's console then shows the request
    approved (its buttons gone), the canary and the promotion request numbered anew; the
    promotion Bob approves in his shows in hers too."""
    with console(fast_sim, redis_url, "U0ALICE") as (alice, a_screen, a_keys):
        a_keys.type(f"canary {TARGET} image={IMAGE} node=gpu-node1")
        a_screen.wait_for(r"\[1\] Approve  \[2\] Reject")
        run_id = a_screen.wait_for(r"posted run (r-\w+)").group(1)

        with console(fast_sim, redis_url, "U0BOB") as (_, b_screen, b_keys):
            # Bob's console shows the open request, numbered in his console
            b_screen.wait_for(rf"posted run {run_id}")
            number = b_screen.wait_for(r"\[(\d+)\] Approve  \[\d+\] Reject").group(1)
            mark = len(a_screen.getvalue())
            b_keys.type(number)
            b_screen.wait_for(rf"\(U0BOB clicked \[{number}\] Approve\)")
            b_screen.wait_for(r"Approved by @U0BOB")

            # Alice's console: the request's buttons give way to Bob's approval, the run moves on to
            # its canary and then asks for the promotion, with buttons numbered anew
            a_screen.wait_for(r"Approved by @U0BOB", after=mark)
            a_screen.wait_for(rf"updated the message of {run_id}: state canary_(rolling|verifying)", after=mark)
            a_screen.wait_for(rf"updated the message of {run_id}: state awaiting_promotion", after=mark)
            renumbered = a_screen.wait_for(r"\[(\d+)\] Approve  \[(\d+)\] Reject", after=mark)
            assert int(renumbered.group(1)) > 2, "the promotion request gets numbers of its own"
            assert {1, 2}.isdisjoint(alice.choices), "the canary request's buttons are gone from Alice's console"
            assert int(renumbered.group(1)) in alice.choices

            # the promotion, approved in Bob's console by the number his console gave it, shows in hers
            promo = b_screen.wait_for(r"Promotion request[\s\S]*?\[(\d+)\] Approve").group(1)
            b_keys.type(promo)
            b_screen.wait_for(rf"\(U0BOB clicked \[{promo}\] Approve\)[\s\S]*replaced the request's buttons")
            a_screen.wait_for(rf"updated the message of {run_id}: state (promoting|verifying|monitoring)", after=mark)
            assert b_screen.getvalue().count("WARN  Promotion request") == 1, "each request numbered once"
            assert a_screen.getvalue().count(f"posted run {run_id}") == 1
