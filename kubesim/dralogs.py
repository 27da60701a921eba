"""What DRA kubelet plugins print, line for line from their sources, at the klog verbosity the
container runs at (:func:`kubesim.dradrivers.verbosity`; a chart's default: the example driver's
sets none, so 0; NVIDIA's ``logVerbosity: "4"``).

The kubeletplugin helper (k8s.io/dynamic-resource-allocation v0.34.0, which both the example
driver v0.2.0 and NVIDIA's v25.8.1 vendor) logs its start at verbosity 3 only:
``draplugin.go:597`` ``"Starting"``, ``nonblockinggrpcserver.go:90`` ``"GRPC server started"``
with ``logger="dra"`` and ``logger="registrar"`` and the socket as ``endpoint``, and its
ResourceSlice controller's ``resourceslicecontroller.go:184``, ``:528`` and ``:543``. The kubelet's
calls to the registrar (``GetInfo``, ``NotifyRegistrationStatus``) are logged at the gRPC verbosity,
6, only, so a registration, first or after a kubelet restart, writes nothing below 6. No driver and
no library version logs ``registered=true``.

- The example driver (``cmd/dra-example-kubeletplugin``, tag v0.2.0) at 0: ``health.go``'s three
  lines when ``HEALTHCHECK_PORT`` is not negative (the chart sets 51515), nothing else; v0.1.0 has no
  health check and logs nothing at 0 (tags before v0.2.0).
- NVIDIA's ``gpu-kubelet-plugin`` (v25.8.1): ``nvlib.go:132`` per GPU, ``device_state.go:71``,
  ``health.go:100``; ``compute-domain-kubelet-plugin``: the IMEXDaemonsWithDNSNames driver check of
  ``device_state.go:668-687`` (the gate is on by default), ``device_state.go:81``, ``nvlib.go:220``
  per GPU that is not fabric-attached, the checkpoint line (``:138`` on the node's first start,
  ``:133`` after), ``health.go:100``. Left out: ``LogStartupConfig``'s go-spew dump of the flags
  (``pkg/flags/utils.go``) and the CDI library's and client-go's own lines.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from kubesim import dradrivers
from kubesim.pluginlogs import Lines, klog

REGISTRAR_DIR, PLUGINS_DIR = "/var/lib/kubelet/plugins_registry", "/var/lib/kubelet/plugins"
IMEX_DNS_MIN_DRIVER = "570.158.01"
"""``IMEXDaemonsWithDNSNamesMinDriverVersion`` (cmd/compute-domain-kubelet-plugin/main.go, v25.8.1)."""
CHECKPOINT = "checkpoint.json"
HEALTH_PORTS = {dradrivers.EXAMPLE: "51515", dradrivers.NVIDIA_GPU: "51516", dradrivers.NVIDIA_COMPUTE_DOMAIN: "51515"}


def _at(start: dt.datetime, lines: Sequence[tuple[int, str, str]], verbosity: int, step: float = 0.0004) -> Lines:
    """(level, file:line, message) kept when ``level <= verbosity``, timed from ``start``."""
    kept = [(where, msg) for level, where, msg in lines if level <= verbosity]
    out = []
    for i, (where, msg) in enumerate(kept):
        moment = start + dt.timedelta(seconds=i * step)
        out.append((moment, klog(where[0], moment, where[1:], msg)))
    return out


def _helper(driver: str, container: Mapping[str, Any]) -> tuple[list[tuple[int, str, str]], list[tuple[int, str, str]]]:
    """The kubeletplugin helper's lines (v0.34.0): at Start, and once PublishResources starts its controller."""
    registrar = dradrivers.env_value(container, "KUBELET_REGISTRAR_DIRECTORY_PATH") or REGISTRAR_DIR
    plugins = dradrivers.env_value(container, "KUBELET_PLUGINS_DIRECTORY_PATH") or PLUGINS_DIR
    start = [
        (3, "Idraplugin.go:597", '"Starting"'),
        (3, "Inonblockinggrpcserver.go:90", f'"GRPC server started" logger="dra" endpoint="{plugins}/{driver}/dra.sock"'),
        (3, "Inonblockinggrpcserver.go:90",
         f'"GRPC server started" logger="registrar" endpoint="{registrar}/{driver}-reg.sock"'),
    ]
    slices = [
        (3, "Iresourceslicecontroller.go:184", '"Starting" logger="ResourceSlice controller"'),
        (3, "Iresourceslicecontroller.go:528",
         '"Starting ResourceSlice informer and waiting for it to sync" logger="ResourceSlice controller"'),
        (3, "Iresourceslicecontroller.go:543", '"ResourceSlice informer has synced" logger="ResourceSlice controller"'),
    ]
    return start, slices


def _tag(image: str) -> tuple[int, ...]:
    tag = image.rsplit(":", 1)[-1].lstrip("v").split("-", 1)[0]
    try:
        return tuple(int(p) for p in tag.split("."))
    except ValueError:
        return (9999,)


def _example(container: Mapping[str, Any], start: dt.datetime) -> Lines:
    """``dra-example-kubeletplugin``: NewDriver starts the helper, then the health check, then publishes."""
    if _tag(str(container.get("image", ""))) < (0, 2):
        return []  # v0.1.0: nothing at 0, and its library's (v0.32.0) lines are not modelled
    port = dradrivers.env_value(container, "HEALTHCHECK_PORT") or "-1"
    registrar = dradrivers.env_value(container, "KUBELET_REGISTRAR_DIRECTORY_PATH") or REGISTRAR_DIR
    plugins = dradrivers.env_value(container, "KUBELET_PLUGINS_DIRECTORY_PATH") or PLUGINS_DIR
    helper, slices = _helper(dradrivers.EXAMPLE, container)
    health: list[tuple[int, str, str]] = [] if port.startswith("-") else [
        (0, "Ihealth.go:70", f'"connecting to registration socket" path="unix://{registrar}/{dradrivers.EXAMPLE}-reg.sock"'),
        (0, "Ihealth.go:83", f'"connecting to DRA socket" path="unix://{plugins}/{dradrivers.EXAMPLE}/dra.sock"'),
        (0, "Ihealth.go:103", f'"starting healthcheck service" addr="[::]:{port}"'),
    ]
    return _at(start, [*helper, *health, *slices], dradrivers.verbosity(container))


def _nvidia_gpus(container: Mapping[str, Any], uuids: Sequence[str], start: dt.datetime) -> Lines:
    helper, slices = _helper(dradrivers.NVIDIA_GPU, container)
    port = dradrivers.env_value(container, "HEALTHCHECK_PORT") or HEALTH_PORTS[dradrivers.NVIDIA_GPU]
    lines = [
        *((0, "Invlib.go:132", f"Adding device gpu-{i} to allocatable devices") for i in range(len(uuids))),
        (0, "Idevice_state.go:71", "using devRoot=/driver-root"),
        *helper,
        (0, "Ihealth.go:100", f"starting healthcheck service at [::]:{port}"),
        *slices,
    ]
    return _at(start, lines, dradrivers.verbosity(container))


def _generic(version: str) -> str:
    """k8s.io/apimachinery's ``version.ParseGeneric(v).String()``: each part without leading zeros."""
    return ".".join(str(int(p)) for p in version.split("."))


def _compute_domains(container: Mapping[str, Any], uuids: Sequence[str], driver_version: str, start: dt.datetime,
                     *, first: bool) -> Lines:
    helper, slices = _helper(dradrivers.NVIDIA_COMPUTE_DOMAIN, container)
    port = dradrivers.env_value(container, "HEALTHCHECK_PORT") or HEALTH_PORTS[dradrivers.NVIDIA_COMPUTE_DOMAIN]
    found, wanted = _generic(driver_version), _generic(IMEX_DNS_MIN_DRIVER)
    lines: list[tuple[int, str, str]] = [
        (0, "Idevice_state.go:668", "Starting driver version validation for IMEXDaemonsWithDNSNames feature..."),
        (0, "Idevice_state.go:669", f"Minimum required version: {IMEX_DNS_MIN_DRIVER}"),
    ]
    if tuple(int(p) for p in found.split(".")) < tuple(int(p) for p in wanted.split(".")):
        lines += [
            (0, "Edevice_state.go:682",
             f"IMEXDaemonsWithDNSNames feature requires GPU driver version >= {wanted}, but found {found}"),
            (0, "Edevice_state.go:683", "If installed via helm, set featureGates.IMEXDaemonsWithDNSNames=false to disable"),
        ]
        return _at(start, lines, dradrivers.verbosity(container))
    lines += [
        (0, "Idevice_state.go:687", f"Driver version validation passed: {found} >= {wanted}"),
        (0, "Idevice_state.go:81", "using devRoot=/driver-root"),
        *((0, "Invlib.go:220", f"no-clique fallback: fabric not attached (device {i}/{uuid})") for i, uuid in enumerate(uuids)),
        (0, "Idevice_state.go:138", "Create empty checkpoint") if first else
        (0, "Idevice_state.go:133", f"Found previous checkpoint: {CHECKPOINT}"),
        *helper,
        (0, "Ihealth.go:100", f"starting healthcheck service at [::]:{port}"),
        *slices,
    ]
    return _at(start, lines, dradrivers.verbosity(container))


def started(container: Mapping[str, Any], driver: str, *, node: str, labels: Mapping[str, str], gpus: int,
            start: dt.datetime, first: bool) -> Lines:
    """A healthy plugin of ``driver`` starting on ``node`` (``first``: the node's first start of it)."""
    uuids = [dradrivers.gpu_uuid(node, i) for i in range(gpus)]
    if driver == dradrivers.NVIDIA_GPU:
        return _nvidia_gpus(container, uuids, start)
    if driver == dradrivers.NVIDIA_COMPUTE_DOMAIN:
        version = labels.get("nvidia.com/cuda.driver-version.full") or IMEX_DNS_MIN_DRIVER
        return _compute_domains(container, uuids, version, start, first=first)
    return _example(container, start)


def silent(container: Mapping[str, Any], start: dt.datetime) -> Lines:
    """A plugin that never gets to register (kubesim's ``-silent`` builds): stuck before its first
    line, so its log stays empty."""
    return []


def reregistered(container: Mapping[str, Any], start: dt.datetime) -> Lines:
    """After a kubelet restart the kubelet calls the registrar again: logged at the gRPC verbosity (6) only."""
    return []
