"""Running kubesim: in-process (tests, the demo) or as ``python -m kubesim serve``.

:class:`KubeSim` builds a scenario, serves it on 127.0.0.1 from a background thread with
its own event loop, writes a kubeconfig with a bearer token, and offers the control API
as methods for tests (``advance``, ``fault``, ``push``, ``mutations``) plus ``call`` to run a
function on the simulation's loop.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import copy
import os
import secrets
import tempfile
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

from aiohttp import web

from kubesim import dcgm
from kubesim.certs import serving_cert
from kubesim.clock import parse_duration
from kubesim.control import apply_fault
from kubesim.dcgmprofiles import ExporterConfig
from kubesim.registry import Registry
from kubesim.server import ApiServer
from kubesim.simulation import Simulation

T = TypeVar("T")


def parse_release(version: str) -> int:
    """``1.31`` (or ``v1.31.2``) -> 31, refusing releases kubesim does not simulate."""
    text = version.lstrip("v")
    parts = text.split(".")
    if len(parts) < 2 or parts[0] != "1" or not parts[1].isdigit():
        raise ValueError(f"invalid Kubernetes version {version!r}: use 1.27 .. 1.34")
    minor = int(parts[1])
    if not 27 <= minor <= 34:
        raise ValueError(f"Kubernetes {version} is not simulated: use 1.27 .. 1.34")
    return minor


def kubeconfig_text(url: str, token: str, ca_pem: bytes, context: str = "kubesim") -> str:
    ca_data = base64.b64encode(ca_pem).decode()
    return (
        "apiVersion: v1\n"
        "kind: Config\n"
        "clusters:\n"
        f"- name: {context}\n"
        "  cluster:\n"
        f"    server: {url}\n"
        f"    certificate-authority-data: {ca_data}\n"
        "users:\n"
        f"- name: {context}-admin\n"
        "  user:\n"
        f"    token: {token}\n"
        "contexts:\n"
        f"- name: {context}\n"
        "  context:\n"
        f"    cluster: {context}\n"
        f"    user: {context}-admin\n"
        "    namespace: default\n"
        f"current-context: {context}\n"
    )


def write_kubeconfig(
    path: str | os.PathLike[str], url: str, token: str, ca_pem: bytes, context: str = "kubesim"
) -> Path:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(kubeconfig_text(url, token, ca_pem, context))
    return target


class KubeSim:
    """A simulated cluster served over HTTP from a background thread."""

    def __init__(
        self,
        *,
        scenario: str = "gpu-small",
        nodes: int | None = None,
        k8s_version: str = "1.31",
        event_ttl: str | float = "1h",
        speed: float = 1.0,
        port: int = 0,
        kubeconfig: str | os.PathLike[str] | None = None,
        context: str = "kubesim",
        token: str | None = None,
        dcgm_port: int = 0,
        dcgm: ExporterConfig | None = None,
        pushed: Iterable[str] = (),
    ) -> None:
        self.scenario = scenario
        self.nodes = nodes
        self.minor = parse_release(k8s_version)
        self.event_ttl = parse_duration(event_ttl)
        self.speed = speed
        self.port = port
        self.context = context
        self.token = token or secrets.token_urlsafe(24)
        self.dcgm_port = dcgm_port
        self.dcgm_config = dcgm or ExporterConfig()
        """What the dcgm-exporters export at start (:meth:`exporters` changes it while serving)."""
        self.pushed = [str(image).strip() for image in pushed]
        Registry(self.pushed)  # refuses what is not a tagged reference, before anything starts
        """Images pushed to the simulated registry before the cluster starts (:mod:`kubesim.registry`):
        a test's own builds, such as kubesim's fault tags (``…:v0.17.0-crash``)."""
        self.dcgm_url = ""
        """``http://127.0.0.1:<port>``: the dcgm-exporters of the GPU nodes (:mod:`kubesim.dcgm`)."""
        self._dcgm_runner: web.AppRunner | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if kubeconfig is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="kubesim-")
            kubeconfig = Path(self._tmp.name) / "kubeconfig"
        self.kubeconfig = Path(kubeconfig)
        self.url = ""
        self.sim: Simulation | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._sim_task: asyncio.Task[None] | None = None

    # ---------------------------------------------------------- lifecycle
    def start(self) -> KubeSim:
        ready: concurrent.futures.Future[str] = concurrent.futures.Future()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, args=(ready,), name="kubesim", daemon=True)
        self._thread.start()
        self.url = ready.result(timeout=120 + (self.nodes or 0) * 0.03)  # 10,000 nodes take minutes on a loaded machine
        write_kubeconfig(self.kubeconfig, self.url, self.token, serving_cert().ca_pem, self.context)
        return self

    def _serve(self, ready: concurrent.futures.Future[str]) -> None:
        assert self._loop is not None
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._boot(ready))
        except BaseException as exc:  # report start-up failures to start()
            if not ready.done():
                ready.set_exception(exc)
            return
        self._loop.run_forever()

    async def _boot(self, ready: concurrent.futures.Future[str]) -> None:
        from kubesim.scenarios import build

        self.sim = build(
            scenario=self.scenario, nodes=self.nodes, minor=self.minor,
            event_ttl=self.event_ttl, speed=self.speed,
        )
        for image in self.pushed:
            self.sim.registry.push(image)
        server = ApiServer(self.sim, token=self.token)
        self._runner = web.AppRunner(server.app, access_log=None, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(
            self._runner, "127.0.0.1", self.port, ssl_context=serving_cert().ssl_context()
        )
        await site.start()
        sockets = getattr(site._server, "sockets", None) or []
        port = sockets[0].getsockname()[1] if sockets else self.port
        server.address = f"127.0.0.1:{port}"
        exporters = dcgm.DcgmExporters()
        exporters.config = self.dcgm_config
        self.sim.add_controller("dcgm", exporters)
        self._dcgm_runner = await dcgm.serve(exporters, port=self.dcgm_port)
        self.dcgm_url = exporters.url
        self._sim_task = asyncio.get_running_loop().create_task(self.sim.run())
        ready.set_result(f"https://127.0.0.1:{port}")

    def stop(self) -> None:
        if self._loop is None:
            return
        loop = self._loop

        async def shutdown() -> None:
            if self._sim_task is not None:
                self._sim_task.cancel()
            if self._runner is not None:
                await self._runner.cleanup()
            if self._dcgm_runner is not None:
                await self._dcgm_runner.cleanup()

        try:
            asyncio.run_coroutine_threadsafe(shutdown(), loop).result(timeout=30)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            if self._thread is not None:
                self._thread.join(timeout=30)
            loop.close()
            self._loop = None
            if self._tmp is not None:
                self._tmp.cleanup()

    def __enter__(self) -> KubeSim:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---------------------------------------------------------- test hooks
    def call(self, fn: Callable[[Simulation], T]) -> T:
        """Run ``fn(sim)`` on the simulation's loop and return its result."""
        assert self._loop is not None and self.sim is not None

        async def run() -> T:
            assert self.sim is not None
            return fn(self.sim)

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout=120)

    def advance(self, duration: str | float) -> None:
        seconds = parse_duration(duration)
        self.call(lambda sim: sim.advance(seconds))

    def fault(self, **fault: Any) -> None:
        problem = self.call(lambda sim: apply_fault(sim, fault))
        if problem:
            raise ValueError(problem)

    def push(self, *images: str) -> list[str]:
        """Push images to the simulated registry (as ``POST /sim/v1/registry``): a test's own
        build, e.g. ``nvcr.io/nvidia/k8s-device-plugin:v0.17.0-crash``; returns their full names."""
        return self.call(lambda sim: [sim.registry.push(image) for image in images])

    def exporters(self, **changes: Any) -> ExporterConfig:
        """Change what the dcgm-exporters export (``profile``, ``enable``, ``release``,
        ``xid_window_ms``, as ``POST /sim/v1/dcgm/config``); returns the new configuration."""

        def change(sim: Simulation) -> ExporterConfig:
            exporters = sim.controllers["dcgm"]
            exporters.config = ExporterConfig.of(changes, base=exporters.config)
            return exporters.config

        return self.call(change)

    def operator_reconciles(self) -> list[dict[str, Any]]:
        """The GPU operator's reconciles so far (scenario ``gpu-operator``; ``GET /sim/v1/gpu-operator``), once the
        work already queued has run: a test that changed a ClusterPolicy or an owned DaemonSet reads the reconcile
        that change caused, without waiting on time."""

        def read(sim: Simulation) -> list[dict[str, Any]]:
            sim.settle()
            return copy.deepcopy(sim.controllers["gpu-operator"].reconciles)

        return self.call(read)

    def mutations(self) -> list[dict[str, Any]]:
        return self.call(lambda sim: list(sim.mutations))

    def reads(self) -> list[dict[str, Any]]:
        """The last reads received (get, list, watch): verb, path, query, code, bytes answered."""
        return self.call(lambda sim: list(sim.reads))
