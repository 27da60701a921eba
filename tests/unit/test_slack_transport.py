"""The Slack Web API over kept-alive connections (``bot.slack.transport``), against the fake
Slack over real HTTP and HTTPS: one connection per thread for many calls, answers and
failures exactly as slack_sdk's own ``WebClient`` gives them."""

from __future__ import annotations

import socket
import threading
from urllib.error import URLError

import pytest
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_handlers import ConnectionErrorRetryHandler
from slack_sdk.http_retry.builtin_interval_calculators import FixedValueRetryIntervalCalculator

from bot.settings import Settings
from bot.slack import transport
from bot.slack.metrics import Metrics
from bot.slack.transport import KeptAliveWebClient
from bot.slack.web import SlackWeb, make_client
from handlers.replies import Reply
from tests.fakeslack import BOT_TOKEN, SIGNING_SECRET, FakeSlack


def web_for(fake: FakeSlack) -> SlackWeb:
    settings = Settings(SLACK_BOT_TOKEN=BOT_TOKEN, SLACK_SIGNING_SECRET=SIGNING_SECRET,
                        SLACK_API_URL=fake.api_url)
    return SlackWeb(make_client(settings, metrics=Metrics()), Metrics())


def test_the_calls_of_one_thread_share_one_connection() -> None:
    with FakeSlack() as fake:
        web = web_for(fake)
        for n in range(3):
            web.post_reply("C0OPS", Reply(text=f"reply {n}", thread=[Reply(text="more")]), prefix="/upgrade")
        assert len(fake.of("chat.postMessage")) == 6
        assert fake.connections == 1


def test_over_tls_as_slack_serves() -> None:
    with FakeSlack(tls=True) as fake:
        client = KeptAliveWebClient(token=BOT_TOKEN, base_url=fake.api_url, ssl=fake.client_ssl())
        assert fake.api_url.startswith("https://")
        for n in range(3):
            assert client.chat_postMessage(channel="C0OPS", text=f"over TLS {n}")["ok"]
        assert [c.body["text"] for c in fake.of("chat.postMessage")] == ["over TLS 0", "over TLS 1", "over TLS 2"]
        assert fake.connections == 1


def test_each_thread_keeps_its_own() -> None:
    with FakeSlack() as fake:
        web = web_for(fake)
        start = threading.Barrier(8)

        def post(n: int) -> None:
            start.wait()
            for k in range(5):
                web.post("C0OPS", {"text": f"{n}.{k}"})

        threads = [threading.Thread(target=post, args=(n,)) for n in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(c.body["text"] for c in fake.of("chat.postMessage")) == sorted(
            f"{n}.{k}" for n in range(8) for k in range(5))
        assert fake.connections == 8


def test_a_connection_the_server_closed_is_replaced_not_failed_on() -> None:
    """No retry handler: a request sent over the closed connection would fail, so this holds
    only because the client sees the server's close before it sends (over loopback the close
    has arrived by the time ``hang_up`` returns)."""
    with FakeSlack() as fake:
        client = KeptAliveWebClient(token=BOT_TOKEN, base_url=fake.api_url, retry_handlers=[])
        assert client.chat_postMessage(channel="C0OPS", text="before")["ok"]
        assert fake.hang_up() == 1
        assert client.chat_postMessage(channel="C0OPS", text="after")["ok"]
        assert fake.connections == 2


def test_an_idle_connection_is_not_used_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transport, "IDLE_REUSE", -1.0)  # every kept connection counts as idle too long
    with FakeSlack() as fake:
        client = KeptAliveWebClient(token=BOT_TOKEN, base_url=fake.api_url)
        for n in range(3):
            assert client.chat_postMessage(channel="C0OPS", text=f"{n}")["ok"]
        assert fake.connections == 3


def test_a_rate_limit_is_retried_after_retry_after_on_the_same_connection() -> None:
    with FakeSlack() as fake:
        web = web_for(fake)
        fake.rate_limit_once("chat.postMessage", retry_after=0)
        web.post("C0OPS", {"text": "limited once"})
        assert [c.answer["ok"] for c in fake.of("chat.postMessage")] == [False, True]
        assert fake.connections == 1
        text = web.client.retry_handlers[1].metrics.exposition()[0].decode()  # type: ignore[attr-defined]
        assert 'upgradebot_slack_api_errors_total{error="ratelimited",method="chat.postMessage"} 1.0' in text


@pytest.mark.parametrize("kind", [WebClient, KeptAliveWebClient])
def test_a_refusal_reads_as_slack_sdk_gives_it(kind: type[WebClient]) -> None:
    """Without retries a 429 is a SlackApiError carrying its status and Retry-After, from
    either client alike."""
    with FakeSlack() as fake:
        fake.rate_limit_once("chat.postMessage", retry_after=7)
        with pytest.raises(SlackApiError) as refused:
            kind(token=BOT_TOKEN, base_url=fake.api_url, retry_handlers=[]).chat_postMessage(channel="C0OPS", text="x")
        assert refused.value.response.status_code == 429
        assert refused.value.response.headers["Retry-After"] == "7"
        assert refused.value.response["error"] == "ratelimited"


@pytest.mark.parametrize("kind", [WebClient, KeptAliveWebClient])
def test_an_unreachable_slack_is_a_url_error_retried_once(kind: type[WebClient]) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    attempts: list[int] = []

    class Counted(ConnectionErrorRetryHandler):
        def prepare_for_next_attempt(self, **kwargs: object) -> None:
            attempts.append(1)
            super().prepare_for_next_attempt(**kwargs)  # type: ignore[arg-type]

    client = kind(token=BOT_TOKEN, base_url=f"http://127.0.0.1:{port}/api/", timeout=5,
                  retry_handlers=[Counted(max_retry_count=1, interval_calculator=FixedValueRetryIntervalCalculator(0))])
    with pytest.raises(URLError):
        client.chat_postMessage(channel="C0OPS", text="nobody listens")
    assert attempts == [1]


def test_a_call_that_fails_before_it_is_sent_leaves_no_connection_half_used() -> None:
    """A header http.client refuses fails that call only: the connection it had begun is dropped,
    and the thread's next call goes out on a sound one (one sent per call, as urllib's were)."""
    with FakeSlack() as fake:
        client = KeptAliveWebClient(token=BOT_TOKEN, base_url=fake.api_url, retry_handlers=[])
        assert client.chat_postMessage(channel="C0OPS", text="first")["ok"]
        with pytest.raises(ValueError):
            client.api_call("chat.postMessage", json={"channel": "C0OPS", "text": "bad"},
                            headers={"X-Broken": "a\r\nInjected: yes"})
        assert client.chat_postMessage(channel="C0OPS", text="after")["ok"]
        assert [c.body["text"] for c in fake.of("chat.postMessage")] == ["first", "after"]


def test_response_urls_are_answered_over_one_kept_connection_per_thread() -> None:
    """Issue 63: ``KeptAliveResponses`` posts to ``response_url`` s as Bolt's ``respond`` does (JSON),
    over the connection its thread keeps; a refused message is its status, not an exception; a
    URL nobody answers is an ``OSError``, one that is no URL a ``ValueError``."""
    with FakeSlack() as fake:
        responses = transport.KeptAliveResponses()
        for n in range(3):
            answered = responses.respond(fake.response_url(f"r{n}"))(
                text=f"said {n}", blocks=None, response_type="ephemeral", replace_original=False)
            assert answered.status_code == 200
        bad = responses.post(fake.response_url("bad"), {"text": "x", "blocks": [{"type": "nonsense"}]})
        fake.refused.clear()  # the bad one was sent on purpose
        assert bad == 400
        said = fake.of("response_url")
        assert [c.body["text"] for c in said[:3]] == ["said 0", "said 1", "said 2"]
        assert said[0].body["response_type"] == "ephemeral" and said[0].body["replace_original"] is False
        assert "blocks" not in said[0].body
        assert fake.connections == 1
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    with pytest.raises(OSError):
        responses.post(f"http://127.0.0.1:{port}/response/gone", {"text": "x"})
    with pytest.raises(ValueError):
        responses.respond(None)(text="x")
