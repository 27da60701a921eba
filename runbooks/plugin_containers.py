"""Which container of a pod template runs the device plugin, told by what each container runs.

NVIDIA's device-plugin image ships four programs (``deployments/container/Dockerfile`` of
NVIDIA/k8s-device-plugin copies them to ``/usr/bin``; the image's ENTRYPOINT is the plugin):
``nvidia-device-plugin``, ``gpu-feature-discovery``, ``mps-control-daemon`` and
``config-manager``. Its Helm chart runs the last three from the same image in their own
DaemonSets or as sidecars (``<release>-gpu-feature-discovery``, ``<release>-mps-control-daemon``,
the ``*-sidecar`` containers when a config map is used), under the plugin's own labels and
selector; the GPU operator's plugin pod runs ``config-manager`` beside ``nvidia-device-plugin``
(which it starts through ``/bin/sh -c /bin/entrypoint.sh``) and its ``gpu-feature-discovery``
runs the plugin's image too. So neither the image nor the labels tell them apart: the command
and args do. Pure functions over pod-template dicts.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

COMPANIONS = ("gpu-feature-discovery", "mps-control-daemon", "config-manager")
"""Programs of the plugin's image that are not the plugin (what a companion container runs)."""
COMPANION_LABELS = ("app.kubernetes.io/name", "app.kubernetes.io/component", "app")
"""Labels whose value names what a workload is (``app: gpu-feature-discovery`` in the GPU
operator's GFD, ``app.kubernetes.io/name`` in charts)."""


def runs(container: Mapping[str, Any]) -> str:
    """The container's command and args, as one line."""
    return " ".join(str(word) for word in [*(container.get("command") or []), *(container.get("args") or [])])


def is_companion(container: Mapping[str, Any]) -> bool:
    """The container runs GFD, the MPS control daemon or the config manager, not a plugin."""
    line = runs(container)
    return any(program in line for program in COMPANIONS)


def companion_labels(labels: Mapping[str, str]) -> bool:
    """The workload's labels name GFD or the MPS control daemon (or the config manager)."""
    return any(str(labels.get(key, "")) in COMPANIONS for key in COMPANION_LABELS)


def plugin_containers(containers: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The containers that are not companions."""
    return [c for c in containers if not is_companion(c)]


GPU_PROGRAMS = ("gpu-kubelet-plugin",)
"""Programs that serve GPUs beside other kubelet plugins of one pod: NVIDIA's DRA driver
(NVIDIA/k8s-dra-driver-gpu v25.x, ``templates/kubeletplugin.yaml``) runs ``gpu-kubelet-plugin`` in its
``gpus`` container beside ``compute-domain-kubelet-plugin`` in ``compute-domains``."""


def plugin_container(containers: Sequence[Mapping[str, Any]]) -> str | None:
    """The name of the container to change when none is named: the only one, else the only one
    that is not a companion, else the only one running a GPU program (:data:`GPU_PROGRAMS`);
    ``None`` when that leaves none or several."""
    if len(containers) == 1:
        return str(containers[0].get("name", ""))
    chosen = plugin_containers(containers)
    if len(chosen) > 1:
        chosen = [c for c in chosen if any(re.search(rf"(?<![\w.-]){re.escape(p)}(?![\w.-])", runs(c))
                                           for p in GPU_PROGRAMS)]
    return str(chosen[0].get("name", "")) if len(chosen) == 1 else None
