"""Fixtures for the integration tests: kubesim clusters per release, inventories, helpers.

The shared ``cluster``/``fresh_cluster``/``kubectl_for`` fixtures live in the top-level
conftest; this one adds one read-only cluster per release the inventory must support,
and helpers as fixtures (``connect``, ``inventory_of``, ``settle_until``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from kubesim import KubeSim
from runbooks.cluster import Cluster, RetryPolicy
from runbooks.inventory import Inventory, take_inventory
from tests.support import TEST_BUILDS

RELEASES = ("1.27", "1.31", "1.32", "1.34")
FAST_RETRIES = RetryPolicy(attempts=4, base_delay=0.05, max_delay=0.5, deadline=5)


@pytest.fixture(scope="module", params=RELEASES)
def release_cluster(request: pytest.FixtureRequest) -> Iterator[KubeSim]:
    """A gpu-small kubesim of each release the inventory supports (read-only: shared by a module)."""
    with KubeSim(pushed=TEST_BUILDS, scenario="gpu-small", k8s_version=request.param) as sim:
        yield sim


@pytest.fixture
def sim() -> Iterator[KubeSim]:
    """A gpu-small kubesim of its own, its clock running 4 times as fast as the wall clock."""
    with KubeSim(pushed=TEST_BUILDS, scenario="gpu-small", k8s_version="1.31", speed=4) as served:
        yield served


@pytest.fixture(scope="session")
def connect() -> Callable[..., Cluster]:
    """``connect(sim, retry=...)``: the adapter on a kubesim's kubeconfig (fast retries by default)."""

    def _connect(sim: KubeSim, retry: RetryPolicy = FAST_RETRIES) -> Cluster:
        return Cluster.from_kubeconfig(sim.kubeconfig, retry=retry)

    return _connect


@pytest.fixture(scope="session")
def inventory_of(connect: Callable[..., Cluster]) -> Callable[..., Inventory]:
    """``inventory_of(sim, **kwargs)``: take an inventory of a kubesim."""

    def _inventory(sim: KubeSim, **kwargs: object) -> Inventory:
        with connect(sim) as cluster:
            return take_inventory(cluster, **kwargs)  # type: ignore[arg-type]

    return _inventory


@pytest.fixture(scope="session")
def settle_until() -> Callable[..., None]:
    """``settle_until(sim, done, step="10s", steps=60)``: advance simulated time until ``done()``."""

    def _settle(sim: KubeSim, done: Callable[[], bool], *, step: str = "10s", steps: int = 60) -> None:
        for _ in range(steps):
            if done():
                return
            sim.advance(step)
        assert done(), f"not reached after {steps} steps of {step}"

    return _settle
