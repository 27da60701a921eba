"""A promotion in waves on kubesim ``gpu-large``, with the real steps; kubectl watches the
plugin pods the whole time and is the referee of which node ran the new image when."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import pytest

from kubesim import KubeSim
from runbooks.cluster import Cluster
from runbooks.cluster.resources import NODES
from runbooks.engine.approving import Actor
from runbooks.engine.clocks import ClusterClock
from runbooks.engine.commands import Engine
from runbooks.engine.runs import RunState
from runbooks.policy import Policy
from tests.engine_support import kubesim_engine
from tests.support import TEST_BUILDS, Kubectl, PodWatch, pinned

S = RunState
NS, DS = "kube-system", "nvidia-device-plugin-daemonset"
TARGET = f"{NS}/{DS}"
SELECTOR = "name=nvidia-device-plugin-ds"
OLD = "nvcr.io/nvidia/k8s-device-plugin:v0.14.2"
NEW = "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"
ALICE, BOB, CAROL = Actor("U0ALICE"), Actor("U0BOB"), Actor("U0CAROL")
ZONE, RACK = "topology.kubernetes.io/zone", "kubesim.io/rack"


def waved_policy(waves: list[Any]) -> Policy:
    return Policy.model_validate({
        "approvers": {"users": ["U0BOB", "U0CAROL"]},
        "reports": {"after": []},
        # ready_timeout on the cluster's clock at SPEED: 15 s of wall clock for a node to move
        "steps": {"observe_window": "1s", "poll_interval": "0.1s", "ready_timeout": "300s"},
        "targets": [{"namespace": NS, "name": DS, "waves": waves, "spread": [ZONE, RACK]}],
    })


SPEED = 20
"""The cluster's clock runs 20 times as fast: the pods' pulls and starts (simulated seconds) take
a twentieth of them on the wall clock; soaks are crossed with ``sim.advance``."""


def start(nodes: int) -> KubeSim:
    sim = KubeSim(pushed=TEST_BUILDS, scenario="gpu-large", nodes=nodes, k8s_version="1.31", speed=SPEED).start()
    kubectl = Kubectl(sim.kubeconfig)
    kubectl("patch", "daemonset", DS, "-n", NS, "--type=merge",
            "-p", '{"spec":{"updateStrategy":{"rollingUpdate":{"maxUnavailable":"10%"}}}}')
    return sim


@pytest.fixture
def sim12() -> Iterator[KubeSim]:
    sim = start(12)
    try:
        yield sim
    finally:
        sim.stop()


def plugin_images(sim: KubeSim) -> dict[str, str]:
    pods = Kubectl(sim.kubeconfig).json("get", "pods", "-n", NS, "-l", SELECTOR)["items"]
    return {p["spec"]["nodeName"]: p["spec"]["containers"][0]["image"] for p in pods
            if not p["metadata"].get("deletionTimestamp")}


def engine_on(sim: KubeSim, redis_url: str, policy: Policy) -> Engine:
    clock = ClusterClock(Cluster.from_kubeconfig(sim.kubeconfig).server_time)  # the cluster's clock: advanced by tests
    return kubesim_engine(sim, redis_url, policy, clock=clock)


def assert_progress_shown(run: Any, lines: list[str]) -> None:
    """The root message shows one bar per wave (each line starts as given; its checks follow),
    and Slack would accept its blocks."""
    from slack_sdk.models.blocks import Block

    from bot.slack.blocks import render_message
    from handlers.run_views import root_message

    message = root_message(run)
    shown = [line for line in message.text.splitlines() if line.startswith(("Promotion in", "Wave "))]
    assert len(shown) == len(lines) and all(s.startswith(want) for s, want in zip(shown, lines, strict=True)), shown
    for payload in render_message(message):
        for block in payload["blocks"]:
            Block.parse(block).validate_json()  # type: ignore[union-attr]


def assert_waves_in_order(watch: PodWatch, canary: str, waves: list[list[str]], *, image: str) -> None:
    """From kubectl's watch: a node got a pod of ``image`` only once every node of the waves before
    its own ran one Ready, and no node outside the canary and ``waves`` ever did."""
    created, ready = watch.created_on(image), watch.ready_on(image)
    allowed = {canary, *(n for w in waves for n in w)}
    assert set(created) <= allowed, f"nodes outside the waves ran {image}: {sorted(set(created) - allowed)}"
    before = [canary]
    for number, wave in enumerate(waves, start=1):
        started = [created[n] for n in wave if n in created]
        if not started:
            continue
        assert all(n in ready for n in before), f"wave {number} started before the earlier nodes were Ready"
        assert min(started) > max(ready[n] for n in before), f"wave {number} started before wave {number - 1} was Ready"
        before = [n for n in wave if n in ready]


def test_a_soak_then_an_approved_wave_then_the_rest(sim12: KubeSim, redis_url: str) -> None:
    """12 nodes, waves [1 (soak 10m, continues by itself), 50% (next needs approval), 100%]:
    the soak holds the run without work until the cluster's clock passes it; the third wave
    waits for its approval; kubectl saw each wave start only after the one before was Ready."""
    policy = waved_policy([{"nodes": 1, "soak": "10m", "approve_next": False}, "50%", "100%"])
    engine = engine_on(sim12, redis_url, policy)
    watch = PodWatch(sim12.kubeconfig, NS, SELECTOR)
    try:
        watch.wait_for(12)
        run = engine.request_canary(actor=ALICE, target=TARGET, image=NEW, node="gpu-node5").run
        engine.approve(run.id, actor=BOB)
        run = engine.advance(run.id)
        assert run.state is S.AWAITING_PROMOTION, run.reason
        waves = [w["nodes"] for w in run.progress["waves"]]
        assert [len(w) for w in waves] == [1, 5, 5] and sorted(n for w in waves for n in w) == sorted(
            f"gpu-node{i}" for i in range(1, 13) if i != 5)
        assert run.gate is not None and run.gate.wave == 1 and run.gate.reason.startswith("wave 1 of 3: 1 node")
        engine.approve(run.id, actor=CAROL)
        run = engine.advance(run.id)
        assert run.state is S.PROMOTING and "soaks until" in run.progress["waiting_for"]
        images = plugin_images(sim12)
        assert {n for n, i in images.items() if i == pinned(NEW)} == {"gpu-node5", *waves[0]}
        assert not engine.needs_work(engine.get(run.id))
        assert_progress_shown(engine.get(run.id), [
            "Promotion in 3 waves after the canary:",
            "Wave 1 of 3 ▰▰▰▰▰▰▰▰▰▰ 1/1 node: verified, soaking until ",
            "Wave 2 of 3 ▱▱▱▱▱▱▱▱▱▱ 0/5 nodes: starts by itself once the wave before passed",
            "Wave 3 of 3 ▱▱▱▱▱▱▱▱▱▱ 0/5 nodes: starts once approved"])
        sim12.advance("10m")
        assert engine.needs_work(engine.get(run.id))
        run = engine.advance(run.id)
        assert run.state is S.AWAITING_PROMOTION and run.gate is not None and run.gate.wave == 3, run.reason
        images = plugin_images(sim12)
        assert {n for n, i in images.items() if i == pinned(NEW)} == {"gpu-node5", *waves[0], *waves[1]}
        assert_progress_shown(run, [
            "Promotion in 3 waves after the canary:",
            "Wave 1 of 3 ▰▰▰▰▰▰▰▰▰▰ 1/1 node: verified",
            "Wave 2 of 3 ▰▰▰▰▰▰▰▰▰▰ 5/5 nodes: verified",
            "Wave 3 of 3 ▱▱▱▱▱▱▱▱▱▱ 0/5 nodes: starts once approved"])
        engine.approve(run.id, actor=BOB)
        run = engine.advance(run.id)
        assert run.state is S.DONE, run.reason
        assert set(plugin_images(sim12).values()) == {pinned(NEW)}
    finally:
        watch.stop()
    assert_waves_in_order(watch, "gpu-node5", waves, image=pinned(NEW))
    zones = {n["metadata"]["name"]: n["metadata"]["labels"][ZONE]
             for n in Kubectl(sim12.kubeconfig).json("get", "nodes")["items"]}
    assert len({zones[n] for n in waves[1][:3]}) == 3  # the second wave begins with one node in each zone
    strategy = Kubectl(sim12.kubeconfig).json("get", "daemonset", DS, "-n", NS)["spec"]["updateStrategy"]
    assert strategy == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": "10%"}}


@pytest.mark.slow
def test_two_hundred_nodes_in_four_waves_then_a_crash_in_wave_three_rolled_back(redis_url: str) -> None:
    """gpu-large, 200 nodes, waves [1, 5%, 25%, 100%] that go on by themselves: a healthy image
    reaches every node in four waves of 1, 9, 40 and 149 nodes; then an image that crashes only
    on the nodes labelled for it (wave 3's) is stopped in wave 3 and every node it moved goes
    back. kubectl's watch shows no node outside the current wave ever ran either image."""
    policy = waved_policy([{"nodes": n, "approve_next": False} for n in (1, "5%", "25%")] + ["100%"])
    sim = start(200)
    try:
        engine = engine_on(sim, redis_url, policy)
        watch = PodWatch(sim.kubeconfig, NS, SELECTOR)
        try:
            watch.wait_for(200)
            run = engine.request_canary(actor=ALICE, target=TARGET, image=NEW, node="auto").run
            engine.approve(run.id, actor=BOB)
            run = engine.advance(run.id)
            assert run.state is S.AWAITING_PROMOTION, run.reason
            waves = [w["nodes"] for w in run.progress["waves"]]
            assert [len(w) for w in waves] == [1, 9, 40, 149]
            engine.approve(run.id, actor=CAROL)
            run = engine.advance(run.id)
            assert run.state is S.DONE, run.reason
            assert set(plugin_images(sim).values()) == {pinned(NEW)}
            assert_waves_in_order(watch, run.node, waves, image=pinned(NEW))
            started = [e for e in engine.audit(run.id) if e["name"] == "promote.wave" and e["status"] == "info"]
            assert [len(e["evidence"]["nodes"]) for e in started] == [1, 9, 40, 149]
            trail = engine.audit(run.id)  # a line per batch deleted and per look, each naming its nodes
            deleted = [e["evidence"].get("nodes") or [e["evidence"]["node"]] for e in trail
                       if e["name"] == "promote.node.delete-pod" and e["kind"] == "mutation"]
            ready = [e["evidence"]["nodes"] for e in trail if e["name"] == "promote.node" and e["status"] == "ok"]
            every = sorted(n for wave in waves for n in wave)
            assert sorted(n for batch in deleted for n in batch) == every
            assert sorted(n for batch in ready for n in batch) == every
            assert len(deleted) + len(ready) < 150, f"{len(deleted)} deletions and {len(ready)} ready entries"

            crash = "nvcr.io/nvidia/k8s-device-plugin:v0.17.1-crash-on-wave3"
            run = engine.request_canary(actor=ALICE, target=TARGET, image=crash, node="auto").run
            engine.approve(run.id, actor=BOB)
            run = engine.advance(run.id)
            assert run.state is S.AWAITING_PROMOTION, run.reason
            waves = [w["nodes"] for w in run.progress["waves"]]
            with Cluster.from_kubeconfig(sim.kubeconfig) as api:  # kubectl label would wait on its 5 QPS for 40 nodes
                for node in waves[2]:
                    api.patch(NODES, node, {"metadata": {"labels": {"kubesim.io/crash": "wave3"}}}, patch_type="merge")
            engine.approve(run.id, actor=CAROL)
            run = engine.advance(run.id)
            assert run.state is S.ROLLED_BACK, run.reason
            assert "wave 3 of 4 failed" in run.reason and "crash-looping" in run.reason
            assert set(plugin_images(sim).values()) == {pinned(NEW)}
        finally:
            watch.stop()
        moved = watch.created_on(pinned(crash))  # the canary's node and the waves' ran the crash's pinned digest
        assert set(moved) <= {run.node, *waves[0], *waves[1], *waves[2]}
        assert set(waves[0]) | set(waves[1]) <= set(moved) and set(moved) & set(waves[2])
        assert_waves_in_order(watch, run.node, waves, image=pinned(crash))
    finally:
        sim.stop()


def test_a_window_that_closes_during_a_soak_holds_the_next_wave_until_the_next_window(redis_url: str) -> None:
    """The cluster's clock runs 60 times as fast. A daily window of one hour; wave 1 soaks 25
    minutes, wave 2 30 minutes (it fits when it starts, but its 5-minute verification makes
    the window close during its soak): wave 3 does not start at the end of that soak, it waits
    for the next day's window; kubectl shows its nodes untouched until then. (``images.pin_digest``
    is off: the canary's node moving to its verified digest before wave 1 would take minutes of this
    clock out of the window whose arithmetic is the test's subject.)"""
    sim = KubeSim(pushed=TEST_BUILDS, scenario="gpu-large", nodes=12, k8s_version="1.31", speed=60).start()
    try:
        kubectl = Kubectl(sim.kubeconfig)
        kubectl("patch", "daemonset", DS, "-n", NS, "--type=merge",
                "-p", '{"spec":{"updateStrategy":{"rollingUpdate":{"maxUnavailable":"10%"}}}}')
        cluster = Cluster.from_kubeconfig(sim.kubeconfig)
        opens = cluster.server_time().replace(second=0, microsecond=0)
        closes = opens + dt.timedelta(hours=1)
        policy = Policy.model_validate({
            "approvers": {"users": ["U0BOB", "U0CAROL"]},
            "reports": {"after": []},
            "steps": {"observe_window": "1s", "poll_interval": "0.1s", "ready_timeout": "30m"},
            "images": {"pin_digest": False},
            "targets": [{"namespace": NS, "name": DS, "spread": [ZONE],
                         "windows": [{"hours": f"{opens:%H:%M}-{closes:%H:%M}", "timezone": "UTC"}],
                         "waves": [{"nodes": 1, "soak": "25m", "approve_next": False},
                                   {"nodes": "50%", "soak": "30m", "approve_next": False}, "100%"]}],
        })
        engine = kubesim_engine(sim, redis_url, policy, clock=ClusterClock(cluster.server_time))
        run = engine.request_canary(actor=ALICE, target=TARGET, image=NEW, node="gpu-node5").run
        engine.approve(run.id, actor=BOB)
        assert engine.advance(run.id).state is S.AWAITING_PROMOTION
        engine.approve(run.id, actor=CAROL)
        run = engine.advance(run.id)  # wave 1, then its soak
        waves = [w["nodes"] for w in run.progress["waves"]]
        assert "wave 1 of 3 soaks until" in run.progress["waiting_for"]
        sim.advance("25m")
        slow = policy.steps.model_copy(update={"observe_window": "5m"})  # wave 2's verification takes 5 minutes
        engine = kubesim_engine(sim, redis_url, policy.model_copy(update={"steps": slow}),
                                clock=ClusterClock(cluster.server_time))
        run = engine.advance(run.id)
        assert run.state is S.PROMOTING and "wave 2 of 3 soaks until" in run.progress["waiting_for"], run.progress
        soak_end = dt.datetime.fromisoformat(run.progress["wait_until"])
        assert soak_end > closes  # the window closes during wave 2's soak
        engine = kubesim_engine(sim, redis_url, policy, clock=ClusterClock(cluster.server_time))  # 1s verifies again
        sim.advance(max(1.0, (soak_end - cluster.server_time()).total_seconds() + 1))
        run = engine.advance(run.id)
        assert run.state is S.PROMOTING and "wave 3 of 3 waits for a maintenance window" in run.progress["waiting_for"]
        assert dt.datetime.fromisoformat(run.progress["wait_until"]) == opens + dt.timedelta(days=1)
        images = plugin_images(sim)
        assert {n for n, i in images.items() if i == NEW} == {"gpu-node5", *waves[0], *waves[1]}
        sim.advance((opens + dt.timedelta(days=1) - cluster.server_time()).total_seconds() + 1)
        run = engine.advance(run.id)
        assert run.state is S.DONE, run.reason
        assert set(plugin_images(sim).values()) == {NEW}
    finally:
        sim.stop()
