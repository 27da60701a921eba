"""Failure domains in kubesim: the region, zone and rack labels of ``gpu-large`` nodes, and
an image that crashes only on the nodes labelled for it (``-crash-on-<word>``), refereed
by the real kubectl."""

from __future__ import annotations

import json
from typing import Any

import pytest
from _simkit import DAEMONSETS, NODES, PODS, get, pods_of, set_image, small

from kubesim import KubeSim
from kubesim import podstatus as ps
from kubesim.scenarios import build
from tests.support import TEST_BUILDS, Kubectl, push_test_builds

REGION, ZONE, RACK, CRASH = (
    "topology.kubernetes.io/region", "topology.kubernetes.io/zone", "kubesim.io/rack", "kubesim.io/crash")
NS, DS, CTR = "kube-system", "nvidia-device-plugin-daemonset", "nvidia-device-plugin-ctr"
REPO = "nvcr.io/nvidia/k8s-device-plugin"
CRASH_ON = f"{REPO}:v0.17.0-crash-on-wave3"
FS_WATCHER = "main.go:173] failed to create FS watcher for /var/lib/kubelet/device-plugins/: too many open files"
"""v0.17's exit on the FS watcher (cmd/nvidia-device-plugin/main.go:241 wrapped, :173 printed): a -crash build's."""


def expected_domain(i: int) -> dict[str, str]:
    """gpu-node<i>: zones a, b, c round-robin; eight nodes per rack within a zone."""
    zone = "sim-zone-" + "abc"[(i - 1) % 3]
    return {REGION: "sim-region-1", ZONE: zone, RACK: f"{zone}-rack{(i - 1) // 3 // 8 + 1}"}


# ------------------------------------------------------------------ tag parsing
def test_crash_on_tags_name_their_word_and_no_other_mode() -> None:
    """``-crash-on-<word>`` ([a-z0-9]+) crashes on nodes labelled ``kubesim.io/crash=<word>`` only;
    the word is never read as a mode of its own, and a plain ``-crash`` crashes everywhere."""
    wave3 = {CRASH: "wave3"}
    assert ps.CRASH_LABEL == CRASH
    assert ps.crash_on(CRASH_ON) == "wave3"
    assert ps.crash_on(f"{REPO}:v0.17.0-crash-on-wave3@sha256:{'0' * 64}") == "wave3"
    assert ps.crash_on("localhost:5000/plugin:v1-crash-on-r7") == "r7"
    for image in (f"{REPO}:v0.17.0-crash", f"{REPO}:v0.17.0-crash-on-", f"{REPO}:v0.17.0-crash-on-Wave3",
                  f"{REPO}:v0.17.0-crash-on-wave3-slow", f"{REPO}:v0.17.0-crash-on-wave_3", f"{REPO}:v0.17.0"):
        assert ps.crash_on(image) is None, image
    assert ps.behaviour(CRASH_ON) == "healthy"
    assert ps.behaviour(CRASH_ON, {}) == "healthy"
    assert ps.behaviour(CRASH_ON, {CRASH: "wave4"}) == "healthy"
    assert ps.behaviour(CRASH_ON, {"kubesim.io/rack": "wave3"}) == "healthy"
    assert ps.behaviour(CRASH_ON, wave3) == "crash"
    for word in ("slow", "silent", "noalloc", "crash"):
        image = f"{REPO}:v0.17.0-crash-on-{word}"
        assert ps.behaviour(image) == "healthy", image
        assert ps.behaviour(image, wave3) == "healthy", image
        assert ps.behaviour(image, {CRASH: word}) == "crash", image
    assert ps.behaviour(f"{REPO}:v0.17.0-crash") == "crash"
    assert ps.behaviour(f"{REPO}:v0.17.0-crash", wave3) == "crash"
    assert ps.behaviour(f"{REPO}:v0.17.0-crash", {CRASH: "other"}) == "crash"
    assert ps.behaviour(f"{REPO}:v0.17.0-crash-on-wave3-slow", wave3) == "slow"
    assert ps.behaviour(f"{REPO}:v0.17.0-slow", wave3) == "slow"
    assert ps.behaviour(f"{REPO}:v0.17.0", wave3) == "healthy"


# ------------------------------------------------------------------ in process
def test_gpu_large_nodes_carry_region_zone_and_rack() -> None:
    """Round-robin zones a, b, c; racks of eight nodes within a zone (node 25 opens zone a's rack 2)."""
    sim = push_test_builds(build(scenario="gpu-large", nodes=50, minor=31))
    for i in range(1, 51):
        labels = get(sim, NODES, "", f"gpu-node{i}")["metadata"]["labels"]
        assert {k: labels.get(k) for k in (REGION, ZONE, RACK)} == expected_domain(i), i
        assert labels["kubernetes.io/hostname"] == f"gpu-node{i}" and labels["nvidia.com/gpu.present"] == "true"
    racks = [get(sim, NODES, "", f"gpu-node{i}")["metadata"]["labels"][RACK] for i in (1, 22, 25, 26, 27, 49, 50)]
    assert racks == ["sim-zone-a-rack1", "sim-zone-a-rack1", "sim-zone-a-rack2", "sim-zone-b-rack2",
                     "sim-zone-c-rack2", "sim-zone-a-rack3", "sim-zone-b-rack3"]
    before = sim.store.rv
    sim.advance(5)
    assert sim.store.rv == before


def test_gpu_small_nodes_have_no_failure_domain_labels() -> None:
    """gpu-small is unchanged: no region, zone or rack labels."""
    sim = small()
    for node in sim.store.list(NODES):
        assert not {REGION, ZONE, RACK} & set(node["metadata"]["labels"]), node["metadata"]["name"]


def test_crash_on_label_is_read_when_the_kubelet_starts_the_pod() -> None:
    """Labelling a node after its plugin started changes nothing; the next pod there crash-loops."""
    sim = small()
    sim.store.mutate(NODES, "", "gpu-node2", lambda n: n["metadata"]["labels"].__setitem__(CRASH, "wave3"))
    sim.store.mutate(DAEMONSETS, NS, DS, lambda ds: ds["spec"]["updateStrategy"]["rollingUpdate"].__setitem__(
        "maxUnavailable", 3))  # the crash-looping pod would hold a rollout of one at a time
    set_image(sim, NS, DS, CRASH_ON)
    sim.advance(120)
    by_node = {p["spec"]["nodeName"]: p for p in pods_of(sim, NS, "name", "nvidia-device-plugin-ds", alive=True)}
    for name, pod in by_node.items():
        assert pod["spec"]["containers"][0]["image"] == CRASH_ON
        status = pod["status"]["containerStatuses"][0]
        if name == "gpu-node2":
            assert status["restartCount"] >= 2 and not status["ready"], status
        else:
            assert status["ready"] and status["restartCount"] == 0, (name, status)
    assert [get(sim, NODES, "", f"gpu-node{i}")["status"]["allocatable"]["nvidia.com/gpu"] for i in (1, 2, 3)] == [
        "8", "0", "8"]

    sim.store.mutate(NODES, "", "gpu-node3", lambda n: n["metadata"]["labels"].__setitem__(CRASH, "wave3"))
    sim.advance(60)
    running = by_node["gpu-node3"]["metadata"]["name"]
    assert get(sim, PODS, NS, running)["status"]["containerStatuses"][0]["ready"]
    sim.store.delete(PODS, NS, running)
    sim.advance(60)
    replacement = next(p for p in pods_of(sim, NS, "name", "nvidia-device-plugin-ds", alive=True)
                       if p["spec"]["nodeName"] == "gpu-node3")
    assert replacement["metadata"]["name"] != running
    status = replacement["status"]["containerStatuses"][0]
    assert status["restartCount"] >= 1 and not status["ready"], status
    assert get(sim, NODES, "", "gpu-node3")["status"]["allocatable"]["nvidia.com/gpu"] == "0"


# ------------------------------------------------------------------ through kubectl
def _plugin_pods(kubectl: Kubectl) -> dict[str, dict[str, Any]]:
    pods = kubectl.json("-n", NS, "get", "pods", "-l", "name=nvidia-device-plugin-ds")["items"]
    return {p["spec"]["nodeName"]: p for p in pods if not p["metadata"].get("deletionTimestamp")}


def _crash_looping(pod: dict[str, Any]) -> bool:
    status = (pod["status"].get("containerStatuses") or [{}])[0]
    waiting = (status.get("state") or {}).get("waiting") or {}
    return waiting.get("reason") == "CrashLoopBackOff" and status.get("restartCount", 0) >= 2


def _healthy(pod: dict[str, Any]) -> bool:
    status = (pod["status"].get("containerStatuses") or [{}])[0]
    ready = [c["status"] for c in pod["status"].get("conditions") or [] if c["type"] == "Ready"]
    return pod["status"].get("phase") == "Running" and ready == ["True"] and bool(status.get("ready"))


@pytest.mark.conformance
def test_crash_on_image_crash_loops_only_on_labelled_gpu_large_nodes() -> None:
    """gpu-large with 12 nodes: kubectl sees the failure-domain labels; after labelling two nodes
    kubesim.io/crash=wave3 and rolling out a -crash-on-wave3 plugin, those two crash-loop with no
    GPUs allocatable while the other ten run it Ready and registered."""
    with KubeSim(pushed=TEST_BUILDS, scenario="gpu-large", nodes=12, k8s_version="1.31") as sim:
        kubectl = Kubectl(sim.kubeconfig)
        nodes = {n["metadata"]["name"]: n for n in kubectl.json("get", "nodes")["items"]}
        assert sorted(nodes) == sorted(f"gpu-node{i}" for i in range(1, 13))
        for i in range(1, 13):
            labels = nodes[f"gpu-node{i}"]["metadata"]["labels"]
            assert {k: labels.get(k) for k in (REGION, ZONE, RACK)} == expected_domain(i), i
        table = kubectl("get", "nodes", "-L", ZONE, "-L", RACK).splitlines()
        head = table[0].split()
        assert head[-2:] == ["ZONE", "RACK"], head
        rows = {row.split()[0]: row.split()[-2:] for row in table[1:]}
        assert rows["gpu-node1"] == ["sim-zone-a", "sim-zone-a-rack1"]
        assert rows["gpu-node5"] == ["sim-zone-b", "sim-zone-b-rack1"]
        assert rows["gpu-node12"] == ["sim-zone-c", "sim-zone-c-rack1"]
        assert {zone for zone, _ in rows.values()} == {"sim-zone-a", "sim-zone-b", "sim-zone-c"}

        crashing = ("gpu-node4", "gpu-node8")
        out = kubectl("label", "node", *crashing, f"{CRASH}=wave3")
        assert out.splitlines() == ["node/gpu-node4 labeled", "node/gpu-node8 labeled"]
        kubectl("-n", NS, "patch", "daemonset", DS, "--type=merge", "-p",
                json.dumps({"spec": {"updateStrategy": {"rollingUpdate": {"maxUnavailable": 12}}}}))
        kubectl("-n", NS, "set", "image", f"daemonset/{DS}", f"{CTR}={CRASH_ON}")

        def done(pods: dict[str, dict[str, Any]]) -> bool:
            return len(pods) == 12 and all(
                p["spec"]["containers"][0]["image"] == CRASH_ON
                and (_crash_looping(p) if name in crashing else _healthy(p)) for name, p in pods.items())

        for _ in range(60):
            sim.advance("10s")
            if done(_plugin_pods(kubectl)):
                break
        pods = _plugin_pods(kubectl)
        assert sorted(pods) == sorted(nodes)
        for name, pod in pods.items():
            status = pod["status"]["containerStatuses"][0]
            assert pod["spec"]["containers"][0]["image"] == CRASH_ON
            assert status["image"] == CRASH_ON
            node = kubectl.json("get", "node", name)["status"]
            if name in crashing:
                assert _crash_looping(pod), (name, status)
                assert not status["ready"] and status["lastState"]["terminated"]["exitCode"] == 1
                assert FS_WATCHER in kubectl("-n", NS, "logs", pod["metadata"]["name"], "--previous")
                assert (node["capacity"]["nvidia.com/gpu"], node["allocatable"]["nvidia.com/gpu"]) == ("8", "0")
            else:
                assert _healthy(pod) and status["restartCount"] == 0, (name, status)
                assert "Registered device plugin for 'nvidia.com/gpu' with Kubelet" in kubectl(
                    "-n", NS, "logs", pod["metadata"]["name"])
                assert (node["capacity"]["nvidia.com/gpu"], node["allocatable"]["nvidia.com/gpu"]) == ("8", "8")
        listing = kubectl("-n", NS, "get", "pods", "-l", "name=nvidia-device-plugin-ds", "-o", "wide").splitlines()
        assert len(listing) == 13
        for row in listing[1:]:  # RESTARTS may read "3 (20s ago)": find the NODE column by its value
            on = next(word for word in row.split() if word.startswith("gpu-node"))
            assert ("CrashLoopBackOff" in row) == (on in crashing), row
        ds = kubectl.json("-n", NS, "get", "daemonset", DS)["status"]
        assert (ds["updatedNumberScheduled"], ds["numberReady"], ds["numberUnavailable"]) == (12, 10, 2)
