"""What a kubelet knows of a pod it runs, and the pod status it renders from that.

:class:`PodRt` and :class:`Ctr` are the kubelet-side state (stage, containers, restarts,
back-off); :func:`render_status` turns them into ``status`` as the kubelet's status
manager writes it (conditions keep their transition times while unchanged).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubesim import pluginreleases
from kubesim import podstatus as ps
from kubesim.devices import DEVICE_PLUGIN_IMAGE, kind_of

BACKOFF_START, BACKOFF_MAX = 10.0, 300.0


@dataclass
class Ctr:
    """One container's runtime state."""

    name: str
    image: str
    mode: str  # healthy | crash | silent | slow | noalloc (the image tag resolved on the pod's node)
    kind: str  # generic | device-plugin | dra-plugin (from the image name)
    state: str = "waiting"  # waiting | running | backoff | terminated (run to completion)
    started_at: str = ""
    restarts: int = 0
    backoff: float = 0.0
    last_term: dict[str, Any] | None = None
    cid: str = ""
    registered: bool = False
    term: dict[str, Any] | None = None
    """How a run-to-completion container exited (state ``terminated``)."""
    crash_reason: str | None = None
    """Why NVIDIA's device plugin fails to serve (a bad flag, the node's host fault: the keys of
    :func:`kubesim.pluginreleases.failure`): it crashes on it, or waits unregistered (mode ``silent``)."""
    config_error: str | None = None
    """Why the kubelet cannot create the container: a Secret or ConfigMap its environment reads is missing."""
    pull_waiting: dict[str, str] | None = None
    """The waiting state of a container whose image cannot be pulled (ErrImagePull, ImagePullBackOff)."""
    image_id: str = ""
    """``repo@sha256:…`` the registry resolved the image to when it was pulled (its ``imageID``)."""

    @property
    def ready(self) -> bool:
        """Running and reported ready (a crashing container dies before it is ever seen ready)."""
        return self.state == "running" and self.mode != "crash"


@dataclass
class PodRt:
    """What the node's kubelet knows of one pod."""

    uid: str
    ns: str
    name: str
    node: str
    ctrs: dict[str, Ctr] = field(default_factory=dict)
    stage: str = "new"  # new | preparing | sandbox | started | terminating
    start_time: str = ""
    pod_ip: str | None = None
    epoch: int = 0


def new_runtime(pod: dict[str, Any], node: str, node_labels: Mapping[str, str] | None = None, *,
                host: str | None = None, content: Callable[[str], str] | None = None) -> PodRt:
    """The kubelet starts a pod on ``node``: each container's mode is resolved here, once, from
    its image tag and the node's labels as they are now (see :func:`kubesim.podstatus.behaviour`)
    and, for NVIDIA's device plugin, from its flags and the node's host fault ``host``
    (:func:`kubesim.pluginreleases.failure`). ``content(image)``: the tag whose bytes an image
    pulls (a digest's, :meth:`kubesim.registry.Registry.content`); what it does follows that tag."""
    rt = PodRt(pod["metadata"]["uid"], pod["metadata"].get("namespace", ""), pod["metadata"]["name"], node)
    for c in pod["spec"].get("containers") or []:
        image = c.get("image", "")
        pulled = content(image) if content is not None else image
        kind = kind_of(c)
        mode, why = ps.behaviour(pulled, node_labels), None
        if kind == "device-plugin" and mode != "crash" and DEVICE_PLUGIN_IMAGE in image:
            why = pluginreleases.failure(pulled, c, host)
            if why is not None:
                mode = "crash" if pluginreleases.exits(why, c) else "silent"
        rt.ctrs[c["name"]] = Ctr(c["name"], image, mode, kind, crash_reason=why)
    return rt


def runtime_from_status(pod: dict[str, Any], node_labels: Mapping[str, str] | None = None, *,
                        host: str | None = None, content: Callable[[str], str] | None = None) -> PodRt:
    """Rebuild the runtime state of a pod that is already running (scenario start-up)."""
    m, spec, status = pod["metadata"], pod["spec"], pod.get("status") or {}
    rt = new_runtime(pod, spec["nodeName"], node_labels, host=host, content=content)
    rt.stage, rt.start_time, rt.pod_ip = "started", status.get("startTime", ""), status.get("podIP")
    known = {c.get("name"): c for c in status.get("containerStatuses") or []}
    for ctr in rt.ctrs.values():
        cs = known.get(ctr.name) or {}
        if "running" in (cs.get("state") or {}):
            ctr.state, ctr.started_at = "running", cs["state"]["running"].get("startedAt", "")
        ctr.restarts, ctr.cid = int(cs.get("restartCount") or 0), cs.get("containerID", "")
        ctr.image_id = cs.get("imageID") or ""
        ctr.last_term = (cs.get("lastState") or {}).get("terminated")
        ctr.backoff = min(BACKOFF_START * 2 ** max(ctr.restarts - 1, 0), BACKOFF_MAX) if ctr.restarts else 0.0
    del m
    return rt


def dra_prepare_message(minor: int, driver: str) -> str:
    """The kubelet's FailedPrepareDynamicResources message when a driver is not registered."""
    if minor >= 33:
        why = f"prepare dynamic resources: DRA driver {driver} is not registered"
    elif minor >= 31:
        why = f"failed to get gRPC client for driver {driver}: plugin name {driver} not found in the list of registered DRA plugins"
    else:
        why = f"failed to get DRA Plugin client for plugin name {driver}: plugin name {driver} not found in the list of registered DRA plugins"
    return f"Failed to prepare dynamic resources: {why}"


def render_status(rt: PodRt, pod: dict[str, Any], *, minor: int, now: str, host_ip: str) -> dict[str, Any]:
    """The pod's status as the kubelet reports it for the runtime state ``rt``."""
    old = pod.get("status") or {}
    spec = pod["spec"]
    statuses, unready = [], []
    for c in spec.get("containers") or []:
        ctr = rt.ctrs.get(c["name"])
        if ctr is None:
            continue
        statuses.append(container_status(ctr, pod))
        if not ctr.ready:
            unready.append(ctr.name)
    sandbox = rt.pod_ip is not None
    inits = spec.get("initContainers") or []
    finished = completed_phase(rt, spec)
    status = {k: v for k, v in old.items() if k not in ("conditions", "containerStatuses", "initContainerStatuses")}
    conditions = ps.pod_conditions(minor, now, sandbox=sandbox and finished is None, initialized=sandbox or not inits,
                                   unready=unready, uninitialized=[c["name"] for c in inits])
    if finished is not None:
        conditions = [_completed(c) for c in conditions]
    status["conditions"] = ps.merge_conditions(old.get("conditions"), conditions)
    status["containerStatuses"] = statuses
    if inits:
        status["initContainerStatuses"] = [init_status(c, rt, sandbox) for c in inits]
    status["hostIP"] = host_ip
    if minor >= 28:
        status["hostIPs"] = [{"ip": host_ip}]
    status["phase"] = finished or (
        "Running" if any(c.state != "waiting" or c.restarts for c in rt.ctrs.values()) else "Pending")
    if rt.pod_ip:
        status["podIP"], status["podIPs"] = rt.pod_ip, [{"ip": rt.pod_ip}]
    status["qosClass"] = ps.qos_class(spec)
    status["startTime"] = old.get("startTime") or rt.start_time
    return status


def completed_phase(rt: PodRt, spec: dict[str, Any]) -> str | None:
    """``Succeeded``/``Failed`` once every container ran to completion and will not restart."""
    ctrs = list(rt.ctrs.values())
    if not ctrs or any(c.state != "terminated" for c in ctrs):
        return None
    return "Succeeded" if all((c.term or {}).get("exitCode") == 0 for c in ctrs) else "Failed"


def _completed(cond: dict[str, Any]) -> dict[str, Any]:
    """Ready and ContainersReady of a pod whose containers completed: False, PodCompleted."""
    if cond["type"] in ("Ready", "ContainersReady"):
        return {k: v for k, v in cond.items() if k != "message"} | {"status": "False", "reason": "PodCompleted"}
    return cond


def container_status(ctr: Ctr, pod: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if ctr.cid:
        out["containerID"] = ctr.cid
    out["image"] = ps.status_image(ctr.image)
    out["imageID"] = (ctr.image_id or ps.image_id(ctr.image)) if ctr.cid else ""
    out["lastState"] = {"terminated": dict(ctr.last_term)} if ctr.last_term else {}
    out["name"] = ctr.name
    out["ready"] = ctr.ready
    out["restartCount"] = ctr.restarts
    out["started"] = ctr.state == "running"
    if ctr.state == "running":
        out["state"] = {"running": {"startedAt": ctr.started_at}}
    elif ctr.state == "terminated":
        out["state"] = {"terminated": dict(ctr.term or {})}
    elif ctr.state == "backoff":
        msg = ps.crashloop_message(ctr.backoff, ctr.name, pod)
        out["state"] = {"waiting": {"message": msg, "reason": "CrashLoopBackOff"}}
    elif ctr.pull_waiting:
        out["state"] = {"waiting": dict(ctr.pull_waiting)}
    elif ctr.config_error:
        out["state"] = {"waiting": {"message": ctr.config_error, "reason": "CreateContainerConfigError"}}
    else:
        out["state"] = {"waiting": {"reason": "ContainerCreating"}}
    return out


def init_status(c: dict[str, Any], rt: PodRt, done: bool) -> dict[str, Any]:
    """Init containers run to completion as soon as the sandbox exists."""
    image = c.get("image", "")
    if not done:
        return {"image": ps.status_image(image), "imageID": "", "lastState": {}, "name": c["name"], "ready": False,
                "restartCount": 0, "started": False, "state": {"waiting": {"reason": "PodInitializing"}}}
    cid = ps.container_id(f"{rt.uid}/init/{c['name']}")
    term = {"containerID": cid, "exitCode": 0, "finishedAt": rt.start_time, "reason": "Completed", "startedAt": rt.start_time}
    return {"containerID": cid, "image": ps.status_image(image), "imageID": ps.image_id(image), "lastState": {},
            "name": c["name"], "ready": True, "restartCount": 0, "started": False, "state": {"terminated": term}}
