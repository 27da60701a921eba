"""The process's one watch cache on kubesim: the steps on a DaemonSet share its informers,
which outlive the step that started them for a while, and a run's waves list the plugin pods once.

Found before: every step made caches of its own (a Following per wave, a node cache per
verify window), so each wave of a promotion, and each verify, listed every plugin pod and
every node again, and two runs on one cluster in one worker kept two copies.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Iterator
from urllib.parse import parse_qs

import pytest

from kubesim import KubeSim
from runbooks.cluster import Cluster
from runbooks.cluster.informing import Watches
from runbooks.cluster.resources import NODES
from runbooks.daemonset.events import WATCHED
from runbooks.daemonset.observing import Following
from runbooks.daemonset.verifying import NodeSampler, verify
from runbooks.engine.approving import Actor
from runbooks.engine.clocks import ClusterClock, SystemClock
from runbooks.engine.runs import RunState
from runbooks.engine.steps import CheckStatus
from runbooks.errors import Forbidden
from tests.e2e.runs_support import eventually
from tests.engine_support import kubesim_engine
from tests.integration.stepkit import FAST, FaultingClock
from tests.integration.test_informer import requests
from tests.integration.test_waves_kubesim import NEW, TARGET, start, waved_policy
from tests.support import Kubectl

NS, DS = "kube-system", "nvidia-device-plugin-daemonset"
SELECTOR = "name=nvidia-device-plugin-ds"


@pytest.fixture
def sim() -> Iterator[KubeSim]:
    with KubeSim(scenario="gpu-small", k8s_version="1.31", speed=10) as s:
        yield s


def connect_to(sim: KubeSim) -> Watches:
    return Watches(lambda context: Cluster.from_kubeconfig(sim.kubeconfig, context), linger=1.5)


def plugin_pod(kubectl: Kubectl, node: str) -> str:
    pods = kubectl.json("get", "pods", "-n", NS, "-l", SELECTOR, "--field-selector", f"spec.nodeName={node}")["items"]
    return next(p["metadata"]["name"] for p in pods if not p["metadata"].get("deletionTimestamp"))


def woken_by_deleting(following: Following, kubectl: Kubectl, pod: str) -> float:
    """Seconds a wait of up to 30 s took when kubectl deletes ``pod`` one second in."""
    deleting = threading.Timer(1.0, lambda: kubectl("delete", "pod", "-n", NS, pod, "--wait=false"))
    began = time.monotonic()
    deleting.start()
    following.snapshot()
    following.wait(SystemClock(), 30)
    deleting.join()
    return time.monotonic() - began


def test_steps_on_one_daemonset_share_its_caches_which_outlive_them_for_a_while(sim: KubeSim) -> None:
    """Two steps at once and a third just after them list the plugin pods once between them, on a
    connection of the cache's own (the first step's is closed meanwhile), and each wakes on the next
    change; once nobody used the caches for the linger they stop, and the next step lists again."""
    kubectl = Kubectl(sim.kubeconfig)
    probe = Cluster.from_kubeconfig(sim.kubeconfig)
    watches = connect_to(sim)
    victims = [plugin_pod(kubectl, "gpu-node1"), plugin_pod(kubectl, "gpu-node2")]
    before = requests(probe, "list", "pods")
    first = Cluster.from_kubeconfig(sim.kubeconfig)
    with Following(first, NS, DS, watches=watches.on(None)) as one, \
            Following(Cluster.from_kubeconfig(sim.kubeconfig), NS, DS, watches=watches.on(None)) as two:
        assert one.pods is two.pods and one.revisions is two.revisions and one.daemonset is two.daemonset
        assert len(one.snapshot().pods) == len(two.snapshot().pods) == 3
        assert 0.9 < woken_by_deleting(one, kubectl, victims[0]) < 10
        two.wait(SystemClock(), 30)  # woken by the same change: it had not looked since
    first.close()
    assert watches.kept() == 3  # the pods, the DaemonSet, its revisions: kept for the next step
    with Following(Cluster.from_kubeconfig(sim.kubeconfig), NS, DS, watches=watches.on(None)) as three:
        assert 0.9 < woken_by_deleting(three, kubectl, victims[1]) < 10
        eventually(lambda: all(p.name not in victims or p.deleting for p in three.snapshot().pods),
                   "both deletions in the cache")
    assert requests(probe, "list", "pods") == before + 1, "three steps listed the plugin pods more than once"
    assert watches.lists == 3
    eventually(lambda: watches.kept() == 0, "the caches stopped after the linger", timeout=10)
    with Following(Cluster.from_kubeconfig(sim.kubeconfig), NS, DS, watches=watches.on(None)) as four:
        assert len([p for p in four.snapshot().pods if not p.deleting]) >= 2
    assert requests(probe, "list", "pods") == before + 2
    watches.close()


def test_a_cache_that_cannot_list_is_not_kept_and_close_leaves_its_holders_reading_the_cluster(sim: KubeSim) -> None:
    watches = connect_to(sim)
    sim.fault(kind="forbid", path=f"/api/v1/namespaces/{NS}/pods", verb="list")
    with pytest.raises(Forbidden), Following(Cluster.from_kubeconfig(sim.kubeconfig), NS, DS, watches=watches.on(None)):
        pass
    assert watches.kept() == 0 and watches.lists == 0
    sim.fault(kind="allow")
    probe = Cluster.from_kubeconfig(sim.kubeconfig)
    with Following(Cluster.from_kubeconfig(sim.kubeconfig), NS, DS, watches=watches.on(None)) as following:
        assert watches.lists == 3
        watches.close()  # the process stops while a step still follows: it reads the cluster itself
        lists = requests(probe, "list", "pods")
        assert len(following.snapshot().pods) == 3
        assert requests(probe, "list", "pods") == lists + 1
    assert watches.kept() == 0


def test_verify_windows_on_one_cluster_share_one_node_cache(sim: KubeSim) -> None:
    """Two windows over more nodes than are read one by one: one list of the nodes between them,
    each seeing only its own nodes."""
    kubectl = Kubectl(sim.kubeconfig)
    probe = Cluster.from_kubeconfig(sim.kubeconfig)
    for i in range(30):  # through the client: one process, not thirty kubectl runs
        probe.create(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"cpu-{i}"}})
    names = sorted(n["metadata"]["name"] for n in kubectl.json("get", "nodes")["items"])
    watches = connect_to(sim)
    before = requests(probe, "list", "nodes")
    cluster = Cluster.from_kubeconfig(sim.kubeconfig)
    with NodeSampler(cluster, names[:25], ("nvidia.com/gpu",), {}, watches=watches.on(None)) as one, \
            NodeSampler(cluster, names[5:], ("nvidia.com/gpu",), {}, watches=watches.on(None)) as two:
        assert one.cache is two.cache is not None
        assert sorted(one.sample()) == names[:25] and sorted(two.sample()) == names[5:]
    assert requests(probe, "list", "nodes") == before + 1
    assert watches.kept() == 1
    watches.close()


def test_a_promotion_in_waves_lists_the_plugin_pods_once_per_worker(redis_url: str) -> None:
    """A promotion in three waves on 12 nodes with the process's watch cache: the first wave
    lists the plugin pods, the DaemonSet and its revisions, and the later waves follow the
    same caches (each wave's step made and listed its own before)."""
    sim = start(12)
    watches = connect_to(sim)
    watches.linger = 60
    try:
        policy = waved_policy([{"nodes": 1, "approve_next": False}, {"nodes": "50%", "approve_next": False}, "100%"])
        clock = ClusterClock(Cluster.from_kubeconfig(sim.kubeconfig).server_time)  # 1 s windows at the cluster's 20x
        engine = kubesim_engine(sim, redis_url, policy, watches=watches, clock=clock)
        run = engine.request_canary(actor=Actor("U0ALICE"), target=TARGET, image=NEW, node="gpu-node5").run
        engine.approve(run.id, actor=Actor("U0BOB"))
        run = engine.advance(run.id)
        assert run.state is RunState.AWAITING_PROMOTION, run.reason
        watched = watches.lists
        engine.approve(run.id, actor=Actor("U0CAROL"))
        run = engine.advance(run.id)
        assert run.state is RunState.DONE, run.reason
        assert len(run.progress["waves"]) == 3
        assert watches.lists - watched <= 3, f"{watches.lists - watched} caches listed for 3 waves"
    finally:
        watches.close()
        sim.stop()


def test_a_cache_still_listing_when_the_process_stops_is_stopped_once_let_go(sim: KubeSim) -> None:
    """close() while a step's first list is slow (2 s): the informer that list starts is not left
    watching after the step lets go of it, and reads stale from then on."""
    watches = connect_to(sim)
    sim.fault(kind="api-errors", count=1, code=0, delay=2, path=f"/api/v1/namespaces/{NS}/pods")
    held: list[Following] = []

    def step() -> None:
        with Following(Cluster.from_kubeconfig(sim.kubeconfig), NS, DS, watches=watches.on(None)) as following:
            held.append(following)

    stepping = threading.Thread(target=step)
    stepping.start()
    time.sleep(0.8)  # the step is in its slow list of the pods
    watches.close()
    stepping.join(timeout=30)
    pods = held[0].pods
    assert pods is not None and pods.stale
    eventually(lambda: not any(t.name == "informer-pods" and t.is_alive() for t in threading.enumerate()),
               "the pods informer's thread ended")
    assert watches.kept() == 0


DRA_TARGET = "dra-example-driver/dra-example-driver-kubeletplugin"


def _lists(probe: Cluster) -> dict[str, float]:
    return {kind: requests(probe, "list", kind) for kind in ("events", "resourceslices", "resourceclaims", "pods")}


def test_verifies_in_runs_on_one_cluster_read_events_and_dra_objects_from_one_cache(sim: KubeSim) -> None:
    """Two verifies of a DRA driver with the process's watch cache: each event reason, the
    ResourceSlices, the ResourceClaims, the Pending pods and (issue 39: at the start and end of
    each window) the plugin's pods are listed once between them (the first window's start), and
    both judge as a verify outside a run, which lists them at its end."""
    probe = Cluster.from_kubeconfig(sim.kubeconfig)
    settings = dataclasses.replace(FAST, observe_window=0.5)
    alone = verify(Cluster.from_kubeconfig(sim.kubeconfig), DRA_TARGET, settings=settings)
    assert alone.ok, alone.reason
    watches = connect_to(sim)
    try:
        before = _lists(probe)
        results = [verify(Cluster.from_kubeconfig(sim.kubeconfig), DRA_TARGET, settings=settings,
                          watches=watches.on(None)) for _ in range(2)]
        listed = {k: v - before[k] for k, v in _lists(probe).items()}
        assert listed == {"events": len(WATCHED), "resourceslices": 1, "resourceclaims": 1, "pods": 1 + 1}, listed
        for result in results:
            assert {c.name: c.status for c in result.checks} == {c.name: c.status for c in alone.checks}
    finally:
        watches.close()


def test_an_event_during_a_window_is_seen_by_the_cache_and_a_refused_list_is_still_judged_unknown(
        sim: KubeSim) -> None:
    """A BackOff event kubectl records on a node in scope during the window fails events-backoff,
    with each reason listed as the window began and not at its end (the watch brought the
    event); with events forbidden, the cache
    cannot start and verify says it could not read them, as outside a run."""
    kubectl = Kubectl(sim.kubeconfig)
    probe = Cluster.from_kubeconfig(sim.kubeconfig)
    cluster = Cluster.from_kubeconfig(sim.kubeconfig)
    watches = connect_to(sim)
    settings = dataclasses.replace(FAST, observe_window=1.0)

    listed: list[float] = []

    def backoff() -> None:
        listed.append(requests(probe, "list", "events"))
        at = cluster.server_time().strftime("%Y-%m-%dT%H:%M:%SZ")
        pod = plugin_pod(kubectl, "gpu-node2")
        kubectl("create", "-f", "-", input=json.dumps({
            "apiVersion": "v1", "kind": "Event", "type": "Warning", "reason": "BackOff", "count": 1,
            "metadata": {"name": f"{pod}.backoff", "namespace": NS},
            "involvedObject": {"kind": "Pod", "namespace": NS, "name": pod},
            "source": {"component": "kubelet", "host": "gpu-node2"}, "message": "Back-off restarting failed container",
            "firstTimestamp": at, "lastTimestamp": at}))

    try:
        before = requests(probe, "list", "events")
        result = verify(cluster, f"{NS}/{DS}", settings=settings, clock=FaultingClock(backoff),
                        watches=watches.on(None))
        assert listed == [before + len(WATCHED) - 1], "each reason listed as the window began (no DRA reason here)"
        assert requests(probe, "list", "events") == listed[0], "and not again at its end"
        check = next(c for c in result.checks if c.name == "events-backoff")
        assert check.status is CheckStatus.FAIL and "gpu-node2" in json.dumps(check.evidence), check
        watches.close()
        sim.fault(kind="forbid", path="/api/v1/events", verb="list")
        refused = verify(cluster, f"{NS}/{DS}", settings=settings, watches=connect_to(sim).on(None))
        events = next(c for c in refused.checks if c.name == "events")
        assert events.status is CheckStatus.UNKNOWN and "cannot read events" in events.detail
    finally:
        watches.close()


def test_a_canary_request_and_its_canary_in_waves_list_the_plugin_pods_once(redis_url: str) -> None:
    """Issue 39: with the process's watch cache, the request's checks read the plugin pods through
    it, and the canary after approval (its pre-checks, its replacement, its verify and the planning
    of the promotion's waves) follows the same cache: the plugin pods are listed once from request
    to canary (before: the request, the canary's step and the waves' planning each listed them)."""
    sim = start(6)
    watches = connect_to(sim)
    watches.linger = 60
    try:
        clock = ClusterClock(Cluster.from_kubeconfig(sim.kubeconfig).server_time)
        engine = kubesim_engine(sim, redis_url, waved_policy(["100%"]), watches=watches, clock=clock)
        sim.call(lambda s: s.reads.clear())
        run = engine.request_canary(actor=Actor("U0ALICE"), target=TARGET, image=NEW, node="gpu-node2").run
        engine.approve(run.id, actor=Actor("U0BOB"))
        run = engine.advance(run.id)
        assert run.state is RunState.AWAITING_PROMOTION, run.reason
        assert run.progress.get("waves"), "no waves planned"
        plugin = [r for r in sim.reads() if r["verb"] == "list" and r["path"] == f"/api/v1/namespaces/{NS}/pods"
                  and "labelSelector" in parse_qs(r["query"])]
        assert len(plugin) == 1, f"the plugin pods listed {len(plugin)} times from request to canary"
    finally:
        watches.close()
        sim.stop()
