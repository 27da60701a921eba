"""Which device class the DRA smoke test claims from: the one whose selectors ask for a GPU.

Chosen by what the classes' CEL selectors ask, never by name order (issue 59). NVIDIA's DRA driver
(NVIDIA/k8s-dra-driver-gpu, ``deployments/helm/nvidia-dra-driver-gpu/templates/deviceclass-*.yaml``)
ships ``gpu.nvidia.com`` (``device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type
== 'gpu'``) beside ``mig.nvidia.com``, ``vfio.gpu.nvidia.com`` and two compute-domain classes, the first
of which by name is ``compute-domain-daemon.nvidia.com``; kubernetes-sigs/dra-example-driver ships one
class asking only its driver (``templates/deviceclass.yaml``). So, among the classes naming one of
the driver's names: the one asking a device of ``type == 'gpu'``; else the one asking nothing but the
driver (a v1alpha2 ResourceClass, which names only its driver, too); two such is ambiguous and
refused, naming them, as is none. The policy's ``steps.smoke_test.device_class`` overrides all of
this (the caller's). Pure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

_DRIVER = re.compile(r"""device\.driver\s*==\s*["']([^"']+)["']""")
_TYPE = re.compile(r"""\.\s*type\s*==\s*["']([^"']+)["']|\[\s*["']type["']\s*\]\s*==\s*["']([^"']+)["']""")
_NOTHING_ELSE = re.compile(r"^[\s()&]*$")


@dataclass(frozen=True)
class Chosen:
    name: str | None
    why: str = ""
    problem: str = ""


@dataclass(frozen=True)
class _Asks:
    name: str
    drivers: set[str]
    types: set[str]
    only_driver: bool


def _asks(obj: Mapping[str, Any]) -> _Asks:
    name = str((obj.get("metadata") or {}).get("name", ""))
    if obj.get("kind") == "ResourceClass" or "driverName" in obj:  # v1alpha2: a driver, nothing else
        return _Asks(name, {str(obj.get("driverName") or "")}, set(), True)
    expressions = [str(((s or {}).get("cel") or {}).get("expression") or "")
                   for s in (obj.get("spec") or {}).get("selectors") or []]
    drivers = {d for e in expressions for d in _DRIVER.findall(e)}
    types = {a or b for e in expressions for a, b in _TYPE.findall(e)}
    only = bool(expressions) and all(_NOTHING_ELSE.match(_DRIVER.sub("", e)) for e in expressions)
    return _Asks(name, drivers, types, only)


def choose_class(classes: Sequence[Mapping[str, Any]], drivers: Sequence[str]) -> Chosen:
    """The class the smoke test's claim asks a device of, among ``classes`` (DeviceClass or
    ResourceClass objects as listed), for a DaemonSet serving ``drivers``."""
    wanted = set(drivers)
    mine = sorted((a for a in map(_asks, classes) if a.drivers & wanted), key=lambda a: a.name)
    gpus = [a for a in mine if "gpu" in a.types]
    plain = [a for a in mine if a.only_driver]
    served = ", ".join(sorted(wanted)) or "?"
    for found, why in ((gpus, "its selectors ask a device of type == 'gpu'"),
                       (plain, "its selectors ask only the driver")):
        if len(found) == 1:
            return Chosen(found[0].name, f"{found[0].name}: {why}")
        if len(found) > 1:
            return Chosen(None, problem=f"{len(found)} device classes of {served} fit the smoke test "
                          f"({', '.join(a.name for a in found)}: {why}): name one with "
                          "steps.smoke_test.device_class in the policy")
    if not mine:
        return Chosen(None, problem=f"no device class names the driver {served}: set steps.smoke_test.device_class "
                      "in the policy")
    shown = ", ".join(f"{a.name}{' (type ' + '/'.join(sorted(a.types)) + ')' if a.types else ''}" for a in mine)
    return Chosen(None, problem=f"no device class of {served} asks for a GPU (type == 'gpu') or only for the "
                  f"driver ({shown}): name one with steps.smoke_test.device_class in the policy")
