"""Issue 61 item 2, Pending named at once: with the real engine on kubesim, a canary whose own
``requests=`` the node cannot hold fails its step within seconds of the scheduler's
``FailedScheduling`` (not after ``ready_timeout``, 300 s here), quoting the scheduler and naming the
request as the cause, in the step's evidence and in the canary's thread; the run is rolled back.
A request of ``1Ti`` passes the request's server-side dry run (kubesim reads every quantity as the
API server does: no 500)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from handlers.run_views import phase_message, phase_of
from kubesim import KubeSim
from runbooks.cluster import Cluster
from runbooks.engine.approving import Actor
from runbooks.engine.clocks import ClusterClock
from runbooks.engine.runs import Run, RunState, Step
from runbooks.policy import Policy
from runbooks.templates import Edits
from tests.engine_support import kubesim_engine
from tests.support import TEST_BUILDS

NS, DS = "kube-system", "nvidia-device-plugin-daemonset"
TARGET = f"{NS}/{DS}"
IMAGE = "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"
ALICE, BOB = Actor("U0ALICE"), Actor("U0BOB")


def _policy() -> Policy:
    target = {"namespace": NS, "name": DS, "compatibility": {"ignore": True}}
    return Policy.model_validate({"approvers": {"users": ["U0BOB"]}, "reports": {"after": []},
                                  "steps": {"observe_window": "1s", "poll_interval": "0.2s", "ready_timeout": "300s"},
                                  "targets": [target]})


def _run(sim: KubeSim, redis_url: str, edits: Edits) -> tuple[Run, list[dict[str, Any]]]:
    clock = ClusterClock(Cluster.from_kubeconfig(sim.kubeconfig).server_time)
    engine = kubesim_engine(sim, redis_url, _policy(), clock=clock)
    run = engine.request_canary(actor=ALICE, target=TARGET, image=IMAGE, node="gpu-node1", edits=edits).run
    engine.approve(run.id, actor=BOB)
    run = engine.advance(run.id)
    return run, engine.audit(run.id)


def _at(entry: dict[str, Any]) -> dt.datetime:
    return dt.datetime.fromisoformat(str(entry["at"]))


def _thread(run: Run, entries: list[dict[str, Any]]) -> str:
    steps = [Step.model_validate(e) for e in entries]
    message = phase_message(run, "canary", [s for s in steps if phase_of(run, s) == "canary"])
    return f"{message.title}\n{message.text}"


@pytest.mark.parametrize(("k8s", "resource", "amount", "insufficient"), [
    ("1.27", "cpu", "200", "Insufficient cpu"),
    ("1.34", "cpu", "200", "Insufficient cpu"),
    ("1.32", "memory", "2Ti", "Insufficient memory"),
])
def test_a_request_larger_than_the_node_fails_the_canary_at_once_naming_it(
        k8s: str, resource: str, amount: str, insufficient: str, redis_url: str) -> None:
    """``requests=cpu=200`` on gpu-node1 (96 CPUs) or ``requests=memory=2Ti`` (about 1007 GiB): the
    new pod stays Pending; ``pod-scheduled`` fails within 30 simulated seconds of the old pod's
    deletion, its evidence the FailedScheduling event (reason, the scheduler's message) and the
    cause, the run's request with what gpu-node1 offers; the thread quotes both; rolled back."""
    with KubeSim(pushed=TEST_BUILDS, scenario="gpu-small", k8s_version=k8s, speed=4) as sim:
        run, audit = _run(sim, redis_url, Edits(requests={resource: amount}))
    assert run.state in (RunState.ROLLED_BACK, RunState.FAILED), (run.state, run.reason)
    deleted = next(e for e in audit if e["name"] == "canary.delete-pod")
    pending = next(e for e in audit if e["name"] == "canary.pod-scheduled")
    assert pending["status"] == "failed" and (_at(pending) - _at(deleted)).total_seconds() < 30, (deleted, pending)
    evidence = pending["evidence"]
    assert evidence["reason"] == "FailedScheduling" and evidence["node"] == "gpu-node1"
    assert evidence["message"].startswith(f"0/4 nodes are available: 1 {insufficient}"), evidence
    offers = "96" if resource == "cpu" else "1056376768Ki"
    assert evidence["cause"] == f"the run's requests={resource}={amount} (gpu-node1 offers {offers} allocatable)"
    assert insufficient in pending["detail"] and f"caused by the run's requests={resource}={amount}" in pending["detail"]
    thread = _thread(run, audit)
    assert f"FailedScheduling, the scheduler said: 0/4 nodes are available: 1 {insufficient}" in thread, thread
    assert f"caused by the run's requests={resource}={amount}" in thread, thread
    assert "was not Ready in 300s" not in thread


def test_a_one_tebibyte_request_passes_the_dry_run_and_fails_on_the_node(redis_url: str) -> None:
    """``requests=memory=1Ti``: the request's server-side dry runs answer (the DaemonSet patch and
    the canary pod), so the run is requested; on gpu-node1 (less than 1Ti allocatable) its pod is
    not scheduled and the canary fails naming the request."""
    with KubeSim(pushed=TEST_BUILDS, scenario="gpu-small", k8s_version="1.31", speed=4) as sim:
        run, audit = _run(sim, redis_url, Edits(requests={"memory": "1Ti"}))
    assert run.state in (RunState.ROLLED_BACK, RunState.FAILED), (run.state, run.reason)
    pending = next(e for e in audit if e["name"] == "canary.pod-scheduled")
    assert "1 Insufficient memory" in pending["evidence"]["message"]
    assert pending["evidence"]["cause"].startswith("the run's requests=memory=1Ti")


def test_a_promotion_stops_at_the_first_new_pod_the_scheduler_cannot_place(redis_url: str) -> None:
    """``requests=cpu=40`` fits gpu-node1, so the canary passes; gpu-node2 already runs a pod asking
    60 of its 96 CPUs, so the promotion's new pod there is not scheduled: the promotion stops at
    once with the scheduler's words (not after ``ready_timeout``, 300 s) and the run rolls back."""
    from kubernetes import client, config

    with KubeSim(pushed=TEST_BUILDS, scenario="gpu-small", k8s_version="1.34", speed=4) as sim:
        api = client.CoreV1Api(config.new_client_from_config(config_file=str(sim.kubeconfig)))
        api.create_namespaced_pod("ml-team", {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "cpu-hog"},
            "spec": {"nodeName": "gpu-node2", "containers": [{"name": "hog", "image": "registry.example.com/ml/worker:3.0.2",
                                                                "resources": {"requests": {"cpu": "60"}}}]}})
        clock = ClusterClock(Cluster.from_kubeconfig(sim.kubeconfig).server_time)
        engine = kubesim_engine(sim, redis_url, _policy(), clock=clock)
        run = engine.request_canary(actor=ALICE, target=TARGET, image=IMAGE, node="gpu-node1",
                                    edits=Edits(requests={"cpu": "40"})).run
        engine.approve(run.id, actor=BOB)
        run = engine.advance(run.id)
        assert run.state is RunState.AWAITING_PROMOTION, (run.state, run.reason)
        engine.approve(run.id, actor=BOB)
        run = engine.advance(run.id)
        audit = engine.audit(run.id)
    assert run.state in (RunState.ROLLED_BACK, RunState.FAILED), (run.state, run.reason)
    said = "cannot be scheduled: the scheduler said: 0/4 nodes are available: 1 Insufficient cpu"
    stopped = [e for e in audit if said in str(e.get("detail") or "")]
    assert stopped and "gpu-node2" in stopped[0]["detail"], [(e["name"], e.get("detail")) for e in audit]
    started = next(e for e in audit if e["name"].startswith("promote") and e["name"] != "promote.approved")
    assert (_at(stopped[0]) - _at(started)).total_seconds() < 60, (started, stopped[0])
