"""A real Prometheus for the tests: Debian's ``prometheus`` (``make prometheus`` installs it).

:class:`Prometheus` runs the binary on 127.0.0.1 with a generated configuration (1 s scrape
and evaluation intervals) and its storage in a temp dir. Scrape jobs are added and removed
while it runs (the configuration rewritten, then ``POST /-/reload``); :meth:`Prometheus.scrape`
points one at a kubesim's dcgm-exporters through their HTTP service discovery, as a cluster's
Prometheus would find dcgm-exporter pods. :meth:`Prometheus.clear` drops every job and every
series (the admin API), so each test starts empty, as ``redis_url`` does.

Waits end on what Prometheus reports (``/api/v1/targets``, a query's answer), polled under a
generous deadline, never after a fixed sleep.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kubesim import KubeSim

DEADLINE = 90.0
"""Seconds a wait may take on a loaded machine (target discovery alone runs on 5 s tickers)."""


def prometheus_binary() -> str:
    found = shutil.which("prometheus")
    if not found:
        pytest.fail("prometheus is not on PATH: run `make prometheus` (Debian's prometheus package)")
    return found


def free_port() -> int:
    """A port free on 127.0.0.1 now (Prometheus cannot listen on port 0 and say which it got)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Prometheus:
    """One Prometheus server on loopback, with jobs added and removed at run time."""

    def __init__(self, *, scrape_interval: str = "1s") -> None:
        self.scrape_interval = scrape_interval
        self.jobs: dict[str, dict[str, Any]] = {}
        self.url = ""
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    # ------------------------------------------------------------ lifecycle
    def start(self) -> Prometheus:
        self._tmp = tempfile.TemporaryDirectory(prefix="prometheus-")
        root = Path(self._tmp.name)
        self._write_config()
        for _ in range(3):  # the port may be taken between free_port() and the bind
            port = free_port()
            self.url = f"http://127.0.0.1:{port}"
            log = (root / "prometheus.log").open("wb")
            self._proc = subprocess.Popen(
                [
                    prometheus_binary(),
                    f"--config.file={root / 'prometheus.yml'}",
                    f"--storage.tsdb.path={root / 'data'}",
                    f"--web.listen-address=127.0.0.1:{port}",
                    "--web.enable-lifecycle",
                    "--web.enable-admin-api",
                    "--storage.tsdb.retention.time=1d",
                    "--log.level=warn",
                ],
                stdout=log, stderr=subprocess.STDOUT, cwd=root,
            )
            log.close()
            if self._wait_ready():
                return self
        raise AssertionError(f"prometheus did not start: {self.log()[-2000:]}")

    def _wait_ready(self) -> bool:
        assert self._proc is not None
        deadline = time.monotonic() + DEADLINE
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=5) as resp:
                    if resp.status == 200:
                        return True
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.1)
        self.stop()
        raise AssertionError(f"prometheus not ready within {DEADLINE}s: {self.log()[-2000:]}")

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=30)
        self._proc = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> Prometheus:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def log(self) -> str:
        if self._tmp is None:
            return ""
        path = Path(self._tmp.name) / "prometheus.log"
        return path.read_text(errors="replace") if path.exists() else ""

    # ------------------------------------------------------------ configuration
    def config(self) -> dict[str, Any]:
        interval = self.scrape_interval
        return {
            "global": {"scrape_interval": interval, "scrape_timeout": interval, "evaluation_interval": interval},
            "scrape_configs": [{"job_name": name, **job} for name, job in sorted(self.jobs.items())],
        }

    def _write_config(self) -> None:
        assert self._tmp is not None
        path = Path(self._tmp.name) / "prometheus.yml"
        path.write_text(json.dumps(self.config(), indent=2))  # JSON is YAML

    def _reload(self) -> None:
        self._write_config()
        self._post("/-/reload")

    def scrape(self, sim: KubeSim, *, job: str = "dcgm", servicemonitor: bool = False) -> str:
        """Scrape ``sim``'s dcgm-exporters, one target per GPU node found by HTTP SD; returns the job.

        ``servicemonitor``: as the Prometheus Operator scrapes the GPU operator's ServiceMonitor
        (``honorLabels: false``): the targets carry the exporter pod's ``namespace``, ``pod`` and
        ``container``, so Prometheus renames the exporter's own to ``exported_*``."""
        query = "?scrape=servicemonitor" if servicemonitor else ""
        self.jobs[job] = {
            "http_sd_configs": [{"url": f"{sim.dcgm_url}/sim/v1/dcgm/targets{query}", "refresh_interval": "1s"}],
            **({"honor_labels": False} if servicemonitor else {}),
        }
        self._reload()
        return job

    def clear(self) -> None:
        """No job, no series: what a test finds when it starts."""
        self.jobs.clear()
        self._reload()
        now = f"{time.time():.3f}"
        self._post("/api/v1/admin/tsdb/delete_series", {"match[]": '{__name__=~".+"}', "end": now})

    # ------------------------------------------------------------ the HTTP API
    def _post(self, path: str, form: dict[str, str] | None = None) -> bytes:
        data = urllib.parse.urlencode(form or {}).encode()
        with urllib.request.urlopen(urllib.request.Request(f"{self.url}{path}", data=data), timeout=30) as resp:
            body: bytes = resp.read()
        return body

    def api(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}{path}?{query}", timeout=30) as resp:
            answer = json.loads(resp.read())
        assert answer.get("status") == "success", answer
        return answer["data"]

    def query(self, promql: str) -> list[dict[str, Any]]:
        """An instant query's vector: ``[{"metric": {...}, "value": [t, "v"]}, ...]``."""
        data = self.api("/api/v1/query", query=promql)
        assert data["resultType"] == "vector", data
        result: list[dict[str, Any]] = data["result"]
        return result

    def value(self, promql: str) -> float | None:
        """The one value ``promql`` answers, ``None`` for an empty answer."""
        result = self.query(promql)
        assert len(result) <= 1, result
        return float(result[0]["value"][1]) if result else None

    def targets(self, job: str) -> list[dict[str, Any]]:
        active: list[dict[str, Any]] = self.api("/api/v1/targets", state="active")["activeTargets"]
        return [t for t in active if t.get("scrapePool") == job]

    # ------------------------------------------------------------ waiting
    def wait_until(self, what: str, check: Callable[[], Any], *, deadline: float = DEADLINE) -> Any:
        """Poll ``check`` until it answers something true; fail naming ``what`` after ``deadline``."""
        end = time.monotonic() + deadline
        while True:
            answer = check()
            if answer:
                return answer
            if time.monotonic() > end:
                raise AssertionError(f"prometheus: {what} not within {deadline}s; targets: {self._describe()}")
            time.sleep(0.2)

    def wait_scraped(self, job: str, *, instances: int = 1, after: float | None = None) -> list[dict[str, Any]]:
        """Until ``job`` has at least ``instances`` targets, each up and with a scrape stored that
        started after the epoch second ``after`` (now when not given); returns the targets.

        Stored, not only reported: ``up`` is committed with the scrape's samples, so a fresh ``up``
        in the TSDB means the fresh samples are there for the next query."""
        since = time.time() if after is None else after

        def scraped() -> list[dict[str, Any]] | None:
            found = self.targets(job)
            if len(found) < instances or any(t.get("health") != "up" for t in found):
                return None
            fresh = self.query(f'timestamp(up{{job="{job}"}}) > {since:.3f}')
            return found if len(fresh) >= len(found) else None

        result: list[dict[str, Any]] = self.wait_until(f"{instances} target(s) of {job} scraped", scraped)
        return result

    def _describe(self) -> str:
        try:
            return json.dumps([
                {k: t.get(k) for k in ("scrapePool", "scrapeUrl", "health", "lastError", "lastScrape")}
                for t in self.api("/api/v1/targets", state="active")["activeTargets"]
            ])
        except (urllib.error.URLError, OSError, AssertionError) as exc:
            return f"unavailable ({exc})"
