"""verify's window and what it reads around it (issue 39: ``verify`` within 1.05x its window
from the CLI), on kubesim over HTTPS, counted from its read log (``/sim/v1/requests?reads=true``).

Found before: outside a run verify listed the plugin's pods at the window's start and again at
its end, listed the nodes only once the pods were in, opened the window only then, and read
the plugin logs of its registration check after the window had ended: at 5,000 nodes about
4 s beyond the window besides the process's start-up.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs

import pytest

from kubesim import KubeSim
from runbooks.cluster import Cluster
from runbooks.cluster.adapter import FIRST_PAGE
from runbooks.cluster.resources import NODES
from runbooks.daemonset.observing import observe
from runbooks.daemonset.verifying import NODE_GETS, log_reads, verify
from runbooks.daemonset.window_logs import WindowLogs
from runbooks.engine.clocks import SystemClock
from runbooks.engine.steps import StepSettings

NS = "kube-system"
TARGET = f"{NS}/nvidia-device-plugin-daemonset"
PLUGIN_PODS = f"/api/v1/namespaces/{NS}/pods"
NODES_PATH = "/api/v1/nodes"
SLOW = 3.0
"""Seconds kubesim takes to answer each of the start's two large lists in the timing test."""
NODE_COUNT = NODE_GETS + 10
"""More nodes than verify reads one by one: the window keeps a watch cache of them."""


@pytest.fixture(scope="module")
def sim() -> Iterator[KubeSim]:
    with KubeSim(scenario="gpu-large", nodes=NODE_COUNT, k8s_version="1.31") as served:
        yield served


def reads_of(sim: KubeSim, verb: str, path: str) -> list[dict[str, Any]]:
    return [r for r in sim.reads() if r["verb"] == verb and r["path"] == path]


def log_reads_of(sim: KubeSim) -> list[str]:
    return [r["path"] for r in sim.reads() if r["path"].startswith(PLUGIN_PODS + "/") and r["path"].endswith("/log")]


def settings(window: float) -> StepSettings:
    return StepSettings(observe_window=window, poll_interval=0.2)


def test_verify_lists_the_plugin_pods_and_the_nodes_once_and_watches_from_there(sim: KubeSim) -> None:
    """issue 39: outside a run, verify lists the plugin's pods once (its start) and follows them
    with a watch from that list, so its end lists them no more; the nodes are listed once too."""
    sim.call(lambda s: s.reads.clear())
    with Cluster.from_kubeconfig(sim.kubeconfig) as cluster:
        outcome = verify(cluster, TARGET, settings=settings(0.5), clock=SystemClock())
    assert outcome.ok, outcome.reason
    pod_lists = [r for r in reads_of(sim, "list", PLUGIN_PODS) if "labelSelector" in r["query"]]
    assert len(pod_lists) == 1, f"the plugin's pods listed {len(pod_lists)} times by one verify"
    assert len(reads_of(sim, "list", NODES_PATH)) == 1
    give_up = time.monotonic() + 60  # kubesim logs a watch once it has ended, after the client let go of it
    while not (watched := [r for r in reads_of(sim, "watch", PLUGIN_PODS) if "labelSelector" in r["query"]]) \
            and time.monotonic() < give_up:
        time.sleep(0.05)
    assert watched, "the plugin's pods were not watched from their list"


def test_the_window_opens_when_the_start_is_in_hand_not_after_each_list_in_turn(sim: KubeSim) -> None:
    """issue 39: the start's two large lists (the plugin's pods, the nodes) are read at once and
    the window opens when both are in, so with each answered SLOW seconds late a verify takes
    about SLOW plus its window, not two SLOWs plus its window (one after the other) or more."""
    window = 1.0
    for path in (PLUGIN_PODS, NODES_PATH):  # each list's first request (the pods: nothing else of theirs comes first)
        sim.fault(kind="api-errors", code=0, delay=SLOW, path=path, count=1)
    with Cluster.from_kubeconfig(sim.kubeconfig) as cluster:
        began = time.monotonic()
        outcome = verify(cluster, TARGET, settings=settings(window), clock=SystemClock())
        took = time.monotonic() - began
    assert outcome.ok, outcome.reason
    assert window + SLOW <= took < window + 2 * SLOW, f"verify took {took:.1f} s for a {window:g} s window"


class LogsAwaited(SystemClock):
    """The real clock, whose first sleep in the window also waits (at most ``deadline`` seconds)
    until kubesim has answered ``wanted`` plugin-log reads: what the window's reads are given."""

    def __init__(self, sim: KubeSim, wanted: int, deadline: float = 30.0) -> None:
        self.sim, self.wanted, self.deadline = sim, wanted, deadline
        self.seen_in_window = -1
        self._first = threading.Event()

    def sleep(self, seconds: float) -> None:
        if not self._first.is_set():
            self._first.set()
            give_up = time.monotonic() + self.deadline
            while len(log_reads_of(self.sim)) < self.wanted and time.monotonic() < give_up:
                time.sleep(0.05)
        self.seen_in_window = len(log_reads_of(self.sim))
        super().sleep(seconds)


def test_the_plugin_logs_are_read_during_the_window_and_not_again_at_its_end(sim: KubeSim) -> None:
    """issue 39: the registration check's plugin logs are read while the window runs; at its
    end, those that showed the registration line of the same pod are not read again."""
    with Cluster.from_kubeconfig(sim.kubeconfig) as cluster:
        pods = len([p for p in observe(cluster, NS, "nvidia-device-plugin-daemonset").pods if not p.deleting])
        sim.call(lambda s: s.reads.clear())
        clock = LogsAwaited(sim, wanted=pods)
        outcome = verify(cluster, TARGET, settings=settings(1.0), clock=clock)
    assert outcome.ok, outcome.reason
    assert clock.seen_in_window == pods, f"{clock.seen_in_window} of {pods} plugin logs read during the window"
    assert len(log_reads_of(sim)) == pods, "a log that showed the registration was read again at the window's end"


def test_window_logs_read_again_only_a_pod_that_changed(sim: KubeSim) -> None:
    """issue 39: at the window's end the logs read during it stand for the same pods; a pod that
    restarted since (another container, another log) has its log read again."""
    with Cluster.from_kubeconfig(sim.kubeconfig) as cluster:
        snap = observe(cluster, NS, "nvidia-device-plugin-daemonset")
        nodes = snap.nodes
        _, chosen, reads = log_reads(snap, nodes, {}, kind="device-plugin", pattern=None)
        before = {pod.name: pod for _, pod in chosen}
        sim.call(lambda s: s.reads.clear())
        with WindowLogs(cluster) as logs:
            logs.start(reads, before)
            restarted = chosen[0][1]
            after = {**before, restarted.name: restarted.model_copy(update={"restarts": restarted.restarts + 1})}
            found = logs.results(reads, after)
    assert set(found) == {(NS, r.pod) for r in reads} and all(r.registered for r in found.values())
    read = log_reads_of(sim)
    assert len(read) == len(reads) + 1 and read.count(f"{PLUGIN_PODS}/{restarted.name}/log") == 2


def test_a_list_signals_its_first_page_before_the_next_is_asked_for(sim: KubeSim) -> None:
    """issue 39: ``list_versioned(first_page=…)`` calls back once the first page is in, before
    the list asks for the second: the moment the list shows, from which the window may open;
    that first page is a small one (``FIRST_PAGE`` objects), to come sooner."""
    asked: list[int] = []
    with Cluster.from_kubeconfig(sim.kubeconfig) as cluster:
        sim.call(lambda s: s.reads.clear())
        items, _ = cluster.list_versioned(NODES, page_size=5,
                                          first_page=lambda: asked.append(len(reads_of(sim, "list", NODES_PATH))))
    assert len(items) == NODE_COUNT
    assert asked == [1], f"called back after {asked} list requests"
    assert len(reads_of(sim, "list", NODES_PATH)) > 1

    with Cluster.from_kubeconfig(sim.kubeconfig) as cluster:  # a full-size list: its first page is a small one
        sim.call(lambda s: s.reads.clear())
        items, _ = cluster.list_versioned(NODES, first_page=lambda: None)
    limits = [parse_qs(r["query"])["limit"] for r in reads_of(sim, "list", NODES_PATH)]
    assert len(items) == NODE_COUNT and limits[0] == [str(FIRST_PAGE)], limits
