"""Socket Mode: the bot dials Slack over a WebSocket, and keeps dialling.

:class:`SocketMode` is Bolt's Socket Mode handler over slack_sdk's built-in client
(:class:`Client`), which already does what Slack asks of a client: it answers ``hello``,
acknowledges each envelope with its ``envelope_id`` once the Bolt app has run its listener
(ours only acknowledge and queue, so the ack never waits for work), and on ``disconnect``
(``warning``, about ten seconds before Slack closes a connection, or
``refresh_requested``) opens a new connection with a fresh ``apps.connections.open`` URL
before it closes the old one. A connection that drops without a word is dialled again as
soon as it is noticed: by the close, by the ping monitor (slack_sdk's: 5 failed pings or 4
intervals without a pong), and, every interval, by a look at the socket for the end of the
stream (:func:`at_eof`), which slack_sdk's reader does not treat as a close; that look is
also taken every :data:`EOF_INTERVAL` between pings, so a drop costs a quarter second, not three.

:class:`Client` adds to it:

- **backoff with jitter** between failed attempts (a Slack that refuses or cannot be
  reached is asked again after a random wait up to 1, 2, 4 … 30 s, not every few
  seconds by every replica at once);
- **metrics**: envelopes received by type, acks sent and their latency from the moment the
  envelope arrived (the time it queued included), reconnects by reason (``warning``,
  ``refresh_requested``, ``dropped``) and failed attempts, and whether a connection is up;
- **its state** for ``/readyz`` (:meth:`SocketMode.check`).

A retried envelope (``retry_attempt``) reaches the listeners with ``X-Slack-Retry-Num`` as over
HTTP, and the delivery claims (:func:`bot.slack.app.delivery_key`, by ``trigger_id``) make
it the same delivery: it is dropped, never applied twice.
"""

from __future__ import annotations

import json
import logging
import random
import select
import socket
import threading
import time
from typing import Any

from slack_bolt import App
from slack_bolt.adapter.socket_mode.base_handler import BaseSocketModeHandler
from slack_bolt.adapter.socket_mode.internals import run_bolt_app, send_response
from slack_sdk.socket_mode.builtin import SocketModeClient
from slack_sdk.socket_mode.client import BaseSocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse

from bot.slack.metrics import Metrics

log = logging.getLogger("upgradebot.socket")

BACKOFF_BASE = 1.0
BACKOFF_CAP = 30.0
PING_INTERVAL = 3.0
"""Seconds between pings and looks at the socket (slack_sdk's monitor)."""
EOF_INTERVAL = 0.25
"""Seconds between looks at the socket for the end of the stream, between pings: local, no network."""
CONCURRENCY = 10
"""Envelopes handled at once; each only acknowledges and queues, so a few threads suffice."""


def at_eof(sock: Any) -> bool:
    """Whether the peer closed the stream (readable, and a peek reads nothing); never consumes data."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
        return bool(readable) and sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except (BlockingIOError, InterruptedError):
        return False
    except (OSError, ValueError):  # closed under us: as good as the end
        return True


class Backoff:
    """Full-jitter exponential backoff: after ``n`` failures, wait uniform(0, min(cap, base·2ⁿ))."""

    def __init__(self, base: float = BACKOFF_BASE, cap: float = BACKOFF_CAP,
                 rand: random.Random | None = None) -> None:
        self.base, self.cap, self.failures = base, cap, 0
        self._rand = rand or random.Random()

    def delay(self) -> float:
        if self.failures == 0:
            return 0.0
        return self._rand.uniform(0, min(self.cap, self.base * 2 ** (self.failures - 1)))

    def failed(self) -> None:
        self.failures += 1

    def reset(self) -> None:
        self.failures = 0


class Client(SocketModeClient):
    """slack_sdk's built-in Socket Mode client, with backoff, metrics and a state."""

    def __init__(self, *, metrics: Metrics, backoff: Backoff | None = None, **kwargs: Any) -> None:
        self.metrics = metrics
        self.backoff = backoff or Backoff()
        self._stopping = threading.Event()
        self._arrived: dict[str, float] = {}
        self._arrived_lock = threading.Lock()
        self._reason = ""
        """Why the next connection is made: the reason of the last ``disconnect``, else a drop."""
        self._monitor_lock = threading.Lock()
        self._eof_watch: threading.Thread | None = None
        super().__init__(**kwargs)

    # ------------------------------------------------------------ envelopes and acks
    def _on_message(self, message: str) -> None:
        try:
            parsed = json.loads(message) if message.startswith("{") else {}
        except ValueError:
            parsed = {}
        kind = str(parsed.get("type") or "")
        if kind == "disconnect":
            self._reason = str(parsed.get("reason") or "disconnect")
            self.metrics.socket_disconnects.labels(reason=self._reason).inc()
            log.info("Slack asks for a new connection (%s)", self._reason)
        elif parsed.get("envelope_id"):
            self.metrics.socket_envelopes.labels(type=kind or "-", retry="yes" if parsed.get("retry_attempt") else "no").inc()
            with self._arrived_lock:
                self._arrived.setdefault(str(parsed["envelope_id"]), time.monotonic())
        super()._on_message(message)

    def send_socket_mode_response(self, response: dict[str, Any] | SocketModeResponse) -> None:
        envelope = response.envelope_id if isinstance(response, SocketModeResponse) else response.get("envelope_id")
        super().send_socket_mode_response(response)
        with self._arrived_lock:
            arrived = self._arrived.pop(str(envelope), None)
        self.metrics.socket_acks.inc()
        if arrived is not None:
            self.metrics.socket_ack_seconds.observe(time.monotonic() - arrived)

    # ------------------------------------------------------------ connections
    def connect(self) -> None:
        try:
            super().connect()
        finally:
            self.metrics.socket_connected.set(1 if self.is_connected() else 0)
        if self._eof_watch is None:  # a drop is dialled again within EOF_INTERVAL, not at the next ping (issue 35)
            self._eof_watch = threading.Thread(target=self._watch_eof, name="upgradebot-socket-eof", daemon=True)
            self._eof_watch.start()

    def _watch_eof(self) -> None:
        """The first dial after a drop: at the end of the stream, or once slack_sdk's reader closed
        the session (a reset); after a failed dial the monitor's pace and the backoff hold again."""
        while not self._stopping.wait(EOF_INTERVAL):
            session = self.current_session
            sock = getattr(session, "sock", None)
            if session is not None and self.backoff.failures == 0 and (sock is None or at_eof(sock)):
                self._monitor_current_session()

    def connect_to_new_endpoint(self, force: bool = False) -> None:
        """Dial again, after the backoff's wait when the last attempt failed; counted by why."""
        wait = self.backoff.delay()
        if wait:
            log.info("dialling Slack again in %.1f s (attempt %d)", wait, self.backoff.failures + 1)
            if self._stopping.wait(wait):
                return
        if self.closed:
            return
        before = self.session_id()
        try:
            super().connect_to_new_endpoint(force=force)
        except Exception as exc:
            self.backoff.failed()
            self.metrics.socket_reconnects.labels(outcome="failed", reason=self._reason or "dropped").inc()
            self.metrics.socket_connected.set(0)
            log.warning("cannot open a Socket Mode connection: %s", type(exc).__name__)
            raise
        if self.session_id() != before and self.is_connected():
            self.backoff.reset()
            self.metrics.socket_reconnects.labels(outcome="connected", reason=self._reason or "dropped").inc()
            self._reason = ""
        self.metrics.socket_connected.set(1 if self.is_connected() else 0)

    def _monitor_current_session(self) -> None:
        with self._monitor_lock:  # slack_sdk's monitor and the look for the end of the stream, one at a time
            session = self.current_session
            sock = getattr(session, "sock", None)
            if session is not None and sock is not None and at_eof(sock):
                log.info("the Socket Mode connection was closed without a word; dialling again")
                session.disconnect()
            super()._monitor_current_session()

    def _on_close(self, code: int, reason: str | None = None) -> None:
        self.metrics.socket_connected.set(1 if self.is_connected() else 0)
        super()._on_close(code, reason)

    def close(self) -> None:
        self._stopping.set()
        super().close()
        self.metrics.socket_connected.set(0)


class SocketMode(BaseSocketModeHandler):
    """The Bolt app over Socket Mode (:class:`Client`); ``connect`` raises when Slack refuses."""

    def __init__(self, app: App, *, app_token: str, metrics: Metrics, ping_interval: float = PING_INTERVAL,
                 backoff: Backoff | None = None) -> None:
        self.app, self.app_token = app, app_token
        self.client = Client(metrics=metrics, backoff=backoff, app_token=app_token, logger=log,
                             web_client=app.client, ping_interval=ping_interval, concurrency=CONCURRENCY)
        self.client.socket_mode_request_listeners.append(self.handle)

    def handle(self, client: BaseSocketModeClient, req: SocketModeRequest) -> None:
        start = time.time()
        send_response(client, req, run_bolt_app(self.app, req), start)

    def check(self) -> None:
        """For ``/readyz``: raises while no connection to Slack is up."""
        if not self.client.is_connected():
            raise ConnectionError("the Socket Mode connection is down (reconnecting)")
