"""Helpers for the cluster-step tests: a run in memory, a context around it, kubectl views.

The context is what the engine would pass, minus Redis: ``save_progress`` merges into
the run (through JSON, as the store keeps it), ``record`` appends to a list, the clock
is the real one (kubesim runs fast, ``speed``), settings are short.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from dataclasses import dataclass, field
from typing import Any

from kubesim import KubeSim
from runbooks.cluster import Cluster, RetryPolicy
from runbooks.engine.clocks import SystemClock
from runbooks.engine.runs import Run, Step, Target
from runbooks.engine.steps import StepContext, StepSettings
from runbooks.registries import Mirror
from tests.support import Kubectl, kubesim_mirrors

NS, DS = "kube-system", "nvidia-device-plugin-daemonset"
CTR = "nvidia-device-plugin-ctr"
OLD = "nvcr.io/nvidia/k8s-device-plugin:v0.14.2"
NEW = "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"
SPEED = 20.0
FAST = StepSettings(ready_timeout=3.0, observe_window=0.3, poll_interval=0.03)
RETRIES = RetryPolicy(attempts=4, base_delay=0.05, max_delay=0.5, deadline=5)
GPU_NODES = ("gpu-node1", "gpu-node2", "gpu-node3")


@dataclass
class Harness:
    """One run of the steps: its context, its audit entries, its stored progress."""

    ctx: StepContext
    steps: list[Step] = field(default_factory=list)

    @property
    def run(self) -> Run:
        return self.ctx.run

    def names(self) -> list[str]:
        return [s.name for s in self.steps]


def harness(
    sim: KubeSim, *, image: str = NEW, node: str = "gpu-node1", container: str = CTR, ns: str = NS, ds: str = DS,
    progress: dict[str, Any] | None = None, settings: StepSettings = FAST,
) -> Harness:
    now = dt.datetime.now(dt.UTC)
    run = Run(id="r-steps001", target=Target(cluster="kubesim", namespace=ns, name=ds), image=image,
              container=container, node=node, requester="U0ALICE", created_at=now, updated_at=now,
              progress=progress or {})
    steps: list[Step] = []
    holder: dict[str, Run] = {"run": run}

    def save_progress(keys: dict[str, Any]) -> Run:
        current = holder["run"]
        merged = json.loads(json.dumps({**current.progress, **keys}))  # the store keeps JSON
        holder["run"] = current.model_copy(update={"progress": merged, "version": current.version + 1})
        return holder["run"]

    cluster = Cluster.from_kubeconfig(sim.kubeconfig, retry=RETRIES)
    if not settings.mirrors:  # digests are asked of kubesim's registry, never the internet
        settings = dataclasses.replace(settings, mirrors={host: Mirror(url=m["url"], ca_file=m["ca_file"])
                                                          for host, m in kubesim_mirrors(sim.url, sim.kubeconfig).items()})
    ctx = StepContext(cluster=cluster, run=run, save_progress=save_progress, record=steps.append,
                      clock=SystemClock(), settings=settings)
    return Harness(ctx, steps)


def again(h: Harness) -> Harness:
    """A fresh context on the same run (as the engine builds after a restart), keeping the progress."""
    steps: list[Step] = []
    ctx = StepContext(cluster=h.ctx.cluster, run=h.ctx.run, save_progress=h.ctx.save_progress, record=steps.append,
                      clock=h.ctx.clock, settings=h.ctx.settings)
    return Harness(ctx, steps)


def writes(sim: KubeSim, since: int = 0) -> list[tuple[str, str]]:
    """Successful mutating requests (verb, path) from the ``since``-th on."""
    return [(m["verb"], m["path"]) for m in sim.mutations()[since:] if m["code"] < 400 and not m["dryRun"]]


def images_by_node(kubectl: Kubectl, ns: str = NS, selector: str = "name=nvidia-device-plugin-ds") -> dict[str, str]:
    """node -> image of the live plugin pod on it, as ``kubectl get pods`` prints them."""
    out = kubectl("get", "pods", "-n", ns, "-l", selector, "--no-headers", "-o",
                  "custom-columns=NODE:.spec.nodeName,IMAGE:.spec.containers[*].image,GONE:.metadata.deletionTimestamp")
    rows = [line.split() for line in out.splitlines() if line.strip()]
    return {node: image for node, image, gone in rows if gone == "<none>"}


def gpus_by_node(kubectl: Kubectl) -> dict[str, str]:
    """node -> ``capacity/allocatable`` of nvidia.com/gpu, as ``kubectl get nodes`` prints them."""
    out = kubectl("get", "nodes", "--no-headers", "-o", r"custom-columns=NAME:.metadata.name,"
                  r"CAP:.status.capacity.nvidia\.com/gpu,ALLOC:.status.allocatable.nvidia\.com/gpu")
    return {name: f"{cap}/{alloc}" for name, cap, alloc in (line.split() for line in out.splitlines() if line.strip())}


BASELINE_GPUS = {"cpu-node1": "<none>/<none>", "gpu-node1": "8/8", "gpu-node2": "8/8", "gpu-node3": "8/8"}


class FaultingClock(SystemClock):
    """The real clock, running ``action`` once at the first sleep (a fault while a step watches)."""

    def __init__(self, action: Any) -> None:
        self.action = action

    def sleep(self, seconds: float) -> None:
        if self.action is not None:
            action, self.action = self.action, None
            action()
        super().sleep(seconds)


class Killed(BaseException):
    """The bot died here: a stand-in for SIGKILL that no step catches."""


def kill_after(h: Harness, name: str) -> Harness:
    """Make the step die right after it records ``name`` (so after the mutation that entry reports)."""
    record = h.ctx.record

    def dying(step: Step) -> None:
        record(step)
        if step.name == name:
            raise Killed(name)

    h.ctx.record = dying
    return h


def ds_field(kubectl: Kubectl, jsonpath: str, ns: str = NS, ds: str = DS) -> str:
    return kubectl("get", "daemonset", ds, "-n", ns, "-o", f"jsonpath={jsonpath}")
