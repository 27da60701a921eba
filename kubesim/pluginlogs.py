"""What the simulated containers print: klog's header, another vendor's device plugin and the
CUDA sample. NVIDIA's device plugin prints its lines per release (:mod:`kubesim.pluginreleases`),
DRA kubelet plugins theirs (:mod:`kubesim.dralogs`)."""

from __future__ import annotations

import datetime as dt

Lines = list[tuple[dt.datetime, str]]


def klog(level: str, moment: dt.datetime, where: str, message: str) -> str:
    """One klog header line: ``I1130 08:00:01.000000       1 main.go:123] message``."""
    return f"{level}{moment:%m%d %H:%M:%S.%f} {1:7d} {where}] {message}"


def stamped(start: dt.datetime, lines: list[tuple[str, str, str]], step: float = 0.0003) -> Lines:
    """klog lines ``(level, file:line, message)`` 0.3 ms apart from ``start``."""
    return [
        (start + dt.timedelta(seconds=i * step), klog(level, start + dt.timedelta(seconds=i * step), where, msg))
        for i, (level, where, msg) in enumerate(lines)
    ]


def other_device_plugin_registered(start: dt.datetime) -> Lines:
    """Another vendor's plugin, logging as Kubernetes' device-plugin examples do."""
    return stamped(
        start,
        [
            ("I", "server.go:52", "Starting to serve on /var/lib/kubelet/device-plugins/vendor-gpu.sock"),
            ("I", "server.go:73", "Registered device plugin with Kubelet"),
        ],
    )


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
