"""The HTTP side of ``upgradebot serve``: routes, readiness, and the waitress server.

``POST /slack/events`` is checked on the raw bytes before anything parses it: a body over
:data:`MAX_BODY` is refused 413 unread, and a request without a valid signature and a
fresh timestamp (``SLACK_SIGNING_SECRET``) is refused 401; neither is logged with its body.
Then it must be a form Slack sends (400 if not; a click's JSON ``payload`` nested deeper
than :data:`MAX_DEPTH` is refused before it is parsed), parsed once: ``take`` (the bot's
listeners, with a job queue) may queue it and have it acked here; anything it does not
take goes to Bolt's WSGI adapter. Anything raised on the way is a 500 whose body is one line
(``internal error``), logged as one line naming the exception's type and where it was raised.
``GET /healthz`` says the process answers; ``GET /readyz`` runs the readiness checks
(the run store's ping, the workers, …: callables plugged in by the wiring; Slack's ``auth.test``
and the cluster are *reported*, listed under ``reported``, never making the process unready);
``GET /metrics`` is the Prometheus exposition. :class:`HttpServer` runs the WSGI app on
waitress (a production WSGI server: a thread pool behind one asyncore loop) and stops
it gracefully: no new connections, requests in flight answered, then closed.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import logging
import re
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

import waitress
from waitress import wasyncore
from waitress.channel import HTTPChannel
from waitress.task import WSGITask

from bot.settings import SettingsError
from bot.slack.metrics import Metrics
from handlers import startup_messages as startup_msg
from runbooks.errors import scrub, shorten

log = logging.getLogger("upgradebot.web")

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
MAX_BODY = 1024 * 1024
"""The largest request body read (Slack's are a few KB); waitress refuses larger ones too."""
MAX_AGE = 300
"""Seconds a request's timestamp may be away from now (Slack's own rule: replays are refused)."""
FORM = "application/x-www-form-urlencoded"
_DICTS = ("team", "user", "channel", "container", "message", "enterprise", "state", "view")
_STRINGS = ("type", "token", "trigger_id", "response_url", "api_app_id")
Take = Callable[[dict[str, Any], Mapping[str, Any]], "bytes | None"]
"""``take(body, environ)``: offered every request shown to be Slack's and well formed, with its
body as Bolt parses it; the acknowledgement's body when it took the request (``b""``: Bolt's
empty 200; else the JSON of a message answered in the ack), None to hand it to Bolt."""
Check = Callable[[], object]
"""A readiness check: returns (anything) when the dependency is usable, raises with the reason if not."""


class Readiness:
    """Named checks, run at most every ``cache_seconds`` (probes come often, Slack is remote);
    a required check that failed is asked again at each probe until it passes.

    A check added with ``required=False`` is *reported*: its result is in the answer, but it
    never makes the process unready (a cluster outage is told to the people asking, in their
    thread; taking every replica out of rotation would only turn that answer into a Slack error)."""

    def __init__(self, checks: Mapping[str, Check], *, cache_seconds: float = 5.0,
                 secrets: Iterable[str] = (), clock: Callable[[], float] = time.monotonic,
                 reported: Iterable[str] = ()) -> None:
        """``reported``: the names among ``checks`` that are reported only (as ``required=False``)."""
        self.checks = dict(checks)
        self.reported: set[str] = set(reported)
        self.mode = "full"
        """``read-only`` when ``serve`` started without a policy file (help and inventory only)."""
        self.cache_seconds = cache_seconds
        self._secrets = tuple(secrets)
        self._clock = clock
        self._last: tuple[float, bool, dict[str, str]] | None = None
        self._lock = threading.Lock()

    def add(self, name: str, check: Check, *, required: bool = True) -> None:
        with self._lock:
            self.checks[name] = check
            if not required:
                self.reported.add(name)
            self._last = None

    def check(self) -> tuple[bool, dict[str, str]]:
        """Every check, at most every ``cache_seconds``; while the answer is not ready, the required
        checks that failed are asked again at each call: a starting replica is ready at the first
        probe after its workers beat, not up to ``cache_seconds`` later (issue 35)."""
        with self._lock:
            last = self._last
            if last is not None and self._clock() - last[0] < self.cache_seconds:
                if last[1]:
                    return True, dict(last[2])
                results = dict(last[2])
                for name in [n for n, v in results.items() if n not in self.reported and v != "ok"]:
                    results[name] = self._run(name)
                ready = self._ready(results)
                self._last = (last[0], ready, results)  # the rest are asked again when the period ends
                return ready, dict(results)
            results = {name: self._run(name) for name in self.checks}
            ready = self._ready(results)
            self._last = (self._clock(), ready, results)
            return ready, dict(results)

    def _run(self, name: str) -> str:
        try:
            self.checks[name]()
        except Exception as exc:
            return f"failed: {shorten(scrub(f'{type(exc).__name__}: {exc}', *self._secrets), 200)}"
        return "ok"

    def _ready(self, results: Mapping[str, str]) -> bool:
        return all(v == "ok" for name, v in results.items() if name not in self.reported)


class WebApp:
    """The WSGI app: Slack's endpoint (absent in Socket Mode) and the three probes.

    A request to Slack's endpoint reaches Bolt only once it is shown to be Slack's and
    well formed (:meth:`_check`); everything else gets a 4xx with no traceback, and its body
    never reaches a log."""

    def __init__(self, *, slack: WSGIApp | None, readiness: Readiness, metrics: Metrics,
                 slack_path: str = "/slack/events", signing_secret: str | None = None,
                 max_body: int = MAX_BODY, clock: Callable[[], float] = time.time, with_metrics: bool = True,
                 take: Take | None = None) -> None:
        """``with_metrics`` False: ``/metrics`` is served on a port of its own (404 here). With
        ``slack`` (the endpoint) a ``signing_secret`` is required: there is no unsigned mode."""
        self.slack, self.readiness, self.metrics, self.slack_path = slack, readiness, metrics, slack_path
        self.take = take
        self.with_metrics = with_metrics
        if slack is not None and not signing_secret:  # never an endpoint that takes unsigned requests
            raise SettingsError(startup_msg.ERROR_SIGNING_SECRET_REQUIRED)
        self.secret = (signing_secret or "").encode()
        self.max_body, self.clock = max_body, clock
        self._warned_at = -WARN_EVERY

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path, method = environ.get("PATH_INFO", ""), environ.get("REQUEST_METHOD", "GET")
        try:
            answer = self._answer(path, method, environ, start_response)
        except Exception as exc:  # never waitress's page, never a traceback: one line each side
            log.error("the %s %s request failed: %s (raised in %s); nothing else is said", method, path[:80],
                      type(exc).__name__, _raised_in(exc))
            start_response("500 Internal Server Error", [("Content-Type", "text/plain; charset=utf-8"),
                                                         ("Content-Length", str(len(INTERNAL_ERROR)))], sys.exc_info())
            answer = [INTERNAL_ERROR]
        return [] if method == "HEAD" else answer  # HEAD: the headers only, as HTTP says

    def _answer(self, path: str, method: str, environ: dict[str, Any],
                start_response: Callable[..., Any]) -> Iterable[bytes]:
        if path == self.slack_path and self.slack is not None:
            if method != "POST":
                return _answer(start_response, "405 Method Not Allowed", b"method not allowed\n")
            now = time.perf_counter()
            started = environ.get(ARRIVED) or now
            if now - started > QUEUED_WARN and now - self._warned_at > WARN_EVERY:
                self._warned_at = now
                log.warning("a Slack request waited %.1f s for a free HTTP thread (UPGRADEBOT_HTTP_THREADS, or "
                            "more replicas; upgradebot_slack_request_seconds counts the wait)", now - started)
            try:
                refusal, parsed = self._check(environ)
                if refusal is not None:
                    return _answer(start_response, refusal, refusal.split(" ", 1)[1].lower().encode() + b"\n")
                taken = self.take(parsed, environ) if self.take is not None else None
                if taken is not None:  # the ack Bolt's ack() gives: empty, or a message answered in it
                    return _answer(start_response, "200 OK", taken, "application/json") if taken else \
                        _answer(start_response, "200 OK", b"")
                return self.slack(environ, start_response)
            finally:
                self.metrics.slack_request_seconds.observe(time.perf_counter() - started)
        if method not in ("GET", "HEAD"):
            return _answer(start_response, "405 Method Not Allowed", b"method not allowed\n")
        if path == "/healthz":
            return _answer(start_response, "200 OK", b"ok\n")
        if path == "/readyz":
            ready, results = self.readiness.check()
            body = json.dumps({"ready": ready, "checks": results, "mode": self.readiness.mode,
                               "reported": sorted(self.readiness.reported)},
                              sort_keys=True).encode() + b"\n"
            return _answer(start_response, "200 OK" if ready else "503 Service Unavailable", body, "application/json")
        if path == "/metrics" and self.with_metrics:
            body, content_type = self.metrics.exposition()
            return _answer(start_response, "200 OK", body, content_type)
        return _answer(start_response, "404 Not Found", b"not found\n")

    def _check(self, environ: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
        """``(None, body)`` when the request may go on (its raw body re-wrapped for Bolt; ``body``
        as Bolt parses it: a command's fields, a click's payload); else ``(status to answer, {})``.

        In order, reading nothing a check does not need: the size (413 over ``max_body``), the
        signature on the raw bytes and the timestamp's age (401), then the shape: a form
        (Slack's slash commands and interactions), UTF-8, each field once, and for a click a
        JSON ``payload`` whose fields have the types Slack gives them (400)."""
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            return _refuse("400 Bad Request", "a Content-Length that is not a number"), {}
        if length < 0:
            return _refuse("400 Bad Request", "a negative Content-Length"), {}
        if length > self.max_body:
            return _refuse("413 Request Entity Too Large", f"a body of {length} bytes (at most {self.max_body})"), {}
        body = environ["wsgi.input"].read(length) if length else b""
        timestamp = str(environ.get("HTTP_X_SLACK_REQUEST_TIMESTAMP", ""))
        if not self._signed(body, timestamp, str(environ.get("HTTP_X_SLACK_SIGNATURE", ""))):
            return _refuse("401 Unauthorized", "no valid Slack signature for this body and a fresh timestamp"), {}
        form = _shape(body, str(environ.get("CONTENT_TYPE", "")))
        if form.problem:
            return _refuse("400 Bad Request", form.problem), {}
        if form.rewritten is not None:  # re-encoded for Bolt's parser, and signed again as Slack would
            body = form.rewritten
            environ["HTTP_X_SLACK_SIGNATURE"] = _signature(self.secret, timestamp, body)
        environ["wsgi.input"], environ["CONTENT_LENGTH"] = io.BytesIO(body), str(len(body))
        return None, form.body

    def _signed(self, body: bytes, timestamp: str, signature: str) -> bool:
        """Slack's v0 signature of ``body`` at ``timestamp``, no more than :data:`MAX_AGE` away."""
        if not self.secret:
            return False
        if not (timestamp.isascii() and timestamp.isdigit() and len(timestamp) <= 12) or not signature.isascii():
            return False
        if abs(self.clock() - int(timestamp)) > MAX_AGE:
            return False
        return hmac.compare_digest(_signature(self.secret, timestamp, body).encode(), signature.encode())


def _signature(secret: bytes, timestamp: str, body: bytes) -> str:
    return "v0=" + hmac.new(secret, b"v0:" + timestamp.encode() + b":" + body, hashlib.sha256).hexdigest()


class _Form(NamedTuple):
    problem: str
    """Why the body is not a Slack command or click ("" when it is one)."""
    body: dict[str, Any]
    """As Bolt parses it: a command's fields, a click's payload."""
    rewritten: bytes | None = None
    """The body Bolt must be given instead of the one received (None: the one received)."""


def _refused(problem: str) -> _Form:
    return _Form(problem, {})


def _shape(body: bytes, content_type: str) -> _Form:
    """The body checked to be a Slack command or a button click, and parsed.

    Bolt decides that a form is a click when the text ``payload`` appears anywhere in it, so
    a command whose text says "payload" would be read as an empty click and dropped: such a
    command is re-encoded for Bolt with that word's ``p`` percent-encoded (the same fields)."""
    if content_type.split(";", 1)[0].strip().lower() != FORM:
        return _refused(f"a {content_type.split(';', 1)[0][:40] or 'missing'} content type (Slack sends {FORM})")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return _refused("a body that is not UTF-8")
    try:
        pairs = urllib.parse.parse_qsl(text, keep_blank_values=True, strict_parsing=bool(text), errors="strict")
    except (ValueError, UnicodeDecodeError):
        return _refused("a body that is not a form")
    fields = dict(pairs)
    if len(fields) != len(pairs):
        return _refused("a form that gives a field twice")
    if text.lstrip().startswith("{"):  # Bolt reads any body that starts so as JSON, whatever its type says
        return _refused("a JSON body (Slack sends commands and clicks as forms)")
    if "payload" not in fields:
        if "payload" in text:
            encoded = urllib.parse.urlencode(pairs).replace("payload", "%70ayload")
            return _Form("", fields, encoded.encode())
        return _Form("", fields)
    if len(fields) != 1:
        return _refused("a click with fields besides its payload")
    if too_deep(fields["payload"]):
        return _refused(f"a payload nested deeper than {MAX_DEPTH}")
    try:
        payload = json.loads(fields["payload"])
    except (ValueError, RecursionError):
        return _refused("a payload that is not JSON")
    problem = _click_problem(payload)
    return _Form(problem, payload if not problem else {})


def _click_problem(payload: object) -> str:
    """What is wrong with a click's payload, or "" (only button clicks are taken)."""
    if not isinstance(payload, dict):
        return "a payload that is not a JSON object"
    if payload.get("type") != "block_actions":
        return "a payload that is not a button click (block_actions)"
    for key in _DICTS:
        if key in payload and payload[key] is not None and not isinstance(payload[key], dict):
            return f"a payload whose {key} is not an object"
    for key in _STRINGS:
        if key in payload and payload[key] is not None and not isinstance(payload[key], str):
            return f"a payload whose {key} is not a string"
    for key in ("team", "user", "channel", "enterprise"):
        value = payload.get(key)
        if isinstance(value, dict) and not isinstance(value.get("id", ""), str):
            return f"a payload whose {key}.id is not a string"
    if not isinstance(payload.get("is_enterprise_install", False), bool):
        return "a payload whose is_enterprise_install is not a boolean"
    actions = payload.get("actions")
    if not isinstance(actions, list) or not actions:
        return "a click without actions"
    for action in actions:
        if not isinstance(action, dict) or not isinstance(action.get("action_id"), str) or not all(
                isinstance(action.get(k, ""), str) for k in ("block_id", "value", "type", "action_ts")):
            return "a click whose actions are not objects with a string action_id and string fields"
    for key, inner in (("container", "message_ts"), ("container", "channel_id"), ("message", "ts"),
                       ("message", "thread_ts")):
        value = payload.get(key)
        if isinstance(value, dict) and not isinstance(value.get(inner, ""), str | None):
            return f"a payload whose {key}.{inner} is not a string"
    return ""


MAX_DEPTH = 64
"""The deepest JSON nesting a click's payload may have (Slack's deepest, rich text in the
clicked message, is under 10): what parsing a deeper one would need is never spent."""
_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[\]{}]', re.S)
"""A JSON string (to its closing quote, or the end: linear however the quotes fall), or a bracket."""
INTERNAL_ERROR = b"internal error\n"


def too_deep(text: str, limit: int = MAX_DEPTH) -> bool:
    """Whether JSON ``text`` nests arrays and objects more than ``limit`` deep (brackets inside
    strings do not count), found in one scan before anything parses it."""
    if text.count("[") + text.count("{") <= limit:
        return False
    depth = 0
    for token in _TOKENS.finditer(text):
        mark = token.group()
        if mark in ("[", "{"):
            depth += 1
            if depth > limit:
                return True
        elif mark in ("]", "}"):
            depth -= 1
    return False


def _raised_in(exc: BaseException) -> str:
    """``module:function:line`` of the innermost frame ``exc`` went through (the log's clue)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return "?"
    code = tb.tb_frame.f_code
    return f"{tb.tb_frame.f_globals.get('__name__', '?')}:{code.co_name}:{tb.tb_lineno}"


def _refuse(status: str, why: str) -> str:
    log.warning("refused a request to the Slack endpoint (%s): %s; its body is not logged", status, why)
    return status


def _answer(start_response: Callable[..., Any], status: str, body: bytes,
            content_type: str = "text/plain; charset=utf-8") -> list[bytes]:
    start_response(status, [("Content-Type", content_type), ("Content-Length", str(len(body)))])
    return [body]


QUEUED_WARN = 1.0
"""Seconds a Slack request may wait for a thread before it is logged (at most every :data:`WARN_EVERY` s)."""
WARN_EVERY = 60.0
# waitress logs "Task queue depth is N" for every request that finds no idle thread: under a
# burst of commands, a warning per command (and the cost of writing each). The Slack endpoint
# says it at most once a minute instead, when a request waited long enough to matter.
logging.getLogger("waitress.queue").setLevel(logging.ERROR)

ARRIVED = "upgradebot.arrived"
"""The environ key of when the request's last bytes were read off the socket (``time.perf_counter``)."""


class _StampedTask(WSGITask):
    wrote_header: bool  # waitress's, set in its Task

    def get_environment(self) -> dict[str, Any]:
        environ: dict[str, Any] = super().get_environment()
        environ[ARRIVED] = getattr(self.request, "arrived", None)
        return environ

    def write(self, data: bytes) -> None:
        """waitress's ``write``, but an answer whose whole body comes at once (this app's: every
        one has its ``Content-Length``) goes out with its header in one send. waitress sends the
        header and the body each as it is written, and every send lets go of the GIL and waits
        to take it back behind the other threads: an ack carrying its message (``help``) paid
        that twice where an empty ack pays it once (issue 39)."""
        if self.complete and not self.wrote_header and data and self.has_body and self.content_length == len(data):
            header = self.build_response_header()  # with a Content-Length: never chunked
            self.wrote_header = True
            self.content_bytes_written += len(data)
            self.channel.write_soon(header + data)
            return
        super().write(data)


class _StampedChannel(HTTPChannel):
    """waitress's channel, noting when each request was read off the socket: the ack's time
    then counts the wait for a free thread too, which is what Slack's 3 s see."""

    task_class = _StampedTask

    def received(self, data: bytes) -> bool:
        now = time.perf_counter()
        result: bool = super().received(data)
        with self.requests_lock:
            for request in self.requests:
                if getattr(request, "arrived", None) is None:
                    request.arrived = now
        return result


class HttpServer:
    """A WSGI app on waitress, in a background thread; ``url`` once constructed. Each request
    carries when it was read off the socket (``environ[ARRIVED]``)."""

    def __init__(self, app: WSGIApp, *, host: str = "127.0.0.1", port: int = 0, threads: int = 16) -> None:
        self._server: Any = waitress.create_server(
            app, host=host, port=port, threads=threads, ident="upgradebot", channel_timeout=60,
            max_request_body_size=MAX_BODY,
        )
        self._server.channel_class = _StampedChannel
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
