"""kube-scheduler's NodeResourcesFit filter and the wording of its ``FailedScheduling`` message.

What a pod asks for is ``resource.PodRequests`` of k8s.io/component-helpers (``resource/helpers.go``),
as ``computePodResourceRequest`` of kubernetes ``pkg/scheduler/framework/plugins/noderesources/fit.go``
calls it: the containers' requests summed; an init container's requests (plus the sidecars, the
``restartPolicy: Always`` init containers, started before it) taken where larger; sidecars added to
the sum; the pod's ``overhead`` added. A container's missing request stands for its limit (the API
server's defaulting). CPU is counted in thousandths (``MilliValue``), everything else in units.

``fitsRequest`` (fit.go) compares it with the node's allocatable minus what the pods bound to the
node already request: ``Too many pods`` first, then ``Insufficient cpu``, ``Insufficient memory``,
``Insufficient ephemeral-storage`` and ``Insufficient <name>`` for every other resource asked for
(extended resources such as ``nvidia.com/gpu``, hugepages). From 1.34 (kubernetes#131345) a
request larger than the node's whole allocatable makes the node ``UnschedulableAndUnresolvable``:
preemption says it is "not helpful" there instead of finding "no victims".
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from kubesim import podstatus as ps
from kubesim import quantities

CPU, MEMORY, STORAGE, PODS = "cpu", "memory", "ephemeral-storage", "pods"
_FIXED = (CPU, MEMORY, STORAGE)
UNRESOLVABLE_FROM = 34
"""The first release whose NodeResourcesFit calls a request above the node's allocatable unresolvable."""


def _amount(name: str, value: Any) -> int:
    return quantities.milli(value) if name == CPU else quantities.value(value)


def _add(into: Counter[str], res: Mapping[str, Any]) -> None:
    for name, value in res.items():
        into[name] += _amount(name, value)


def _max(into: Counter[str], other: Mapping[str, int]) -> None:
    for name, value in other.items():
        if value > into.get(name, 0):
            into[name] = value


def pod_requests(spec: Mapping[str, Any]) -> dict[str, int]:
    """``resource.PodRequests``: what the pod asks of each resource (cpu in millicores), zeros left out."""
    total: Counter[str] = Counter()
    for container in spec.get("containers") or []:
        _add(total, ps.container_requests(container))
    sidecars: Counter[str] = Counter()
    init: Counter[str] = Counter()
    for container in spec.get("initContainers") or []:
        own: Counter[str] = Counter()
        _add(own, ps.container_requests(container))
        if container.get("restartPolicy") == "Always":
            total.update(own)
            sidecars.update(own)
            _max(init, sidecars)
        else:
            _max(init, own + sidecars)
    _max(total, init)
    _add(total, spec.get("overhead") or {})
    return {name: amount for name, amount in sorted(total.items()) if amount > 0}


def allocatable(node: Mapping[str, Any]) -> dict[str, int]:
    """The node's ``status.allocatable`` in the same units."""
    alloc = (node.get("status") or {}).get("allocatable") or {}
    out: dict[str, int] = {}
    for name, value in alloc.items():
        try:
            out[name] = _amount(name, value)
        except quantities.QuantityError:
            continue
    return out


def insufficient(wants: Mapping[str, int], alloc: Mapping[str, int], used: Mapping[str, int],
                 pods_on_node: int) -> tuple[list[str], bool]:
    """``fitsRequest``: the reasons the node cannot take the pod (in fit.go's order), and whether a
    request exceeds the node's whole allocatable (``Unresolvable``)."""
    reasons: list[str] = []
    unresolvable = False
    if pods_on_node + 1 > alloc.get(PODS, 0):
        reasons.append("Too many pods")
    if not wants:
        return reasons, False
    for name in _FIXED:
        asked = wants.get(name, 0)
        if asked > 0 and asked > alloc.get(name, 0) - used.get(name, 0):
            reasons.append(f"Insufficient {name}")
            unresolvable = unresolvable or asked > alloc.get(name, 0)
    for name, asked in wants.items():  # ScalarResources (a Go map: fit.go's order is random; sorted here)
        if name in _FIXED or name == PODS or asked == 0:
            continue
        if asked > alloc.get(name, 0) - used.get(name, 0):
            reasons.append(f"Insufficient {name}")
            unresolvable = unresolvable or asked > alloc.get(name, 0)
    return reasons, unresolvable
