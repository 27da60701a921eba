"""Issue 40, item 1 (fencing, the run-step part): a run owner starved past its lease mid-step
sends no more cluster mutations once it runs again.

Two replicas are two processes (:mod:`tests.run_replica`) on one Redis and one kubesim. The
canary has run; replica A approves the promotion (one wave, the DaemonSet's maxUnavailable 3:
the wave's pods deleted in one batch) and drives it. The moment kubesim receives A's first pod
deletion of the wave, A is stopped (SIGSTOP, before it reads kubesim's answer): it holds the
wave's other pods, as it last read them. Its 2 s lease runs out; replica B
takes the run over and finishes the promotion. Then A is resumed (SIGCONT) in the middle of
its wave, its lease renewer not yet aware: kubesim's request log must show no mutation from
then on (on the code before issue 40, A went on deleting the pods of its stale list).
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bot.storage.redis_store import RedisRunStore
from kubesim import KubeSim
from runbooks.cluster import Cluster
from runbooks.daemonset.steps import DaemonSetSteps
from runbooks.engine.actors import Actor
from runbooks.engine.commands import Engine
from runbooks.engine.runs import RunState
from runbooks.policy import Policy
from tests.run_replica import POLICY
from tests.starving import Starvation, end_replicas
from tests.support import Kubectl

LEASE = "2"
ROOT = Path(__file__).resolve().parents[2]
TARGET = "kube-system/nvidia-device-plugin-daemonset"
NEW = "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"
PODS = "/api/v1/namespaces/kube-system/pods/"


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[KubeSim]:
    with KubeSim(scenario="gpu-small", k8s_version="1.31", speed=4, kubeconfig=tmp_path / "kubeconfig") as served:
        yield served


class StoppingLog(list[dict[str, Any]]):
    """kubesim's mutation log, which stops ``pid`` when the first pod deletion is logged (the
    pod is gone; the deleting process has not yet read the answer)."""

    def __init__(self, items: list[dict[str, Any]], starvation: Starvation) -> None:
        super().__init__(items)
        self.starvation, self.pid = starvation, 0

    def append(self, item: dict[str, Any]) -> None:
        super().append(item)
        if self.pid and item["method"] == "DELETE" and item["path"].startswith(PODS) and int(item["code"]) < 400:
            self.starvation.stop(self.pid)
            self.pid = 0


def replica(redis_url: str, sim: KubeSim, owner: str, run_id: str, log: Path, mode: str) -> subprocess.Popen[str]:
    with log.open("a") as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "tests.run_replica", redis_url, str(sim.kubeconfig), owner, LEASE,
                                 run_id, mode], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
                                text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready", log.read_text()[-3000:]
    return proc


def mutations(sim: KubeSim) -> list[dict[str, Any]]:
    return [m for m in sim.mutations() if not m["dryRun"]]


def test_a_run_owner_stopped_mid_wave_past_its_lease_mutates_nothing_when_resumed(
    sim: KubeSim, redis_url: str, tmp_path: Path, starvation: Starvation
) -> None:
    """Issue 40 item 1 (no repeated mutation): A is stopped inside the promotion's wave, right
    after its first pod deletion, past its 2 s lease; B resumes the run and finishes the
    promotion; A is SIGCONTed mid-wave: each cluster write it would send next is fenced by the
    run's lease (its owner token checked atomically right before the write), so kubesim's
    request log gets no mutation after the resume, and each plugin pod is deleted once."""
    Kubectl(sim.kubeconfig)("patch", "daemonset", "-n", "kube-system", "nvidia-device-plugin-daemonset", "--type=merge",
                            "-p", '{"spec": {"updateStrategy": {"rollingUpdate": {"maxUnavailable": 3}}}}')
    store = RedisRunStore.from_url(redis_url)
    engine = Engine(store=store, steps=DaemonSetSteps(), policy=Policy.model_validate(POLICY),
                    connect=lambda context: Cluster.from_kubeconfig(sim.kubeconfig, context))
    run_id = engine.request_canary(actor=Actor("U0ALICE"), target=TARGET, image=NEW, node="gpu-node1").run.id
    engine.approve(run_id, actor=Actor("U0BOB"))
    assert engine.advance(run_id).state is RunState.AWAITING_PROMOTION
    log = StoppingLog(sim.call(lambda s: s.mutations), starvation)
    sim.call(lambda s: setattr(s, "mutations", log))
    procs: list[subprocess.Popen[str]] = []
    at_resume: list[dict[str, Any]] = []
    try:
        a = replica(redis_url, sim, "bot-a", run_id, tmp_path / "a.log", "approve")
        procs.append(a)
        log.pid = a.pid
        assert a.stdin is not None
        a.stdin.write("go\n")
        a.stdin.flush()
        starvation.wait_stopped(a.pid)
        b = replica(redis_url, sim, "bot-b", run_id, tmp_path / "b.log", "resume")
        procs.append(b)

        def b_promoted() -> bool:
            run = store.get(run_id)
            if run is None or run.state in (RunState.PROMOTING, RunState.AWAITING_PROMOTION):
                return False
            b.terminate()
            b.wait(timeout=30)
            at_resume.extend(mutations(sim))
            return True

        starvation.resume_when(a.pid, b_promoted)
        assert a.wait(timeout=120) == 0
    finally:
        store.close()
        end_replicas(procs, tmp_path, timeout=30)
    after = mutations(sim)[len(at_resume):]
    assert after == [], f"the starved owner mutated the cluster after it was resumed: {after}"
    deleted = Counter(m["path"] for m in at_resume if m["method"] == "DELETE" and m["path"].startswith(PODS))
    assert len(deleted) >= 3 and all(n == 1 for n in deleted.values()), deleted
