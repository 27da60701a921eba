"""The Slack Web API over kept-alive connections.

slack_sdk's ``WebClient`` opens a connection for every call (``urlopen`` builds an opener,
connects, for Slack with a TLS handshake, sends, reads and closes), and an inventory's
answer is several ``chat.postMessage`` calls (its message, then its thread): at 5,000
nodes and 200 commands at once, connecting was the largest part of the commands worker's
CPU. :class:`KeptAliveWebClient` sends each call over an HTTP/1.1 connection its thread
keeps to that host, and answers exactly as ``urlopen`` would have: a status outside 2xx
raises ``HTTPError`` (so slack_sdk's retry handlers see a 429 and its ``Retry-After`` as
before), a failure to connect or send raises ``URLError`` (retried once as before, by
``ConnectionErrorRetryHandler``), a connection lost while reading raises as
``http.client`` does.

A kept connection is used again only while it is sound: not after the server closed it
(a readable socket before a request is the server's goodbye, as urllib3 checks), not after
an answer that closes it, not after any error, not once it has been idle for
:data:`IDLE_REUSE` seconds (Slack's servers close idle connections; one closed in the
instant of a request is then never the usual case), and never in another process than the
one that opened it. With a proxy the client does what slack_sdk does.
"""

from __future__ import annotations

import http.client
import io
import json
import logging
import os
import select
import threading
import time
from typing import Any
from urllib.error import HTTPError, URLError
from urllib.parse import urlsplit
from urllib.request import Request

from slack_sdk import WebClient
from slack_sdk.errors import SlackRequestError

IDLE_REUSE = 30.0
"""Seconds a connection may have been idle and still be used; an older one is closed and replaced."""

_Key = tuple[str, str, int]


class _Kept:
    __slots__ = ("connection", "pid", "used")

    def __init__(self, connection: http.client.HTTPConnection) -> None:
        self.connection, self.pid, self.used = connection, os.getpid(), time.monotonic()


class KeptAliveWebClient(WebClient):
    """A ``WebClient`` whose calls reuse one connection per thread and host (see the module)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._local = threading.local()

    def _perform_urllib_http_request_internal(self, url: str, req: Request) -> dict[str, Any]:
        if self.proxy is not None:
            return super()._perform_urllib_http_request_internal(url, req)
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https") or not parts.hostname:
            raise SlackRequestError(f"Invalid URL detected: {url}")
        key: _Key = (scheme, parts.hostname, parts.port or (443 if scheme == "https" else 80))
        connection = self._connection(key)
        selector = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        headers = {name.title(): value for name, value in req.header_items()}  # as urllib sends them
        try:
            connection.request(req.get_method(), selector, body=req.data, headers=headers)
        except OSError as err:  # as urllib's do_open: a failure to connect or send is a URLError
            self._forget(key)
            raise URLError(err) from err
        except BaseException:  # a bad header or path: the connection is mid-request, never to be used again
            self._forget(key)
            raise
        try:
            response = connection.getresponse()
            body = response.read()
        except BaseException:
            self._forget(key)
            raise
        if response.will_close:
            self._forget(key)
        else:
            self._kept()[key].used = time.monotonic()
        if not 200 <= response.status < 300:  # as urllib's HTTPErrorProcessor (Slack's Web API never redirects)
            raise HTTPError(url, response.status, response.reason, response.msg, io.BytesIO(body))
        if response.msg.get_content_type() == "application/gzip":  # admin.analytics.getFile
            return {"status": response.status, "headers": response.msg, "body": body}
        charset = response.msg.get_content_charset() or "utf-8"
        decoded = body.decode(charset)
        if self._logger.level <= logging.DEBUG:
            self._logger.debug(f"Received the following response - status: {response.status}, "
                               f"headers: {dict(response.msg)}, body: {decoded}")
        return {"status": response.status, "headers": response.msg, "body": decoded}

    # ------------------------------------------------------------------ connections
    def _kept(self) -> dict[_Key, _Kept]:
        kept: dict[_Key, _Kept] | None = getattr(self._local, "kept", None)
        if kept is None:
            kept = self._local.kept = {}
        return kept

    def _connection(self, key: _Key) -> http.client.HTTPConnection:
        kept = self._kept()
        held = kept.get(key)
        if held is not None and (held.pid != os.getpid()  # inherited by a fork: let go, never closed (the parent's)
                                 or time.monotonic() - held.used > IDLE_REUSE or not _sound(held.connection)):
            self._forget(key)
            held = None
        if held is None:
            scheme, host, port = key
            connection: http.client.HTTPConnection
            if scheme == "https":  # without ssl=, http.client's own default context, as urlopen's
                connection = http.client.HTTPSConnection(host, port, timeout=self.timeout, context=self.ssl)
            else:
                connection = http.client.HTTPConnection(host, port, timeout=self.timeout)
            held = kept[key] = _Kept(connection)
        elif held.connection.timeout != self.timeout:  # the client's timeout changed since it connected
            held.connection.timeout = self.timeout
            if held.connection.sock is not None:
                held.connection.sock.settimeout(self.timeout)
        return held.connection

    def _forget(self, key: _Key) -> None:
        held = self._kept().pop(key, None)
        if held is not None and held.pid == os.getpid():
            held.connection.close()


def _sound(connection: http.client.HTTPConnection) -> bool:
    """Whether a kept connection can carry a request: not yet opened, or open with nothing to
    read (between answers a server sends nothing; something readable is its close)."""
    sock = connection.sock
    if sock is None:
        return True
    try:
        poller = select.poll()  # not select(): it cannot watch a descriptor past 1023
        poller.register(sock, select.POLLIN)
        return not poller.poll(0)
    except (OSError, ValueError):  # closed under us
        return False


class KeptAliveResponses:
    """Messages posted to ``response_url`` s over the connections each thread keeps to their host.

    Bolt's ``respond`` builds a ``WebhookClient`` per message and urllib opens (for Slack: a TLS
    handshake) and closes a connection for each: in read-only ``serve`` each refusal of a burst paid
    that on the thread that took the command (16-22 % of the samples, issue 63). Here the notice
    pool's threads (and the workers') post over kept connections, as :class:`KeptAliveWebClient`'s
    calls go (the same rules of reuse); a status outside 2xx is answered, not raised."""

    def __init__(self, *, timeout: int = 10) -> None:
        self._client = KeptAliveWebClient(timeout=timeout)

    def post(self, url: str, message: dict[str, Any]) -> int:
        """POST ``message`` (JSON) to ``url``; the status. ``OSError`` when it could not be sent,
        ``ValueError`` for a URL that is not one."""
        request = Request(url, data=json.dumps(message).encode(), method="POST",
                          headers={"Content-Type": "application/json;charset=utf-8",
                                   "User-Agent": self._client.headers["User-Agent"]})
        try:
            answer = self._client._perform_urllib_http_request_internal(url, request)
        except HTTPError as exc:
            return int(exc.code)
        except SlackRequestError as exc:
            raise ValueError(str(exc)) from None
        return int(answer["status"])

    def respond(self, url: str | None) -> KeptRespond:
        """Bolt's ``respond`` for ``url`` (what the listeners call), over these connections."""
        return KeptRespond(url, self)


class _Answered:
    __slots__ = ("status_code",)

    def __init__(self, status_code: int) -> None:
        self.status_code = status_code


class KeptRespond:
    """A ``response_url`` to answer, called as Bolt's ``Respond`` is (``text``, ``blocks``,
    ``response_type``, ``replace_original``); the answer has its ``status_code``."""

    __slots__ = ("_responses", "response_url")

    def __init__(self, url: str | None, responses: KeptAliveResponses) -> None:
        self.response_url, self._responses = url, responses

    def __call__(self, **fields: Any) -> _Answered:
        if self.response_url is None:
            raise ValueError("no response_url to answer")
        message = {name: value for name, value in fields.items() if value is not None}
        return _Answered(self._responses.post(self.response_url, message))
