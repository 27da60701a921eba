"""A fake Slack for tests: the Web API over real HTTP, and requests signed as Slack signs them.

:class:`FakeSlack` listens on 127.0.0.1:0 and records every call (method, parsed body,
headers, time). It answers like Slack: ``auth.test`` (checking the bearer token),
``chat.postMessage`` (with ``channel`` and a fresh ``ts``), ``chat.update``,
``chat.postEphemeral``, ``usergroups.users.list``, ``conversations.info``,
``apps.connections.open`` (Socket Mode, with :mod:`tests.fakesocket`), the three calls
of ``files.uploadV2`` (``files.getUploadURLExternal``, the upload URL it hands out, and
``files.completeUploadExternal``, which checks the bytes arrived and records the file in
:attr:`FakeSlack.files`), and the ``response_url`` paths it hands out
(:meth:`FakeSlack.response_url`). It speaks HTTP/1.1, counting the connections it accepts,
over TLS with ``tls=True``, and can close the ones clients keep (:meth:`FakeSlack.hang_up`).
It can be told to
answer one call with 429 and ``Retry-After`` (:meth:`FakeSlack.rate_limit_once`), to
refuse posting in some channels (``not_in_channel``), or to fail ``auth.test``. Like Slack it
refuses a message whose blocks break Block Kit (``invalid_blocks``, checked with
``slack_sdk.models.blocks``), and a test that made the bot send one fails when it ends.

:func:`sign` computes ``X-Slack-Signature`` exactly as Slack does: ``v0=`` + hex
HMAC-SHA256 of ``v0:{timestamp}:{body}`` with the signing secret.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import http.client
import itertools
import json
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from slack_sdk.errors import SlackObjectFormationError
from slack_sdk.models.blocks import Block

BOT_TOKEN = "xoxb-test-0000000000-fake-token-value"
SIGNING_SECRET = "0123456789abcdef-test-signing-secret"


@dataclass(frozen=True)
class Call:
    method: str
    """Web API method (``chat.postMessage``) or ``response_url``."""
    path: str
    body: dict[str, Any]
    headers: dict[str, str]
    at: float
    answer: dict[str, Any] = field(default_factory=dict)
    """What the fake answered (``ts`` of a posted message...)."""


@dataclass
class FakeSlack:
    token: str = BOT_TOKEN
    usergroups: dict[str, list[str]] = field(default_factory=dict)
    not_in_channels: set[str] = field(default_factory=set)
    auth_ok: bool = True
    calls: list[Call] = field(default_factory=list)
    files: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Uploaded files by id: ``filename``, ``length``, ``data`` (bytes), ``title``, ``channel``, ``thread_ts``."""
    socket_mode: Any = None
    """A :class:`tests.fakesocket.FakeSocketMode` that ``apps.connections.open`` hands out URLs of."""
    refused: list[tuple[str, list[str]]] = field(default_factory=list)
    """Messages Slack would refuse (``invalid_blocks``): the method and what is wrong. Leaving the
    ``with`` block fails the test while any is here (:meth:`__exit__`)."""
    tls: bool = False
    """Serve HTTPS, as Slack does, with a certificate for 127.0.0.1 that :meth:`client_ssl` trusts."""
    connections: int = 0
    """Connections accepted so far (HTTP/1.1: a client may send many calls over one)."""

    def __post_init__(self) -> None:
        self._lock = threading.Condition()
        self._ts = itertools.count(1)
        self._rate_limits: dict[str, int] = {}
        self._failures: dict[str, str] = {}
        self._open: set[socket.socket] = set()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        if self.tls:
            from kubesim.certs import serving_cert

            self._server.socket = serving_cert().ssl_context().wrap_socket(self._server.socket, server_side=True)
        self.url = f"{'https' if self.tls else 'http'}://127.0.0.1:{self._server.server_address[1]}"
        self.api_url = self.url + "/api/"
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), name="fakeslack", daemon=True)

    # -------------------------------------------------------------- lifecycle
    def __enter__(self) -> FakeSlack:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        if exc[0] is None and self.refused:
            raise AssertionError(f"Slack would have refused {len(self.refused)} message(s) the bot sent: "
                                 f"{self.refused[:3]}")

    # --------------------------------------------------------------- controls
    def fail_once(self, method: str, error: str = "internal_error") -> None:
        """The next call of ``method`` is answered ``{"ok": false, "error": error}``."""
        with self._lock:
            self._failures[method] = error

    def rate_limit_once(self, method: str, retry_after: int = 0) -> None:
        """The next call of ``method`` is answered 429 with ``Retry-After``."""
        with self._lock:
            self._rate_limits[method] = retry_after

    def hang_up(self) -> int:
        """Close every connection a client keeps open, as Slack's servers do to idle ones; how many."""
        with self._lock:
            kept = list(self._open)
        for sock in kept:
            with contextlib.suppress(OSError):  # closed meanwhile
                sock.shutdown(socket.SHUT_RDWR)
        return len(kept)

    def client_ssl(self) -> ssl.SSLContext:
        """A client's context that trusts this fake's certificate (with ``tls``)."""
        from kubesim.certs import serving_cert

        return ssl.create_default_context(cadata=serving_cert().ca_pem.decode())

    def response_url(self, name: str = "r") -> str:
        return f"{self.url}/response/{name}"

    # ---------------------------------------------------------------- queries
    def of(self, method: str) -> list[Call]:
        with self._lock:
            return [c for c in self.calls if c.method == method]

    def wait_for(self, method: str, count: int = 1, timeout: float = 20.0) -> list[Call]:
        """The calls of ``method`` once there are at least ``count``; AssertionError on timeout."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while len([c for c in self.calls if c.method == method]) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    seen = [c.method for c in self.calls]
                    raise AssertionError(f"{count} {method} call(s) expected within {timeout}s; got {seen}")
                self._lock.wait(left)
            return [c for c in self.calls if c.method == method]

    def clear(self) -> None:
        with self._lock:
            self.calls.clear()

    # ---------------------------------------------------------------- answers
    def _record(self, call: Call) -> None:
        with self._lock:
            self.calls.append(call)
            self._lock.notify_all()

    def _limited(self, method: str) -> int | None:
        with self._lock:
            return self._rate_limits.pop(method, None)

    def answer(self, method: str, body: Mapping[str, Any], headers: Mapping[str, str]) -> dict[str, Any]:
        if method == "apps.connections.open":  # Socket Mode: the app-level token, not the bot's
            if self.socket_mode is None:
                return {"ok": False, "error": "not_allowed_token_type"}
            auth = headers.get("authorization", "")
            return dict(self.socket_mode.open_url(auth.removeprefix("Bearer ")))
        if headers.get("authorization") != f"Bearer {self.token}":
            return {"ok": False, "error": "not_authed" if "authorization" not in headers else "invalid_auth"}
        channel = str(body.get("channel", ""))
        with self._lock:
            failure = self._failures.pop(method, None)
        if failure is not None:
            return {"ok": False, "error": failure}
        if method == "auth.test":
            if not self.auth_ok:
                return {"ok": False, "error": "account_inactive"}
            return {"ok": True, "url": self.url + "/", "team": "Test", "user": "upgradebot",
                    "team_id": "T0TEST", "user_id": "U0BOT", "bot_id": "B0BOT"}
        if method in ("chat.postMessage", "chat.postEphemeral", "chat.update"):
            wrong = message_problems(body)
            if wrong:
                with self._lock:
                    self.refused.append((method, wrong))
                return {"ok": False, "error": "invalid_blocks", "errors": wrong}
        if method in ("chat.postMessage", "chat.postEphemeral") and channel in self.not_in_channels:
            return {"ok": False, "error": "not_in_channel"}
        if method == "chat.postMessage":
            ts = f"{1700000000 + next(self._ts)}.000100"
            return {"ok": True, "channel": channel, "ts": ts, "message": {"text": body.get("text"), "ts": ts}}
        if method == "chat.update":
            return {"ok": True, "channel": channel, "ts": body.get("ts"), "text": body.get("text")}
        if method == "chat.postEphemeral":
            return {"ok": True, "message_ts": f"{1700000000 + next(self._ts)}.000200"}
        if method == "usergroups.users.list":
            group = str(body.get("usergroup", ""))
            if group not in self.usergroups:
                return {"ok": False, "error": "no_such_subteam"}
            return {"ok": True, "users": self.usergroups[group]}
        if method == "files.getUploadURLExternal":
            if not body.get("filename") or not str(body.get("length", "")).isdigit():
                return {"ok": False, "error": "invalid_arguments"}
            file_id = f"F0{next(self._ts):08d}"
            with self._lock:
                self.files[file_id] = {"filename": body["filename"], "length": int(body["length"]), "data": None}
            return {"ok": True, "upload_url": f"{self.url}/upload/{file_id}", "file_id": file_id}
        if method == "files.completeUploadExternal":
            wanted = json.loads(body.get("files") or "[]")
            with self._lock:
                for entry in wanted:
                    known = self.files.get(entry.get("id", ""))
                    if known is None or known["data"] is None or len(known["data"]) != known["length"]:
                        return {"ok": False, "error": "file_not_found" if known is None else "file_upload_incomplete"}
                    known.update(title=entry.get("title"), channel=body.get("channel_id"), thread_ts=body.get("thread_ts"))
            return {"ok": True, "files": [{"id": e["id"], "title": e.get("title")} for e in wanted]}
        if method == "conversations.info":
            return {"ok": True, "channel": {"id": channel, "name": channel.lower(), "is_member": channel not in self.not_in_channels}}
        return {"ok": False, "error": "unknown_method"}


MAX_BLOCKS = 50
MAX_TEXT = 40_000


def message_problems(body: Mapping[str, Any]) -> list[str]:
    """What Slack would refuse in a message: more than 50 blocks, a block ``slack_sdk`` does not
    know or that breaks Block Kit's limits (``validate_json``: 3,000 characters a section, 150 a
    header, 75 a button's text, 10 fields...), a ``text`` over 40,000 characters."""
    out: list[str] = []
    text = body.get("text")
    if isinstance(text, str) and len(text) > MAX_TEXT:
        out.append(f"text of {len(text)} characters (at most {MAX_TEXT})")
    blocks = body.get("blocks")
    if blocks is None:
        return out
    if not isinstance(blocks, list):
        return [*out, "blocks is not a list"]
    if len(blocks) > MAX_BLOCKS:
        out.append(f"{len(blocks)} blocks (at most {MAX_BLOCKS})")
    for index, block in enumerate(blocks):
        try:
            parsed = Block.parse(block)
            if parsed is None:
                out.append(f"block {index}: not a block ({str(block)[:80]})")
                continue
            parsed.validate_json()
        except (SlackObjectFormationError, KeyError, TypeError, ValueError) as exc:
            out.append(f"block {index} ({block.get('type') if isinstance(block, dict) else '?'}): {exc}")
    return out


def _handler(fake: FakeSlack) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # as Slack's servers: an answer's body is not held back behind its headers

        def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
            pass

        def setup(self) -> None:
            super().setup()
            with fake._lock:
                fake.connections += 1
                fake._open.add(self.connection)

        def finish(self) -> None:
            with fake._lock:
                fake._open.discard(self.connection)
            super().finish()

        def _body(self) -> dict[str, Any]:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
            parsed = urllib.parse.urlsplit(self.path)
            body: dict[str, Any] = dict(urllib.parse.parse_qsl(parsed.query))
            if "json" in (self.headers.get("Content-Type") or ""):
                body.update(json.loads(raw or "{}"))
            elif raw:
                body.update(urllib.parse.parse_qsl(raw))
            for key in ("blocks", "attachments"):  # form-encoded JSON fields
                if isinstance(body.get(key), str):
                    body[key] = json.loads(body[key])
            return body

        def _send(self, status: int, payload: bytes, content_type: str, extra: Mapping[str, str] = {}) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
            for k, v in extra.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(payload)

        def _serve(self) -> None:
            path = urllib.parse.urlsplit(self.path).path
            headers = {k.lower(): v for k, v in self.headers.items()}
            if path.startswith("/upload/"):  # files.uploadV2's second step: the bytes, no token
                data = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                file_id = path.removeprefix("/upload/")
                with fake._lock:
                    known = fake.files.get(file_id)
                    if known is not None:
                        known["data"] = data
                fake._record(Call("upload", path, {"file_id": file_id, "length": len(data)}, headers, time.monotonic()))
                self._send(200 if known is not None else 404, f"OK - {len(data)}".encode(), "text/plain")
                return
            body = self._body()
            if path.startswith("/response/"):
                fake._record(Call("response_url", path, body, headers, time.monotonic()))
                wrong = message_problems(body)
                if wrong:
                    with fake._lock:
                        fake.refused.append(("response_url", wrong))
                    self._send(400, b"invalid_blocks", "text/plain")
                    return
                self._send(200, b"ok", "text/plain")
                return
            method = path.removeprefix("/api/")
            retry_after = fake._limited(method)
            if retry_after is not None:
                limited = {"ok": False, "error": "ratelimited"}
                fake._record(Call(method, path, body, headers, time.monotonic(), limited))
                self._send(429, json.dumps(limited).encode(), "application/json", {"Retry-After": str(retry_after)})
                return
            answer = fake.answer(method, body, headers)
            fake._record(Call(method, path, body, headers, time.monotonic(), answer))
            self._send(200, json.dumps(answer).encode(), "application/json; charset=utf-8")

        do_GET = _serve
        do_POST = _serve

    return Handler


# ------------------------------------------------------------------- signed requests
def sign(body: bytes, *, secret: str = SIGNING_SECRET, timestamp: int | None = None) -> dict[str, str]:
    """The two headers Slack adds: ``X-Slack-Request-Timestamp`` and ``X-Slack-Signature``."""
    ts = str(int(time.time()) if timestamp is None else timestamp)
    digest = hmac.new(secret.encode(), b"v0:" + ts.encode() + b":" + body, hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": f"v0={digest}"}


_trigger = itertools.count(1)


def slash_command(text: str, *, user: str = "U0ANA", channel: str = "C0OPS", command: str = "/upgrade",
                  response_url: str = "", trigger_id: str | None = None) -> bytes:
    """A form-encoded slash command body as Slack sends it."""
    fields = {
        "token": "deprecated-verification-token", "team_id": "T0TEST", "team_domain": "test",
        "channel_id": channel, "channel_name": channel.lower(), "user_id": user, "user_name": user.lower(),
        "command": command, "text": text, "api_app_id": "A0APP", "is_enterprise_install": "false",
        "response_url": response_url, "trigger_id": trigger_id or f"{next(_trigger)}.1.{time.time_ns()}",
    }
    return urllib.parse.urlencode(fields).encode()


def block_action(*, action_id: str, value: str, user: str, channel: str = "C0OPS", message_ts: str = "1.000100",
                 thread_ts: str | None = None, response_url: str = "") -> bytes:
    """A ``payload=`` interactivity body for a click on a button of a message."""
    message: dict[str, Any] = {"type": "message", "ts": message_ts, "text": "gate", "blocks": []}
    if thread_ts:
        message["thread_ts"] = thread_ts
    payload = {
        "type": "block_actions", "team": {"id": "T0TEST", "domain": "test"},
        "user": {"id": user, "username": user.lower(), "team_id": "T0TEST"}, "api_app_id": "A0APP",
        "token": "deprecated-verification-token", "trigger_id": f"{next(_trigger)}.2.{time.time_ns()}",
        "container": {"type": "message", "message_ts": message_ts, "channel_id": channel, "is_ephemeral": False},
        "channel": {"id": channel, "name": channel.lower()}, "message": message, "response_url": response_url,
        "actions": [{"type": "button", "action_id": action_id, "block_id": "gate", "value": value,
                     "text": {"type": "plain_text", "text": action_id}, "action_ts": f"{time.time():.6f}"}],
    }
    return urllib.parse.urlencode({"payload": json.dumps(payload)}).encode()


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    seconds: float

    @property
    def message(self) -> dict[str, Any]:
        """The message answered in the acknowledgement itself (``help``: Slack shows it as the
        ``response_url``'s); AssertionError when the ack was empty or not a JSON object."""
        assert self.body, "the ack was empty: the answer was not in it"
        message = json.loads(self.body)
        assert isinstance(message, dict), f"the ack is not a message: {self.body[:200]!r}"
        problems = message_problems(message)
        assert not problems, f"Slack would refuse the ack's message: {problems}"
        return message


def post(url: str, body: bytes, *, headers: Mapping[str, str] | None = None,
         content_type: str = "application/x-www-form-urlencoded", signed: bool = True,
         secret: str = SIGNING_SECRET, on_sent: Callable[[], None] | None = None) -> Answer:
    """POST ``body`` to ``url`` (signed unless told otherwise); status, body and seconds taken."""
    parts = urllib.parse.urlsplit(url)
    all_headers = {"Content-Type": content_type, **(sign(body, secret=secret) if signed else {}), **(headers or {})}
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=30)
    try:
        start = time.perf_counter()
        conn.request("POST", parts.path or "/", body=body, headers=all_headers)
        if on_sent:
            on_sent()
        response = conn.getresponse()
        data = response.read()
        return Answer(response.status, data, time.perf_counter() - start)
    finally:
        conn.close()


def get(url: str) -> Answer:
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=30)
    try:
        start = time.perf_counter()
        conn.request("GET", parts.path)
        response = conn.getresponse()
        return Answer(response.status, response.read(), time.perf_counter() - start)
    finally:
        conn.close()
