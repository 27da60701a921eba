"""Pod status as the kubelet writes it: conditions, container statuses, ids, messages.

Pure functions over JSON-shaped dicts, shared by the kubelets (live transitions), the
DaemonSet controller (availability) and the scenarios (pods loaded already running).
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import re
from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any

from kubesim import quantities
from kubesim.clock import parse_time, rfc3339

GPU = "nvidia.com/gpu"
_COMPUTE = ("cpu", "memory")
CRASH_LABEL = "kubesim.io/crash"
"""The node label a ``-crash-on-<word>`` image reads: it crashes where the value is its word."""
_CRASH_ON = re.compile(r"-crash-on-([a-z0-9]+)$")


# ------------------------------------------------------------------ identities
def container_id(seed: str) -> str:
    """A containerd container id (64 hex digits), stable for a seed."""
    return "containerd://" + hashlib.sha256(seed.encode()).hexdigest()


@functools.lru_cache(maxsize=1024)
def image_ref(image: str) -> str:
    """The fully qualified image name containerd reports in ``containerStatuses[].image``."""
    name = image.split("@", 1)[0]
    first = name.split("/", 1)[0]
    if "/" not in name:
        name = "docker.io/library/" + name
    elif "." not in first and ":" not in first and first != "localhost":
        name = "docker.io/" + name
    last = name.rsplit("/", 1)[-1]
    return name if ":" in last else name + ":latest"


def status_image(image: str) -> str:
    """``containerStatuses[].image``: the fully qualified tag (:func:`image_ref`); for an image pulled
    by digest, ``repository@sha256:…`` (containerd reports a repo tag only when the image has one,
    pkg/cri/server/container_status.go v1.7.27; the tag of ``repo:tag@sha256:…`` is dropped)."""
    ref = image_ref(image)
    digest = image.partition("@")[2]
    return f"{ref.rsplit(':', 1)[0]}@{digest}" if digest else ref


def first_digest(ref: str) -> str:
    """The digest of a tag's first push (or its release), ``sha256:<hex>``: stable for the
    fully qualified reference (:mod:`kubesim.registry` gives a tag pushed again another)."""
    return "sha256:" + hashlib.sha256(ref.encode()).hexdigest()


@functools.lru_cache(maxsize=1024)
def image_id(image: str) -> str:
    """``<repository>@sha256:<digest>`` as containerd reports ``imageID`` (its repo digest) for an
    image as first pushed: the digest a reference names, else its tag's first digest. A running
    kubelet reports what its registry resolved at the pull (:meth:`kubesim.registry.Registry.image_id`)."""
    ref = image_ref(image)
    digest = image.partition("@")[2]
    return f"{ref.rsplit(':', 1)[0]}@{digest or first_digest(ref)}"


def image_tag(image: str) -> str:
    last = image.split("@", 1)[0].rsplit("/", 1)[-1]
    return last.rsplit(":", 1)[1] if ":" in last else "latest"


def crash_on(image: str) -> str | None:
    """The ``<word>`` of a tag ending in ``-crash-on-<word>`` (``[a-z0-9]+``), else None."""
    found = _CRASH_ON.search(image_tag(image))
    return found.group(1) if found else None


def behaviour(image: str, node_labels: Mapping[str, str] | None = None) -> str:
    """What an image does on a node with ``node_labels``, from its tag: ``crash``, ``silent``,
    ``slow``, ``noalloc`` or ``healthy``.

    A tag ending in ``-crash-on-<word>`` is ``crash`` on a node labelled
    ``kubesim.io/crash=<word>`` and ``healthy`` anywhere else (and without labels); its word is
    never read as a mode (``-crash-on-slow`` is not slow). A plain ``-crash`` crashes everywhere.
    """
    tag = image_tag(image)
    word = crash_on(image)
    if word is not None:
        return "crash" if (node_labels or {}).get(CRASH_LABEL) == word else "healthy"
    for kind in ("crash", "silent", "slow", "noalloc"):
        if tag.endswith("-" + kind):
            return kind
    return "healthy"


def pod_ref(pod: dict[str, Any]) -> str:
    """``format.Pod``: ``name_namespace(uid)`` as kubelet messages print a pod."""
    m = pod["metadata"]
    return f"{m['name']}_{m.get('namespace', 'default')}({m.get('uid', '')})"


def go_duration(seconds: float) -> str:
    """Go's ``time.Duration.String()`` for whole and fractional seconds: 10s, 1m20s, 5m0s."""
    if seconds < 60:
        text = f"{seconds:.3f}".rstrip("0").rstrip(".")
        return f"{text}s"
    total = round(seconds)
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    return f"{minutes}m{secs}s"


# ------------------------------------------------------------------ messages
def created_message(minor: int, container: str) -> str:
    return f"Created container: {container}" if minor >= 33 else f"Created container {container}"


def started_message(minor: int, container: str) -> str:
    return f"Started container: {container}" if minor >= 33 else f"Started container {container}"


def pulled_message(minor: int, image: str, seconds: float) -> str:
    took = go_duration(seconds)
    text = f'Successfully pulled image "{image}" in {took} ({took} including waiting)'
    if minor >= 29:
        size = 20_000_000 + int(hashlib.sha256(image.encode()).hexdigest()[:6], 16) * 10
        text += f". Image size: {size} bytes."
    return text


def pull_backoff_message(minor: int, image: str, error: str) -> str:
    """The ImagePullBackOff message: from 1.31 the kubelet appends the last pull error to it."""
    text = f'Back-off pulling image "{image}"'
    return text + f": ErrImagePull: {error}" if minor >= 31 else text


def crashloop_message(backoff: float, container: str, pod: dict[str, Any]) -> str:
    return f"back-off {go_duration(backoff)} restarting failed container={container} pod={pod_ref(pod)}"


# ------------------------------------------------------------------ requests
def _quantity(value: Any) -> Fraction:
    """A quantity's exact value (:mod:`kubesim.quantities`, apimachinery's parser)."""
    return quantities.parse(value)


def container_requests(container: dict[str, Any]) -> dict[str, Any]:
    """Requests with limits standing in for missing requests (the API server's defaulting)."""
    res = container.get("resources") or {}
    out = dict(res.get("limits") or {})
    out.update(res.get("requests") or {})
    return out


def pod_request(spec: dict[str, Any], resource: str) -> int:
    """What a pod asks of one integer resource: sum over containers, max with init ones."""
    total = sum(quantities.value(container_requests(c).get(resource, 0)) for c in spec.get("containers") or [])
    init = max((quantities.value(container_requests(c).get(resource, 0)) for c in spec.get("initContainers") or []), default=0)
    return max(total, init)


def extended_requests(spec: dict[str, Any]) -> dict[str, int]:
    """Extended resources (``vendor/name``) the pod requests, e.g. ``nvidia.com/gpu``."""
    total: dict[str, int] = {}
    init: dict[str, int] = {}
    for c in spec.get("containers") or []:
        res = c.get("resources")
        if not res:
            continue
        for name, value in container_requests(c).items():
            if "/" in name and not name.startswith("hugepages"):
                total[name] = total.get(name, 0) + quantities.value(value)
    for c in spec.get("initContainers") or []:
        for name, value in container_requests(c).items():
            if "/" in name and not name.startswith("hugepages"):
                init[name] = max(init.get(name, 0), quantities.value(value))
    for name, value in init.items():
        total[name] = max(total.get(name, 0), value)
    return {n: v for n, v in sorted(total.items()) if v > 0}


def qos_class(spec: dict[str, Any]) -> str:
    """``qos.GetPodQOS``: cpu and memory requests and limits (zero ones ignored) summed over the
    containers and init containers, a missing request standing for its limit (defaulting); the
    pod-level ``resources`` instead when the spec has them (only stored while PodLevelResources is on).
    Guaranteed when every container limits both and the sums are equal, BestEffort when none is set."""
    requests: dict[str, Fraction] = {}
    limits: dict[str, Fraction] = {}
    guaranteed = True
    pod_level = spec.get("resources")
    holders = [pod_level] if pod_level else [
        c.get("resources") or {} for c in (spec.get("containers") or []) + (spec.get("initContainers") or [])]
    for res in holders:
        declared = res.get("limits") or {}
        asked = {**declared, **(res.get("requests") or {})}
        for name in _COMPUTE:
            if name in asked and _quantity(asked[name]) > 0:
                requests[name] = requests.get(name, Fraction(0)) + _quantity(asked[name])
            if name in declared and _quantity(declared[name]) > 0:
                limits[name] = limits.get(name, Fraction(0)) + _quantity(declared[name])
        if not all(name in declared and _quantity(declared[name]) > 0 for name in _COMPUTE):
            guaranteed = False
    if not requests and not limits:
        return "BestEffort"
    if guaranteed and requests == limits:
        return "Guaranteed"
    return "Burstable"


# ------------------------------------------------------------------ conditions
def condition(kind: str, status: bool | str, when: str, reason: str | None = None, message: str | None = None) -> dict[str, Any]:
    value = status if isinstance(status, str) else ("True" if status else "False")
    cond: dict[str, Any] = {"lastProbeTime": None, "lastTransitionTime": when, "status": value, "type": kind}
    if message:
        cond["message"] = message
    if reason:
        cond["reason"] = reason
    return cond


def merge_conditions(old: Iterable[dict[str, Any]] | None, new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Keep each condition's lastTransitionTime while its status does not change."""
    before = {c.get("type"): c for c in old or []}
    out = []
    for cond in new:
        prev = before.get(cond["type"])
        if prev is not None and prev.get("status") == cond["status"] and prev.get("lastTransitionTime"):
            cond = {**cond, "lastTransitionTime": prev["lastTransitionTime"]}
        out.append(cond)
    return out


def get_condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return cond
    return None


def is_pod_ready(pod: dict[str, Any]) -> bool:
    cond = get_condition(pod, "Ready")
    return cond is not None and cond.get("status") == "True"


def is_pod_available(pod: dict[str, Any], min_ready_seconds: int, now: float) -> bool:
    """``podutil.IsPodAvailable``: ready, and ready for at least minReadySeconds."""
    cond = get_condition(pod, "Ready")
    if cond is None or cond.get("status") != "True":
        return False
    if not min_ready_seconds:
        return True
    since = parse_time(cond.get("lastTransitionTime"))
    return since is not None and since.timestamp() + min_ready_seconds <= now


def is_terminal(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def pod_conditions(
    minor: int,
    when: str,
    *,
    sandbox: bool,
    initialized: bool,
    unready: list[str],
    uninitialized: list[str] | None = None,
    node_ready: bool = True,
) -> list[dict[str, Any]]:
    """The kubelet-owned conditions in the kubelet's order, then PodScheduled."""
    out = []
    if minor >= 29:
        out.append(condition("PodReadyToStartContainers", sandbox, when))
    if initialized:
        out.append(condition("Initialized", True, when))
    else:
        names = " ".join(uninitialized or [])
        out.append(condition("Initialized", False, when, "ContainersNotInitialized", f"containers with incomplete status: [{names}]"))
    if unready:
        msg = f"containers with unready status: [{' '.join(unready)}]"
        out.append(condition("Ready", False, when, "ContainersNotReady", msg))
        out.append(condition("ContainersReady", False, when, "ContainersNotReady", msg))
    else:
        out.append(condition("Ready", node_ready, when))
        out.append(condition("ContainersReady", True, when))
    out.append(condition("PodScheduled", True, when))
    return out


def running_container_status(container: dict[str, Any], pod_uid: str, started: str, *, restarts: int = 0) -> dict[str, Any]:
    """A ready, running container as the kubelet reports it."""
    image = container.get("image", "")
    return {
        "containerID": container_id(f"{pod_uid}/{container['name']}/{restarts}"),
        "image": status_image(image),
        "imageID": image_id(image),
        "lastState": {},
        "name": container["name"],
        "ready": True,
        "restartCount": restarts,
        "started": True,
        "state": {"running": {"startedAt": started}},
    }


_SETTLED_CONDITIONS: dict[tuple[int, str], list[dict[str, Any]]] = {}
_WHEN: dict[dt.datetime, str] = {}


def stamp(moment: dt.datetime) -> str:
    """``rfc3339`` remembered for the few moments scenarios stamp thousands of objects with."""
    when = _WHEN.get(moment)
    if when is None:
        if len(_WHEN) > 256:
            _WHEN.clear()
            _SETTLED_CONDITIONS.clear()
        when = _WHEN[moment] = rfc3339(moment)
    return when


def settled_status(
    pod: dict[str, Any], *, minor: int, host_ip: str, pod_ip: str, started: dt.datetime, qos: str | None = None
) -> dict[str, Any]:
    """The status of a pod that has been running and ready since ``started`` (scenarios).

    Pods settled at the same moment share one (never mutated) conditions list.
    """
    when = stamp(started)
    spec = pod["spec"]
    uid = pod["metadata"]["uid"]
    conditions = _SETTLED_CONDITIONS.get((minor, when))
    if conditions is None:
        conditions = _SETTLED_CONDITIONS[(minor, when)] = pod_conditions(minor, when, sandbox=True, initialized=True, unready=[])
    status: dict[str, Any] = {
        "conditions": conditions,
        "containerStatuses": [running_container_status(c, uid, when) for c in spec.get("containers") or []],
        "hostIP": host_ip,
        "phase": "Running",
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "qosClass": qos or qos_class(spec),
        "startTime": when,
    }
    if minor >= 28:
        status["hostIPs"] = [{"ip": host_ip}]
    return status
