"""The cluster adapter over the real client against kubesim: retries, errors, pages, logs."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from kubesim import KubeSim
from runbooks.cluster import Cluster, RetryPolicy
from runbooks.cluster.resources import DAEMONSETS, PODS
from runbooks.errors import (
    Action,
    ClusterConfigError,
    ClusterUnreachable,
    Forbidden,
    ServerBusy,
    Unauthorized,
)
from tests.support import unreachable_kubeconfig


def list_requests(cluster: Cluster, resource: str) -> int:
    """apiserver_request_total for list on ``resource`` (kubesim counts requests like a real server)."""
    samples = cluster.metric_samples("apiserver_request_total") or []
    return int(sum(s.value for s in samples if s.labels.get("resource") == resource and s.labels.get("verb") == "list"))


@pytest.fixture
def faulty(cluster: KubeSim) -> Iterator[KubeSim]:
    """The module's cluster, with every injected request fault cleared after the test."""
    yield cluster
    cluster.call(lambda sim: sim.faults.api_errors.clear())


def test_reads_survive_injected_server_errors(faulty: KubeSim, connect: Callable[..., Cluster]) -> None:
    """Two 500s in a row are retried away: the list still returns every DaemonSet."""
    with connect(faulty) as api:
        faulty.fault(kind="api-errors", count=2, code=500)
        assert {d["metadata"]["name"] for d in api.list_objects(DAEMONSETS)} == {
            "nvidia-device-plugin-daemonset", "dra-example-driver-kubeletplugin"}


def test_429_waits_for_retry_after(faulty: KubeSim, connect: Callable[..., Cluster]) -> None:
    """A 429 with Retry-After: 1 is retried no sooner than one second later."""
    with connect(faulty) as api:
        faulty.fault(kind="api-errors", count=1, code=429, retry_after=1)
        start = time.monotonic()
        assert len(api.list_objects(DAEMONSETS)) == 2
        assert time.monotonic() - start >= 0.95


def test_slow_answers_time_out_and_are_retried(faulty: KubeSim) -> None:
    """An answer slower than the read timeout is abandoned (a temporary error) and the read retried."""
    with Cluster.from_kubeconfig(faulty.kubeconfig, retry=RetryPolicy(attempts=1), timeout=(2.0, 0.3)) as api:
        faulty.fault(kind="api-errors", count=1, code=0, delay=1.0)
        with pytest.raises(ClusterUnreachable, match="timed out"):
            api.list_objects(DAEMONSETS)
    policy = RetryPolicy(attempts=3, base_delay=0.05, deadline=10)
    with Cluster.from_kubeconfig(faulty.kubeconfig, retry=policy, timeout=(2.0, 0.3)) as api:
        faulty.fault(kind="api-errors", count=1, code=0, delay=1.0)
        assert len(api.list_objects(DAEMONSETS)) == 2


def test_persistent_errors_give_up_within_the_deadline(faulty: KubeSim, connect: Callable[..., Cluster]) -> None:
    """A server that keeps failing gets a bounded number of tries, then a temporary error that says so."""
    policy = RetryPolicy(attempts=20, base_delay=0.05, max_delay=0.2, deadline=1.0)
    with connect(faulty, policy) as api:
        faulty.fault(kind="api-errors", count=1000, code=503)
        start = time.monotonic()
        with pytest.raises(ServerBusy, match=r"failed \(503\).*gave up after \d+ tries") as caught:
            api.list_objects(DAEMONSETS)
        assert time.monotonic() - start < 2.0
        assert caught.value.retryable


def test_forbidden_names_the_missing_permission(fresh_cluster: KubeSim, connect: Callable[..., Cluster]) -> None:
    """A 403 says which verb on which resource in which namespace the ServiceAccount lacks."""
    fresh_cluster.fault(kind="forbid", path="/apis/apps/v1/namespaces/kube-system/daemonsets")
    with connect(fresh_cluster) as api, pytest.raises(Forbidden) as caught:
        api.list_objects(DAEMONSETS, namespace="kube-system")
    assert str(caught.value).startswith(
        "the bot's ServiceAccount (system:serviceaccount:upgradebot:upgradebot) may not list daemonsets.apps "
        'in namespace kube-system: its RBAC lacks the rule {apiGroups: ["apps"], resources: [daemonsets], '
        "verbs: [list]} in its ClusterRole")


def test_lists_are_paginated(cluster: KubeSim, connect: Callable[..., Cluster], kubectl_for) -> None:
    """A list is read a page at a time, following continue tokens to the last page."""
    expected = {(p["metadata"]["namespace"], p["metadata"]["name"]) for p in kubectl_for(cluster).json("get", "pods", "-A")["items"]}
    with connect(cluster) as api:
        before = list_requests(api, "pods")
        got = api.list_objects(PODS, page_size=2, project=lambda p: (p["metadata"]["namespace"], p["metadata"]["name"]))
        pages = list_requests(api, "pods") - before
    assert set(got) == expected and len(got) == len(expected)
    assert pages == -(-len(expected) // 2)


def test_expired_continue_token_restarts_the_list(fresh_cluster: KubeSim, connect: Callable[..., Cluster]) -> None:
    """A continue token that expires mid-list (410) makes the adapter start the list again, once."""
    compacted = []
    projected = []

    def project(pod: dict) -> str:
        if not compacted:  # a write after the list began, then the history compacted past it: 410
            compacted.append(True)
            api.write_json("POST", "/api/v1/namespaces/default/configmaps", action=Action("create", "configmaps"),
                           body={"metadata": {"name": "moved-on"}, "data": {}})
            fresh_cluster.fault(kind="compact")
        projected.append(pod["metadata"]["name"])
        return pod["metadata"]["name"]

    with connect(fresh_cluster) as api:
        names = api.list_objects(PODS, page_size=2, project=project)
        assert len(names) == len(set(names)) == len(api.list_objects(PODS))
        assert len(projected) > len(names), "the list was not started again after the 410"


def test_a_fold_whose_continue_token_expires_starts_again_from_nothing(
        fresh_cluster: KubeSim, connect: Callable[..., Cluster]) -> None:
    """issue 39: folding a list (each pod decoded as ``PodShape`` and added into one value) whose
    continue token expires mid-list starts again from a fresh value: every pod counted once."""
    from runbooks.cluster.decoding import PodShape

    compacted: list[bool] = []

    def add(names: list[str], pod: PodShape) -> None:
        if not compacted:  # a write after the list began, then the history compacted past it: 410
            compacted.append(True)
            api.write_json("POST", "/api/v1/namespaces/default/configmaps", action=Action("create", "configmaps"),
                           body={"metadata": {"name": "moved-on"}, "data": {}})
            fresh_cluster.fault(kind="compact")
        names.append(f"{pod.metadata.namespace}/{pod.metadata.name}" if pod.metadata else "")

    starts: list[list[str]] = []

    def start() -> list[str]:
        starts.append([])
        return starts[-1]

    with connect(fresh_cluster) as api:
        names = api.fold_objects(PODS, start=start, add=add, item=PodShape, page_size=2)
        assert len(starts) == 2 and starts[0], "the list was not started again after the 410"
        assert sorted(names) == sorted(
            f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in api.list_objects(PODS))
        assert len(names) == len(set(names))


def test_wrong_token_is_unauthorized_and_never_echoed(cluster: KubeSim, tmp_path: Path) -> None:
    """Bad credentials give Unauthorized; neither the bad nor the real token appears in the message."""
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    config["users"][0]["user"]["token"] = "not-the-token-0123456789"
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    with Cluster.from_kubeconfig(path) as api, pytest.raises(Unauthorized) as caught:
        api.list_objects(DAEMONSETS)
    message = str(caught.value)
    assert "401" in message and "renew the token" in message
    assert "not-the-token-0123456789" not in message and cluster.token not in message


def test_closed_port_is_unreachable_quickly(tmp_path: Path, cluster: KubeSim) -> None:
    """A server that refuses connections is ClusterUnreachable after a few quick tries."""
    path, _ = unreachable_kubeconfig(cluster.kubeconfig, tmp_path)
    start = time.monotonic()
    with Cluster.from_kubeconfig(path) as api, pytest.raises(ClusterUnreachable, match="cannot reach the API server"):
        api.version()
    assert time.monotonic() - start < 5


def test_named_context_and_unknown_context(cluster: KubeSim, tmp_path: Path) -> None:
    """cluster=<context> picks a context of the kubeconfig; an unknown one lists the contexts there are."""
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    other = {"name": "other", "context": dict(config["contexts"][0]["context"])}
    config["contexts"].append(other)
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    with Cluster.from_kubeconfig(path, context="other") as api:
        assert api.context == "other" and api.version().minor == 31
    with pytest.raises(ClusterConfigError, match=r"no context 'prod' in .*contexts: kubesim, other"):
        Cluster.from_kubeconfig(path, context="prod")
    with pytest.raises(ClusterConfigError, match="missing not found"):
        Cluster.from_kubeconfig(tmp_path / "missing")


def test_pod_log_tail(cluster: KubeSim, connect: Callable[..., Cluster]) -> None:
    """A plugin pod's log is read through the log endpoint, tailed to the lines asked for."""
    with connect(cluster) as api:
        pod = api.list_objects(PODS, namespace="kube-system", label_selector="name=nvidia-device-plugin-ds")[0]
        name = pod["metadata"]["name"]
        log = api.pod_log("kube-system", name)
        assert "Registered device plugin for 'nvidia.com/gpu' with Kubelet" in log
        assert len(api.pod_log("kube-system", name, tail_lines=1).splitlines()) == 1


def test_dra_discovery_per_release(release_cluster: KubeSim, connect: Callable[..., Cluster]) -> None:
    """Claims, classes and slices are read in the newest resource.k8s.io version the release serves."""
    with connect(release_cluster) as api:
        minor = api.version().minor
        apis = api.dra_apis()
    newest = {27: "v1alpha2", 31: "v1alpha3", 32: "v1beta1", 34: "v1"}[minor]
    assert apis.served_versions[0] == newest
    assert apis.chosen["ResourceClaim"].version == newest
    assert ("ResourceClass" if minor <= 30 else "DeviceClass") in apis.chosen
    assert ("ResourceSlice" in apis.chosen) == (minor >= 30)


def test_threads_connecting_at_once_all_get_the_kubeconfigs_certificate(cluster: KubeSim) -> None:
    """The kubernetes client wrote a kubeconfig's embedded CA to a temporary file and
    remembered the file *before* writing it: a second thread loading the same kubeconfig at
    that moment used the empty file (``ssl.SSLError: NO_CERTIFICATE_OR_CRL_FOUND``, seen in
    the crash tests' four scenarios at once, as in a worker's threads). Our own reader keeps the
    CA in memory (issue 63); twelve threads connecting at once, forty times, still all read."""
    failures: list[str] = []

    def connect_and_read(barrier: threading.Barrier) -> None:
        barrier.wait()
        try:
            with Cluster.from_kubeconfig(cluster.kubeconfig, retry=RetryPolicy(attempts=1)) as api:
                api.get(DAEMONSETS, "nvidia-device-plugin-daemonset", "kube-system")
        except Exception as exc:
            failures.append(f"{type(exc).__name__}: {exc}")

    for _ in range(40):
        barrier = threading.Barrier(12)
        threads = [threading.Thread(target=connect_and_read, args=(barrier,)) for _ in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
    assert failures == [], failures[:3]
