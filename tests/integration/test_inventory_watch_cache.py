"""A worker's ``inventory`` reads its nodes, unfinished pods and ResourceSlices from the watch cache (issue 39),
counted from kubesim's read log.

Found before: each ``inventory`` a worker answered listed every node and every unfinished pod of
the cluster again (at 5,000 nodes, 50,000 pods: about two CPU-seconds of the API server's per
inventory), so fifty users asking at once during a promotion slowed the API server the front
end's acks and the promotion share the machine with.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from kubesim import KubeSim
from runbooks.cluster import Cluster
from runbooks.cluster.informing import Informer, Watches
from runbooks.cluster.resources import NODES
from runbooks.inventory import Inventory, reading, take_inventory
from runbooks.inventory.models import Node
from tests.support import Kubectl

NS = "kube-system"
RESOURCES = ("nvidia.com/gpu",)
GPU_POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "trainer", "namespace": "default"},
           "spec": {"nodeName": "gpu-node2", "containers": [{"name": "main", "image": "cuda:12",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}


@pytest.fixture
def sim() -> Iterator[KubeSim]:
    with KubeSim(scenario="gpu-small", k8s_version="1.31", speed=4) as served:
        yield served


def connect_to(sim: KubeSim) -> Watches:
    return Watches(lambda context: Cluster.from_kubeconfig(sim.kubeconfig, context))


def listed(sim: KubeSim) -> list[str]:
    """What kubesim listed of the nodes, pods and ResourceSlices since its read log was last cleared."""
    return [r["path"].rsplit("/", 1)[1] for r in sim.reads() if r["verb"] == "list"
            and (r["path"] in ("/api/v1/nodes", "/api/v1/pods") or r["path"].endswith("/resourceslices"))]


def comparable(inventory: Inventory) -> dict[str, Any]:
    """The inventory as JSON, without its notes (the cached one says where it read from)."""
    shown: dict[str, Any] = json.loads(inventory.model_dump_json(exclude={"notes", "taken_at"}))
    return shown


@contextlib.contextmanager
def node_cache(watches: Watches) -> Iterator[Informer[Node]]:
    """The node cache the inventory shares (the same ``kept``: the same informer)."""
    with watches.on(None).share(NODES, kept=("nodes", RESOURCES), project=lambda o: reading.node_from(o, RESOURCES)) \
            as informer:
        yield informer


def test_a_cached_inventory_shows_what_one_read_of_the_cluster_shows_and_the_next_lists_nothing(
        sim: KubeSim) -> None:
    kubectl = Kubectl(sim.kubeconfig)
    kubectl("create", "-f", "-", input=json.dumps(GPU_POD))
    cluster = Cluster.from_kubeconfig(sim.kubeconfig)
    watches = connect_to(sim)
    try:
        direct = take_inventory(cluster)
        sim.call(lambda s: s.reads.clear())
        first = take_inventory(cluster, watches=watches.on(None))
        assert sorted(listed(sim)) == ["nodes", "pods", "resourceslices"], "the caches list once"
        assert comparable(first) == comparable(direct)
        assert sum(sum(n.in_use.values()) for n in first.nodes) > 1 and any(d.pods for d in first.daemonsets)
        assert any("watch cache" in note for note in first.notes) and not any("watch cache" in n for n in direct.notes)

        sim.call(lambda s: s.reads.clear())
        again = take_inventory(cluster, watches=watches.on(None))
        assert listed(sim) == [], "the second inventory lists no node, no pod and no slice"
        assert comparable(again) == comparable(direct)
        assert watches.kept() == 3
    finally:
        watches.close()


def test_a_change_the_watch_brings_shows_in_the_next_cached_inventory(sim: KubeSim) -> None:
    kubectl = Kubectl(sim.kubeconfig)
    cluster = Cluster.from_kubeconfig(sim.kubeconfig)
    watches = connect_to(sim)
    try:
        before = take_inventory(cluster, watches=watches.on(None))
        assert not next(n for n in before.nodes if n.name == "gpu-node1").unschedulable
        with node_cache(watches) as informer:
            seen = informer.version
            kubectl("cordon", "gpu-node1")
            while not next(n for n in informer.items() if n.name == "gpu-node1").unschedulable:
                assert informer.wait(seen, timeout=30), "the watch brought no change in 30 s"
                seen = informer.version
        sim.call(lambda s: s.reads.clear())
        after = take_inventory(cluster, watches=watches.on(None))
        assert listed(sim) == []
        assert next(n for n in after.nodes if n.name == "gpu-node1").unschedulable
        assert comparable(after) == comparable(take_inventory(cluster))
    finally:
        watches.close()


def test_while_a_watch_is_away_the_inventory_reads_the_cluster_itself(sim: KubeSim) -> None:
    """A cache whose watch is away (an error, RBAC without ``watch``, the process stopping) may miss
    changes: the inventory reads the nodes and the pods from the cluster, as the shell's does."""
    cluster = Cluster.from_kubeconfig(sim.kubeconfig)
    watches = connect_to(sim)
    try:
        take_inventory(cluster, watches=watches.on(None))
        with node_cache(watches) as informer:
            informer.signal_stop()  # stale from now on, still shared
            sim.call(lambda s: s.reads.clear())
            inventory = take_inventory(cluster, watches=watches.on(None))
            assert sorted(listed(sim)) == ["nodes", "pods"], "the slices' watch holds: they are not listed"
            assert not any("watch cache" in note for note in inventory.notes)
            assert comparable(inventory) == comparable(take_inventory(cluster))
    finally:
        watches.close()


def logs_read(sim: KubeSim) -> list[tuple[str, str]]:
    """The pods whose log kubesim served since its read log was last cleared: (namespace, pod)."""
    found = []
    for r in sim.reads():
        parts = r["path"].split("/")  # /api/v1/namespaces/<ns>/pods/<pod>/log
        if r["verb"] == "get" and parts[-1] == "log":
            found.append((parts[4], parts[6]))
    return sorted(found)


def test_a_registration_seen_in_a_plugin_log_is_not_read_again_until_the_pod_changes(sim: KubeSim) -> None:
    """Issue 39: every inventory read up to 200 plugin-pod logs (at 5,000 nodes, 200 requests to the
    API server each time: most of kubesim's CPU in bench_ack's inventory cells). A worker keeps what
    the log of a pod that registered showed, by the pod's uid and restarts: its next inventory reads
    only the logs of pods not known to have registered, and a pod replaced is read again. The
    shell's inventory (no watch cache) reads them all each time."""
    kubectl = Kubectl(sim.kubeconfig)
    cluster = Cluster.from_kubeconfig(sim.kubeconfig)
    watches = connect_to(sim)
    try:
        sim.call(lambda s: s.reads.clear())
        first = take_inventory(cluster, watches=watches.on(None))
        # issue 59: a DRA driver's registration is seen in its ResourceSlices, its pods' logs never read
        pods = {(d.namespace, p.name): p for d in first.daemonsets for p in d.pods if d.kind == "device-plugin"}
        assert all(p.registered for d in first.daemonsets for p in d.pods if d.kind == "dra-kubelet-plugin")
        registered = sorted(k for k, p in pods.items() if p.registered)
        assert registered and logs_read(sim) == sorted(pods), "the first reads every device-plugin pod's log"

        sim.call(lambda s: s.reads.clear())
        again = take_inventory(cluster, watches=watches.on(None))
        assert logs_read(sim) == sorted(k for k in pods if k not in registered)
        assert comparable(again) == comparable(first)
        assert any(f"{len(registered)} plugin pods as their logs showed it" in n for n in again.notes), again.notes

        sim.call(lambda s: s.reads.clear())
        take_inventory(cluster)
        assert logs_read(sim) == sorted(pods), "without a watch cache every log is read"

        namespace, name = registered[0]
        node = pods[(namespace, name)].node
        kubectl("delete", "pod", name, "-n", namespace, "--wait=false")
        deadline = time.monotonic() + 60
        while True:  # until the watch brought the replacement (kubesim's DaemonSet controller makes it)
            sim.call(lambda s: s.reads.clear())
            latest = take_inventory(cluster, watches=watches.on(None))
            now = {(d.namespace, p.name): p for d in latest.daemonsets for p in d.pods if d.kind == "device-plugin"}
            new = [k for k, p in now.items() if p.node == node and k[0] == namespace and k not in pods]
            if new and (namespace, name) not in now:
                break
            assert time.monotonic() < deadline, "no replacement pod within 60 s"
            time.sleep(0.1)  # the next look
        assert new[0] in logs_read(sim) and (namespace, name) not in logs_read(sim)
    finally:
        watches.close()



def test_a_workers_inventories_read_through_the_one_connection_its_watch_cache_keeps(sim: KubeSim) -> None:
    """Issue 39: each inventory a worker took opened a client of its own (its kubeconfig loaded, a
    TLS handshake per connection, eight for the plugin logs): at 5,000 nodes a flood of them kept
    the API server handshaking beside the front end's acks. Now the reads it makes itself go
    through one connection per cluster, kept as long as the watch cache keeps its informers;
    without a linger (nothing kept), each opens its own as before."""
    from handlers.inventory import InventoryRequest, handle
    from runbooks.policy import Policy

    def counting() -> tuple[list[str | None], Any]:
        opened: list[str | None] = []

        def connect(context: str | None) -> Cluster:
            opened.append(context)
            return Cluster.from_kubeconfig(sim.kubeconfig, context)

        return opened, connect

    opened, connect = counting()
    watches = Watches(connect)
    try:
        first = handle(InventoryRequest(), connect=connect, policy=Policy(), watches=watches)
        after_first = len(opened)
        second = handle(InventoryRequest(), connect=connect, policy=Policy(), watches=watches)
        assert len(opened) == after_first, f"the second inventory opened {len(opened) - after_first} connection(s)"
        assert comparable(first)["nodes"] == comparable(second)["nodes"]
    finally:
        watches.close()

    opened, connect = counting()
    unkept = Watches(connect, linger=0)
    try:
        handle(InventoryRequest(), connect=connect, policy=Policy(), watches=unkept)
        after_first = len(opened)
        handle(InventoryRequest(), connect=connect, policy=Policy(), watches=unkept)
        assert len(opened) == 2 * after_first, "nothing kept: the second opened all the first did"
    finally:
        unkept.close()
