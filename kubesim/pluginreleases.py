"""What NVIDIA's k8s-device-plugin prints, release by release: start-up, registration and each
failure kubesim can cause, line for line from the plugin's source at its tag.

Each :class:`Family` holds the lines of one release family as read at its tag in
NVIDIA/k8s-device-plugin (``git show <tag>:<path>``): the klog level, ``file:line`` of the
klog header (klog prints the base name) and the message. docs/kubesim.md cites every line.

* ``v0.14`` (v0.14.0-v0.14.5: cmd/nvidia-device-plugin/main.go, plugin-manager.go,
  internal/plugin/manager/factory.go, internal/plugin/server.go are the same at each);
* ``v0.15`` (v0.15.0-v0.15.1, same lines);
* ``v0.17`` (v0.17.0-v0.17.4, same lines; internal/plugin/factory.go);
* ``v0.20`` (v0.20.0; its platform lines from cmd/nvidia-device-plugin/plugin-manager.go).

:func:`family` picks the family from the image's tag; a tag between families takes the nearest
older family (v0.16.x -> v0.15, v0.18.x and v0.19.x -> v0.17), one older than v0.14 takes v0.14,
one newer than v0.20 (or no version at all, ``latest``) takes v0.20.

What fails (:func:`failure`), in the order the plugin checks: an unknown device-list strategy, a
CDI strategy on a node without NVML (v0.15+), an unknown MIG strategy, then the node: no NVIDIA
Container Toolkit (``no-container-toolkit``: no NVML library in the container) or a driver whose
library and kernel module disagree (``driver-mismatch``: NVML's
``NVML_ERROR_LIB_RM_VERSION_MISMATCH``). The node's faults end the plugin only with
``FAIL_ON_INIT_ERROR`` true (the flag's default); with false the plugin waits, unregistered
(``No devices found. Waiting indefinitely.``). A ``-crash`` image exits on the FS watcher's
failure (inotify's ``too many open files``), the one start-up failure that needs no cluster
setting; a ``-silent`` one (or a node without GPUs) finds NVML and no device, and waits. One
whose device-plugin directory is mounted from another host directory serves its socket, finds no
kubelet.sock and logs its release's registration failure (:func:`unregistered`).
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubesim.pluginlogs import Lines, stamped

DIAL_TIMEOUT = 5.0
"""Seconds ``Register`` waits for kubelet.sock (``plugin.dial(kubeletSocket, 5*time.Second)``, a blocking
gRPC dial that ends in ``context deadline exceeded``)."""
SOCKET = "/var/lib/kubelet/device-plugins/nvidia-gpu.sock"
KUBELET_SOCKET = "/var/lib/kubelet/device-plugins/kubelet.sock"
DEVICE_PLUGIN_PATH = "/var/lib/kubelet/device-plugins/"
"""``pluginapi.DevicePluginPath`` (k8s.io/kubelet deviceplugin/v1beta1 constants.go:30, vendored)."""
RESOURCE = "nvidia.com/gpu"
HOST_FAULTS = ("driver-mismatch", "no-container-toolkit")
MIG_STRATEGIES = ("none", "single", "mixed")  # api/config/v1/consts.go
INOTIFY_FULL = "too many open files"
"""Go's text of EMFILE, which fsnotify.NewWatcher returns when inotify_init1 fails (the node's
``fs.inotify.max_user_instances`` used up)."""
NO_NVML = "could not load NVML library: libnvidia-ml.so.1: cannot open shared object file: No such file or directory"
"""go-nvlib info.go:59 ``could not load NVML library: %v`` with dlerror's text (glibc's wording)."""

HINTS = (
    "You can check the prerequisites at: https://github.com/NVIDIA/k8s-device-plugin#prerequisites",
    "You can learn how to set the runtime at: https://github.com/NVIDIA/k8s-device-plugin#quick-start",
    "If this is not a GPU node, you should set up a toleration or nodeSelector to only deploy this plugin on GPU nodes",
)
NVML_HINT = "If this is a GPU node, did you set the docker default runtime to `nvidia`?"
TOOLKIT_HINT = "If this is a GPU node, did you configure the NVIDIA Container Toolkit?"

COMMITS = {
    "v0.17.0": "d475b2cfcf12b983a4975d4fc59d91af432cf28e", "v0.17.1": "3c378193fcebf6e955f0d65bd6f2aeed099ad8ea",
    "v0.17.2": "390b1f6ae7b4301e65cf1744ccbbb8b0d0b1cc77", "v0.17.3": "e0a461e1e7ad1d239d4708c954f08c3038e2654a",
    "v0.17.4": "fd56a747defe15333adce40fcd3a06ffb129251b", "v0.18.0": "3c9ffca9491f0d2d362a7064138dfcd71bb57592",
    "v0.18.1": "dfcf72838b8839c7a0fd9bc9d21fe8d46bed2111", "v0.18.2": "fb1242add205d8563f9c604b8ba239607b4083e6",
    "v0.19.0": "1ae8e5f02a47ad80e2b4fcc6c35a757c61ddd81f", "v0.19.1": "b24f243ba9183df5727f38e758d968c7e6f91014",
    "v0.19.2": "5939c7a14ed94eb6c848cb3ace75561fc6f5dd92", "v0.19.3": "570e776d6813cb9f3e9c8c105cf8d79989db6650",
    "v0.20.0": "1b826acc6af3079d8923bac395c3124b8861a9a6",
}
"""The commit each tag names (``git rev-parse <tag>^{commit}``): the Makefile's GIT_COMMIT
(``git describe --abbrev=40``) that ``internal/info`` prints after the version."""


@dataclass(frozen=True)
class Family:
    """The lines of one release family; ``at`` maps a line's key to its ``file:line``."""

    name: str
    at: Mapping[str, str]
    device_list: tuple[str, ...]
    """The device-list strategies it knows (api/config/v1/strategy.go)."""
    new_chain: bool
    """v0.17+: flags validated before the config is printed; the plugins built by
    internal/plugin/factory.go (``error getting plugins: unable to create plugins: …``)."""
    nvml_names: bool
    """v0.14-v0.15: NVML's return codes print as go-nvlib's Go names (``ERROR_LIB_RM_VERSION_MISMATCH``)
    until an Init succeeds; v0.17+ uses go-nvml, which prints libnvidia-ml's own nvmlErrorString
    once the library is loaded."""


_V14 = {
    "fs": "main.go:154", "os": "main.go:161", "plugins": "main.go:176", "load": "main.go:234",
    "update": "main.go:242", "config": "main.go:253", "retrieve": "main.go:256", "detect": "factory.go:107",
    "cdi-null": "factory.go:31", "nvml": "factory.go:77", "nvml-warn": "factory.go:85", "incompatible": "factory.go:115", "grpc": "server.go:165",
    "serve": "server.go:117", "registered": "server.go:125", "stop-serve": "server.go:142", "none": "main.go:287",
    "fatal": "main.go:123", "inotify": "main.go:202", "stop": "main.go:294",
    "unregistered": "server.go:121", "contact": "main.go:278", "retry": "main.go:183",
}
_V15 = {
    "fs": "main.go:178", "os": "main.go:185", "plugins": "main.go:200", "load": "main.go:257",
    "update": "main.go:265", "config": "main.go:276", "retrieve": "main.go:279", "detect": "factory.go:104",
    "cdi-null": "factory.go:31", "nvml": "factory.go:72", "nvml-warn": "factory.go:80", "incompatible": "factory.go:112", "grpc": "server.go:216",
    "serve": "server.go:147", "registered": "server.go:154", "stop-serve": "server.go:185", "none": "main.go:308",
    "fatal": "main.go:132", "inotify": "main.go:225", "stop": "main.go:315",
    "unregistered": "server.go:151", "start-failed": "main.go:301", "retry": "main.go:208",
}
_V17 = {
    "banner": "main.go:235", "fs": "main.go:238", "os": "main.go:245", "plugins": "main.go:260", "load": "main.go:317",
    "update": "main.go:342", "config": "main.go:353", "retrieve": "main.go:356", "nvml": "factory.go:93",
    "nvml-warn": "factory.go:101", "incompatible": "factory.go:112", "grpc": "server.go:195", "serve": "server.go:139",
    "registered": "server.go:146", "stop-serve": "server.go:164", "none": "main.go:381", "fatal": "main.go:173",
    "inotify": "main.go:285", "stop": "main.go:388",
    "unregistered": "server.go:143", "start-failed": "main.go:374", "retry": "main.go:268",
}
_V20 = {
    "banner": "main.go:269", "fs": "main.go:272", "os": "main.go:279", "plugins": "main.go:294", "load": "main.go:351",
    "update": "main.go:377", "config": "main.go:388", "retrieve": "main.go:391", "platform": "plugin-manager.go:101",
    "unsupported": "plugin-manager.go:108", "strategy": "plugin-manager.go:50", "nvml": "factory.go:99",
    "nvml-warn": "factory.go:107", "grpc": "server.go:198", "serve": "server.go:142", "registered": "server.go:149",
    "xids": "health.go:64", "stop-serve": "server.go:167", "none": "main.go:416", "fatal": "main.go:198",
    "inotify": "main.go:319", "stop": "main.go:423",
    "unregistered": "server.go:146", "start-failed": "main.go:409", "retry": "main.go:302",
}
_OLD_STRATEGIES = ("envvar", "volume-mounts", "cdi-annotations")
_NEW_STRATEGIES = ("envvar", "volume-mounts", "cdi-annotations", "cdi-cri")
FAMILIES = {
    "v0.14": Family("v0.14", _V14, _OLD_STRATEGIES, new_chain=False, nvml_names=True),
    "v0.15": Family("v0.15", _V15, _NEW_STRATEGIES, new_chain=False, nvml_names=True),
    "v0.17": Family("v0.17", _V17, _NEW_STRATEGIES, new_chain=True, nvml_names=False),
    "v0.20": Family("v0.20", _V20, _NEW_STRATEGIES, new_chain=True, nvml_names=False),
}
_ORDER = ((0, 15), (0, 17), (0, 20))
_VERSION = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)")


def version(image: str) -> str | None:
    """The release an image's tag names (``v0.17.0`` for ``…:v0.17.0-ubi9``), else None."""
    name = image.split("@", 1)[0].rsplit("/", 1)[-1]
    tag = name.rsplit(":", 1)[1] if ":" in name else ""
    found = _VERSION.match(tag)
    return f"v{found.group(1)}.{found.group(2)}.{found.group(3)}" if found else None


def family(image: str) -> Family:
    """The release family whose lines an image prints (see the module's docstring)."""
    release = version(image)
    if release is None:
        return FAMILIES["v0.20"]
    major, minor = (int(x) for x in release[1:].split(".")[:2])
    chosen = "v0.14"
    for fam_major, fam_minor in _ORDER:
        if (major, minor) >= (fam_major, fam_minor):
            chosen = f"v{fam_major}.{fam_minor}"
    return FAMILIES[chosen]


# ------------------------------------------------------------------ settings
@dataclass(frozen=True)
class Settings:
    """The flags that decide what the plugin prints: an ``args`` flag (``--mig-strategy=x`` or
    ``--mig-strategy x``) wins over its environment variable, as urfave/cli reads them."""

    mig: str = "none"
    device_list: tuple[str, ...] = ("envvar",)
    fail_on_init: bool = True


_FALSE = ("0", "f", "F", "false", "FALSE", "False")  # Go's strconv.ParseBool


def settings(container: Mapping[str, Any]) -> Settings:
    env = {str(e.get("name")): str(e.get("value", "")) for e in container.get("env") or [] if "value" in e}
    args = [str(a) for a in container.get("args") or []]
    flags: dict[str, str] = {}
    for i, arg in enumerate(args):
        if not arg.startswith("-"):
            continue
        key, sep, value = arg.lstrip("-").partition("=")
        if sep:
            flags[key] = value
        elif key == "fail-on-init-error":
            flags[key] = "true"
        elif i + 1 < len(args):
            flags[key] = args[i + 1]
    mig = flags.get("mig-strategy", env.get("MIG_STRATEGY", "none"))
    strategies = flags.get("device-list-strategy", env.get("DEVICE_LIST_STRATEGY", "envvar"))
    fail = flags.get("fail-on-init-error", env.get("FAIL_ON_INIT_ERROR", "true"))
    return Settings(mig, tuple(s.strip() for s in strategies.split(",")), fail not in _FALSE)


# ------------------------------------------------------------------ what fails
def failure(image: str, container: Mapping[str, Any], host: str | None) -> str | None:
    """Why the plugin fails to serve on a node with the host fault ``host``, as a key
    (``device-list:<x>``, ``cdi-no-nvml``, ``mig:<x>``, ``no-container-toolkit``,
    ``driver-mismatch``), else None. Whether it then exits is :func:`exits`."""
    fam, cfg = family(image), settings(container)
    for strategy in cfg.device_list:
        if strategy not in fam.device_list:
            return f"device-list:{strategy}"
    if fam.name != "v0.14" and host == "no-container-toolkit" and any(s.startswith("cdi-") for s in cfg.device_list):
        return "cdi-no-nvml"
    if cfg.mig not in MIG_STRATEGIES:
        return f"mig:{cfg.mig}"
    return host


def exits(why: str, container: Mapping[str, Any]) -> bool:
    """A bad flag always ends the plugin; the node's faults only with FAIL_ON_INIT_ERROR true."""
    return why not in HOST_FAULTS or settings(container).fail_on_init


# ------------------------------------------------------------------ lines
Line = tuple[str, str, str]


def _config(fam: Family, cfg: Settings) -> str:
    """``Running with config:`` and ``json.MarshalIndent(config, "", "  ")`` of the release's
    ``spec.Config`` (api/config/v1/config.go, flags.go at its tag) with the defaults of its flags
    (cmd/nvidia-device-plugin/main.go): fields without ``omitempty`` print even when nil (null)."""
    flags: dict[str, Any] = {"migStrategy": cfg.mig, "failOnInitError": cfg.fail_on_init}
    if fam.name != "v0.14":
        flags["mpsRoot"] = ""
    flags["nvidiaDriverRoot"] = "/"
    if fam.new_chain:
        flags["nvidiaDevRoot"] = ""
    if fam.name == "v0.20":
        flags["gdrcopyEnabled"] = False
    flags |= {"gdsEnabled": False, "mofedEnabled": False}
    if fam.name != "v0.14":
        flags["useNodeFeatureAPI"] = None
    if fam.new_chain:
        flags["deviceDiscoveryStrategy"] = "auto"
    plugin: dict[str, Any] = {
        "passDeviceSpecs": False, "deviceListStrategy": list(cfg.device_list), "deviceIDStrategy": "uuid",
        "cdiAnnotationPrefix": "cdi.k8s.io/", "nvidiaCTKPath": "/usr/bin/nvidia-ctk", "containerDriverRoot": "/driver-root",
    }
    if fam.name == "v0.20":
        plugin["sharedDevicesAllocationPolicy"] = "distributed"
    flags["plugin"] = plugin
    resources: dict[str, Any] = {"gpus": [{"pattern": "*", "name": RESOURCE}]}
    if cfg.mig == "single":
        resources["mig"] = [{"pattern": "*", "name": RESOURCE}]
    config: dict[str, Any] = {"version": "v1", "flags": flags, "resources": resources, "sharing": {"timeSlicing": {}}}
    if fam.new_chain:
        config["imex"] = {}
    return "\nRunning with config:\n" + json.dumps(config, indent=2)


def _banner(fam: Family, image: str) -> list[Line]:
    """v0.17+: ``klog.InfoS("Starting NVIDIA Device Plugin", "version", c.App.Version)``, the
    version and ``commit: <sha>`` on two lines, as klog prints a multi-line value."""
    if "banner" not in fam.at:
        return []
    release = version(image) or "unknown"
    value = release if release not in COMMITS else f"{release}\n\tcommit: {COMMITS[release]}"
    text = f'version=<\n\t{value}\n >' if "\n" in value else f'version="{value}"'
    return [("I", fam.at["banner"], f'"Starting NVIDIA Device Plugin" {text}')]


def _watchers(fam: Family, image: str) -> list[Line]:
    fs = "Starting FS watcher." if not fam.new_chain else f"Starting FS watcher for {DEVICE_PLUGIN_PATH.rstrip('/')}"
    return [*_banner(fam, image), ("I", fam.at["fs"], fs), ("I", fam.at["os"], "Starting OS watcher.")]


def _until_config(fam: Family, cfg: Settings) -> list[Line]:
    return [
        ("I", fam.at["plugins"], "Starting Plugins."),
        ("I", fam.at["load"], "Loading configuration."),
        ("I", fam.at["update"], "Updating config with default resource matching patterns."),
        ("I", fam.at["config"], _config(fam, cfg)),
        ("I", fam.at["retrieve"], "Retreiving plugins." if fam.name == "v0.14" else "Retrieving plugins."),
    ]


def _platform(fam: Family, *, nvml: bool) -> list[Line]:
    """How the release finds its platform: v0.14-v0.15 log both checks (go-nvlib info.go reasons),
    v0.17 logs nothing, v0.20 logs the platform and the strategy it resolves to."""
    if not fam.new_chain:
        return [("I", fam.at["detect"], "Detected NVML platform: found NVML library" if nvml else f"Detected non-NVML platform: {NO_NVML}"),
                ("I", fam.at["detect"], "Detected non-Tegra platform: /sys/devices/soc0/family file not found")]
    if fam.name != "v0.20":
        return []
    lines = [("I", fam.at["platform"], f"Detected platform: {'nvml' if nvml else 'unknown'}")]
    if not nvml:
        lines.append(("W", fam.at["unsupported"], "Unsupported platform detected; defaulting to nvml"))
    return [*lines, ("I", fam.at["strategy"], "Using device discovery strategy: nvml")]


def _block(level: str, at: str, first: str, second: str) -> list[Line]:
    """Five consecutive klog lines from ``at``: the failure, its hint, and the three shared hints."""
    file, line = at.rsplit(":", 1)
    return [(level, f"{file}:{int(line) + i}", text) for i, text in enumerate((first, second, *HINTS))]


def _nvml_code(fam: Family, why: str) -> str:
    if why == "driver-mismatch":
        return "ERROR_LIB_RM_VERSION_MISMATCH" if fam.nvml_names else "Driver/library version mismatch"
    return "ERROR_LIBRARY_NOT_FOUND"


def _chain(fam: Family, tail: str) -> str:
    """main.go's wrapping of a failure while the plugins are built."""
    if fam.new_chain:
        return f"error starting plugins: error getting plugins: unable to create plugins: failed to construct resource managers: {tail}"
    return f"error starting plugins: error creating plugin manager: unable to create plugin manager: {tail}"


def _host_lines(fam: Family, why: str, *, fatal: bool) -> list[Line]:
    """From ``Retrieving plugins.`` on, on a node with a host fault: the platform, NVML's or the
    platform's error block, then the fatal line (FAIL_ON_INIT_ERROR) or the wait."""
    nvml = why == "driver-mismatch" or fam.name == "v0.20"
    lines = _platform(fam, nvml=why == "driver-mismatch")
    if why == "no-container-toolkit" and "cdi-null" in fam.at:  # v0.14-v0.15: cdi.New, before the manager
        lines.insert(0, ("W", fam.at["cdi-null"], "No valid resources detected, creating a null CDI handler"))
    if nvml:
        code = _nvml_code(fam, why)
        lines += _block("E", fam.at["nvml"], f"Failed to initialize NVML: {code}.", NVML_HINT)
        tail, warn = f"nvml init failed: {code}", [("W", fam.at["nvml-warn"], f"nvml init failed: {code}")]
    else:
        first = "Incompatible strategy detected auto" if fam.new_chain else "Incompatible platform detected"
        lines += _block("E", fam.at["incompatible"], first, TOOLKIT_HINT)
        tail, warn = ("invalid device discovery strategy" if fam.new_chain else "platform detection failed"), []
    if fatal:
        return [*lines, ("E", fam.at["fatal"], _chain(fam, tail))]
    return [*lines, *warn, ("I", fam.at["none"], "No devices found. Waiting indefinitely.")]


def _flag_error(fam: Family, why: str) -> str:
    kind, _, value = why.partition(":")
    if kind == "device-list":
        text = f"invalid --device-list-strategy option: invalid strategy: {value}"
    else:
        text = "CDI --device-list-strategy options are only supported on NVML-based systems"
    prefix = "error starting plugins: " if fam.new_chain else "error starting plugins: unable to load config: "
    return f"{prefix}unable to validate flags: {text}"


def _serving(fam: Family) -> list[Line]:
    """Up to the plugin's own socket served: what precedes ``Register``."""
    return [
        *_platform(fam, nvml=True),
        ("I", fam.at["grpc"], f"Starting GRPC server for '{RESOURCE}'"),
        ("I", fam.at["serve"], f"Starting to serve '{RESOURCE}' on {SOCKET}"),
    ]


def _registered(fam: Family) -> list[Line]:
    lines = [*_serving(fam), ("I", fam.at["registered"], f"Registered device plugin for '{RESOURCE}' with Kubelet")]
    if "xids" in fam.at:
        lines.append(("I", fam.at["xids"], "Ignoring the following XIDs for health checks: "
                      "map[13:true 31:true 43:true 45:true 68:true 109:true]"))
    return lines


def _unreachable(fam: Family) -> list[Line]:
    """``Register`` gave up on kubelet.sock: ``Start`` logs it and stops its server, ``startPlugins``
    reports the failure (v0.14: three fixed lines; v0.15+: the error) and main retries in 30 s."""
    level = "I" if not fam.new_chain else "E"  # klog.Infof until v0.15, klog.Errorf from v0.17
    lines = [(level, fam.at["unregistered"], "Could not register device plugin: context deadline exceeded"),
             ("I", fam.at["stop-serve"], f"Stopping to serve '{RESOURCE}' on {SOCKET}")]
    if "contact" in fam.at:
        file, line = fam.at["contact"].rsplit(":", 1)
        lines += [("E", f"{file}:{int(line) + i}", text) for i, text in enumerate(
            ("Could not contact Kubelet. Did you enable the device plugin feature gate?", *HINTS[:2]))]
    else:
        lines.append(("E", fam.at["start-failed"], "Failed to start plugin: context deadline exceeded"))
    return [*lines, ("I", fam.at["retry"], "Failed to start one or more plugins. Retrying in 30s...")]


def _from_plugins(fam: Family, cfg: Settings, why: str | None, *, registered: bool, fatal: bool) -> list[Line]:
    """What ``startPlugins`` prints (from ``Starting Plugins.``), for an outcome."""
    if why is not None and (why.startswith("device-list:") or why == "cdi-no-nvml"):
        return [("I", fam.at["plugins"], "Starting Plugins."), ("I", fam.at["load"], "Loading configuration."),
                ("E", fam.at["fatal"], _flag_error(fam, why))]
    if why is not None and why.startswith("mig:"):
        value = why.partition(":")[2]
        if fam.new_chain:  # validateFlags, before the config is printed
            return [("I", fam.at["plugins"], "Starting Plugins."), ("I", fam.at["load"], "Loading configuration."),
                    ("E", fam.at["fatal"], f"error starting plugins: unable to validate flags: unknown MIG strategy: {value}")]
        return [*_until_config(fam, cfg),  # NewPluginManager, after the config is printed
                ("E", fam.at["fatal"], f"error starting plugins: error creating plugin manager: unknown strategy: {value}")]
    lines = _until_config(fam, cfg)
    if why in HOST_FAULTS:
        return lines + _host_lines(fam, why, fatal=fatal)
    if registered:
        return lines + _registered(fam)
    return [*lines, *_platform(fam, nvml=True), ("I", fam.at["none"], "No devices found. Waiting indefinitely.")]


def started(image: str, container: Mapping[str, Any], start: dt.datetime, *, why: str | None, registered: bool) -> Lines:
    """The lines of a plugin that starts and keeps running: registered, or waiting unregistered
    (``why``: a host fault with FAIL_ON_INIT_ERROR false, or None: NVML found no device)."""
    fam, cfg = family(image), settings(container)
    return stamped(start, [*_watchers(fam, image), *_from_plugins(fam, cfg, why, registered=registered, fatal=False)])


def unregistered(image: str, container: Mapping[str, Any], start: dt.datetime) -> Lines:
    """The lines of a plugin that serves its socket but finds no kubelet.sock in the directory
    mounted at :data:`DEVICE_PLUGIN_PATH` (a hostPath other than the kubelet's): start-up as a
    healthy plugin up to ``Starting to serve``, then, :data:`DIAL_TIMEOUT` later, the failure and
    the retry. (The plugin retries every 30 s with the same lines; kubesim writes the first try.)"""
    fam, cfg = family(image), settings(container)
    serving = [*_watchers(fam, image), *_until_config(fam, cfg), *_serving(fam)]
    later = start + dt.timedelta(seconds=DIAL_TIMEOUT)
    return stamped(start, serving) + stamped(later, _unreachable(fam))


def crashed(image: str, container: Mapping[str, Any], start: dt.datetime, why: str | None) -> Lines:
    """The lines of a plugin that exits: a bad flag, a host fault with FAIL_ON_INIT_ERROR true, or
    (``why`` None: a ``-crash`` image) the FS watcher's failure, returned straight from ``start()``."""
    fam, cfg = family(image), settings(container)
    if why is None:
        fs = (f"failed to create FS watcher: {INOTIFY_FULL}" if fam.name == "v0.14"
              else f"failed to create FS watcher for {DEVICE_PLUGIN_PATH}: {INOTIFY_FULL}")
        return stamped(start, [*_watchers(fam, image)[:-1], ("E", fam.at["fatal"], fs)])
    return stamped(start, [*_watchers(fam, image), *_from_plugins(fam, cfg, why, registered=False, fatal=True)])


def reregistered(image: str, container: Mapping[str, Any], start: dt.datetime) -> Lines:
    """The kubelet restarted: the plugin sees kubelet.sock created, stops and starts its plugins."""
    fam, cfg = family(image), settings(container)
    return stamped(start, [
        ("I", fam.at["inotify"], f"inotify: {KUBELET_SOCKET} created, restarting."),
        ("I", fam.at["stop"], "Stopping plugins."),
        ("I", fam.at["stop-serve"], f"Stopping to serve '{RESOURCE}' on {SOCKET}"),
        *_from_plugins(fam, cfg, None, registered=True, fatal=False),
    ])
