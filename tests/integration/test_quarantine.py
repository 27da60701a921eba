"""``quarantine`` and ``release`` on kubesim ``gpu-small`` (issue 61, deliverable 5): a node whose
device plugin crash-loops (kubesim's host fault ``driver-mismatch``) is taken out of the plugin's
reach by an approved run (cordoned, labelled, the template's required node affinity gaining a
``DoesNotExist`` term, the DaemonSet OnDelete so no other node's pod is replaced); the DaemonSet
controller removes that node's pod only, every other node keeps its very pod (same uid, seen by
``kubectl get pods --watch``) and its GPUs; ``release`` (or a rollback of the quarantine) puts the
DaemonSet and the node back exactly as they were. Bad requests are refused, naming why, and write
nothing."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, config, watch

from handlers.quarantine import parse_quarantine, parse_release
from handlers.run_views import gate_message
from kubesim import KubeSim
from runbooks.cluster import Cluster
from runbooks.daemonset.quarantine_marks import SAVED
from runbooks.daemonset.quarantining import QuarantineSteps, ReleaseSteps
from runbooks.engine.approving import Actor
from runbooks.engine.clocks import ClusterClock
from runbooks.engine.commands import Engine
from runbooks.engine.refusals import Refused
from runbooks.engine.runs import RunKind, RunState
from runbooks.policy import Policy
from tests.engine_support import IMAGE, FakeClock, kubesim_engine
from tests.support import Kubectl, PodWatch

S = RunState
NS, DS = "kube-system", "nvidia-device-plugin-daemonset"
TARGET = f"{NS}/{DS}"
KEY = f"{NS}.quarantine.upgradebot.io/{DS}"
SELECTOR = "name=nvidia-device-plugin-ds"
ALICE, BOB = Actor("U0ALICE"), Actor("U0BOB")
POLICY = Policy.model_validate({
    "approvers": {"users": ["U0BOB"]}, "reports": {"after": []},
    "steps": {"observe_window": "1s", "poll_interval": "0.1s", "ready_timeout": "60s"}, "targets": [TARGET],
})
KINDS = {RunKind.QUARANTINE: QuarantineSteps(), RunKind.RELEASE: ReleaseSteps()}


@pytest.fixture
def sim() -> Iterator[KubeSim]:
    with KubeSim(scenario="gpu-small", k8s_version="1.31", speed=4) as served:
        yield served


def engine_on(sim: KubeSim, redis_url: str, **kwargs: Any) -> Engine:
    return kubesim_engine(sim, redis_url, POLICY, kinds=KINDS,
                          clock=ClusterClock(Cluster.from_kubeconfig(sim.kubeconfig).server_time), **kwargs)


def plugin_pods(kubectl: Kubectl) -> dict[str, str]:
    """node -> uid of its live plugin pod."""
    pods = kubectl.json("get", "pods", "-n", NS, "-l", SELECTOR)["items"]
    return {p["spec"]["nodeName"]: p["metadata"]["uid"] for p in pods if not p["metadata"].get("deletionTimestamp")}


def gpus(kubectl: Kubectl) -> dict[str, str | None]:
    return {n["metadata"]["name"]: n["status"]["allocatable"].get("nvidia.com/gpu")
            for n in kubectl.json("get", "nodes")["items"]}


def daemonset(kubectl: Kubectl) -> dict[str, Any]:
    ds = kubectl.json("get", "ds", "-n", NS, DS)
    return {"template": ds["spec"]["template"], "updateStrategy": ds["spec"]["updateStrategy"],
            "annotations": {k: v for k, v in (ds["metadata"].get("annotations") or {}).items()
                            if k != "deprecated.daemonset.template.generation"}}


def node_marks(kubectl: Kubectl, node: str) -> dict[str, Any]:
    obj = kubectl.json("get", "node", node)
    return {"label": (obj["metadata"].get("labels") or {}).get(KEY),
            "annotation": (obj["metadata"].get("annotations") or {}).get(KEY),
            "unschedulable": bool(obj["spec"].get("unschedulable"))}


def crash_loop(sim: KubeSim, kubectl: Kubectl, node: str) -> None:
    """The node's driver library and kernel module disagree; its plugin pod is replaced and the new
    one crash-loops (waited for on a watch of the pod, not a sleep)."""
    sim.fault(kind="driver-mismatch", node=node)
    old = plugin_pods(kubectl)[node]
    [name] = [p["metadata"]["name"] for p in kubectl.json("get", "pods", "-n", NS, "-l", SELECTOR)["items"]
              if p["metadata"]["uid"] == old]
    kubectl("delete", "pod", "-n", NS, name, "--wait=false")
    api = client.CoreV1Api(config.new_client_from_config(str(sim.kubeconfig)))
    for event in watch.Watch().stream(api.list_namespaced_pod, NS, field_selector=f"spec.nodeName={node}",
                                      label_selector=SELECTOR, timeout_seconds=60):
        pod = event["object"]
        restarted = any((s.restart_count or 0) > 0 for s in pod.status.container_statuses or [])
        if pod.metadata.uid != old and restarted:
            return
    raise AssertionError(f"the plugin on {node} did not crash-loop")


def written(sim: KubeSim, since: int) -> list[tuple[str, str]]:
    return [(m["verb"], m["path"]) for m in sim.mutations()[since:] if not m["dryRun"]]


def test_quarantine_takes_the_crashing_node_out_and_release_gives_it_back_exactly(
        sim: KubeSim, redis_url: str) -> None:
    kubectl = Kubectl(sim.kubeconfig)
    crash_loop(sim, kubectl, "gpu-node2")
    ds_before, node_before = daemonset(kubectl), node_marks(kubectl, "gpu-node2")
    pods_before, gpus_before = plugin_pods(kubectl), gpus(kubectl)
    engine = engine_on(sim, redis_url)

    args = parse_quarantine([TARGET, "node=gpu-node2"])
    before = len(sim.mutations())
    run = engine.request_quarantine(actor=ALICE, target=args.target, node=args.node).run
    assert run.kind is RunKind.QUARANTINE and run.state is S.AWAITING_APPROVAL and run.gate is not None
    assert written(sim, before) == []  # the request only read, and asked with dry runs
    text = gate_message(run, run.gate).text
    assert f"label it `{KEY}={run.id}`" in text and f"`{KEY} DoesNotExist`" in text, text
    assert "updateStrategy OnDelete" in text and "ml-team/trainer-1" in text, text
    with pytest.raises(Refused, match="another approver must approve it"):
        engine.approve(run.id, actor=ALICE)

    watching = PodWatch(sim.kubeconfig, NS, SELECTOR)
    try:
        watching.wait_for(3)  # kubectl listed the three plugin pods
        before = len(sim.mutations())
        engine.approve(run.id, actor=BOB)
        run = engine.advance(run.id)
        assert run.state is S.DONE, run.reason
    finally:
        events = watching.stop()
    # the bot wrote the DaemonSet once and the node once, nothing else
    assert written(sim, before) == [("patch", f"/apis/apps/v1/namespaces/{NS}/daemonsets/{DS}"),
                                    ("patch", "/api/v1/nodes/gpu-node2")]
    now = plugin_pods(kubectl)
    assert "gpu-node2" not in now
    assert now == {n: uid for n, uid in pods_before.items() if n != "gpu-node2"}  # the very same pods
    changed = [(e["type"], e["object"]["spec"].get("nodeName")) for e in events[3:]]
    assert changed and {node for _, node in changed} == {"gpu-node2"}, changed  # kubectl saw no other node's pod move
    after = gpus(kubectl)
    assert {n: after[n] for n in ("gpu-node1", "gpu-node3")} == {n: gpus_before[n] for n in ("gpu-node1", "gpu-node3")}
    assert node_marks(kubectl, "gpu-node2") == {"label": run.id, "unschedulable": True,
                                                "annotation": json.dumps({"cordoned": True, "run": run.id},
                                                                         sort_keys=True)}
    ds = daemonset(kubectl)
    assert ds["updateStrategy"] == {"type": "OnDelete"}
    assert ds["template"]["spec"]["affinity"] == {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": KEY, "operator": "DoesNotExist"}]}]}}}
    assert json.loads(ds["annotations"][SAVED])["updateStrategy"] == ds_before["updateStrategy"]
    checks = {e["name"]: e for e in engine.audit(run.id) if e["name"].startswith("verify.")}
    assert {k: v["status"] for k, v in checks.items()} == {
        "verify.node-pod-gone": "ok", "verify.others-untouched": "ok", "verify.gpus-unchanged": "ok",
        "verify.workloads-told": "info"}
    assert checks["verify.workloads-told"]["evidence"]["pods"] == ["ml-team/trainer-1 (no controller)"]

    # while quarantined: an upgrade is refused (a promotion would roll nothing), and so is a second quarantine
    with pytest.raises(Refused, match="has a quarantined node"):
        engine.request_canary(actor=ALICE, target=TARGET, image=IMAGE, node="gpu-node1")
    with pytest.raises(Refused, match=f"gpu-node2 is quarantined from {TARGET} already \\(by run {run.id}\\)"):
        engine.request_quarantine(actor=ALICE, target=TARGET, node="gpu-node2")

    sim.fault(kind="driver-mismatch", node="gpu-node2", repaired=True)  # the host is fixed
    args = parse_release([TARGET, "node=gpu-node2"])
    released = engine.request_release(actor=ALICE, target=args.target, node=args.node).run
    assert released.kind is RunKind.RELEASE and released.gate is not None
    assert "uncordon it" in gate_message(released, released.gate).text
    before = len(sim.mutations())
    engine.approve(released.id, actor=BOB)
    released = engine.advance(released.id)
    assert released.state is S.DONE, released.reason
    assert written(sim, before) == [("patch", f"/apis/apps/v1/namespaces/{NS}/daemonsets/{DS}"),
                                    ("patch", "/api/v1/nodes/gpu-node2")]
    assert daemonset(kubectl) == ds_before  # template, strategy and annotations exactly as before
    assert node_marks(kubectl, "gpu-node2") == node_before
    back = plugin_pods(kubectl)
    assert {n: back[n] for n in ("gpu-node1", "gpu-node3")} == {n: pods_before[n] for n in ("gpu-node1", "gpu-node3")}
    checks = {e["name"]: e["status"] for e in engine.audit(released.id) if e["name"].startswith("verify.")}
    assert checks == {"verify.node-pod-back": "ok", "verify.others-untouched": "ok", "verify.gpus-unchanged": "ok"}


def test_a_rolled_back_quarantine_puts_back_the_affinity_the_strategy_and_the_cordon_as_they_were(
        sim: KubeSim, redis_url: str) -> None:
    """The template has a required node affinity of its owners' (merged with, not replaced), the node
    was cordoned before the run (it stays so); the bot stops right after the apply (a crash), and
    the rollback, approved by a second person, writes back the saved pre-run state."""
    kubectl = Kubectl(sim.kubeconfig)
    owners = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "feature.node.kubernetes.io/pci-10de.present", "operator": "In",
                               "values": ["true"]}]},
        {"matchExpressions": [{"key": "nvidia.com/gpu.present", "operator": "Exists"}]}]}}}
    kubectl("patch", "ds", "-n", NS, DS, "--type=merge", "-p",
            json.dumps({"spec": {"template": {"spec": {"affinity": owners}}}}))
    kubectl("rollout", "status", f"ds/{DS}", "-n", NS, "--timeout=60s", timeout=90)
    kubectl("cordon", "gpu-node3")
    ds_before, node_before, pods_before = daemonset(kubectl), node_marks(kubectl, "gpu-node3"), plugin_pods(kubectl)

    class Crash(Exception):
        pass

    def crash(point: str) -> None:
        if point == "before:verifying":
            raise Crash(point)

    engine = engine_on(sim, redis_url, checkpoint=crash)
    run = engine.request_quarantine(actor=ALICE, target=TARGET, node="gpu-node3").run
    assert "cordon it" not in str(run.change["summary"])  # cordoned already
    engine.approve(run.id, actor=BOB)
    with pytest.raises(Crash):
        engine.advance(run.id)
    merged = daemonset(kubectl)["template"]["spec"]["affinity"]
    expected = copy.deepcopy(owners)
    for term in expected["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]:
        term["matchExpressions"].append({"key": KEY, "operator": "DoesNotExist"})
    assert merged == expected  # every term of the owners' kept, each with the quarantine's expression

    again = engine_on(sim, redis_url, owner_dead=lambda owner: True)  # the bot that crashed is gone
    assert again.get(run.id).state is S.VERIFYING
    again.rollback(run.id, actor=ALICE, reason="undo it")
    again.approve(run.id, actor=BOB)
    run = again.advance(run.id)
    assert run.state is S.ROLLED_BACK, run.reason
    assert daemonset(kubectl) == ds_before
    assert node_marks(kubectl, "gpu-node3") == node_before  # still cordoned, as before the run
    back = plugin_pods(kubectl)
    assert {n: back[n] for n in ("gpu-node1", "gpu-node2")} == {n: pods_before[n] for n in ("gpu-node1", "gpu-node2")}


@pytest.mark.parametrize(("verb", "node", "said"), [
    ("quarantine", "gpu-node9", "node gpu-node9 does not exist on"),
    ("quarantine", "cpu-node1", f"{TARGET} runs no pod on cpu-node1: nothing to keep off it"),
    ("release", "gpu-node1", f"gpu-node1 is not quarantined from {TARGET}: nothing to release"),
    ("release", "gpu-node9", "node gpu-node9 does not exist on"),
])
def test_bad_requests_are_refused_in_one_line_and_change_nothing(
        sim: KubeSim, redis_url: str, verb: str, node: str, said: str) -> None:
    engine = engine_on(sim, redis_url)
    before = len(sim.mutations())
    request = engine.request_quarantine if verb == "quarantine" else engine.request_release
    with pytest.raises(Refused) as refused:
        request(actor=ALICE, target=TARGET, node=node)
    assert said in str(refused.value) and "\n" not in str(refused.value)
    assert written(sim, before) == [] and engine.runs() == []


def test_two_quarantined_nodes_change_the_daemonset_once_and_the_last_release_puts_it_back(
        sim: KubeSim, redis_url: str) -> None:
    """The second node's quarantine finds the term and OnDelete in place and writes only its node;
    releasing the first leaves the template as it is (the other stays quarantined); the last
    release puts the DaemonSet back exactly, and the pod gpu-node1 got from the quarantine's
    template in between is replaced once (checked, not counted against the release). gpu-node3,
    never quarantined, keeps its pod throughout."""
    kubectl = Kubectl(sim.kubeconfig)
    ds_before, pods_before = daemonset(kubectl), plugin_pods(kubectl)
    engine = engine_on(sim, redis_url)
    ds_path, writes = f"/apis/apps/v1/namespaces/{NS}/daemonsets/{DS}", []
    for verb, node in (("quarantine", "gpu-node1"), ("quarantine", "gpu-node2"), ("release", "gpu-node1"),
                       ("release", "gpu-node2")):
        request = engine.request_quarantine if verb == "quarantine" else engine.request_release
        run = request(actor=ALICE, target=TARGET, node=node).run
        before = len(sim.mutations())
        engine.approve(run.id, actor=BOB)
        run = engine.advance(run.id)
        assert run.state is S.DONE, (verb, node, run.reason)
        writes.append([path for _, path in written(sim, before)])
        if (verb, node) == ("release", "gpu-node1"):
            assert daemonset(kubectl)["updateStrategy"] == {"type": "OnDelete"}  # gpu-node2 stays quarantined
            assert set(plugin_pods(kubectl)) == {"gpu-node1", "gpu-node3"}
    assert writes == [[ds_path, "/api/v1/nodes/gpu-node1"], ["/api/v1/nodes/gpu-node2"], ["/api/v1/nodes/gpu-node1"],
                      [ds_path, "/api/v1/nodes/gpu-node2"]]
    assert daemonset(kubectl) == ds_before
    assert plugin_pods(kubectl)["gpu-node3"] == pods_before["gpu-node3"]
    assert kubectl.json("get", "nodes", "-l", KEY)["items"] == []
    # gpu-node1's pod, made from the quarantine's template when it was released, is renewed once
    checks = {e["name"]: e for e in engine.audit(run.id) if e["name"].startswith("verify.")}
    assert checks["verify.renewed-ready"]["status"] == "ok" and checks["verify.renewed-ready"]["evidence"]["scope"] == \
        "gpu-node1"
    assert checks["verify.others-untouched"]["status"] == "ok", checks


def test_outside_the_targets_maintenance_window_it_is_refused_or_queued_for_the_next(
        sim: KubeSim, redis_url: str) -> None:
    """Windows hold a quarantine as they hold a canary: refused outside one, naming the next; with
    ``when=next-window`` it is requested and approved now and changes nothing before the window."""
    clock = FakeClock()  # Monday 09:00 UTC
    windowed = POLICY.model_copy(update={"targets": Policy.model_validate({
        "approvers": {"users": ["U0BOB"]}, "targets": [{"namespace": NS, "name": DS, "windows": [
            {"days": "mon-fri", "hours": "22:00-23:00", "timezone": "UTC"}]}]}).targets})
    engine = kubesim_engine(sim, redis_url, windowed, kinds=KINDS, clock=clock)
    before = len(sim.mutations())
    with pytest.raises(Refused, match="may change only in its maintenance windows"):
        engine.request_quarantine(actor=ALICE, target=TARGET, node="gpu-node2")
    assert engine.runs() == []
    run = engine.request_quarantine(actor=ALICE, target=TARGET, node="gpu-node2", when="next-window").run
    assert "queued for the maintenance window opening at 2025-01-06 22:00:00 UTC" in engine.audit(run.id)[0]["detail"]
    engine.approve(run.id, actor=BOB)
    run = engine.advance(run.id)
    assert run.state is S.APPLYING and run.progress["wait_until"] == "2025-01-06T22:00:00+00:00"
    assert "the quarantine waits for the maintenance window" in run.progress["waiting_for"]
    assert not engine.needs_work(run) and written(sim, before) == []
