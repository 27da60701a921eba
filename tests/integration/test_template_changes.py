"""Changes beyond the image as runs, on kubesim ``gpu-small`` with the real steps: the request
shows the template diff; the canary writes the changed template whole, one node first; verify,
promote; a change that breaks the plugin (an unknown MIG strategy: the plugin's config does not
load) is rolled back to the exact template saved before, read back with kubectl."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from handlers.arguments import UsageError
from handlers.run_views import gate_message, root_message
from handlers.runs import parse_canary, parse_restart
from kubesim import KubeSim
from runbooks.cluster import Cluster
from runbooks.engine.approving import Actor
from runbooks.engine.clocks import ClusterClock
from runbooks.engine.commands import Engine
from runbooks.engine.refusals import Refused
from runbooks.engine.runs import RunState
from runbooks.inventory import take_inventory
from runbooks.policy import Policy
from tests.engine_support import kubesim_engine
from tests.support import Kubectl

S = RunState
NS, DS = "kube-system", "nvidia-device-plugin-daemonset"
TARGET = f"{NS}/{DS}"
CTR = "nvidia-device-plugin-ctr"
OLD = "nvcr.io/nvidia/k8s-device-plugin:v0.14.2"
ALICE, BOB, CAROL = Actor("U0ALICE"), Actor("U0BOB"), Actor("U0CAROL")
POLICY = Policy.model_validate({
    "approvers": {"users": ["U0BOB", "U0CAROL"]},
    "reports": {"after": []},
    "steps": {"observe_window": "1s", "poll_interval": "0.1s", "ready_timeout": "60s"},
    "targets": [TARGET],
})


@pytest.fixture
def sim() -> Iterator[KubeSim]:
    with KubeSim(scenario="gpu-small", k8s_version="1.31", speed=4) as served:
        yield served


def engine_on(sim: KubeSim, redis_url: str) -> Engine:
    return kubesim_engine(sim, redis_url, POLICY, clock=ClusterClock(Cluster.from_kubeconfig(sim.kubeconfig).server_time))


def template(kubectl: Kubectl) -> dict[str, Any]:
    return dict(kubectl.json("get", "daemonset", DS, "-n", NS)["spec"]["template"])


def plugin_containers(kubectl: Kubectl) -> dict[str, dict[str, Any]]:
    pods = kubectl.json("get", "pods", "-n", NS, "-l", "name=nvidia-device-plugin-ds")["items"]
    return {p["spec"]["nodeName"]: p["spec"]["containers"][0] for p in pods if not p["metadata"].get("deletionTimestamp")}


def request(engine: Engine, words: str) -> Any:
    """A canary as the chat and the shell parse it."""
    args = parse_canary([TARGET, *words.split()])
    return engine.request_canary(actor=ALICE, target=args.target, image=args.image, node=args.node,
                                 edits=args.edits).run


def test_the_inventorys_fail_on_init_error_fix_goes_through_canary_verify_and_promote(
        sim: KubeSim, redis_url: str) -> None:
    """The plugin as its static manifest (v0.13 to v0.17) sets it (FAIL_ON_INIT_ERROR=false): the inventory
    warns and names the canary that fixes it; that canary, with a memory limit besides, shows
    its template diff in the request, changes one node first, then every node; the warning is
    gone."""
    kubectl = Kubectl(sim.kubeconfig)
    kubectl("set", "env", f"daemonset/{DS}", "-n", NS, "FAIL_ON_INIT_ERROR=false")
    kubectl("rollout", "status", f"daemonset/{DS}", "-n", NS, "--timeout=60s", timeout=90)
    cluster = Cluster.from_kubeconfig(sim.kubeconfig)
    warned = [f for f in take_inventory(cluster).findings if f.code == "fail-on-init-error"]
    assert [f.object for f in warned] == [f"daemonset/{TARGET}"] and warned[0].severity == "warn"
    fix = re.search(r"`canary (\S+) (.+) node=auto`", warned[0].next_step)
    assert fix is not None and fix.group(1) == TARGET and fix.group(2) == "env=FAIL_ON_INIT_ERROR=true"

    engine = engine_on(sim, redis_url)
    run = request(engine, f"node=gpu-node1 {fix.group(2)} limits=memory=256Mi")
    assert run.image == OLD  # no image=: the container keeps its own
    assert run.gate is not None
    text = gate_message(run, run.gate).text
    assert "with `env FAIL_ON_INIT_ERROR=true; limits memory=256Mi`" in text
    assert ("Change", "`env FAIL_ON_INIT_ERROR=true; limits memory=256Mi`") in [
        (f.label, f.value) for f in root_message(run).fields]  # the root message says it too
    assert "-      value: 'false'\n+      value: 'true'" in text and "+      limits:\n+        memory: 256Mi" in text
    engine.approve(run.id, actor=BOB)
    run = engine.advance(run.id)
    assert run.state is S.AWAITING_PROMOTION, run.reason
    seen = plugin_containers(kubectl)
    assert {"name": "FAIL_ON_INIT_ERROR", "value": "true"} in seen["gpu-node1"]["env"]
    assert all({"name": "FAIL_ON_INIT_ERROR", "value": "false"} in c["env"] for n, c in seen.items() if n != "gpu-node1")
    engine.approve(run.id, actor=CAROL)
    run = engine.advance(run.id)
    assert run.state is S.DONE, run.reason
    assert all({"name": "FAIL_ON_INIT_ERROR", "value": "true"} in c["env"] for c in plugin_containers(kubectl).values())
    assert template(kubectl)["spec"]["containers"][0]["resources"]["limits"] == {"memory": "256Mi"}
    assert not [f for f in take_inventory(cluster).findings if f.code == "fail-on-init-error"]
    with pytest.raises(Refused, match=r"already has env FAIL_ON_INIT_ERROR=true.*nothing to change"):
        request(engine, "node=gpu-node2 env=FAIL_ON_INIT_ERROR=true")


def test_a_change_that_breaks_the_plugin_is_rolled_back_to_the_exact_previous_template(
        sim: KubeSim, redis_url: str) -> None:
    kubectl = Kubectl(sim.kubeconfig)
    before = template(kubectl)
    engine = engine_on(sim, redis_url)
    run = request(engine, "node=gpu-node2 env=MIG_STRATEGY=bogus toleration=example.com/maintenance:NoSchedule "
                          "security=allowPrivilegeEscalation=false,capabilities.drop=ALL")
    engine.approve(run.id, actor=BOB)
    run = engine.advance(run.id)
    assert run.state is S.ROLLED_BACK, run.reason
    assert "crash-looping" in run.reason or "no-crashloop" in run.reason, run.reason
    assert template(kubectl) == before
    assert "MIG_STRATEGY" not in str(plugin_containers(kubectl))


def test_bad_changes_are_refused_before_anyone_is_asked(sim: KubeSim, redis_url: str) -> None:
    engine = engine_on(sim, redis_url)
    with pytest.raises(Refused, match="env NOT_THERE is not set on container nvidia-device-plugin-ctr"):
        request(engine, "node=gpu-node1 env=NOT_THERE-")
    with pytest.raises(Refused, match=r"has no toleration example\.com/x:NoSchedule"):
        request(engine, "node=gpu-node1 toleration=example.com/x:NoSchedule-")
    assert sim.mutations() == []


def test_restart_replaces_one_node_first_then_the_rest_with_the_same_image(sim: KubeSim, redis_url: str) -> None:
    """``restart`` is an approved run: the canary node's plugin pod is replaced by one of a new
    revision of the same template (kubectl's restartedAt annotation), verified; every other
    node keeps its pod until the promotion is approved; then every pod is new."""
    kubectl = Kubectl(sim.kubeconfig)
    uids = {p["spec"]["nodeName"]: p["metadata"]["uid"] for p in
            kubectl.json("get", "pods", "-n", NS, "-l", "name=nvidia-device-plugin-ds")["items"]}
    engine = engine_on(sim, redis_url)
    args = parse_restart([TARGET, "node=gpu-node2"])
    run = engine.request_restart(actor=ALICE, target=args.target, node=args.node).run
    assert run.image == OLD and run.gate is not None
    text = gate_message(run, run.gate).text
    assert "asks to restart the plugin on gpu-node2 first" in text and f"`{OLD}` kept" in text
    assert "+    kubectl.kubernetes.io/restartedAt: " in text
    engine.approve(run.id, actor=BOB)
    run = engine.advance(run.id)
    assert run.state is S.AWAITING_PROMOTION, run.reason
    now = {p["spec"]["nodeName"]: p["metadata"]["uid"] for p in
           kubectl.json("get", "pods", "-n", NS, "-l", "name=nvidia-device-plugin-ds")["items"]
           if not p["metadata"].get("deletionTimestamp")}
    assert now["gpu-node2"] != uids["gpu-node2"] and all(now[n] == uids[n] for n in uids if n != "gpu-node2")
    engine.approve(run.id, actor=CAROL)
    run = engine.advance(run.id)
    assert run.state is S.DONE, run.reason
    after = plugin_containers(kubectl)
    assert {c["image"] for c in after.values()} == {OLD}
    pods = kubectl.json("get", "pods", "-n", NS, "-l", "name=nvidia-device-plugin-ds")["items"]
    assert not {p["metadata"]["uid"] for p in pods} & set(uids.values())
    assert template(kubectl)["metadata"]["annotations"]["kubectl.kubernetes.io/restartedAt"].endswith("Z")
    with pytest.raises(UsageError, match="node= is required"):
        parse_restart([TARGET])


def test_a_change_requested_on_one_template_never_lands_on_another(sim: KubeSim, redis_url: str) -> None:
    """A restart (it names no image) requested, then someone sets a new image before it is
    approved: the canary refuses to start, since its diff no longer says what it would write,
    and the other person's change stays as they made it."""
    kubectl = Kubectl(sim.kubeconfig)
    engine = engine_on(sim, redis_url)
    run = engine.request_restart(actor=ALICE, target=TARGET, node="gpu-node1").run
    kubectl("set", "image", f"daemonset/{DS}", "-n", NS, f"{CTR}=nvcr.io/nvidia/k8s-device-plugin:v0.15.0")
    kubectl("rollout", "status", f"daemonset/{DS}", "-n", NS, "--timeout=60s", timeout=90)
    theirs = template(kubectl)
    engine.approve(run.id, actor=BOB)
    run = engine.advance(run.id)
    assert run.state is S.ROLLED_BACK and "changed since the request" in run.reason, run.reason
    assert template(kubectl) == theirs
