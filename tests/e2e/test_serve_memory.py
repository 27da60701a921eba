"""The bot's memory request (deploy/base/deployment.yaml) covers what ``upgradebot serve`` and
its two worker processes use once ready: their proportional set size (PSS, from
/proc/<pid>/smaps_rollup: shared pages split between the processes sharing them, as the
container's cgroup charges them once) against kubesim and a real Redis (issue 34 item 4)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import yaml

from kubesim import KubeSim
from tests.e2e.test_serve_process import environment
from tests.e2e.test_serve_restart import start
from tests.e2e.test_serve_workers import children_of
from tests.fakeslack import FakeSlack, get
from tests.support import TEST_BUILDS, reap

DEPLOYMENT = Path(__file__).resolve().parents[2] / "deploy" / "base" / "deployment.yaml"


def pss_kib(pid: int) -> int:
    text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    match = re.search(r"^Pss:\s+(\d+) kB", text, re.MULTILINE)
    assert match, text
    return int(match.group(1))


def mebibytes(quantity: str) -> float:
    number, unit = re.fullmatch(r"(\d+)(Mi|Gi)", quantity).groups()  # type: ignore[union-attr]
    return int(number) * (1024 if unit == "Gi" else 1)


def test_the_memory_request_covers_serve_and_its_workers_when_ready(tmp_path: Path, redis_url: str) -> None:
    """Issue 34 item 4: serve plus its two workers, ready and idle, use less than the
    Deployment's memory request (192Mi was below their 269 MiB), and the limit leaves room
    for a run's work above it."""
    container = yaml.safe_load(DEPLOYMENT.read_text())["spec"]["template"]["spec"]["containers"][0]
    request = mebibytes(container["resources"]["requests"]["memory"])
    limit = mebibytes(container["resources"]["limits"]["memory"])
    log = tmp_path / "serve.log"
    with FakeSlack() as fake, KubeSim(pushed=TEST_BUILDS, scenario="gpu-small", k8s_version="1.32") as sim:
        serve, url = start(environment(fake, sim, tmp_path, redis_url), log)
        try:
            deadline = time.monotonic() + 120
            while get(url + "/readyz").status != 200:  # the workers and their consumers are up
                assert time.monotonic() < deadline and serve.poll() is None, log.read_text()[-3000:]
                time.sleep(0.2)
            workers = children_of(serve.pid)
            assert len(workers) == 2, workers
            used = sum(pss_kib(pid) for pid in [serve.pid, *workers]) / 1024
        finally:
            reap(serve)
    assert used <= request, f"serve and its workers use {used:.0f} MiB (PSS), the request is {request:.0f} MiB"
    assert limit >= 2 * request
