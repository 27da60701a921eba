"""kubesim's own control API under ``/sim/v1/``: faults, the clock, the registry, the mutation log.

- ``POST /sim/v1/faults`` with ``{"kind": ...}``:
  ``kubelet-restart`` ``{node}``; ``node-reboot`` ``{node}`` (a kubelet restart after which no
  container survived: pods asking for a device plugin's resource fail admission); ``node-not-ready`` ``{node, duration?}`` (the kubelet
  stops renewing its Lease: the node goes Unknown with the unreachable taints after the node
  lifecycle controller's grace, 40 s, 50 s from 1.32); ``runtime-down`` ``{node, duration?}`` (the
  container runtime stops: 30 s later the kubelet, still heartbeating, reports Ready=False and the
  node gets the not-ready taints, NoExecute from the controller's next 5 s pass); ``node-ready``
  ``{node}`` (ends either); ``api-errors`` ``{count=1, code=500|429, delay=0, path?, retry_after=1}`` (the
  next ``count`` API requests fail, or answer after ``delay`` seconds when ``code`` is 0);
  ``compact`` (drop watch history: older watches and continue tokens get 410);
  ``forbid`` ``{path, verb?}`` / ``allow`` (403 for a path prefix); ``feature-gate`` ``{name, enabled}``;
  ``xid`` ``{node, code=79, gpu=0}`` / ``ecc`` ``{node, gpu=0, count=1}`` (a GPU's dcgm-exporter
  shows the XID / double-bit ECC errors: :mod:`kubesim.dcgm`);
  ``driver-mismatch`` ``{node, repaired?}`` (the node's NVIDIA driver was upgraded without a
  reboot: its user-space library and loaded kernel module differ, NVML answers
  ``NVML_ERROR_LIB_RM_VERSION_MISMATCH``; a ``node-reboot`` or ``repaired: true`` ends it) and
  ``no-container-toolkit`` ``{node, repaired?}`` (the NVIDIA Container Toolkit is not configured for
  the node's runtime: no NVML library in the plugin's container): device-plugin containers that
  start on the node afterwards print their release's lines for it (:mod:`kubesim.pluginreleases`).
- ``GET /sim/v1/dcgm`` tells where the dcgm-exporters listen, their HTTP SD URL and what they
  export; ``POST /sim/v1/dcgm/config`` ``{"profile": "default"|"dcp", "enable": [fields],
  "release": "4.5.3-4.8.2"|"main-d5e5f51", "xid_window_ms": 300000}`` changes it (keys left out
  are kept: :class:`kubesim.dcgmprofiles.ExporterConfig`).
- ``POST /sim/v1/clock`` ``{"advance": "24h"}`` moves simulated time and fires what falls due;
  ``GET /sim/v1/clock`` tells the simulated now.
- ``POST /sim/v1/registry`` ``{"images": ["repo:tag", ...]}`` pushes images to the simulated
  registry (a test's own build, e.g. ``…/k8s-device-plugin:v0.17.0-crash``), answering the fully
  qualified names and their digests (``"digests": {ref: "sha256:…"}``); a tag that exists already
  (pushed or released) is pushed again, with a new digest: the tag now pulls that, the old digest
  still pulls by digest. ``GET /sim/v1/registry`` lists what was pushed, the pushed tags' digests
  and the released tags of the repositories kubesim knows. A pod whose image is neither fails
  ``ErrImagePull`` with containerd's ``not found`` (:mod:`kubesim.registry`); one pushed later
  pulls on its next retry. The same registry answers the OCI distribution API under ``/v2/``
  (:mod:`kubesim.registryapi`).
- ``GET /sim/v1/gpu-operator`` (scenario ``gpu-operator``): the GPU operator's reconciles so far, oldest first
  (:attr:`kubesim.gpuoperator.GpuOperator.reconciles`: ``time``, ``clusterpolicy``, ``generation``,
  ``daemonsets`` name -> ``created|updated|identical|deleted``, ``state``, ``error``), once what is queued has run.
- ``GET /sim/v1/requests`` lists the mutating API requests received (verb, path, time);
  ``DELETE /sim/v1/requests`` clears it. With ``?reads=true``, the same for the last reads
  (get, list, watch: verb, path, query, code, bytes answered; :data:`kubesim.simulation.READS_KEPT`).
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from kubesim.clock import parse_duration
from kubesim.dcgmprofiles import ExporterConfig
from kubesim.pluginreleases import HOST_FAULTS
from kubesim.registry import RELEASED
from kubesim.simulation import Simulation


def _json(body: Any, status: int = 200) -> web.Response:
    return web.Response(text=json.dumps(body), status=status, content_type="application/json")


def _bad(message: str) -> web.Response:
    return _json({"error": message}, 400)


def apply_fault(sim: Simulation, fault: dict[str, Any]) -> str | None:
    """Apply one fault; returns an error message for a bad request, else ``None``."""
    kind = fault.get("kind")
    kubelet = sim.controllers.get("kubelet")
    if kind in ("kubelet-restart", "node-reboot", "node-not-ready", "node-ready", "runtime-down"):
        node = fault.get("node")
        if not node or sim.store.get(("", "nodes"), "", node) is None:
            return f"unknown node {node!r}"
        if kubelet is None:
            return "this simulation runs no kubelets"
        if kind in ("kubelet-restart", "node-reboot"):
            if kind == "node-reboot" and sim.faults.hosts.get(node) == "driver-mismatch":
                del sim.faults.hosts[node]  # the reboot loads the upgraded kernel module
            kubelet.restart_kubelet(node, reboot=kind == "node-reboot")
        elif kind == "runtime-down":
            kubelet.stop_runtime(node)
            if fault.get("duration"):
                sim.call_later(parse_duration(fault["duration"]), lambda: _heartbeat(sim, node, stop=False, duration=None))
        else:
            _heartbeat(sim, node, stop=kind == "node-not-ready", duration=fault.get("duration"))
    elif kind in HOST_FAULTS:
        refused = _host_fault(sim, str(kind), fault)
        if refused:
            return refused
    elif kind == "api-errors":
        code = int(fault.get("code", 500))
        if code not in (0, 429, 500, 503):
            return "code must be 500, 503, 429, or 0 with a delay for slow answers"
        sim.faults.api_errors.append(
            {
                "remaining": int(fault.get("count", 1)),
                "code": code,
                "delay": float(fault.get("delay", 0)),
                "path": fault.get("path"),
                "retry_after": int(fault.get("retry_after", 1)),
            }
        )
    elif kind == "compact":
        sim.store.compact()
    elif kind == "forbid":
        if not fault.get("path"):
            return "forbid needs a path prefix"
        sim.faults.forbidden.append({"path": fault["path"], "verb": fault.get("verb")})
    elif kind == "allow":
        sim.faults.forbidden.clear()
    elif kind == "feature-gate":
        sim.feature_gates[str(fault.get("name"))] = bool(fault.get("enabled"))
    elif kind in ("xid", "ecc"):
        exporters = sim.controllers.get("dcgm")
        if exporters is None:
            return "this simulation runs no dcgm-exporters"
        problem: str | None = exporters.inject(fault)
        if problem:
            return problem
    else:
        return (
            f"unknown fault kind {kind!r}: use kubelet-restart, node-reboot, node-not-ready, node-ready, runtime-down, "
            "driver-mismatch, no-container-toolkit, api-errors, compact, forbid, allow, feature-gate, xid or ecc"
        )
    sim.settle()
    return None


def _host_fault(sim: Simulation, kind: str, fault: dict[str, Any]) -> str | None:
    """``driver-mismatch`` / ``no-container-toolkit`` on a node, or its end (``repaired``)."""
    where = fault.get("node")
    if not where or sim.store.get(("", "nodes"), "", where) is None:
        return f"unknown node {where!r}"
    if not fault.get("repaired"):
        sim.faults.hosts[str(where)] = kind
    elif sim.faults.hosts.get(str(where)) == kind:
        del sim.faults.hosts[str(where)]
    return None


def _heartbeat(sim: Simulation, node: str, *, stop: bool, duration: str | None) -> None:
    """``node-not-ready``: the node's kubelet stops renewing its Lease (for ``duration``); the node
    lifecycle controller marks the node after its grace period (:mod:`kubesim.heartbeats`).
    ``node-ready``: the kubelet renews and posts Ready again."""
    beats = sim.controllers.get("nodeheartbeats")
    kubelet = sim.controllers["kubelet"]
    if beats is None:  # a simulation without heartbeats: the node controller's verdict at once
        kubelet.set_node_ready(node, not stop)
    elif not stop:
        beats.resume(node)
    else:
        beats.stop(node)
        if duration:
            sim.call_later(parse_duration(duration), lambda: beats.resume(node))


async def handle(sim: Simulation, request: web.Request) -> web.Response:
    path = request.path.rstrip("/")
    body: dict[str, Any] = {}
    if request.method == "POST":
        try:
            body = json.loads(await request.read() or b"{}")
        except ValueError:
            return _bad("the body must be JSON")
        if not isinstance(body, dict):
            return _bad("the body must be a JSON object")
    if path == "/sim/v1/faults" and request.method == "POST":
        problem = apply_fault(sim, body)
        return _bad(problem) if problem else _json({"applied": body})
    if path == "/sim/v1/clock":
        if request.method == "POST":
            try:
                seconds = parse_duration(body.get("advance", 0))
            except ValueError as exc:
                return _bad(str(exc))
            sim.advance(seconds)
        return _json({"now": sim.clock.now().isoformat().replace("+00:00", "Z")})
    if path == "/sim/v1/dcgm" and request.method == "GET":
        exporters = sim.controllers.get("dcgm")
        url = getattr(exporters, "url", "")
        config = exporters.config.as_json() if exporters is not None else {}
        return _json({"url": url, "targets": f"{url}/sim/v1/dcgm/targets" if url else "", "config": config})
    if path == "/sim/v1/dcgm/config" and request.method == "POST":
        exporters = sim.controllers.get("dcgm")
        if exporters is None:
            return _bad("this simulation runs no dcgm-exporters")
        try:
            exporters.config = ExporterConfig.of(body, base=exporters.config)
        except ValueError as exc:
            return _bad(str(exc))
        return _json(exporters.config.as_json())
    if path == "/sim/v1/registry":
        if request.method == "POST":
            images = body.get("images")
            if not isinstance(images, list) or not images or not all(isinstance(i, str) for i in images):
                return _bad('give the images to push as {"images": ["repository:tag", ...]}')
            try:
                pushed = [sim.registry.push(image) for image in images]
            except ValueError as exc:
                return _bad(str(exc))
            return _json({"pushed": pushed, "digests": {ref: sim.registry.digests()[ref] for ref in pushed}})
        return _json({"pushed": sim.registry.pushed, "digests": sim.registry.digests(),
                      "released": {r: list(t) for r, t in RELEASED.items()}})
    if path == "/sim/v1/gpu-operator" and request.method == "GET":
        operator = sim.controllers.get("gpu-operator")
        if operator is None:
            return _json({"error": "this simulation runs no GPU operator (scenario gpu-operator)"}, 404)
        sim.settle()  # what is queued for the operator runs first: the answer is up to date
        return _json({"namespace": operator.namespace, "reconciles": list(operator.reconciles)})
    if path == "/sim/v1/requests":
        log: Any = sim.reads if request.query.get("reads") == "true" else sim.mutations
        if request.method == "DELETE":
            log.clear()
        return _json({"items": list(log)})
    return _json({"error": f"no such control endpoint: {request.method} {path}"}, 404)
