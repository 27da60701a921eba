"""The per-channel pacer of Slack messages: order, pace, coalescing, failures."""

from __future__ import annotations

import itertools
import threading
import time

from bot.slack.pacing import Pacer


def test_one_channel_in_order_at_the_pace() -> None:
    """Jobs of one channel run in the order queued, at most one per interval."""
    pacer = Pacer(0.05)
    ran: list[tuple[int, float]] = []
    for i in range(4):
        pacer.submit("C1", lambda i=i: ran.append((i, time.monotonic())))  # type: ignore[misc]
    assert pacer.wait_idle(5)
    pacer.close()
    assert [i for i, _ in ran] == [0, 1, 2, 3]
    gaps = [b - a for (_, a), (_, b) in itertools.pairwise(ran)]
    assert all(gap >= 0.045 for gap in gaps), gaps


def test_waiting_job_with_the_same_key_is_coalesced() -> None:
    """A keyed job still waiting is not queued again (the root message is sent once, with its latest content)."""
    pacer = Pacer(0.2)
    gate = threading.Event()
    ran: list[str] = []
    pacer.submit("C1", lambda: (gate.wait(5), ran.append("first")))  # type: ignore[func-returns-value]
    assert pacer.submit("C1", lambda: ran.append("root"), key="root:r1")
    assert not pacer.submit("C1", lambda: ran.append("root again"), key="root:r1")
    gate.set()
    assert pacer.wait_idle(5)
    pacer.close()
    assert ran == ["first", "root"]


def test_channels_are_paced_independently_and_failures_do_not_stop_them() -> None:
    """A slow channel does not hold another back; a job that raises is dropped and the next runs."""
    pacer = Pacer(1.0)
    ran: list[str] = []

    def boom() -> None:
        raise RuntimeError("slack said no")

    pacer.submit("C1", boom)
    pacer.submit("C1", lambda: ran.append("C1 second"))
    pacer.submit("C2", lambda: ran.append("C2 first"))
    started = time.monotonic()
    while "C2 first" not in ran and time.monotonic() - started < 2:
        time.sleep(0.01)
    assert "C2 first" in ran and time.monotonic() - started < 0.5
    assert pacer.wait_idle(5)
    pacer.close()
    assert ran == ["C2 first", "C1 second"]
