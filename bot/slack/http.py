"""The HTTP side of ``upgradebot serve``: routes, readiness, and the waitress server.

``POST /slack/events`` goes to Bolt's WSGI adapter (commands, interactivity, events), but
only once it has been checked on the raw bytes, before anything parses it: a body over
:data:`MAX_BODY` is refused 413 unread, and a request without a valid signature and a
fresh timestamp (``SLACK_SIGNING_SECRET``) is refused 401; neither is logged with its body.
``GET /healthz`` says the process answers; ``GET /readyz`` runs the readiness checks
(Slack ``auth.test``, the run store's ping, …: callables plugged in by the wiring);
``GET /metrics`` is the Prometheus exposition. :class:`HttpServer` runs the WSGI app on
waitress (a production WSGI server: a thread pool behind one asyncore loop) and stops
it gracefully: no new connections, requests in flight answered, then closed.
"""

from __future__ import annotations

import io
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import waitress
from slack_sdk.signature import SignatureVerifier
from waitress import wasyncore

from bot.slack.metrics import Metrics
from runbooks.errors import scrub, shorten

log = logging.getLogger("upgradebot.web")

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
MAX_BODY = 1024 * 1024
"""The largest request body read (Slack's are a few KB); waitress refuses larger ones too."""
Check = Callable[[], object]
"""A readiness check: returns (anything) when the dependency is usable, raises with the reason if not."""


class Readiness:
    """Named checks, run at most every ``cache_seconds`` (probes come often, Slack is remote)."""

    def __init__(self, checks: Mapping[str, Check], *, cache_seconds: float = 5.0,
                 secrets: Iterable[str] = (), clock: Callable[[], float] = time.monotonic) -> None:
        self.checks = dict(checks)
        self.mode = "full"
        """``read-only`` when ``serve`` started without a policy file (help and inventory only)."""
        self.cache_seconds = cache_seconds
        self._secrets = tuple(secrets)
        self._clock = clock
        self._last: tuple[float, bool, dict[str, str]] | None = None
        self._lock = threading.Lock()

    def add(self, name: str, check: Check) -> None:
        with self._lock:
            self.checks[name] = check
            self._last = None

    def check(self) -> tuple[bool, dict[str, str]]:
        with self._lock:
            if self._last is not None and self._clock() - self._last[0] < self.cache_seconds:
                return self._last[1], dict(self._last[2])
            results: dict[str, str] = {}
            for name, check in self.checks.items():
                try:
                    check()
                    results[name] = "ok"
                except Exception as exc:
                    reason = shorten(scrub(f"{type(exc).__name__}: {exc}", *self._secrets), 200)
                    results[name] = f"failed: {reason}"
            ready = all(v == "ok" for v in results.values())
            self._last = (self._clock(), ready, results)
            return ready, dict(results)


class WebApp:
    """The WSGI app: Slack's endpoint (absent in Socket Mode) and the three probes."""

    def __init__(self, *, slack: WSGIApp | None, readiness: Readiness, metrics: Metrics,
                 slack_path: str = "/slack/events", signing_secret: str | None = None,
                 max_body: int = MAX_BODY) -> None:
        self.slack, self.readiness, self.metrics, self.slack_path = slack, readiness, metrics, slack_path
        self.verifier = SignatureVerifier(signing_secret) if signing_secret else None
        self.max_body = max_body

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path, method = environ.get("PATH_INFO", ""), environ.get("REQUEST_METHOD", "GET")
        if path == self.slack_path and self.slack is not None:
            started = time.perf_counter()
            try:
                refusal = self._check(environ)
                if refusal is not None:
                    return _answer(start_response, refusal, refusal.split(" ", 1)[1].lower().encode() + b"\n")
                return self.slack(environ, start_response)
            finally:
                self.metrics.slack_request_seconds.observe(time.perf_counter() - started)
        if method not in ("GET", "HEAD"):
            return _answer(start_response, "405 Method Not Allowed", b"method not allowed\n")
        if path == "/healthz":
            return _answer(start_response, "200 OK", b"ok\n")
        if path == "/readyz":
            ready, results = self.readiness.check()
            body = json.dumps({"ready": ready, "checks": results, "mode": self.readiness.mode},
                              sort_keys=True).encode() + b"\n"
            return _answer(start_response, "200 OK" if ready else "503 Service Unavailable", body, "application/json")
        if path == "/metrics":
            body, content_type = self.metrics.exposition()
            return _answer(start_response, "200 OK", body, content_type)
        return _answer(start_response, "404 Not Found", b"not found\n")

    def _check(self, environ: dict[str, Any]) -> str | None:
        """None when the request may go on (its body re-wrapped for Bolt); else the HTTP status to answer."""
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            return _refuse("400 Bad Request", "a Content-Length that is not a number")
        if length < 0:
            return _refuse("400 Bad Request", "a negative Content-Length")
        if length > self.max_body:
            return _refuse("413 Request Entity Too Large", f"a body of {length} bytes (at most {self.max_body})")
        body = environ["wsgi.input"].read(length) if length else b""
        if self.verifier is not None:
            timestamp = environ.get("HTTP_X_SLACK_REQUEST_TIMESTAMP", "")
            signature = environ.get("HTTP_X_SLACK_SIGNATURE", "")
            if not (timestamp.isascii() and timestamp.isdigit()) or not signature:
                return _refuse("401 Unauthorized", "no valid Slack timestamp and signature headers")
            if not self.verifier.is_valid(body, timestamp, signature):
                return _refuse("401 Unauthorized", "a signature that does not match, or a stale timestamp")
        environ["wsgi.input"], environ["CONTENT_LENGTH"] = io.BytesIO(body), str(len(body))
        return None


def _refuse(status: str, why: str) -> str:
    log.warning("refused a request to the Slack endpoint (%s): %s; its body is not logged", status, why)
    return status


def _answer(start_response: Callable[..., Any], status: str, body: bytes,
            content_type: str = "text/plain; charset=utf-8") -> list[bytes]:
    start_response(status, [("Content-Type", content_type), ("Content-Length", str(len(body)))])
    return [body]


class HttpServer:
    """A WSGI app on waitress, in a background thread; ``url`` once constructed."""

    def __init__(self, app: WSGIApp, *, host: str = "127.0.0.1", port: int = 0, threads: int = 16) -> None:
        self._server: Any = waitress.create_server(
            app, host=host, port=port, threads=threads, ident="upgradebot", channel_timeout=60,
            max_request_body_size=MAX_BODY,
        )
        shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
        self.port: int = int(self._server.effective_port)
        self.url = f"http://{shown}:{self.port}"
        self._thread: threading.Thread | None = None
        self._accepting = True

    def start(self) -> HttpServer:
        self._thread = threading.Thread(target=self._server.run, name="upgradebot-http", daemon=True)
        self._thread.start()
        return self

    def _on_loop(self, thunk: Callable[[], None]) -> None:
        """Run ``thunk`` on the server's loop thread; directly when the loop cannot be woken.

        At shutdown waitress's trigger pipe may already be closed (seen as ``EBADF`` from
        ``pull_trigger``); the loop then no longer runs the thunk, so closing here is safe.
        """
        try:
            self._server.trigger.pull_trigger(thunk)
        except OSError:
            thunk()

    def stop_accepting(self) -> None:
        """Close the listening socket (from the server's own loop); connections stay."""
        if not self._accepting:
            return
        self._accepting = False
        self._on_loop(lambda: wasyncore.dispatcher.close(self._server))

    def stop(self, timeout: float = 10.0) -> None:
        """Stop accepting, let requests in flight finish and their answers go out, close."""
        self.stop_accepting()
        self._server.task_dispatcher.shutdown(cancel_pending=False, timeout=timeout)
        deadline = time.monotonic() + min(timeout, 2.0)
        while time.monotonic() < deadline and any(
            getattr(ch, "total_outbufs_len", 0) for ch in list(self._server._map.values())
        ):
            time.sleep(0.01)

        def close_all() -> None:
            for channel in list(self._server._map.values()):
                if channel is not self._server.trigger:
                    channel.close()
            self._server.trigger.close()

        self._on_loop(close_all)
        if self._thread is not None:
            self._thread.join(timeout)
