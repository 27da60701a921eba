"""The watch cache on kubesim: what kubectl changes shows up, a 410 lists again, a rollout reads its pods once.

Found on main before: each poll of a promotion listed every plugin pod (220 MiB of reads
for a 500-node rollout), and verify listed every node each second of its window.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from kubesim import KubeSim
from runbooks.cluster import Cluster
from runbooks.cluster.informing import Informer
from runbooks.cluster.resources import PODS
from runbooks.daemonset.observing import Following
from runbooks.engine.approving import Actor
from runbooks.engine.clocks import SystemClock
from runbooks.engine.runs import RunState
from runbooks.errors import ListExpired
from runbooks.inventory.reading import pod_from
from runbooks.policy import Policy
from tests.e2e.runs_support import eventually
from tests.engine_support import kubesim_engine
from tests.support import Kubectl

NS, DS = "kube-system", "nvidia-device-plugin-daemonset"
SELECTOR = "name=nvidia-device-plugin-ds"
GPU_LABEL = "feature.node.kubernetes.io/pci-10de.present"


@pytest.fixture
def sim() -> Iterator[KubeSim]:
    with KubeSim(scenario="gpu-small", k8s_version="1.31", speed=10) as s:
        yield s


def names(kubectl: Kubectl) -> set[str]:
    """The plugin pods as kubectl lists them (across namespaces: /api/v1/pods, which the fault below spares)."""
    pods = kubectl.json("get", "pods", "-A", "-l", SELECTOR)["items"]
    return {p["metadata"]["name"] for p in pods if p["metadata"]["namespace"] == NS
            and not p["metadata"].get("deletionTimestamp")}


def requests(cluster: Cluster, verb: str, resource: str) -> float:
    samples = cluster.metric_samples("apiserver_request_total") or []
    return sum(s.value for s in samples if s.labels.get("verb") == verb and s.labels.get("resource") == resource)


def test_what_kubectl_changes_shows_up_and_a_410_lists_again(sim: KubeSim) -> None:
    kubectl = Kubectl(sim.kubeconfig)
    cluster = Cluster.from_kubeconfig(sim.kubeconfig)
    pods = Informer(cluster, PODS, namespace=NS, label_selector=SELECTOR, watch_seconds=1,
                    project=lambda o: pod_from(o) if not (o["metadata"].get("deletionTimestamp")) else None)
    with pods:
        assert {p.name for p in pods.items()} == names(kubectl) != set()
        victim = sorted(names(kubectl))[0]
        seen = pods.version
        kubectl("delete", "pod", "-n", NS, victim, "--wait=false")
        assert pods.wait(seen, timeout=10)
        eventually(lambda: {p.name for p in pods.items()} == names(kubectl) and victim not in names(kubectl),
                   "the deleted pod gone from the cache and its replacement in it")
        # The watch ends (1 s) and cannot reopen for a while (its next three tries fail: 1 + 2 + 4 s
        # apart); meanwhile gpu-node2 loses its GPU label, so the DaemonSet controller removes its
        # plugin pod, and the history is compacted: the reopened watch gets 410 and lists again.
        sim.fault(kind="api-errors", count=3, code=500, path=f"/api/v1/namespaces/{NS}/pods")
        time.sleep(2.0)
        before = names(kubectl)
        kubectl("label", "node", "gpu-node2", f"{GPU_LABEL}-")
        eventually(lambda: len(names(kubectl)) == len(before) - 1, "the plugin pod of gpu-node2 removed")
        sim.fault(kind="compact")
        eventually(lambda: pods.relists >= 1, "listed again after the 410", timeout=20)
        eventually(lambda: {p.name for p in pods.items()} == names(kubectl), "the cache as kubectl sees it")
        assert all(p.node != "gpu-node2" for p in pods.items())


def test_a_rollout_lists_the_plugin_pods_once_however_long_it_polls(sim: KubeSim, redis_url: str) -> None:
    policy = Policy.model_validate({
        "approvers": {"users": ["U0BOB"]}, "reports": {"after": []},
        "steps": {"observe_window": "1s", "poll_interval": "0.1s", "ready_timeout": "60s"},
    })
    engine = kubesim_engine(sim, redis_url, policy)
    cluster = Cluster.from_kubeconfig(sim.kubeconfig)
    run = engine.request_canary(actor=Actor("U0ANA"), target=f"{NS}/{DS}",
                                image="nvcr.io/nvidia/k8s-device-plugin:v0.17.0", node="gpu-node1").run
    engine.approve(run.id, actor=Actor("U0BOB"))
    run = engine.advance(run.id)
    assert run.state is RunState.AWAITING_PROMOTION, run.reason
    with Following(cluster, NS, DS) as following:  # what the promotion's polls read: not the pods
        before = requests(cluster, "list", "pods")
        for _ in range(20):
            following.snapshot()
        assert requests(cluster, "list", "pods") == before
    lists = requests(cluster, "list", "pods")
    engine.approve(run.id, actor=Actor("U0BOB"))
    run = engine.advance(run.id)
    assert run.state is RunState.DONE, run.reason
    promotion_lists = requests(cluster, "list", "pods") - lists
    assert promotion_lists <= 6, f"{promotion_lists} pod lists in a promotion that polled every 100 ms"
    assert requests(cluster, "watch", "pods") >= 1


def test_a_follower_reads_nothing_per_look_and_wakes_on_the_next_change(sim: KubeSim) -> None:
    """A look is made from the caches (no get of the DaemonSet, no list of its pods or its
    revisions), and a wait of up to 30 s ends as soon as kubectl deletes a plugin pod."""
    kubectl = Kubectl(sim.kubeconfig)
    cluster = Cluster.from_kubeconfig(sim.kubeconfig)
    reads = (("get", "daemonsets"), ("list", "daemonsets"), ("list", "pods"), ("list", "controllerrevisions"))
    with Following(cluster, NS, DS) as following:
        before = [requests(cluster, *read) for read in reads]
        snap = following.snapshot()
        for _ in range(20):
            assert following.snapshot().ds["metadata"]["uid"] == snap.ds["metadata"]["uid"]
        assert [requests(cluster, *read) for read in reads] == before
        assert [r.number for r in snap.revisions] == [1] and len(snap.pods) == 3
        victim = sorted(names(kubectl))[0]
        deleting = threading.Timer(1.0, lambda: kubectl("delete", "pod", "-n", NS, victim, "--wait=false"))
        began = time.monotonic()
        deleting.start()
        following.wait(SystemClock(), 30)
        waited = time.monotonic() - began
        deleting.join()
        assert 0.9 < waited < 10, f"woke after {waited:.1f} s"


def test_without_watch_in_its_rbac_a_rollout_reads_the_pods_itself(sim: KubeSim, redis_url: str) -> None:
    """An RBAC that grants list but not watch: the cache knows it is stale, the steps list instead,
    and the run ends as it would have (found by the rendered-RBAC test: the rollout waited on a
    cache that never changed, and rolled back)."""
    sim.fault(kind="forbid", path=f"/api/v1/namespaces/{NS}/pods", verb="watch")
    policy = Policy.model_validate({
        "approvers": {"users": ["U0BOB"]}, "reports": {"after": []},
        "steps": {"observe_window": "1s", "poll_interval": "0.1s", "ready_timeout": "30s"},
    })
    engine = kubesim_engine(sim, redis_url, policy)
    cluster = Cluster.from_kubeconfig(sim.kubeconfig)
    with Following(cluster, NS, DS) as following:
        eventually(lambda: following.pods.stale, "the cache knows its watch is refused")
        assert len(following.snapshot().pods) == len(names(Kubectl(sim.kubeconfig)))
    run = engine.request_canary(actor=Actor("U0ANA"), target=f"{NS}/{DS}",
                                image="nvcr.io/nvidia/k8s-device-plugin:v0.17.0", node="gpu-node1").run
    engine.approve(run.id, actor=Actor("U0BOB"))
    run = engine.advance(run.id)
    assert run.state is RunState.AWAITING_PROMOTION, run.reason
    engine.approve(run.id, actor=Actor("U0BOB"))
    run = engine.advance(run.id)
    assert run.state is RunState.DONE, run.reason


def test_a_watch_from_before_the_servers_window_is_expired_at_once(sim: KubeSim) -> None:
    """The API server answers a watch from a version older than its watch cache's window with one
    410 ``ERROR`` event (kubesim as the real one): the adapter raises ListExpired quoting it, the
    error the informer and the event collector list again on (the test above, and
    test_stability_collecting's)."""
    cluster = Cluster.from_kubeconfig(sim.kubeconfig)
    with pytest.raises(ListExpired, match=r"too old resource version: 1 \(\d+\)"):
        stream = cluster.watch(PODS, resource_version="1", namespace=NS, timeout_seconds=30)
        try:
            for _ in stream:
                pass
        finally:
            stream.close()
