"""Fixtures of the Slack end-to-end tests: a fake Slack and the bot serving over HTTP.

The bot is what ``upgradebot serve`` builds (:func:`bot.slack.serve.build_service`), on a
real waitress server on 127.0.0.1:0, with ``SLACK_API_URL`` pointing at the fake Slack
and ``KUBECONFIG`` at the module's kubesim; see :mod:`tests.e2e.harness`.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from bot.runtime import Runtime, build_runtime, connector
from bot.slack.http import HttpServer
from bot.slack.serve import Service, build_service, build_slack_service, inventory_verb
from bot.slack.threads import SlackThreads
from kubesim import KubeSim
from runbooks.cluster.informing import Watches
from runbooks.engine.runs import RunState
from runbooks.policy import Policy
from tests.e2e.harness import POLICY, USERGROUPS, Bot, GateBook, ask_verb, hold_verb, settings_for
from tests.e2e.runs_support import POLICY as RUN_POLICY
from tests.e2e.runs_support import SlackClient, eventually, kept_in
from tests.fakeslack import FakeSlack
from tests.support import TEST_BUILDS, with_kubesim_mirrors


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
    watches = Watches(connector(settings))
    service = build_service(settings, POLICY, verbs=[inventory_verb(settings, POLICY, watches=watches), ask_verb(book),
                                                     hold_verb(release, started)],
                            decisions=book, readiness_cache=0)
    holder.append(service)
    http = HttpServer(service.wsgi(), port=0, threads=8).start()
    try:
        yield Bot(http.url, service, fake_slack, book, release, started)
    finally:
        release.set()
        http.stop(timeout=5)
        service.stop_workers(timeout=10)
        watches.close()


@dataclass
class RunBot:
    slack: SlackClient
    runtime: Runtime
    fake: FakeSlack
    service: Service
    kubeconfig: Path | None = None
    """The kubesim's, for kubectl."""

    def state(self, run_id: str) -> RunState:
        return self.runtime.engine.get(run_id).state

    def wait_state(self, run_id: str, state: RunState) -> None:
        try:
            eventually(lambda: self.state(run_id) is state, f"run {run_id} {state.value}", timeout=60)
        except AssertionError as exc:  # say where the run stopped, for a failure seen once in a whole suite
            run = self.runtime.engine.get(run_id)
            last = [str(entry)[:200] for entry in self.runtime.engine.audit(run_id)[-5:]]
            said = [f"{c.path}: {str(c.body.get('text', ''))[:160]}" for c in self.fake.of("response_url")[-4:]]
            raise AssertionError(f"{exc}; it is {run.state.value} (reason {run.reason!r}, progress "
                                 f"{str(run.progress)[:200]}); its last audit entries: {last}; the last answers "
                                 f"at a response_url: {said}") from None

    def idle(self) -> bool:
        """No run being advanced, every paced message sent."""
        pacers = [t.pacer for t in self.runtime.observers.of_type(SlackThreads)]
        return self.runtime.advancer.wait_idle(0.1) and all(p.wait_idle(0.1) for p in pacers)


@pytest.fixture
def run_bot(fake_slack: FakeSlack, redis_url: str) -> Iterator[RunBot]:
    """The bot as ``upgradebot serve`` wires it, on a kubesim of its own running 20 times as fast."""
    with served_bot(fake_slack, redis_url, scenario="gpu-small", k8s_version="1.31") as bot:
        yield bot


@contextlib.contextmanager
def served_bot(fake_slack: FakeSlack, redis_url: str, *, scenario: str, k8s_version: str,
               policy: Policy = RUN_POLICY) -> Iterator[RunBot]:
    """The bot as ``upgradebot serve`` wires it (``policy``: the run policy unless named), on a kubesim
    of ``scenario`` of its own running 20 times as fast; stopped when the block ends."""
    with KubeSim(pushed=TEST_BUILDS, scenario=scenario, k8s_version=k8s_version, speed=20) as sim:
        settings = settings_for(fake_slack, sim, REDIS_URL=redis_url, UPGRADEBOT_SLACK_PACE=0.01)
        runtime = build_runtime(settings, with_kubesim_mirrors(policy, sim.url, sim.kubeconfig))
        service = build_slack_service(settings, runtime, readiness_cache=0)
        runtime.start()
        http = HttpServer(service.wsgi(), port=0, threads=8).start()
        try:
            yield RunBot(SlackClient(http.url, fake_slack, kept=kept_in(runtime.engine)), runtime, fake_slack, service,
                         Path(sim.kubeconfig))
        finally:
            http.stop(timeout=5)
            service.stop_workers(timeout=10)
            runtime.stop(timeout=30)
