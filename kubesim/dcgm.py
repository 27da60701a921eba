"""NVIDIA dcgm-exporter, simulated: GPU metrics per GPU node, driven by the simulation.

Each GPU node's exporter is its own scrape target, as a dcgm-exporter DaemonSet pod per node
is in a real cluster. They are served from ONE plain-HTTP listener on 127.0.0.1 (a cluster
of thousands of nodes needs no thousands of ports), one path per node:

- ``GET /sim/v1/dcgm/<node>/metrics``: the node's exporter, in the text exposition format;
- ``GET /sim/v1/dcgm/targets``: every GPU node as a target in Prometheus' HTTP service
  discovery format (``http_sd_configs``, Prometheus >= 2.28): the listener's address, the
  node's path as ``__metrics_path__``, ``instance`` and ``node`` set to the node's name (a
  plain scrape configuration);
- ``GET /sim/v1/dcgm/targets?scrape=servicemonitor``: the same targets with the labels the
  Prometheus Operator gives a ServiceMonitor's endpoint (the GPU operator's
  ``nvidia-dcgm-exporter``: ``namespace``, ``service``, ``pod``, ``container``, ``endpoint``,
  ``instance`` = the exporter pod's IP:9400). Scraped with ``honor_labels: false`` (the
  ServiceMonitor's default), Prometheus renames the exporter's own ``pod``, ``namespace`` and
  ``container`` to ``exported_pod``, ``exported_namespace`` and ``exported_container``.

What each exporter exports is :class:`~kubesim.dcgmprofiles.ExporterConfig` (``POST
/sim/v1/dcgm/config``): the fields of NVIDIA's counters CSV of its profile (``default`` or
``dcp``), with their types and help strings, plus the commented-out ones the simulation
enables; the node label of its release (``Hostname``, or ``hostname``); labels ``gpu``,
``UUID``, ``pci_bus_id``, ``device``, ``modelName``, the node label, ``DCGM_FI_DRIVER_VERSION``
(the node's driver), and ``container``/``namespace``/``pod`` on a GPU a running pod was given,
in the order dcgm-exporter's template prints them. Values follow the simulated clock:

- ``DCGM_FI_DEV_GPU_UTIL``: 0 on an idle GPU; a GPU of a running pod is busy, at a level
  seeded by the pod's namespace and name (55..90 %, a few points of wobble per simulated
  minute). A pod's GPUs are those its ResourceClaims were allocated (device ``gpu-<i>`` is
  GPU ``i``), then for ``nvidia.com/gpu`` the lowest free indexes, pods in creation order.
  A running container keeps its GPUs busy when the device plugin or DRA driver that gave
  them goes away: the kubelet does not take devices back from running containers.
- ``DCGM_FI_DEV_XID_ERRORS`` (gauge): the code of the last XID the GPU raised, 0 before any.
  ``DCGM_EXP_XID_ERRORS_COUNT`` (only when enabled): the GPU's XIDs in the last
  ``xid_window_ms`` simulated milliseconds, one series per code (``xid``), 0 without ``xid``
  when none. A device or DRA plugin whose image tag ends in ``-xid`` raises XID 79 (GPU has
  fallen off the bus) on GPU 0 of its node when its container starts and every
  :data:`XID_EVERY` simulated seconds while it runs; ``POST /sim/v1/faults`` ``{"kind":
  "xid", "node", "code"=79, "gpu"=0}`` raises one.
- ``DCGM_FI_DEV_ECC_DBE_VOL_TOTAL`` (counter, only when enabled: both CSVs comment it out):
  double-bit volatile ECC errors, raised by ``{"kind": "ecc", "node", "gpu"=0, "count"=1}``.
- the other fields: steady values that follow the GPU's utilisation (clocks, temperatures,
  power, framebuffer), 0 for the error counters kubesim does not simulate.

Prometheus stamps samples with its own (real) time: the values are what the exporter reads
at the simulated "now" of the scrape, so a clock advanced by 24 h shows a day's XIDs at once.
"""

from __future__ import annotations

import collections
import hashlib
import ipaddress
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from kubesim import dra
from kubesim.clock import parse_time
from kubesim.dcgmprofiles import XID_COUNT, ExporterConfig
from kubesim.devices import container_kind
from kubesim.podstatus import GPU, image_tag
from kubesim.simulation import Simulation
from kubesim.store import WatchEvent

PODS = ("", "pods")
NODES = ("", "nodes")
PREFIX = "/sim/v1/dcgm"
XID_TAG = "-xid"
XID_FALLEN_OFF_BUS = 79
XID_EVERY = 600.0
"""Simulated seconds between two XIDs of a running ``-xid`` plugin."""
PRODUCT_LABEL = "nvidia.com/gpu.product"
DRIVER_LABEL = "nvidia.com/cuda.driver-version.full"
DEFAULT_MODEL = "NVIDIA A100-SXM4-80GB"

GPU_OPERATOR_NAMESPACE = "gpu-operator"
EXPORTER = "nvidia-dcgm-exporter"
"""The GPU operator's exporter: DaemonSet, Service, ServiceMonitor and container name
(``assets/state-dcgm-exporter/`` of NVIDIA/gpu-operator v26.7.0), its Service port ``gpu-metrics``."""
EXPORTER_PORT = 9400
DOUBLES = frozenset({"DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
                     "DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_SM_OCCUPANCY",
                     "DCGM_FI_PROF_PIPE_FP64_ACTIVE", "DCGM_FI_PROF_PIPE_FP32_ACTIVE", "DCGM_FI_PROF_PIPE_FP16_ACTIVE"})
"""DCGM fields of type double: dcgm-exporter prints them with Go's ``%f`` (``toString``)."""
_POD_SUFFIX = "bcdfghjklmnpqrstvwxz2456789"
"""The characters of a generated pod name's suffix (Kubernetes' ``utilrand`` alphabet)."""


@dataclass
class XidRun:
    """A running ``-xid`` plugin container: XIDs from ``start`` until ``end`` (open while running)."""

    node: str
    start: float
    end: float | None = None

    def raised(self, now: float, *, since: float = float("-inf")) -> list[float]:
        """When it raised its XIDs, those after ``since`` and by ``now``: at its start, then every
        :data:`XID_EVERY` seconds while it ran."""
        until = now if self.end is None else min(now, self.end)
        if until < self.start:
            return []
        count = 1 + int((until - self.start) // XID_EVERY)
        first = 0 if since < self.start else max(0, int((since - self.start) // XID_EVERY) + 1)
        return [self.start + k * XID_EVERY for k in range(first, count)]


def _seed(*parts: object) -> int:
    """A stable number from ``parts`` (Python's ``hash`` changes with every process)."""
    text = "/".join(str(p) for p in parts)
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


def gpu_uuid(node: str, gpu: int) -> str:
    digest = hashlib.blake2b(f"{node}/{gpu}".encode(), digest_size=16).hexdigest()
    return f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def model_name(node_obj: dict[str, Any]) -> str:
    """The GPU's name as NVML says it: GFD's product label with its first dash a space again."""
    product = ((node_obj.get("metadata") or {}).get("labels") or {}).get(PRODUCT_LABEL)
    if not product:
        return DEFAULT_MODEL
    return product.replace("NVIDIA-", "NVIDIA ", 1)


def utilisation(ns: str, pod: str, gpu: int, now: float) -> int:
    """A running pod's GPU: busy at a level of its own, a few points up or down per minute."""
    base = 55 + _seed(ns, pod) % 36
    wobble = _seed(ns, pod, gpu, int(now // 60)) % 7 - 3
    return max(1, min(100, int(base + wobble)))


def gpu_requests(pod: dict[str, Any]) -> list[tuple[str, int]]:
    """(container, GPUs) for each container of ``pod`` that asks for ``nvidia.com/gpu``."""
    wanted = []
    for ctr in (pod.get("spec") or {}).get("containers") or []:
        resources = ctr.get("resources") or {}
        amount = (resources.get("limits") or {}).get(GPU) or (resources.get("requests") or {}).get(GPU)
        try:
            count = int(str(amount or 0))
        except ValueError:
            count = 0
        if count > 0:
            wanted.append((str(ctr.get("name")), count))
    return wanted


def _xid_containers(pod: dict[str, Any], content: Callable[[str], str] = lambda image: image) -> dict[str, float]:
    """Running plugin containers of ``pod`` whose image tag ends in ``-xid`` (a digest: the tag it was
    pushed as, ``content``): name -> started."""
    images = {
        c.get("name"): content(str(c.get("image") or ""))
        for c in (pod.get("spec") or {}).get("containers") or []
    }
    running: dict[str, float] = {}
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        image = images.get(status.get("name"), "")
        if not image_tag(image).endswith(XID_TAG) or container_kind(image) == "generic":
            continue
        started = parse_time(((status.get("state") or {}).get("running") or {}).get("startedAt"))
        if started is not None:
            running[str(status.get("name"))] = started.timestamp()
    return running


class DcgmExporters:
    """The exporters of every GPU node: XID and ECC history, and the metrics read from the store."""

    def __init__(self) -> None:
        self.sim: Simulation | None = None
        self.url = ""
        """``http://127.0.0.1:<port>`` once :func:`serve` listens."""
        self._runs: dict[str, dict[str, XidRun]] = {}
        """pod uid -> container -> its latest run (``-xid`` plugin containers)."""
        self._node_runs: dict[str, list[XidRun]] = {}
        self._gpu_pods: dict[str, dict[str, tuple[str, str]]] = {}
        """node -> pod uid -> (namespace, name) of the pods there that ask for GPUs."""
        self._injected: dict[tuple[str, int], list[tuple[float, int]]] = {}
        self._ecc: dict[tuple[str, int], int] = {}
        self.config = ExporterConfig()
        """What every exporter exports (``POST /sim/v1/dcgm/config``)."""

    # ------------------------------------------------------------ the simulation
    def start(self, sim: Simulation) -> None:
        self.sim = sim
        for pod in sim.store.iter(PODS):
            self._observe(pod, deleted=False)
        sim.store.subscribe(self._on_event)

    def _on_event(self, res: Any, event: WatchEvent) -> None:
        if res.group_resource == PODS:
            self._observe(event.obj, deleted=event.type == "DELETED")

    def _observe(self, pod: dict[str, Any], *, deleted: bool) -> None:
        assert self.sim is not None
        meta = pod.get("metadata") or {}
        uid, node = str(meta.get("uid")), (pod.get("spec") or {}).get("nodeName")
        if node and (gpu_requests(pod) or dra.pod_claim_refs(pod)):
            pods = self._gpu_pods.setdefault(node, {})
            if deleted:
                pods.pop(uid, None)
            else:
                pods[uid] = (str(meta.get("namespace")), str(meta.get("name")))
        running = {} if deleted or not node else _xid_containers(pod, self.sim.registry.content)
        runs = self._runs.get(uid)
        if runs is None and not running:
            return
        runs = self._runs.setdefault(uid, {})
        now = self.sim.clock.time()
        for name, run in runs.items():
            if run.end is None and name not in running:
                run.end = now
        for name, started in running.items():
            latest = runs.get(name)
            if latest is None or (latest.end is not None and started > latest.end):
                runs[name] = XidRun(str(node), started)
                self._node_runs.setdefault(str(node), []).append(runs[name])
        if deleted:
            self._runs.pop(uid, None)

    def gpus(self, node: str) -> int:
        assert self.sim is not None
        kubelet = self.sim.controllers.get("kubelet")
        return int(getattr(kubelet, "gpus", {}).get(node, 0))

    def gpu_nodes(self) -> list[str]:
        assert self.sim is not None
        names = (n["metadata"]["name"] for n in self.sim.store.iter(NODES))
        return [name for name in names if self.gpus(name) > 0]

    # ------------------------------------------------------------ faults
    def inject(self, fault: dict[str, Any]) -> str | None:
        """``xid`` ``{node, code=79, gpu=0}`` or ``ecc`` ``{node, gpu=0, count=1}``; a message if bad."""
        assert self.sim is not None
        node = fault.get("node")
        if not node or self.sim.store.get(NODES, "", str(node)) is None:
            return f"unknown node {node!r}"
        count = self.gpus(str(node))
        if not count:
            return f"node {node!r} has no GPUs"
        gpu, code, times = fault.get("gpu", 0), fault.get("code", XID_FALLEN_OFF_BUS), fault.get("count", 1)
        if not isinstance(gpu, int) or isinstance(gpu, bool) or not 0 <= gpu < count:
            return f"gpu must be an index from 0 to {count - 1}"
        key, now = (str(node), gpu), self.sim.clock.time()
        if fault["kind"] == "xid":
            if not isinstance(code, int) or isinstance(code, bool) or not 1 <= code <= 999:
                return "code must be an XID number from 1 to 999"
            self._injected.setdefault(key, []).append((now, code))
            return None
        if not isinstance(times, int) or isinstance(times, bool) or not 1 <= times <= 1_000_000:
            return "count must be a number from 1 to 1000000"
        self._ecc[key] = self._ecc.get(key, 0) + times
        return None

    # ------------------------------------------------------------ reading
    def xids(self, node: str, gpu: int, now: float, *, since: float = float("-inf")) -> list[tuple[float, int]]:
        """(when, XID code) of each XID the GPU raised after ``since`` and by ``now``, oldest first."""
        seen = [(when, code) for when, code in self._injected.get((node, gpu), ()) if since < when <= now]
        if gpu == 0:
            for run in self._node_runs.get(node, ()):
                seen += [(when, XID_FALLEN_OFF_BUS) for when in run.raised(now, since=since)]
        return sorted(seen)

    def assignments(self, node: str, gpus: int) -> dict[int, tuple[str, str, str]]:
        """GPU index -> (namespace, pod, container) for the running pods given GPUs on ``node``:
        their claims' devices first, then ``nvidia.com/gpu`` on the lowest free indexes. A running
        container keeps the devices it was given whatever becomes of the plugin or driver that
        gave them (the kubelet never takes them back: kubernetes#118635)."""
        assert self.sim is not None
        pods = []
        for uid in self._gpu_pods.get(node, {}):
            pod = self.sim.store.by_uid(uid)
            if pod is not None and (pod.get("status") or {}).get("phase") == "Running":
                meta = pod["metadata"]
                pods.append((str(meta.get("creationTimestamp")), str(meta["namespace"]), str(meta["name"]), pod))
        pods.sort(key=lambda p: p[:3])
        given: dict[int, tuple[str, str, str]] = {}
        for _, ns, name, pod in pods:
            for index, _driver, ctr in self._claimed(pod, node):
                if 0 <= index < gpus and index not in given:
                    given[index] = (ns, name, ctr)
        free = [i for i in range(gpus) if i not in given]
        for _, ns, name, pod in pods:
            for ctr, count in gpu_requests(pod):
                taken, free = free[:count], free[count:]
                for index in taken:
                    given[index] = (ns, name, ctr)
        return given

    def _claimed(self, pod: dict[str, Any], node: str) -> list[tuple[int, str, str]]:
        """(GPU index, driver, container) of each device on ``node`` allocated to the pod's claims."""
        assert self.sim is not None
        ns = pod["metadata"]["namespace"]
        users: dict[str, str] = {}
        for ctr in (pod.get("spec") or {}).get("containers") or []:
            for ref in (ctr.get("resources") or {}).get("claims") or []:
                users.setdefault(str(ref.get("name")), str(ctr.get("name")))
        out = []
        for pod_claim, claim_name in dra.resolved_claim_names(pod, self.sim.minor).items():
            claim = self.sim.store.get(dra.CLAIMS, ns, claim_name) if claim_name else None
            for driver, pool, device in dra.allocated_devices(claim or {}):
                index = device.removeprefix("gpu-")
                if pool == node and index.isdigit():
                    out.append((int(index), driver, users.get(pod_claim, "")))
        return out

    def metrics_text(self, node: str) -> str | None:
        """The node's exporter page, or None for a node without GPUs (no exporter there)."""
        assert self.sim is not None
        node_obj = self.sim.store.get(NODES, "", node)
        gpus = self.gpus(node)
        if node_obj is None or not gpus:
            return None
        config, now = self.config, self.sim.clock.time()
        given = self.assignments(node, gpus)
        model = model_name(node_obj)
        driver = ((node_obj.get("metadata") or {}).get("labels") or {}).get(DRIVER_LABEL, "")
        series = config.series()
        rows: dict[str, list[str]] = {c.name: [] for c in series}
        for gpu in range(gpus):
            head = {"gpu": str(gpu), "UUID": gpu_uuid(node, gpu), "pci_bus_id": f"00000000:{0x10 + gpu:02X}:00.0",
                    "device": f"nvidia{gpu}", "modelName": model, config.node_label: node}
            labels = {c.name: driver for c in config.labels() if c.name == "DCGM_FI_DRIVER_VERSION" and driver}
            attributes: dict[str, str] = {}
            util = 0
            if gpu in given:
                ns, pod, ctr = given[gpu]
                attributes = {"container": ctr, "namespace": ns, "pod": pod}
                util = utilisation(ns, pod, gpu, now)
            xids = self.xids(node, gpu, now)
            values = _Gpu(node=node, gpu=gpu, util=util, model=model, now=now, last_xid=xids[-1][1] if xids else 0,
                          ecc=self._ecc.get((node, gpu), 0)).values()
            text = _labels({**head, **labels, **attributes})
            for counter in series:
                if counter.name == XID_COUNT:
                    window = {**labels, "window_size_in_ms": str(config.xid_window_ms)}
                    since = now - config.xid_window_ms / 1000
                    recent = collections.Counter(code for when, code in xids if when > since)
                    counted: list[tuple[int | None, int]] = [*sorted(recent.items())] or [(None, 0)]
                    for code, count in counted:
                        extra = window if code is None else {**window, "xid": str(code)}
                        rows[counter.name].append(f"{_labels({**head, **extra, **attributes})} {count}")
                    continue
                rows[counter.name].append(f"{text} {values.get(counter.name, '0.000000' if counter.name in DOUBLES else '0')}")
        out = []
        for counter in series:
            out += [f"# HELP {counter.name} {counter.help}", f"# TYPE {counter.name} {counter.kind}"]
            out += [f"{counter.name}{row}" for row in rows[counter.name]]
        return "\n".join(out) + "\n"

    def targets(self, *, scrape: str = "plain") -> list[dict[str, Any]]:
        """Prometheus HTTP SD: one target per GPU node, all on this listener; ``scrape``
        ``servicemonitor``: with the target labels the Prometheus Operator gives the GPU
        operator's ServiceMonitor (the exporter pod's own ``pod``/``namespace``/``container``)."""
        assert self.sim is not None
        address = self.url.removeprefix("http://")
        out = []
        for node in self.gpu_nodes():
            labels = {"__metrics_path__": f"{PREFIX}/{node}/metrics"}
            if scrape == "servicemonitor":
                node_obj = self.sim.store.get(NODES, "", node) or {}
                labels.update({"instance": f"{exporter_pod_ip(node_obj)}:{EXPORTER_PORT}",
                               "namespace": GPU_OPERATOR_NAMESPACE, "service": EXPORTER,
                               "pod": exporter_pod_name(node), "container": EXPORTER, "endpoint": "gpu-metrics"})
            else:
                labels.update({"instance": node, "node": node})
            out.append({"targets": [address], "labels": labels})
        return out


@dataclass(frozen=True)
class _Gpu:
    """One GPU as its exporter reads it now: the values of the fields kubesim does not drive."""

    node: str
    gpu: int
    util: int
    model: str
    now: float
    last_xid: int
    ecc: int

    def values(self) -> dict[str, str]:
        """Each field kubesim gives a value, as the exporter prints it (the rest read 0)."""
        temp = 31 + _seed(self.node, self.gpu) % 6 + self.util * 2 // 5
        memory = _memory_mib(self.model)
        used = 0 if not self.util else memory // 4 + self.util * memory // 200
        power = 60.0 + 3.1 * self.util + _seed(self.node, self.gpu) % 10
        ints = {
            "DCGM_FI_DEV_GPU_UTIL": self.util, "DCGM_FI_DEV_GPU_TEMP": temp, "DCGM_FI_DEV_MEMORY_TEMP": temp + 4,
            "DCGM_FI_DEV_XID_ERRORS": self.last_xid, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": self.ecc,
            "DCGM_FI_DEV_SM_CLOCK": 1410 if self.util else 210, "DCGM_FI_DEV_MEM_CLOCK": 1593,
            "DCGM_FI_DEV_MEM_COPY_UTIL": self.util // 3, "DCGM_FI_DEV_FB_RESERVED": 594,
            "DCGM_FI_DEV_FB_USED": used, "DCGM_FI_DEV_FB_FREE": memory - 594 - used,
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": int(self.now * 60_000) % 10**15,
            "DCGM_FI_PROF_PCIE_TX_BYTES": self.util * 1_200_000, "DCGM_FI_PROF_PCIE_RX_BYTES": self.util * 3_400_000,
        }
        doubles = {"DCGM_FI_DEV_POWER_USAGE": power, "DCGM_FI_PROF_GR_ENGINE_ACTIVE": self.util / 100,
                   "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": self.util / 250, "DCGM_FI_PROF_DRAM_ACTIVE": self.util / 200,
                   "DCGM_FI_PROF_SM_ACTIVE": self.util / 110}
        return {**{name: str(value) for name, value in ints.items()},
                **{name: f"{value:f}" for name, value in doubles.items()}}


def _memory_mib(model: str) -> int:
    """The framebuffer of a GPU named ``model`` (``...-80GB``), 80 GiB when its name does not say."""
    match = re.search(r"(\d+)GB", model)
    return int(match.group(1)) * 1024 if match else 80 * 1024


def exporter_pod_name(node: str) -> str:
    """The GPU operator's exporter pod on ``node``: the DaemonSet's name and a 5-character suffix."""
    seed = _seed("dcgm-exporter", node)
    return f"{EXPORTER}-" + "".join(_POD_SUFFIX[(seed >> (5 * i)) % len(_POD_SUFFIX)] for i in range(5))


def exporter_pod_ip(node_obj: dict[str, Any]) -> str:
    """The exporter pod's IP: an address of the node's pod CIDR (``.200`` of its /24)."""
    cidr = str((node_obj.get("spec") or {}).get("podCIDR") or "10.244.0.0/24")
    return str(ipaddress.ip_network(cidr, strict=False).network_address + 200)


def _labels(labels: dict[str, str]) -> str:
    def escape(value: str) -> str:
        return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

    return "{" + ",".join(f'{k}="{escape(v)}"' for k, v in labels.items()) + "}"


def app(exporters: DcgmExporters) -> web.Application:
    """The listener's routes (read-only, no authentication, as dcgm-exporter's port 9400)."""

    async def targets(request: web.Request) -> web.Response:
        scrape = request.query.get("scrape", "plain")
        if scrape not in ("plain", "servicemonitor"):
            return web.Response(status=400, text="scrape must be plain or servicemonitor\n")
        return web.Response(text=json.dumps(exporters.targets(scrape=scrape)), content_type="application/json")

    async def metrics(request: web.Request) -> web.Response:
        text = exporters.metrics_text(request.match_info["node"])
        if text is None:
            return web.Response(status=404, text=f"no dcgm-exporter on node {request.match_info['node']!r}\n")
        return web.Response(text=text, content_type="text/plain", charset="utf-8",
                            headers={"Cache-Control": "no-store"})

    application = web.Application()
    application.router.add_get(f"{PREFIX}/targets", targets)
    application.router.add_get(PREFIX + "/{node}/metrics", metrics)
    return application


async def serve(exporters: DcgmExporters, *, port: int = 0) -> web.AppRunner:
    """Listen on 127.0.0.1:``port`` (0: a free one); sets ``exporters.url``. Clean up the runner to stop."""
    runner = web.AppRunner(app(exporters), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    sockets = getattr(site._server, "sockets", None) or []
    exporters.url = f"http://127.0.0.1:{sockets[0].getsockname()[1] if sockets else port}"
    return runner

