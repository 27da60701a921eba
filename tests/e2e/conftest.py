"""Fixtures of the Slack end-to-end tests: a fake Slack and the bot serving over HTTP.

The bot is what ``upgradebot serve`` builds (:func:`bot.slack.serve.build_service`), on a
real waitress server on 127.0.0.1:0, with ``SLACK_API_URL`` pointing at the fake Slack
and ``KUBECONFIG`` at the module's kubesim; see :mod:`tests.e2e.harness`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from bot.slack.http import HttpServer
from bot.slack.serve import Service, build_service, inventory_verb
from kubesim import KubeSim
from tests.e2e.harness import POLICY, USERGROUPS, Bot, GateBook, ask_verb, hold_verb, settings_for
from tests.fakeslack import FakeSlack


@pytest.fixture
def fake_slack() -> Iterator[FakeSlack]:
    """A fake Slack Web API recording every call."""
    with FakeSlack(usergroups=USERGROUPS, not_in_channels={"C0LAB"}) as fake:
        yield fake


@pytest.fixture
def bot(fake_slack: FakeSlack, cluster: KubeSim) -> Iterator[Bot]:
    """The Slack front end on a real HTTP server, against the fake Slack and kubesim."""
    release, started = threading.Event(), threading.Event()
    holder: list[Service] = []
    book = GateBook(POLICY, lambda: holder[0].directory)
    settings = settings_for(fake_slack, cluster)
    service = build_service(settings, POLICY, verbs=[inventory_verb(settings, POLICY), ask_verb(book), hold_verb(release, started)],
                            decisions=book, readiness_cache=0)
    holder.append(service)
    http = HttpServer(service.wsgi(), port=0, threads=8).start()
    try:
        yield Bot(http.url, service, fake_slack, book, release, started)
    finally:
        release.set()
        http.stop(timeout=5)
        service.workers.shutdown(timeout=10)
