"""Slack's Socket Mode for tests: a WebSocket server on aiohttp that behaves as Slack's does.

:class:`FakeSocketMode` hands out short-lived ``wss://`` URLs (through the fake Web API's
``apps.connections.open``, :meth:`FakeSocketMode.open_url`, which refuses a wrong token
with ``invalid_auth`` and an eleventh connection with ``too_many_websockets``). Each
connection is greeted with ``hello``. :meth:`FakeSocketMode.deliver` sends an envelope
(``slash_commands``, ``interactive``) shaped as Slack shapes it to one open connection, in
turn (several connections share the envelopes, as Slack spreads them); an envelope not
acknowledged with its ``envelope_id`` within :attr:`ack_timeout` seconds is sent again, to
whichever connection is open, with ``retry_attempt`` one higher and ``retry_reason``
``timeout``, up to :data:`MAX_RETRIES` times. Every send and every ack is recorded with its
latency (:attr:`FakeSocketMode.sends`, :attr:`FakeSocketMode.acks`).

It also does what Slack does to connections: :meth:`warn` sends ``disconnect`` with reason
``warning`` and closes the connection :attr:`grace` seconds later (Slack: about ten),
:meth:`refresh` the same with ``refresh_requested``, and :meth:`drop` cuts the TCP
connection without a close frame. The port is not 443, so slack_sdk's client speaks plain
WebSocket to it (its own tests do the same).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import secrets
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web

from tests.fakeslack import block_action, slash_command

APP_TOKEN = "xapp-1-A0APP-1-fakeapptoken"
MAX_CONNECTIONS = 10
MAX_RETRIES = 3


@dataclass
class Send:
    envelope_id: str
    attempt: int
    connection: int
    at: float


@dataclass
class Ack:
    envelope_id: str
    attempt: int
    connection: int
    latency: float
    """Seconds from this attempt's send to its ack."""
    payload: dict[str, Any] = field(default_factory=dict)
    lost: bool = False
    """Sent by the bot, lost on the way (:meth:`FakeSocketMode.deliver` ``lose_first_ack``)."""


@dataclass
class _Envelope:
    envelope_id: str
    kind: str
    payload: dict[str, Any]
    attempt: int = 0
    sent_at: float = 0.0
    acked: bool = False
    lose_acks: int = 0
    """Acks of this envelope to lose on the way (Slack never hears them, so it sends it again)."""


@dataclass
class _Connection:
    number: int
    ws: web.WebSocketResponse
    transport: Any
    closing: bool = False


class FakeSocketMode:
    def __init__(self, *, ack_timeout: float = 3.0, grace: float = 1.0, app_token: str = APP_TOKEN) -> None:
        self.ack_timeout, self.grace, self.app_token = ack_timeout, grace, app_token
        self.sends: list[Send] = []
        self.acks: list[Ack] = []
        self.hellos = 0
        self.open_at_hello: list[set[int]] = []
        """For each connection greeted, the connections open at that moment (itself included)."""
        self.refused: list[str] = []
        self._tickets: set[str] = set()
        self._refusals = 0
        self._open: dict[int, _Connection] = {}
        self._envelopes: dict[str, _Envelope] = {}
        self._numbers = itertools.count(1)
        self._tasks: set[asyncio.Future[None]] = set()
        self._turn = itertools.count()
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="fake-socket-mode", daemon=True)
        self.port = 0

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> FakeSocketMode:
        self._thread.start()
        if not self._started.wait(10):
            raise RuntimeError("the fake Socket Mode server did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        self._call(self._close_all)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.router.add_get("/link/", self._handle)
        runner = web.AppRunner(app, handle_signals=False)
        self._loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self._started.set()
        self._loop.run_forever()
        self._loop.run_until_complete(runner.cleanup())

    def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn(*args)`` (a coroutine function) on the server's loop and wait for it."""
        return asyncio.run_coroutine_threadsafe(fn(*args), self._loop).result(timeout=10)

    # ------------------------------------------------------------------ the Web API's part
    def open_url(self, token: str) -> dict[str, Any]:
        """``apps.connections.open``: a fresh single-use URL, or Slack's error."""
        if token != self.app_token:
            return {"ok": False, "error": "invalid_auth"}
        with self._lock:
            if self._refusals > 0 or len(self._open) + len(self._tickets) >= MAX_CONNECTIONS:
                self._refusals = max(0, self._refusals - 1)
                self.refused.append("too_many_websockets")
                return {"ok": False, "error": "too_many_websockets"}
            ticket = secrets.token_hex(8)
            self._tickets.add(ticket)
        return {"ok": True, "url": f"wss://127.0.0.1:{self.port}/link/?ticket={ticket}&app_id=A0APP"}

    def refuse_next(self, count: int) -> None:
        """The next ``count`` ``apps.connections.open`` are refused ``too_many_websockets`` (the
        app's other connections, elsewhere, hold every slot)."""
        with self._lock:
            self._refusals = count

    # ------------------------------------------------------------------ what tests do
    @property
    def connections(self) -> list[int]:
        with self._lock:
            return sorted(n for n, c in self._open.items() if not c.closing)

    def deliver(self, kind: str, payload: dict[str, Any], *, lose_first_ack: bool = False) -> str:
        """Send an envelope (``slash_commands``, ``interactive``); its ``envelope_id``.
        ``lose_first_ack``: the bot's first ack is lost, so the envelope comes again."""
        envelope = _Envelope(envelope_id=secrets.token_hex(12), kind=kind, payload=payload,
                             lose_acks=1 if lose_first_ack else 0)
        with self._lock:
            self._envelopes[envelope.envelope_id] = envelope
        self._call(self._send, envelope)
        return envelope.envelope_id

    def acked(self, envelope_id: str) -> bool:
        with self._lock:
            return self._envelopes[envelope_id].acked

    def warn(self, connection: int | None = None) -> int:
        """``disconnect`` (``warning``) on a connection, closed :attr:`grace` seconds later."""
        return int(self._call(self._disconnect, connection, "warning"))

    def refresh(self, connection: int | None = None) -> int:
        return int(self._call(self._disconnect, connection, "refresh_requested"))

    def drop(self, connection: int | None = None) -> int:
        """Cut a connection's TCP stream: no close frame, no reason."""
        return int(self._call(self._drop, connection))

    def wait_connections(self, count: int, timeout: float = 20.0) -> list[int]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if len(self.connections) >= count:
                return self.connections
            time.sleep(0.02)
        raise AssertionError(f"{count} Socket Mode connection(s) not open within {timeout}s: {self.connections}")

    def wait_acked(self, envelope_id: str, timeout: float = 20.0) -> Ack:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                found = [a for a in self.acks if a.envelope_id == envelope_id]
            if found:
                return found[0]
            time.sleep(0.02)
        raise AssertionError(f"envelope {envelope_id} not acknowledged within {timeout}s")

    # ------------------------------------------------------------------ the loop's side
    async def _handle(self, request: web.Request) -> web.StreamResponse:
        ticket = request.query.get("ticket", "")
        with self._lock:
            known = ticket in self._tickets
            self._tickets.discard(ticket)
        if not known:  # a URL is good for one connection
            return web.Response(status=401, text="invalid ticket")
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        connection = _Connection(number=next(self._numbers), ws=ws, transport=request.transport)
        with self._lock:
            self._open[connection.number] = connection
            self.hellos += 1
            self.open_at_hello.append(set(self._open))
            count = len(self._open)
        await ws.send_str(json.dumps({"type": "hello", "num_connections": count,
                                      "debug_info": {"host": "fake-socket-mode", "approximate_connection_time": 3600},
                                      "connection_info": {"app_id": "A0APP"}}))
        try:
            async for message in ws:
                if message.type is WSMsgType.TEXT:
                    self._on_text(connection, message.data)
                elif message.type is WSMsgType.ERROR:
                    break
        finally:
            with self._lock:
                self._open.pop(connection.number, None)
        return ws

    def _on_text(self, connection: _Connection, data: str) -> None:
        try:
            answer = json.loads(data)
        except ValueError:
            return
        envelope_id = str(answer.get("envelope_id") or "")
        now = time.monotonic()
        with self._lock:
            envelope = self._envelopes.get(envelope_id)
            if envelope is None:
                return
            lost = envelope.lose_acks > 0
            envelope.lose_acks -= lost
            envelope.acked = envelope.acked or not lost
            self.acks.append(Ack(envelope_id=envelope_id, attempt=envelope.attempt, connection=connection.number,
                                 latency=now - envelope.sent_at, payload=answer.get("payload") or {}, lost=lost))

    def _pick(self) -> _Connection | None:
        with self._lock:
            ready = [c for n, c in sorted(self._open.items()) if not c.closing and not c.ws.closed]
        return ready[next(self._turn) % len(ready)] if ready else None

    async def _send(self, envelope: _Envelope) -> None:
        connection = self._pick()
        if connection is None:  # nobody connected: Slack keeps it and tries again
            self._loop.call_later(0.2, lambda: asyncio.ensure_future(self._send(envelope)))
            return
        body = {"envelope_id": envelope.envelope_id, "type": envelope.kind, "payload": envelope.payload,
                "accepts_response_payload": envelope.kind != "events_api", "retry_attempt": envelope.attempt,
                "retry_reason": "timeout" if envelope.attempt else ""}
        with self._lock:
            envelope.sent_at = time.monotonic()
            self.sends.append(Send(envelope.envelope_id, envelope.attempt, connection.number, envelope.sent_at))
            attempt = envelope.attempt
        with contextlib.suppress(ConnectionError, RuntimeError):  # died under it: the retry sends it elsewhere
            await connection.ws.send_str(json.dumps(body))
        self._loop.call_later(self.ack_timeout, lambda: asyncio.ensure_future(self._retry(envelope, attempt)))

    async def _retry(self, envelope: _Envelope, attempt: int) -> None:
        with self._lock:
            if envelope.acked or envelope.attempt != attempt or envelope.attempt >= MAX_RETRIES:
                return
            envelope.attempt += 1
        await self._send(envelope)

    def _choose(self, number: int | None) -> _Connection:
        with self._lock:
            if number is not None:
                return self._open[number]
            return next(c for _, c in sorted(self._open.items()) if not c.closing)

    async def _disconnect(self, number: int | None, reason: str) -> int:
        connection = self._choose(number)
        connection.closing = True
        await connection.ws.send_str(json.dumps({"type": "disconnect", "reason": reason,
                                                 "debug_info": {"host": "fake-socket-mode"}}))

        async def close_later() -> None:
            await asyncio.sleep(self.grace)
            await connection.ws.close()

        self._tasks.add(task := asyncio.ensure_future(close_later()))
        task.add_done_callback(self._tasks.discard)
        return connection.number

    async def _drop(self, number: int | None) -> int:
        connection = self._choose(number)
        connection.closing = True
        connection.transport.abort()
        return connection.number

    async def _close_all(self) -> None:
        with self._lock:
            open_now = list(self._open.values())
        for connection in open_now:
            await connection.ws.close()


def command_payload(text: str, *, user: str = "U0ANA", channel: str = "C0OPS", response_url: str = "",
                    command: str = "/upgrade") -> dict[str, Any]:
    """A slash command's envelope payload: the fields of the HTTP form, as JSON."""
    form = urllib.parse.parse_qs(slash_command(text, user=user, channel=channel, response_url=response_url,
                                               command=command).decode())
    return {k: v[0] for k, v in form.items()}


def click_payload(action: str, value: str, *, user: str, message_ts: str, thread_ts: str,
                  response_url: str = "") -> dict[str, Any]:
    """A button click's envelope payload (``block_actions``)."""
    form = urllib.parse.parse_qs(block_action(action_id=action, value=value, user=user, message_ts=message_ts,
                                              thread_ts=thread_ts, response_url=response_url).decode())
    return dict(json.loads(form["payload"][0]))
