"""Which DaemonSets are GPU device plugins or DRA kubelet plugins, and what their logs say.

Pure except :func:`read_registrations`, which reads pod logs through the adapter. Plugin
DaemonSets are the configured targets when there are any, else recognised by known
names, labels and images; a DaemonSet whose every container runs GFD, the MPS control daemon
or config-manager (or whose labels name one of them) is none, though it runs the plugin's
image and, in NVIDIA's Helm chart, carries the plugin's own labels
(:mod:`runbooks.plugin_containers`). A DRA kubelet plugin's drivers are found in its pod
template, container by container (``--driver-name``, a ``DRIVER_NAME`` env value, a program
serving a fixed driver such as NVIDIA's ``gpu-kubelet-plugin``, a known driver named), else
in its logs. Its registration is seen in its ResourceSlices (:mod:`runbooks.inventory.registration`);
its log only supports.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from runbooks import log_lines
from runbooks.characters import shown
from runbooks.errors import ClusterError, Forbidden, InvalidRequest, NotFound
from runbooks.inventory.models import Node, PluginKind, PluginPod
from runbooks.inventory.reading import Obj
from runbooks.plugin_containers import companion_labels, is_companion, runs

DEVICE_PLUGIN_MARKERS = ("device-plugin", "deviceplugin", "gpu-plugin")
DRA_PLUGIN_MARKERS = ("kubeletplugin", "kubelet-plugin", "dra-driver", "dra-example-driver", "k8s-dra-driver")
REGISTERED = {
    # NVIDIA's "Registered device plugin for 'nvidia.com/gpu' with Kubelet", and the generic
    # "Registered device plugin with Kubelet" of Kubernetes' plugin examples (other vendors).
    "device-plugin": re.compile(r"Registered device plugin (?:for '[^']+' )?with Kubelet"),
    # A DRA driver's registration is seen in its ResourceSlices (runbooks.inventory.registration);
    # its log only supports: kubernetes/dynamic-resource-allocation's kubeletplugin logs the
    # registrar's "GRPC server started" at verbosity 3 (nonblockinggrpcserver.go), and nothing at 0.
    "dra-kubelet-plugin": re.compile(r'"GRPC server started" logger="registrar"'),
}
_DRIVER_IN_LOG = re.compile(r'driver="([^"]+)"')
_DRIVER_ARG = re.compile(r"--driver(?:-name)?[= ]([a-z0-9.-]+)")

LOG_BUDGET = 200
"""At most this many plugin-pod logs are read per inventory (suspects first)."""
LOG_WORKERS = 8
"""Logs are read this many at a time: the kubelet serves them, so a few in parallel."""
LOG_TAIL = 500
"""Lines read from the end of each log: the registration line follows start-up closely."""
UNREGISTERED_TAIL = 20
"""Lines kept of a log that did not show the registration (:attr:`LogResult.tail`)."""


def _haystack(ds: Obj) -> str:
    meta = ds.get("metadata") or {}
    template = ((ds.get("spec") or {}).get("template")) or {}
    labels = {**(meta.get("labels") or {}), **((template.get("metadata") or {}).get("labels") or {})}
    images = [c.get("image", "") for c in (template.get("spec") or {}).get("containers") or []]
    return " ".join([meta.get("name", ""), *labels.values(), *images]).lower()


def _companion(ds: Obj) -> bool:
    """Every container runs GFD, the MPS control daemon or config-manager, or the labels name one."""
    template = ((ds.get("spec") or {}).get("template")) or {}
    containers = (template.get("spec") or {}).get("containers") or []
    labels = {**((ds.get("metadata") or {}).get("labels") or {}), **((template.get("metadata") or {}).get("labels") or {})}
    return (bool(containers) and all(is_companion(c) for c in containers)) or companion_labels(labels)


def classify(ds: Obj) -> PluginKind | None:
    """``dra-kubelet-plugin``, ``device-plugin``, or ``None`` for anything else (GFD and the MPS
    control daemon on the plugin's image included)."""
    if _companion(ds):
        return None
    text = _haystack(ds)
    if any(m in text for m in DRA_PLUGIN_MARKERS):
        return "dra-kubelet-plugin"
    if any(m in text for m in DEVICE_PLUGIN_MARKERS):
        return "device-plugin"
    return None


def ref_of(ds: Obj) -> str:
    meta = ds.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


@dataclass(frozen=True)
class Selection:
    plugins: list[tuple[Obj, PluginKind]]
    missing_targets: list[str]


def select_plugins(daemonsets: Sequence[Obj], targets: Sequence[str], known_drivers: Iterable[str]) -> Selection:
    """The plugin DaemonSets: every recognised one, or the configured ``targets`` plus the
    recognised DRA kubelet plugins when the cluster has DRA drivers (the classes are judged
    by whether their driver's plugin runs, whatever the targets)."""
    drivers = set(known_drivers)
    recognised: list[tuple[Obj, PluginKind]] = []
    for ds in daemonsets:
        kind = classify(ds)
        if kind is None and template_drivers(ds, drivers):
            kind = "dra-kubelet-plugin"
        if kind is not None:
            recognised.append((ds, kind))
    if not targets:
        return Selection(recognised, [])
    by_ref = {ref_of(ds): ds for ds in daemonsets}
    chosen = [(by_ref[t], classify(by_ref[t]) or _by_drivers(by_ref[t], drivers)) for t in targets if t in by_ref]
    if drivers:
        chosen += [(ds, kind) for ds, kind in recognised if kind == "dra-kubelet-plugin" and ref_of(ds) not in targets]
    return Selection(chosen, [t for t in targets if t not in by_ref])


def _by_drivers(ds: Obj, drivers: set[str]) -> PluginKind:
    return "dra-kubelet-plugin" if template_drivers(ds, drivers) else "device-plugin"


PROGRAM_DRIVERS = {
    # NVIDIA/k8s-dra-driver-gpu (v25.x): the kubelet-plugin DaemonSet's containers run these
    # (templates/kubeletplugin.yaml); each program's DriverName is in cmd/<program>/main.go.
    "gpu-kubelet-plugin": "gpu.nvidia.com",
    "compute-domain-kubelet-plugin": "compute-domain.nvidia.com",
}
"""Kubelet-plugin programs that serve a fixed driver, which their pod template then never names."""
_PROGRAM = re.compile(r"(?<![\w.-])(" + "|".join(map(re.escape, PROGRAM_DRIVERS)) + r")(?![\w.-])")
DRIVER_ENV = ("DRIVER_NAME",)
"""Env variables whose literal value is the driver's name (kubernetes-sigs/dra-example-driver's chart)."""


def container_drivers(ds: Obj, known: set[str]) -> dict[str, list[str]]:
    """``{container: drivers}`` of the pod template's containers: ``--driver-name=…``, a
    ``DRIVER_NAME`` env value, a program of :data:`PROGRAM_DRIVERS`, or a known driver named in
    its command, args or env."""
    spec = (((ds.get("spec") or {}).get("template")) or {}).get("spec") or {}
    out: dict[str, list[str]] = {}
    for c in spec.get("containers") or []:
        text = json.dumps([c.get("command"), c.get("args"), c.get("env")])
        found = set(_DRIVER_ARG.findall(text)) | {d for d in known if d and d in text}
        found |= {str(e.get("value")) for e in c.get("env") or [] if e.get("name") in DRIVER_ENV and e.get("value")}
        found |= {PROGRAM_DRIVERS[p] for p in _PROGRAM.findall(runs(c))}
        out[str(c.get("name", ""))] = sorted(found)
    return out


def template_drivers(ds: Obj, known: set[str]) -> list[str]:
    """DRA drivers the pod template names (:func:`container_drivers` of all its containers)."""
    return sorted({d for found in container_drivers(ds, known).values() for d in found})


def serving(ds: Obj, drivers: Iterable[str], *, container: str | None = None) -> dict[str, list[str]]:
    """``{driver: the containers serving it}`` (none known: ``[]``, the whole pod); with
    ``container`` (a canary's), only the drivers it serves, when it serves any."""
    by_container = container_drivers(ds, set(drivers))
    out = {d: sorted(c for c, found in by_container.items() if d in found) for d in drivers}
    if container is not None:
        own = {d: c for d, c in out.items() if container in c}
        if own:
            return {d: [container] for d in own}
    return out


# ------------------------------------------------------------------------------ logs
@dataclass(frozen=True)
class LogRead:
    daemonset: str
    namespace: str
    pod: str
    containers: list[str]
    kind: PluginKind
    pattern: str | None = None
    """The registration line to look for (the policy's, for this target); None: the kind's default."""


@dataclass(frozen=True)
class LogResult:
    registered: bool | None
    drivers: list[str]
    problem: str | None = None
    tail: tuple[str, ...] = ()
    """A log that did not show the registration: its last :data:`UNREGISTERED_TAIL` lines (secrets
    scrubbed, each shown: :func:`runbooks.log_lines.tail`), for the failure signatures of a plugin
    that runs unregistered and the evidence of its failure (issue 61 item 3)."""
    errors: tuple[str, ...] = ()
    """Such a log's error and warning lines (:func:`runbooks.log_lines.errors`), the newest."""
    read: bool = True
    """False: the log could not be read (``problem`` says why)."""


REGISTRATIONS_KEPT = 50_000
"""The most plugin pods a :class:`Registrations` keeps (one per node and plugin of a large cluster)."""


class Registrations:
    """What the logs of plugin pods that registered showed, kept by what makes it still true: the
    pod (its uid) and its containers not restarted since (their restarts), read with the same
    pattern. A container's log only grows, so a registration once seen stays seen until the
    container starts again (a new uid or another restart count: read again). A log that did not
    show it is never kept: it is read again next time. Thread-safe; at most
    :data:`REGISTRATIONS_KEPT` pods (beyond, it starts again empty)."""

    def __init__(self, limit: int = REGISTRATIONS_KEPT) -> None:
        self.limit = limit
        self._kept: dict[tuple[object, ...], LogResult] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _key(pod: PluginPod, read: LogRead) -> tuple[object, ...] | None:
        if not pod.uid:
            return None
        return (read.namespace, read.pod, pod.uid, pod.restarts, tuple(read.containers), read.kind, read.pattern)

    def get(self, pod: PluginPod, read: LogRead) -> LogResult | None:
        key = self._key(pod, read)
        with self._lock:
            return self._kept.get(key) if key is not None else None

    def keep(self, pod: PluginPod, read: LogRead, result: LogResult) -> None:
        key = self._key(pod, read)
        if key is None or result.registered is not True or result.problem:
            return
        with self._lock:
            if len(self._kept) >= self.limit:
                self._kept.clear()
            self._kept[key] = result


def suspicion(pod: PluginPod, nodes: dict[str, Node]) -> int:
    """Higher for pods whose registration is in doubt; 0 for a pod that looks healthy."""
    node = nodes.get(pod.node)
    score = 0
    if pod.crashloop:
        score += 8
    if not pod.ready:
        score += 4
    if pod.restarts:
        score += 2
    if node is not None and node.gpu_hardware and any(
        node.allocatable.get(r, 0) < c or node.allocatable.get(r, 0) == 0 for r, c in node.capacity.items()
    ):
        score += 4
    return score


def choose_logs(
    pods: list[tuple[PluginPod, LogRead]], nodes: dict[str, Node], budget: int = LOG_BUDGET
) -> list[tuple[PluginPod, LogRead]]:
    """All pods when they fit the budget; else one Ready pod per DaemonSet (its log names
    the driver), then the most suspect, up to the budget."""
    if len(pods) <= budget:
        return pods
    chosen: dict[tuple[str, str], tuple[PluginPod, LogRead]] = {}
    covered: set[str] = set()
    for pod, read in sorted(pods, key=lambda item: not item[0].ready):
        if read.daemonset not in covered:
            covered.add(read.daemonset)
            chosen[(read.namespace, read.pod)] = (pod, read)
    for pod, read in sorted(pods, key=lambda item: -suspicion(item[0], nodes)):
        if len(chosen) >= budget:
            break
        chosen.setdefault((read.namespace, read.pod), (pod, read))
    return list(chosen.values())


def drivers_by_slices(pod_nodes: set[str], slice_nodes: dict[str, set[str]]) -> list[str]:
    """Drivers that published ResourceSlices on nodes where the DaemonSet runs pods."""
    return sorted(driver for driver, nodes in slice_nodes.items() if nodes & pod_nodes)


def read_registrations(
    reads: list[LogRead],
    read_log: Callable[[str, str, str], str],
    *,
    workers: int = LOG_WORKERS,
) -> dict[tuple[str, str], LogResult]:
    """``{(namespace, pod): LogResult}``; a forbidden log stops the reads, with the reason."""
    if not reads:
        return {}

    def one(read: LogRead) -> LogResult:
        pattern = re.compile(read.pattern) if read.pattern else REGISTERED[read.kind]
        texts = []
        for container in read.containers:
            try:
                texts.append(read_log(read.namespace, read.pod, container))
            except (InvalidRequest, NotFound):
                texts.append("")  # not started (crash loop, creating) or gone: no registration
        text = "\n".join(texts)
        found = bool(pattern.search(text))
        # a DRA kubelet plugin logs its registration only at verbosity 3 and above: without the
        # line (and without a policy pattern) its log proves nothing either way
        registered = True if found else (None if read.kind == "dra-kubelet-plugin" and not read.pattern else False)
        tail = () if found else tuple(log_lines.tail(text, lines=UNREGISTERED_TAIL))
        problems = () if found else tuple(log_lines.errors(text))
        quiet = None if registered is not None else (
            "a DRA kubelet plugin logs its registration only at verbosity 3 and above and this log shows none "
            "(the policy's registration: pattern names a line to require)")
        return LogResult(registered, sorted({shown(d) for d in _DRIVER_IN_LOG.findall(text)}), problem=quiet,
                         tail=tail, errors=problems)

    results: dict[tuple[str, str], LogResult] = {}
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(reads)))) as pool:
        futures = [(r, pool.submit(one, r)) for r in reads]
        for read, future in futures:
            try:
                results[(read.namespace, read.pod)] = future.result()
            except Forbidden as exc:
                for later, pending in futures:
                    pending.cancel()
                    results.setdefault((later.namespace, later.pod), LogResult(None, [], str(exc), read=False))
                break
            except ClusterError as exc:
                results[(read.namespace, read.pod)] = LogResult(None, [], str(exc), read=False)
    return results
