"""What the simulated containers print: klog lines of the NVIDIA device plugin (v0.14
style) and of crashing images (DRA kubelet plugins: :mod:`kubesim.dralogs`)."""

from __future__ import annotations

import datetime as dt
from typing import Any

SOCKET = "/var/lib/kubelet/device-plugins/nvidia-gpu.sock"
KUBELET_SOCKET = "/var/lib/kubelet/device-plugins/kubelet.sock"
CRASH_MESSAGE = "failed to create device plugin socket: mkdir /var/lib/kubelet/device-plugins: permission denied"
NVML_MISMATCH = ("error starting plugins: error getting plugins: failed to construct resource managers: "
                 "nvml init failed: Driver/library version mismatch")
"""The plugin's last line when NVML cannot initialise against the node's older driver: NVML's
own wording of ``NVML_ERROR_LIB_RM_VERSION_MISMATCH`` (``nvmlErrorString``, which go-nvml
uses once the library is loaded), wrapped as ``cmd/nvidia-device-plugin/main.go`` and
``internal/plugin/factory.go`` (v0.17) wrap it, after factory.go's own error lines."""

Lines = list[tuple[dt.datetime, str]]


def klog(level: str, moment: dt.datetime, where: str, message: str) -> str:
    """One klog header line: ``I1130 08:00:01.000000       1 main.go:123] message``."""
    return f"{level}{moment:%m%d %H:%M:%S.%f} {1:7d} {where}] {message}"


def _at(start: dt.datetime, lines: list[tuple[str, str, str]], step: float = 0.0003) -> Lines:
    return [
        (start + dt.timedelta(seconds=i * step), klog(level, start + dt.timedelta(seconds=i * step), where, msg))
        for i, (level, where, msg) in enumerate(lines)
    ]


def _env(container: dict[str, Any], name: str) -> str | None:
    for env in container.get("env") or []:
        if env.get("name") == name:
            return str(env.get("value", ""))
    return None


def _config(container: dict[str, Any]) -> str:
    fail = _env(container, "FAIL_ON_INIT_ERROR")
    fail_on_init = "false" if fail is not None and fail.lower() == "false" else "true"
    return (
        "\nRunning with config:\n"
        "{\n"
        '  "version": "v1",\n'
        '  "flags": {\n'
        '    "migStrategy": "none",\n'
        f'    "failOnInitError": {fail_on_init},\n'
        '    "nvidiaDriverRoot": "/",\n'
        '    "gdsEnabled": false,\n'
        '    "mofedEnabled": false,\n'
        '    "plugin": {\n'
        '      "passDeviceSpecs": false,\n'
        '      "deviceListStrategy": [\n'
        '        "envvar"\n'
        "      ],\n"
        '      "deviceIDStrategy": "uuid",\n'
        '      "cdiAnnotationPrefix": "cdi.k8s.io/",\n'
        '      "nvidiaCTKPath": "/usr/bin/nvidia-ctk",\n'
        '      "containerDriverRoot": "/driver-root"\n'
        "    }\n"
        "  },\n"
        '  "resources": {\n'
        '    "gpus": [\n'
        "      {\n"
        '        "pattern": "*",\n'
        '        "name": "nvidia.com/gpu"\n'
        "      }\n"
        "    ]\n"
        "  },\n"
        '  "sharing": {\n'
        '    "timeSlicing": {}\n'
        "  }\n"
        "}"
    )


def fails_on_init_error(container: dict[str, Any]) -> bool:
    fail = _env(container, "FAIL_ON_INIT_ERROR")
    return not (fail is not None and fail.lower() == "false")


def _plugin_start(container: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [
        ("I", "main.go:176", "Starting Plugins."),
        ("I", "main.go:234", "Loading configuration."),
        ("I", "main.go:242", "Updating config with default resource matching patterns."),
        ("I", "main.go:253", _config(container)),
        ("I", "main.go:256", "Retreiving plugins."),
    ]


def device_plugin_registered(container: dict[str, Any], start: dt.datetime) -> Lines:
    """A healthy plugin on a GPU node, up to its registration with the kubelet."""
    return _at(
        start,
        [
            ("I", "main.go:154", "Starting FS watcher."),
            ("I", "main.go:161", "Starting OS watcher."),
            *_plugin_start(container),
            ("I", "factory.go:107", "Detected NVML platform: found NVML library"),
            ("I", "factory.go:107", "Detected non-Tegra platform: /sys/devices/soc0/family file not found"),
            ("I", "server.go:165", "Starting GRPC server for 'nvidia.com/gpu'"),
            ("I", "server.go:117", f"Starting to serve 'nvidia.com/gpu' on {SOCKET}"),
            ("I", "server.go:125", "Registered device plugin for 'nvidia.com/gpu' with Kubelet"),
        ],
    )


def other_device_plugin_registered(start: dt.datetime) -> Lines:
    """Another vendor's plugin, logging as Kubernetes' device-plugin examples do."""
    return _at(
        start,
        [
            ("I", "server.go:52", "Starting to serve on /var/lib/kubelet/device-plugins/vendor-gpu.sock"),
            ("I", "server.go:73", "Registered device plugin with Kubelet"),
        ],
    )


def device_plugin_no_devices(container: dict[str, Any], start: dt.datetime) -> Lines:
    """FAIL_ON_INIT_ERROR=false and no usable GPU: the plugin waits forever, unregistered."""
    return _at(
        start,
        [
            ("I", "main.go:154", "Starting FS watcher."),
            ("I", "main.go:161", "Starting OS watcher."),
            *_plugin_start(container),
            ("I", "factory.go:107", "Detected non-NVML platform: could not load NVML library: libnvidia-ml.so.1: cannot open shared object file: No such file or directory"),
            ("I", "factory.go:107", "Detected non-Tegra platform: /sys/devices/soc0/family file not found"),
            ("E", "factory.go:115", "Incompatible platform detected"),
            ("E", "factory.go:116", "If this is a GPU node, did you configure the NVIDIA Container Toolkit?"),
            ("E", "factory.go:117", "You can check the prerequisites at: https://github.com/NVIDIA/k8s-device-plugin#prerequisites"),
            ("E", "factory.go:118", "You can learn how to set the runtime at: https://github.com/NVIDIA/k8s-device-plugin#quick-start"),
            ("E", "factory.go:119", "If this is not a GPU node, you should set up a toleration or nodeSelector to only deploy this plugin on GPU nodes"),
            ("I", "main.go:287", "No devices found. Waiting indefinitely."),
        ],
    )


def device_plugin_reregistered(container: dict[str, Any], start: dt.datetime) -> Lines:
    """The kubelet restarted: the plugin sees kubelet.sock re-created and registers again."""
    return _at(
        start,
        [
            ("I", "main.go:200", f"inotify: {KUBELET_SOCKET} created, restarting."),
            ("I", "main.go:292", "Stopping plugins."),
            ("I", "server.go:142", f"Stopping to serve 'nvidia.com/gpu' on {SOCKET}"),
            *_plugin_start(container),
            ("I", "factory.go:107", "Detected NVML platform: found NVML library"),
            ("I", "factory.go:107", "Detected non-Tegra platform: /sys/devices/soc0/family file not found"),
            ("I", "server.go:165", "Starting GRPC server for 'nvidia.com/gpu'"),
            ("I", "server.go:117", f"Starting to serve 'nvidia.com/gpu' on {SOCKET}"),
            ("I", "server.go:125", "Registered device plugin for 'nvidia.com/gpu' with Kubelet"),
        ],
    )


def crash(start: dt.datetime, reason: str | None = None) -> Lines:
    """A crashing plugin's last words: its image's generic failure, why its config did not load,
    or NVML failing on a driver older than its build needs (:data:`NVML_MISMATCH`)."""
    if reason == NVML_MISMATCH:
        return _at(start, [
            ("E", "factory.go:93", "Failed to initialize NVML: Driver/library version mismatch."),
            ("E", "factory.go:94", "If this is a GPU node, did you set the docker default runtime to `nvidia`?"),
            ("E", "factory.go:95", "You can check the prerequisites at: https://github.com/NVIDIA/k8s-device-plugin#prerequisites"),
            ("E", "factory.go:96", "You can learn how to set the runtime at: https://github.com/NVIDIA/k8s-device-plugin#quick-start"),
            ("E", "factory.go:97", "If this is not a GPU node, you should set up a toleration or nodeSelector to only deploy this plugin on GPU nodes"),
            ("E", "main.go:173", NVML_MISMATCH),
        ])
    return _at(start, [("E", "main.go:123", reason or CRASH_MESSAGE)])


def cuda_vectoradd(start: dt.datetime, *, error: str | None = None) -> Lines:
    """The output of the CUDA ``vectorAdd`` sample: ``Test PASSED``, or the CUDA error it met."""
    lines = ["[Vector addition of 50000 elements]"]
    if error:
        lines.append(f"Failed to allocate device vector A (error code {error})!")
    else:
        lines += [
            "Copy input data from the host memory to the CUDA device",
            "CUDA kernel launch with 196 blocks of 256 threads",
            "Copy output data from the CUDA device to the host memory",
            "Test PASSED",
            "Done",
        ]
    return [(start + dt.timedelta(milliseconds=50 * i), line) for i, line in enumerate(lines)]
