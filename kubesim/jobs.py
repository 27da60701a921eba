"""Containers that run to completion: the CUDA vectoradd sample used as a smoke test.

A container whose image names ``cuda-sample`` (e.g.
``nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0``) prints the sample's output and
exits: 0 with ``Test PASSED`` when its pod was given a GPU (``nvidia.com/gpu`` requested,
so scheduled and admitted on a node whose device plugin advertises GPUs, or a DRA claim
the container uses allocated a device), 1 when it got none or its tag ends in ``-crash`` (or in
``-crash-on-<word>`` and its node is labelled ``kubesim.io/crash=<word>``). With
``restartPolicy: Never`` the pod then Succeeds or Fails; otherwise a failed run restarts as a crashing container does.
Told to ``sleep`` (its command), it keeps running instead (:func:`sleeps`).

A mixin for :class:`kubesim.kubelets.KubeletController`.
"""

from __future__ import annotations

from typing import Any

from kubesim import dra, pluginlogs, quantities
from kubesim import podstatus as ps
from kubesim.clock import rfc3339
from kubesim.podruntime import Ctr, PodRt

CUDA_SAMPLE = "cuda-sample"
RUN_SECONDS = 1.0
NO_DEVICE = "no CUDA-capable device is detected"
DRIVER_MISMATCH = "CUDA driver version is insufficient for CUDA runtime version"


def is_job(image: str) -> bool:
    return CUDA_SAMPLE in image


def sleeps(container: dict[str, Any]) -> bool:
    """A container told to ``sleep`` (``command: [sleep, infinity]`` or ``sh -c "sleep ..."``)
    runs that instead of its image's program: it keeps running."""
    words = [str(w) for w in (container.get("command") or [])]
    if words[:2] == ["sh", "-c"] and len(words) > 2:
        words = words[2].split()
    return bool(words) and words[0].rsplit("/", 1)[-1] == "sleep"


def gpus_of(container: dict[str, Any]) -> int:
    try:
        return quantities.value(ps.container_requests(container).get(ps.GPU, 0))
    except ValueError:
        return 0


class JobRunner:
    """Runs to-completion containers and records how they exited."""

    sim: Any

    def _run_job(self, rt: PodRt, ctr: Ctr, pod: dict[str, Any]) -> None:
        container: dict[str, Any] = next((c for c in pod["spec"].get("containers") or [] if c["name"] == ctr.name), {})
        error = None
        if ctr.mode == "crash":
            error = DRIVER_MISMATCH
        elif gpus_of(container) < 1 and self._claimed_devices(pod, container) < 1:
            error = NO_DEVICE
        self._write_log(rt, ctr.name, pluginlogs.cuda_vectoradd(self.sim.clock.now(), error=error))  # type: ignore[attr-defined]
        code = 1 if error else 0
        self._later(rt, RUN_SECONDS, lambda: self._job_exit(rt, ctr, code))  # type: ignore[attr-defined]

    def _claimed_devices(self, pod: dict[str, Any], container: dict[str, Any]) -> int:
        """Devices allocated to the claims this container uses (``resources.claims``)."""
        wanted = {c.get("name") for c in (container.get("resources") or {}).get("claims") or []}
        if not wanted:
            return 0
        names = dra.resolved_claim_names(pod, self.sim.minor)
        count = 0
        for pod_claim, claim_name in names.items():
            claim = self.sim.store.get(dra.CLAIMS, pod["metadata"]["namespace"], claim_name or "") if (
                pod_claim in wanted and claim_name) else None
            count += len(dra.allocated_devices(claim)) if claim else 0
        return count

    def _job_exit(self, rt: PodRt, ctr: Ctr, code: int) -> None:
        pod = self._pod(rt.uid)  # type: ignore[attr-defined]
        if pod is None or ctr.state != "running":
            return
        policy = pod["spec"].get("restartPolicy") or "Always"
        if policy == "Never" or (policy == "OnFailure" and code == 0):
            ctr.state = "terminated"
            ctr.term = {
                "containerID": ctr.cid, "exitCode": code, "finishedAt": rfc3339(self.sim.clock.now()),
                "reason": "Completed" if code == 0 else "Error", "startedAt": ctr.started_at,
            }
            self._write(rt)  # type: ignore[attr-defined]
            return
        self._crash(rt, ctr)  # type: ignore[attr-defined]
