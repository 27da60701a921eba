"""``batch/v1`` Jobs: the API server's defaults and kube-controller-manager's job controller.

- On create (``PrepareForCreate`` and ``SetDefaults_Job``): ``completions`` and
  ``parallelism`` 1 when neither is set, ``backoffLimit`` 6, ``completionMode`` NonIndexed,
  ``suspend`` false; unless ``manualSelector``, the selector
  ``batch.kubernetes.io/controller-uid=<uid>`` and the template labels that go with it
  (``batch.kubernetes.io/job-name``, ``job-name``, ``controller-uid``). A template whose
  ``restartPolicy`` is not ``Never`` or ``OnFailure`` is refused (422), as validation does.
- The controller keeps ``parallelism`` pods running (never more than the completions still
  needed), counts each pod that Succeeded or Failed, and ends the Job: ``Complete`` once
  ``completions`` pods succeeded, ``Failed`` (``BackoffLimitExceeded``, its running pods
  deleted) once more pods failed than ``backoffLimit``. A pod's containers do what their
  image says (:mod:`kubesim.jobs`: a CUDA sample runs to completion; other images keep running).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kubesim import errors
from kubesim import podstatus as ps
from kubesim.clock import rfc3339
from kubesim.errors import ApiError
from kubesim.resources import ResourceType

if TYPE_CHECKING:
    from kubesim.simulation import Simulation
    from kubesim.store import WatchEvent

JOBS = ("batch", "jobs")
PODS = ("", "pods")
UID_LABEL = "batch.kubernetes.io/controller-uid"
NAME_LABEL = "batch.kubernetes.io/job-name"


def prepare_job(res: ResourceType, job: dict[str, Any]) -> None:
    """A new Job's defaults, generated selector and template labels; 422 for a restartPolicy a Job cannot have."""
    spec = job.setdefault("spec", {})
    if not isinstance(spec, dict):
        return
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
    spec.setdefault("parallelism", 1)
    spec.setdefault("backoffLimit", 6)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    m = job["metadata"]
    template = spec.setdefault("template", {})
    tmeta = template.setdefault("metadata", {})
    if not spec.get("manualSelector"):
        uid, name = m["uid"], m.get("name", "")
        spec["selector"] = {"matchLabels": {UID_LABEL: uid}}
        tmeta["labels"] = {**(tmeta.get("labels") or {}), UID_LABEL: uid, NAME_LABEL: name,
                           "controller-uid": uid, "job-name": name}
    policy = (template.get("spec") or {}).get("restartPolicy") or "Always"  # the pod template's default
    if policy not in ("Never", "OnFailure"):
        raise errors.invalid(res, m.get("name", ""), [(
            "spec.template.spec.restartPolicy", f'Unsupported value: "{policy}": supported values: "OnFailure", "Never"')])


def _condition(kind: str, reason: str, message: str, now: str) -> dict[str, Any]:
    return {"type": kind, "status": "True", "lastProbeTime": now, "lastTransitionTime": now,
            "reason": reason, "message": message}


def finished(job: dict[str, Any]) -> bool:
    return any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
               for c in (job.get("status") or {}).get("conditions") or [])


class JobController:
    """Runs each Job's pods to its completions or its backoff limit."""

    def __init__(self) -> None:
        self.sim: Simulation | None = None

    def start(self, sim: Simulation) -> None:
        self.sim = sim
        sim.store.subscribe(self._on_event)
        for job in sim.store.iter(JOBS):
            self._enqueue(job["metadata"]["namespace"], job["metadata"]["name"])

    def _enqueue(self, ns: str, name: str) -> None:
        assert self.sim is not None
        self.sim.enqueue(("job", ns, name), lambda: self.sync(ns, name))

    def _on_event(self, res: ResourceType, event: WatchEvent) -> None:
        if res.group_resource == JOBS and event.type != "DELETED":
            self._enqueue(event.obj["metadata"]["namespace"], event.obj["metadata"]["name"])
        elif res.group_resource == PODS:
            for ref in event.obj["metadata"].get("ownerReferences") or []:
                if ref.get("kind") == "Job" and ref.get("controller"):
                    self._enqueue(event.obj["metadata"]["namespace"], ref.get("name", ""))

    def _pods(self, job: dict[str, Any]) -> list[dict[str, Any]]:
        assert self.sim is not None
        uid = job["metadata"]["uid"]
        return [p for p in self.sim.store.iter(PODS, job["metadata"]["namespace"])
                if any(r.get("uid") == uid and r.get("controller") for r in p["metadata"].get("ownerReferences") or [])]

    def sync(self, ns: str, name: str) -> None:
        assert self.sim is not None
        sim = self.sim
        job = sim.store.get(JOBS, ns, name)
        if job is None or job["metadata"].get("deletionTimestamp") or finished(job):
            return
        spec, pods = job["spec"], self._pods(job)
        phases = [(p.get("status") or {}).get("phase") for p in pods]
        succeeded, failed = phases.count("Succeeded"), phases.count("Failed")
        active = [p for p in pods if not ps.is_terminal(p) and not p["metadata"].get("deletionTimestamp")]
        completions = spec.get("completions")
        now = rfc3339(sim.clock.now())
        done: dict[str, Any] | None = None
        if completions is not None and succeeded >= completions:
            done = _condition("Complete", "CompletionsReached", "Reached expected number of succeeded pods", now)
            sim.record_event(job, reason="Completed", message="Job completed", component="job-controller")
        elif failed > int(spec.get("backoffLimit") or 0):
            done = _condition("Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit", now)
            sim.record_event(job, reason="BackoffLimitExceeded", type="Warning",
                             message="Job has reached the specified backoff limit", component="job-controller")
            for pod in active:
                self._delete(pod)
            active = []
        elif not spec.get("suspend"):
            wanted = int(spec.get("parallelism") or 0)
            if completions is not None:
                wanted = min(wanted, completions - succeeded)
            for _ in range(wanted - len(active)):
                created = self._create(job)
                if created is not None:
                    active.append(created)
        ready = sum(1 for p in active for c in (p.get("status") or {}).get("conditions") or []
                    if c.get("type") == "Ready" and c.get("status") == "True")

        def write(obj: dict[str, Any]) -> None:
            status = obj.setdefault("status", {})
            status.setdefault("startTime", now)
            for key, value in (("active", len(active)), ("succeeded", succeeded), ("failed", failed)):
                if value:
                    status[key] = value
                else:
                    status.pop(key, None)
            status["ready"] = ready
            status["uncountedTerminatedPods"] = {}
            if done is not None:
                status["conditions"] = [*(status.get("conditions") or []), done]
                if done["type"] == "Complete":
                    status["completionTime"] = now

        sim.store.mutate(JOBS, ns, name, write)

    def _create(self, job: dict[str, Any]) -> dict[str, Any] | None:
        assert self.sim is not None
        template = job["spec"].get("template") or {}
        tmeta = template.get("metadata") or {}
        m = job["metadata"]
        pod = {"metadata": {"generateName": f"{m['name']}-", "namespace": m["namespace"],
                            "labels": dict(tmeta.get("labels") or {}),
                            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": m["name"],
                                                 "uid": m["uid"], "controller": True, "blockOwnerDeletion": True}]},
               "spec": dict(template.get("spec") or {})}
        store = self.sim.store
        try:
            created = store.create(store.storage_type(PODS), pod)
        except ApiError as exc:
            self.sim.record_event(job, reason="FailedCreate", type="Warning", message=f"Error creating: {exc}",
                                  component="job-controller")
            return None
        self.sim.record_event(job, reason="SuccessfulCreate", message=f"Created pod: {created['metadata']['name']}",
                              component="job-controller")
        return created

    def _delete(self, pod: dict[str, Any]) -> None:
        assert self.sim is not None
        try:
            self.sim.store.delete(PODS, pod["metadata"]["namespace"], pod["metadata"]["name"])
        except ApiError:
            return
