"""The pieces under the Slack app: signing, idempotency, the bounded pool, user groups."""

from __future__ import annotations

import datetime as dt
import threading
import time

import pytest
from slack_sdk.signature import SignatureVerifier

from bot.slack.app import delivery_key
from bot.slack.idempotency import InMemoryIdempotency
from bot.slack.metrics import Metrics
from bot.slack.web import SlackWeb, UsergroupDirectory
from bot.workers import Workers
from handlers.access import DirectoryUnavailable
from tests.fakeslack import BOT_TOKEN, SIGNING_SECRET, FakeSlack, block_action, sign, slash_command


def test_requests_are_signed_as_slack_signs_them() -> None:
    """slack_sdk's verifier accepts the fake's signatures, and refuses them stale or forged."""
    body = slash_command("inventory")
    verifier = SignatureVerifier(SIGNING_SECRET)
    assert verifier.is_valid_request(body, sign(body))
    click = block_action(action_id="approve", value="run-1", user="U1")
    assert click.startswith(b"payload=") and verifier.is_valid_request(click, sign(click))
    assert not verifier.is_valid_request(click, sign(body))
    assert not verifier.is_valid_request(body, sign(body, timestamp=int(time.time()) - 301))
    assert not verifier.is_valid_request(body, sign(body, secret="another-secret-0000"))


def test_claims_are_once_per_ttl() -> None:
    """A key is claimed once; after its TTL it may be claimed again."""
    now = [100.0]
    claims = InMemoryIdempotency(clock=lambda: now[0])
    ttl = dt.timedelta(seconds=60)
    assert claims.claim_once("k", ttl) and not claims.claim_once("k", ttl)
    assert claims.claim_once("other", ttl)
    now[0] += 61
    assert claims.claim_once("k", ttl)


def test_delivery_keys_follow_the_trigger() -> None:
    """A retry carries the same trigger_id, so the same key; a new command gets a new one."""
    first = {"trigger_id": "1.2.3", "text": "inventory"}
    assert delivery_key("command", first) == delivery_key("command", dict(first))
    assert delivery_key("command", first) != delivery_key("command", {"trigger_id": "1.2.4", "text": "inventory"})
    assert delivery_key("command", {"text": "x"}) == delivery_key("command", {"text": "x"})


def test_pool_is_bounded_and_drains() -> None:
    """size running plus backlog waiting; beyond that submit says no; shutdown waits for the rest."""
    release = threading.Event()
    done: list[int] = []
    pool = Workers(2, backlog=1)

    def job(i: int) -> None:
        release.wait(5)
        done.append(i)

    assert [pool.submit(job, i) for i in range(4)] == [True, True, True, False]
    assert not pool.wait_idle(0.05)
    release.set()
    assert pool.shutdown(timeout=5) and sorted(done) == [0, 1, 2]
    assert not pool.submit(job, 9)


def test_pool_survives_failing_jobs() -> None:
    """A job that raises is logged; the slot is freed for the next one."""
    pool = Workers(1, backlog=0)
    assert pool.submit(lambda: 1 / 0)
    assert pool.wait_idle(5) and pool.submit(lambda: None)
    pool.shutdown(5)


def test_usergroups_are_cached_and_failures_refuse() -> None:
    """Members are read once per TTL; unreadable without a cached answer is DirectoryUnavailable."""
    now = [0.0]
    with FakeSlack(usergroups={"S0LEADS": ["U1", "U2"]}) as fake:
        from slack_sdk import WebClient

        web = SlackWeb(WebClient(token=BOT_TOKEN, base_url=fake.api_url), Metrics())
        groups = UsergroupDirectory(web, ttl=60, clock=lambda: now[0])
        assert groups.members("S0LEADS") == {"U1", "U2"}
        assert groups.members("S0LEADS") == {"U1", "U2"}
        assert len(fake.of("usergroups.users.list")) == 1
        fake.usergroups["S0LEADS"] = ["U3"]
        now[0] = 61
        assert groups.members("S0LEADS") == {"U3"}
        with pytest.raises(DirectoryUnavailable, match="no_such_subteam"):
            groups.members("S0NOPE")
        fake.token = "xoxb-revoked"
        now[0] = 200
        assert groups.members("S0LEADS") == {"U3"}  # stale, but better than refusing everyone
        errors = web.metrics.exposition()[0].decode()
        assert 'upgradebot_slack_api_errors_total{error="invalid_auth",method="usergroups.users.list"} 1.0' in errors
