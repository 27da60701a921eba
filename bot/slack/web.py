"""The Slack Web API as the bot uses it: posting replies, updating messages, user groups.

:func:`make_client` points a ``WebClient`` at ``SLACK_API_URL`` that keeps its connections
alive between calls (:mod:`bot.slack.transport`) and retries 429 answers after their
``Retry-After`` (slack_sdk's ``RateLimitErrorRetryHandler``) and dropped connections. :class:`SlackWeb` counts every failed call by method and error in the
metrics and posts a :class:`~handlers.replies.Reply` as one message plus its thread (and
its files, uploaded into the thread with ``files.uploadV2``).
:class:`UsergroupDirectory` resolves user groups with ``usergroups.users.list``, cached.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.http_retry import HttpRequest, HttpResponse, RetryState
from slack_sdk.http_retry.builtin_handlers import (
    ConnectionErrorRetryHandler,
    RateLimitErrorRetryHandler,
)
from slack_sdk.web import SlackResponse

from bot.settings import Settings
from bot.slack.blocks import Payload, render_reply
from bot.slack.metrics import Metrics
from bot.slack.transport import KeptAliveWebClient
from handlers import messages as msg
from handlers.access import DirectoryUnavailable
from handlers.replies import Attachment, Reply

log = logging.getLogger("upgradebot.slack")


def api_method(url: str) -> str:
    return url.rstrip("/").rsplit("/", 1)[-1].split("?", 1)[0]


class _CountedRateLimits(RateLimitErrorRetryHandler):
    """Retries a 429 after Retry-After, and counts it."""

    def __init__(self, metrics: Metrics | None, max_retry_count: int = 2) -> None:
        super().__init__(max_retry_count=max_retry_count)
        self.metrics = metrics

    def prepare_for_next_attempt(
        self, *, state: RetryState, request: HttpRequest, response: HttpResponse | None = None,
        error: Exception | None = None,
    ) -> None:
        if self.metrics is not None:
            self.metrics.slack_api_errors.labels(method=api_method(request.url), error="ratelimited").inc()
        super().prepare_for_next_attempt(state=state, request=request, response=response, error=error)


def make_client(settings: Settings, *, metrics: Metrics | None = None, with_token: bool = True) -> WebClient:
    """A Web API client on ``SLACK_API_URL``; ``with_token`` False for Bolt's own client,
    which gets the token per request from the app's ``authorize``."""
    token = settings.slack_bot_token.get_secret_value() if with_token and settings.slack_bot_token else None
    return KeptAliveWebClient(
        token=token, base_url=settings.slack_api_url, timeout=10,
        retry_handlers=[ConnectionErrorRetryHandler(max_retry_count=1), _CountedRateLimits(metrics)],
    )


def error_code(exc: Exception) -> str:
    if isinstance(exc, SlackApiError):
        return str(exc.response.get("error", "unknown")) if exc.response is not None else "unknown"
    return type(exc).__name__


class SlackWeb:
    def __init__(self, client: WebClient, metrics: Metrics) -> None:
        self.client = client
        self.metrics = metrics

    def call(self, method: str, **kwargs: Any) -> SlackResponse:
        """``client.api_call`` counting failures; raises ``SlackClientError`` or ``OSError``."""
        http_verb = "GET" if method in ("usergroups.users.list", "conversations.info") else "POST"
        try:
            if http_verb == "GET":
                return self.client.api_call(method, http_verb="GET", params=kwargs)
            return self.client.api_call(method, json=kwargs)
        except (SlackClientError, OSError) as exc:
            self.metrics.slack_api_errors.labels(method=method, error=error_code(exc)).inc()
            raise

    def post(self, channel: str, payload: Payload, *, thread_ts: str | None = None) -> str:
        """``chat.postMessage``; the new message's ``ts``."""
        extra = {"thread_ts": thread_ts} if thread_ts else {}
        response = self.call("chat.postMessage", channel=channel, **payload, **extra)
        return str(response["ts"])

    def update(self, channel: str, ts: str, payload: Payload) -> None:
        self.call("chat.update", channel=channel, ts=ts, **payload)

    def post_ephemeral(self, channel: str, user: str, payload: Payload, *, thread_ts: str | None = None) -> None:
        extra = {"thread_ts": thread_ts} if thread_ts else {}
        self.call("chat.postEphemeral", channel=channel, user=user, **payload, **extra)

    def post_reply(self, channel: str, reply: Reply, *, prefix: str, context: str | None = None,
                   thread_ts: str | None = None) -> str:
        """The reply's message, then each thread message under it; the message's ``ts``."""
        rendered = render_reply(reply, prefix=prefix, context=context)
        ts = self.post(channel, rendered.main, thread_ts=thread_ts)
        for payload in rendered.thread:
            self.post(channel, payload, thread_ts=thread_ts or ts)
        for attached in reply.files:
            self.upload(channel, attached, thread_ts=thread_ts or ts)
        return ts

    def upload(self, channel: str, attached: Attachment, *, thread_ts: str) -> None:
        """``files.uploadV2`` (get an upload URL, send the bytes, complete) into the thread; a
        failed upload is said in the thread instead, never fatal."""
        try:
            content = attached.data if attached.binary else attached.content
            self.client.files_upload_v2(channel=channel, thread_ts=thread_ts, content=content,
                                        filename=attached.filename, title=attached.title)
        except (SlackClientError, OSError) as exc:
            code = error_code(exc)
            self.metrics.slack_api_errors.labels(method="files.uploadV2", error=code).inc()
            log.warning("uploading %s to %s failed: %s", attached.filename, channel, code)
            self.post(channel, {"text": msg.upload_failed(attached.filename, code), "blocks": []}, thread_ts=thread_ts)

    def auth_test(self) -> SlackResponse:
        return self.call("auth.test")


class UsergroupDirectory:
    """Members of Slack user groups (``usergroups.users.list``), cached ``ttl`` seconds.

    When Slack cannot be asked, a stale answer is used if there is one; without one the
    lookup fails with ``DirectoryUnavailable`` and the caller refuses (never allows on
    a guess).
    """

    def __init__(self, web: SlackWeb, *, ttl: float = 300.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.web = web
        self.ttl = ttl
        self._clock = clock
        self._cache: dict[str, tuple[float, frozenset[str]]] = {}
        self._lock = threading.Lock()

    def members(self, usergroup: str) -> frozenset[str]:
        with self._lock:
            cached = self._cache.get(usergroup)
            if cached is not None and self._clock() - cached[0] < self.ttl:
                return cached[1]
            try:
                response = self.web.call("usergroups.users.list", usergroup=usergroup)
            except (SlackClientError, OSError) as exc:
                if cached is not None:
                    log.warning("usergroups.users.list %s failed (%s): using the cached members", usergroup, error_code(exc))
                    return cached[1]
                raise DirectoryUnavailable(f"usergroups.users.list {usergroup}: {error_code(exc)}") from exc
            users = frozenset(str(u) for u in response.get("users") or [])
            self._cache[usergroup] = (self._clock(), users)
            return users
