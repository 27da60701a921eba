"""The NVIDIA GPU operator's ClusterPolicy reconcile, for the device-plugin and GFD DaemonSets.

What NVIDIA/gpu-operator v26.7.0 does (``controllers/clusterpolicy_controller.go``, ``controllers/object_controls.go``),
with the rendering in :mod:`kubesim.operatorrender`:

- **When it reconciles** (``SetupWithManager``): on a ClusterPolicy created, deleted, or updated with a new
  ``metadata.generation`` (``GenerationChangedPredicate``: a label or status edit does not count); on every event
  of a DaemonSet whose controller owner is a ClusterPolicy (``EnqueueRequestForOwner(..., OnlyControllerOwner())``,
  no predicate, so its status updates count too); again 5 s later while a state is not ready
  (``RequeueAfter: 5s``); after a failure, with the controller's back-off (100 ms doubling to 3 s).
- **What it does to each DaemonSet** (``DaemonSet``, ``isDaemonsetSpecChanged``): renders the desired object and
  its hash; creates it when missing (hash in ``nvidia.com/last-applied-hash``); when the *stored annotation*
  differs from the desired hash, replaces the whole object (an Update without resourceVersion: labels,
  annotations and spec as rendered, the hash annotation set) and the state is not ready; else leaves it ("DaemonSet
  identical, skipping update"). It never compares the live spec: a direct edit of the DaemonSet (``kubectl set
  image``) that leaves the annotation alone stays until the desired object changes (a ClusterPolicy edit, an
  operator upgrade), then the whole rendered object replaces it; a direct edit that removes or changes the
  annotation is rewritten at once, the edit being itself an owned-DaemonSet event. A component disabled
  (``enabled: false``) has its DaemonSet deleted.
- **Readiness** (``isDaemonSetReady``): ready with no desired pods; not ready with unavailable pods; a
  RollingUpdate DaemonSet when its status has observed its generation and every desired pod is updated and
  available; an OnDelete one when every pod it owns carries the latest ControllerRevision's hash, runs, and has
  every container ready.
- **Status** (``updateCRState``, ``internal/conditions/clusterpolicy.go``): ``state: ready|notReady``,
  ``namespace``, and the ``Ready``/``Error`` conditions (reasons ``Reconciled``, ``OperandNotReady``,
  ``ReconcileFailed``). Of several ClusterPolicies the oldest (name breaking ties) is the one reconciled.

The hash is kubesim's own (FNV-32a of the desired object as canonical JSON): the operator hashes the Go struct's
``%#v`` printing (``internal/utils.GetObjectHash``), a value kubesim cannot reproduce; both change exactly when the
desired object changes. Every reconcile is recorded (:attr:`GpuOperator.reconciles`, ``GET /sim/v1/gpu-operator``)
so a test waits on it, not on time. Not modelled: the operator's other states (driver, toolkit, validator,
dcgm-exporter, MIG manager, ...), its Deployment and pod, NFD/GPU-node discovery (the GPU nodes are taken as
present), the NVIDIADriver and GPUCluster kinds.
"""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from kubesim import operatorrender as render
from kubesim.clock import rfc3339
from kubesim.errors import ApiError
from kubesim.revisions import HASH_LABEL, TEMPLATE_GENERATION

if TYPE_CHECKING:
    from kubesim.simulation import Simulation
    from kubesim.store import WatchEvent

FILES = Path(__file__).parent / "manifests" / "gpu-operator-v26.7.0"
CLUSTER_POLICIES = ("nvidia.com", "clusterpolicies")
DAEMONSETS, PODS, REVISIONS = ("apps", "daemonsets"), ("", "pods"), ("apps", "controllerrevisions")
HASH_ANNOTATION = "nvidia.com/last-applied-hash"
NAMESPACE = "gpu-operator"
OPERANDS = (render.DEVICE_PLUGIN, render.GFD)
"""The DaemonSets kubesim's operator keeps, in the order of the operator's states."""
REQUEUE_NOT_READY, BACKOFF_MIN, BACKOFF_MAX = 5.0, 0.1, 3.0
RECONCILES_KEPT = 1000
READY_MESSAGE = "ClusterPolicy is ready as all resources have been successfully reconciled"


@functools.cache
def _read(name: str) -> dict[str, Any]:
    with (FILES / name).open(encoding="utf-8") as fh:
        return next(doc for doc in yaml.safe_load_all(fh) if doc)


def _load(name: str) -> dict[str, Any]:
    return copy.deepcopy(_read(name))


def crd() -> dict[str, Any]:
    """The ClusterPolicy CRD, as the operator's chart ships it."""
    return _load("nvidia.com_clusterpolicies.yaml")


def cluster_policy() -> dict[str, Any]:
    """``cluster-policy`` as the operator's chart renders it (see the file's header for the values)."""
    return _load("clusterpolicy.yaml")


ASSET_FILES = {render.DEVICE_PLUGIN: "state-device-plugin-0500_daemonset.yaml",
               render.GFD: "gpu-feature-discovery-0500_daemonset.yaml"}


def asset(name: str) -> dict[str, Any]:
    """The operator's asset for the DaemonSet ``name``, as it ships it."""
    return _load(ASSET_FILES[name])


def object_hash(obj: dict[str, Any]) -> str:
    """kubesim's ``nvidia.com/last-applied-hash`` of a desired object: FNV-32a of its canonical JSON, in decimal."""
    value = 0x811C9DC5
    for byte in json.dumps(obj, sort_keys=True, separators=(",", ":")).encode():
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    return str(value)


def desired(policy: dict[str, Any], name: str, namespace: str = NAMESPACE) -> dict[str, Any]:
    """The DaemonSet ``name`` the operator wants under ``policy``, its hash annotation set."""
    ds = render.render(asset(name), policy, namespace)
    ds["metadata"]["annotations"][HASH_ANNOTATION] = object_hash(ds)
    return ds


def _controller_policy(obj: dict[str, Any] | None) -> str | None:
    for ref in ((obj or {}).get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") == "ClusterPolicy" and str(ref.get("apiVersion", "")).startswith(
                "nvidia.com/"):
            return str(ref.get("name"))
    return None


def _condition(kind: str, status: bool, reason: str, message: str, old: list[dict[str, Any]], now: str) -> dict[str, Any]:
    """``meta.SetStatusCondition``: the transition time moves only when the status does."""
    was = next((c for c in old if c.get("type") == kind), None)
    value = "True" if status else "False"
    since = was["lastTransitionTime"] if was and was.get("status") == value and was.get("lastTransitionTime") else now
    return {"type": kind, "status": value, "lastTransitionTime": since, "reason": reason, "message": message}


def status_of(state: str, namespace: str, reason: str, message: str, old: dict[str, Any] | None, now: str) -> dict[str, Any]:
    """The ClusterPolicy status after a reconcile: ``ready`` (Ready True) or ``notReady`` (Error True)."""
    conditions = list((old or {}).get("conditions") or [])
    ready = state == "ready"
    new = [_condition("Ready", ready, reason if ready else "Error", message if ready else "", conditions, now),
           _condition("Error", not ready, "Ready" if ready else reason, "" if ready else message, conditions, now)]
    kept = [c for c in conditions if c.get("type") not in ("Ready", "Error")]
    return {"state": state, "namespace": namespace, "conditions": [*kept, *new]}


class GpuOperator:
    """The operator's ClusterPolicy controller, for :data:`OPERANDS` in ``namespace``."""

    def __init__(self, namespace: str = NAMESPACE) -> None:
        self.namespace = namespace
        self.sim: Simulation | None = None
        self.reconciles: list[dict[str, Any]] = []
        """One entry per reconcile, the last :data:`RECONCILES_KEPT`: ``seq`` (from 1, never reused), ``time``,
        ``clusterpolicy``, ``generation``, ``daemonsets`` (name -> what was done: ``created``, ``updated``,
        ``identical``, ``deleted``, ``disabled``), ``state``, ``error``."""
        self._seq = 0
        self._requeued: set[str] = set()
        self._failures: dict[str, int] = {}
        self._desired: dict[tuple[str, Any, str], dict[str, Any]] = {}
        """(policy uid, generation, DaemonSet) -> its render: a status write or an owned DaemonSet's event changes
        neither, and a render with its hash costs milliseconds."""

    def start(self, sim: Simulation) -> None:
        """Watch, and reconcile every ClusterPolicy once, as the operator does when its informer first lists them."""
        self.sim = sim
        sim.store.subscribe(self._on_event)
        for policy in sim.store.iter(CLUSTER_POLICIES):
            self.enqueue(policy["metadata"]["name"])

    # ----------------------------------------------------------------- watches
    def _on_event(self, res: Any, event: WatchEvent) -> None:
        gr = res.group_resource
        if gr == CLUSTER_POLICIES:
            old_gen = ((event.old or {}).get("metadata") or {}).get("generation")
            if event.type != "MODIFIED" or old_gen != event.obj["metadata"].get("generation"):
                self.enqueue(event.obj["metadata"]["name"])
        elif gr == DAEMONSETS:
            owner = _controller_policy(event.obj) or _controller_policy(event.old)
            if owner:
                self.enqueue(owner)

    def enqueue(self, name: str) -> None:
        assert self.sim is not None
        self.sim.enqueue(("gpu-operator", name), lambda: self.reconcile(name))

    def _later(self, name: str, delay: float) -> None:
        assert self.sim is not None
        if name in self._requeued:
            return
        self._requeued.add(name)

        def fire() -> None:
            self._requeued.discard(name)
            self.enqueue(name)

        self.sim.call_later(delay, fire)

    # --------------------------------------------------------------- reconcile
    def reconcile(self, name: str) -> None:
        assert self.sim is not None
        store = self.sim.store
        policy = store.get(CLUSTER_POLICIES, "", name)
        if policy is None:
            return
        policies = store.list(CLUSTER_POLICIES)
        singleton = min(policies, key=lambda p: (p["metadata"].get("creationTimestamp") or "", p["metadata"]["name"]))
        if singleton["metadata"]["name"] != name:
            return  # SetStatus(Ignored) in memory only: nothing is written
        entry: dict[str, Any] = {"time": rfc3339(self.sim.clock.now()), "clusterpolicy": name,
                                 "generation": policy["metadata"].get("generation"), "daemonsets": {}}
        not_ready = []
        for ds_name in OPERANDS:
            state_name = render.STATES[ds_name][0]
            try:
                action, ready = self._daemonset(policy, ds_name)
            except (render.RenderError, ApiError) as exc:
                message = exc.message if isinstance(exc, ApiError) else str(exc)
                entry.update(state="notReady", error=f"Failed to reconcile {state_name}: {message}")
                self._record(entry)
                self._write_status(name, "notReady", "ReconcileFailed", entry["error"])
                failures = self._failures[name] = self._failures.get(name, 0) + 1
                self._later(name, min(BACKOFF_MAX, BACKOFF_MIN * 2 ** (failures - 1)))
                return
            entry["daemonsets"][ds_name] = action
            if not ready:
                not_ready.append(state_name)
        self._failures.pop(name, None)
        if not_ready:
            entry["state"] = "notReady"
            self._record(entry)
            message = f"ClusterPolicy is not ready; states not ready: [{' '.join(not_ready)}]"
            self._write_status(name, "notReady", "OperandNotReady", message)
            self._later(name, REQUEUE_NOT_READY)
            return
        entry["state"] = "ready"
        self._record(entry)
        self._write_status(name, "ready", "Reconciled", READY_MESSAGE)

    def _record(self, entry: dict[str, Any]) -> None:
        self._seq += 1
        self.reconciles.append({"seq": self._seq, **entry})
        del self.reconciles[:-RECONCILES_KEPT]

    def _daemonset(self, policy: dict[str, Any], name: str) -> tuple[str, bool]:
        """``DaemonSet``: create, update or leave the DaemonSet ``name``; what was done, and whether it is ready."""
        assert self.sim is not None
        store = self.sim.store
        res = store.storage_type(DAEMONSETS)
        current = store.get(DAEMONSETS, self.namespace, name)
        if not render.enabled(policy, name):
            if current is None:
                return "disabled", True
            store.delete(res, self.namespace, name)
            return "deleted", True
        key = (policy["metadata"]["uid"], policy["metadata"].get("generation"), name)
        if key not in self._desired:
            self._desired = {k: v for k, v in self._desired.items() if k[0] == key[0] and k[1] == key[1]}
            self._desired[key] = desired(policy, name, self.namespace)
        want = copy.deepcopy(self._desired[key])
        if current is None:
            created = store.create(res, want)
            return "created", self._ready(created)
        if (current["metadata"].get("annotations") or {}).get(HASH_ANNOTATION) == want["metadata"]["annotations"][
                HASH_ANNOTATION]:
            return "identical", self._ready(current)
        generation = (current["metadata"].get("annotations") or {}).get(TEMPLATE_GENERATION)
        if generation is not None:  # kept by the API server (spec.templateGeneration), not by the operator
            want["metadata"]["annotations"][TEMPLATE_GENERATION] = generation
        if current["metadata"].get("managedFields"):
            want["metadata"]["managedFields"] = copy.deepcopy(current["metadata"]["managedFields"])
        store.replace(res, want)
        return "updated", False

    def _ready(self, ds: dict[str, Any]) -> bool:
        """``isDaemonSetReady``."""
        assert self.sim is not None
        status = ds.get("status") or {}
        desired_pods = int(status.get("desiredNumberScheduled") or 0)
        if desired_pods == 0:
            return True
        if int(status.get("numberUnavailable") or 0):
            return False
        if ((ds["spec"].get("updateStrategy") or {}).get("type")) != "OnDelete":
            return (int(status.get("observedGeneration") or 0) >= int(ds["metadata"].get("generation") or 0)
                    and int(status.get("updatedNumberScheduled") or 0) == desired_pods
                    and int(status.get("numberAvailable") or 0) == desired_pods)
        name, uid = ds["metadata"]["name"], ds["metadata"]["uid"]
        revisions = [r for r in self.sim.store.list(REVISIONS, self.namespace) if r["metadata"]["name"].startswith(name)]
        if not revisions:
            return False
        latest = max(revisions, key=lambda r: int(r.get("revision") or 0))["metadata"]["name"].removeprefix(f"{name}-")
        selector = (ds["spec"].get("selector") or {}).get("matchLabels") or {}
        pods = [p for p in self.sim.store.list(PODS, self.namespace)
                if all((p["metadata"].get("labels") or {}).get(k) == v for k, v in selector.items())
                and ((p["metadata"].get("ownerReferences") or [{}])[0]).get("uid") == uid]
        if not pods:
            return False
        return all((p["metadata"].get("labels") or {}).get(HASH_LABEL) == latest
                   and (p.get("status") or {}).get("phase") == "Running"
                   and all(c.get("ready") for c in (p.get("status") or {}).get("containerStatuses") or [])
                   for p in pods)

    def _write_status(self, name: str, state: str, reason: str, message: str) -> None:
        assert self.sim is not None
        now = rfc3339(self.sim.clock.now())

        def write(obj: dict[str, Any]) -> None:
            obj["status"] = status_of(state, self.namespace, reason, message, obj.get("status"), now)

        self.sim.store.mutate(CLUSTER_POLICIES, "", name, write)
