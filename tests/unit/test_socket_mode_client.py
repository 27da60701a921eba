"""The Socket Mode client's own parts: backoff with jitter, and noticing a stream that ended."""

from __future__ import annotations

import random
import socket

import pytest
from slack_bolt import App

from bot.slack.metrics import Metrics
from bot.slack.socket_mode import BACKOFF_CAP, Backoff, SocketMode, at_eof


def test_backoff_waits_nothing_first_then_up_to_twice_as_long_capped_and_resets() -> None:
    backoff = Backoff(base=1.0, cap=BACKOFF_CAP, rand=random.Random(7))
    assert backoff.delay() == 0.0, "the first attempt goes at once"
    ceilings = []
    for _ in range(8):
        backoff.failed()
        ceilings.append(min(BACKOFF_CAP, 2 ** (backoff.failures - 1)))
        waits = [backoff.delay() for _ in range(200)]
        assert min(waits) >= 0 and max(waits) <= ceilings[-1]
        assert max(waits) > ceilings[-1] / 2, "jitter spreads over the whole range"
    assert ceilings == [1, 2, 4, 8, 16, 30, 30, 30]
    backoff.reset()
    assert backoff.delay() == 0.0


def test_at_eof_tells_a_closed_stream_from_an_idle_or_busy_one() -> None:
    mine, theirs = socket.socketpair()
    try:
        assert not at_eof(mine), "idle"
        theirs.sendall(b"x")
        assert not at_eof(mine) and mine.recv(1) == b"x", "data waiting is not the end, and is not consumed"
        theirs.close()
        assert at_eof(mine), "the peer closed"
    finally:
        mine.close()
    assert at_eof(mine), "a socket closed here counts as ended"


def test_readyz_fails_while_no_connection_is_up() -> None:
    """The ``socket_mode`` check of ``/readyz``: down until connected, with the reason."""
    app = App(token="xoxb-test", signing_secret="x", token_verification_enabled=False)
    handler = SocketMode(app, app_token="xapp-1-test", metrics=Metrics())
    try:
        with pytest.raises(ConnectionError, match="Socket Mode connection is down"):
            handler.check()
    finally:
        handler.close()
