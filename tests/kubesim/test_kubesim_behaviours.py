"""What an image does in kubesim, observed through the official kubernetes client over HTTPS."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, config

from kubesim import KubeSim
from tests.support import TEST_BUILDS, Kubectl

NS = "kube-system"
DS = "nvidia-device-plugin-daemonset"
CTR = "nvidia-device-plugin-ctr"
REPO = "nvcr.io/nvidia/k8s-device-plugin"


@pytest.fixture
def sim() -> Iterator[KubeSim]:
    with KubeSim(pushed=TEST_BUILDS, scenario="gpu-small", k8s_version="1.31") as s:
        yield s


def apis(sim: KubeSim) -> tuple[client.CoreV1Api, client.AppsV1Api]:
    api = config.new_client_from_config(config_file=str(sim.kubeconfig))
    return client.CoreV1Api(api), client.AppsV1Api(api)


def node(core: client.CoreV1Api, name: str) -> dict[str, Any]:
    """A node read through the client's typed model (as a real 1.31+ server sends it, with
    the deprecated ``kubeProxyVersion`` present as ``""``), back in the API's own field names."""
    return core.api_client.sanitize_for_serialization(core.read_node(name))


def set_image(apps: client.AppsV1Api, image: str) -> None:
    apps.patch_namespaced_daemon_set(DS, NS, {"spec": {"template": {"spec": {"containers": [
        {"name": CTR, "image": image}]}}}})


def plugin_pod(core: client.CoreV1Api, node_name: str) -> client.V1Pod:
    pods = core.list_namespaced_pod(NS, label_selector="name=nvidia-device-plugin-ds",
                                    field_selector=f"spec.nodeName={node_name}").items
    live = [p for p in pods if p.metadata.deletion_timestamp is None]
    assert len(live) == 1, [p.metadata.name for p in pods]
    return live[0]


def settle(sim: KubeSim, seconds: str = "30s", rounds: int = 1) -> None:
    for _ in range(rounds):
        sim.advance(seconds)
    time.sleep(0.05)


def test_healthy_plugin_registers_and_node_offers_gpus(sim: KubeSim) -> None:
    """A healthy plugin is Running/Ready, logs its registration, and the node offers 8 GPUs."""
    core, _ = apis(sim)
    pod = plugin_pod(core, "gpu-node1")
    assert pod.status.phase == "Running" and pod.status.container_statuses[0].ready
    # client 36 returns str(bytes) for text bodies: read logs raw, as the adapter does
    log = core.read_namespaced_pod_log(pod.metadata.name, NS, _preload_content=False).data.decode()
    assert "Starting to serve 'nvidia.com/gpu' on /var/lib/kubelet/device-plugins/nvidia-gpu.sock" in log
    assert "Registered device plugin for 'nvidia.com/gpu' with Kubelet" in log
    status = node(core, "gpu-node1")["status"]
    assert status["capacity"]["nvidia.com/gpu"] == "8" == status["allocatable"]["nvidia.com/gpu"]


def test_another_vendors_plugin_logs_the_generic_registration(sim: KubeSim) -> None:
    """A device-plugin image that is not NVIDIA's registers too, logging the generic line the
    plugin examples of Kubernetes print, and the node offers its GPUs; kubectl logs shows it."""
    core, apps = apis(sim)
    set_image(apps, "registry.example.com/acme/gpu-device-plugin:v2.0.0")
    settle(sim, "30s", rounds=6)
    pod = plugin_pod(core, "gpu-node1")
    log = core.read_namespaced_pod_log(pod.metadata.name, NS, _preload_content=False).data.decode()
    assert "Registered device plugin with Kubelet" in log and "for 'nvidia.com/gpu'" not in log
    status = node(core, "gpu-node1")["status"]
    assert status["allocatable"]["nvidia.com/gpu"] == "8"
    assert "Registered device plugin with Kubelet" in Kubectl(sim.kubeconfig)("-n", NS, "logs", pod.metadata.name)


def test_crash_tag_crash_loops(sim: KubeSim) -> None:
    """-crash: CrashLoopBackOff, a growing restartCount, BackOff events, v0.15's FS watcher failure."""
    core, apps = apis(sim)
    set_image(apps, f"{REPO}:v0.15.0-crash")
    settle(sim, "60s", rounds=5)
    pod = plugin_pod(core, "gpu-node1")
    status = pod.status.container_statuses[0]
    assert status.image.endswith("-crash")
    assert status.restart_count >= 2 and not status.ready
    assert status.state.waiting and status.state.waiting.reason == "CrashLoopBackOff"
    assert status.last_state.terminated.exit_code == 1
    previous = core.read_namespaced_pod_log(pod.metadata.name, NS, previous=True, _preload_content=False).data.decode()
    assert previous.rstrip().endswith(
        "main.go:132] failed to create FS watcher for /var/lib/kubelet/device-plugins/: too many open files"), previous
    events = core.list_namespaced_event(NS, field_selector=f"involvedObject.name={pod.metadata.name},reason=BackOff").items
    assert events and events[0].type == "Warning" and "Back-off restarting failed container" in events[0].message
    assert node(core, "gpu-node1")["status"]["allocatable"]["nvidia.com/gpu"] == "0"


def test_silent_tag_runs_but_never_registers(sim: KubeSim) -> None:
    """-silent: Running and Ready, yet capacity stays 8 while allocatable drops to 0."""
    core, apps = apis(sim)
    set_image(apps, f"{REPO}:v0.15.0-silent")
    settle(sim, "30s", rounds=6)
    for name in ("gpu-node1", "gpu-node2", "gpu-node3"):
        pod = plugin_pod(core, name)
        assert pod.spec.containers[0].image.endswith("-silent")
        assert pod.status.phase == "Running" and pod.status.container_statuses[0].ready
        log = core.read_namespaced_pod_log(pod.metadata.name, NS, _preload_content=False).data.decode()
        assert "Registered device plugin" not in log
        status = node(core, name)["status"]
        assert status["capacity"]["nvidia.com/gpu"] == "8" and status["allocatable"]["nvidia.com/gpu"] == "0"


def test_slow_tag_is_ready_only_after_minutes(sim: KubeSim) -> None:
    """-slow: the new pod is not Ready for about three minutes, then it is."""
    core, apps = apis(sim)
    apps.patch_namespaced_daemon_set(DS, NS, {"spec": {"updateStrategy": {"type": "OnDelete"}}})
    set_image(apps, f"{REPO}:v0.15.0-slow")
    old = plugin_pod(core, "gpu-node1")
    core.delete_namespaced_pod(old.metadata.name, NS)
    settle(sim, "60s")
    pod = plugin_pod(core, "gpu-node1")
    assert pod.spec.containers[0].image.endswith("-slow")
    assert not (pod.status.container_statuses or [client.V1ContainerStatus(name="x", image="x", image_id="",
                                                                          ready=False, restart_count=0)])[0].ready
    settle(sim, "60s", rounds=3)
    pod = plugin_pod(core, "gpu-node1")
    assert pod.status.container_statuses[0].ready and pod.status.phase == "Running"


def test_insufficient_gpus_fail_scheduling(sim: KubeSim) -> None:
    """A pod asking for more GPUs than are free gets FailedScheduling … Insufficient nvidia.com/gpu."""
    core, _ = apis(sim)
    core.create_namespaced_pod("ml-team", {
        "metadata": {"name": "too-big"},
        "spec": {"containers": [{"name": "train", "image": "pytorch/pytorch:2.4.0",
                                 "resources": {"limits": {"nvidia.com/gpu": "16"}}}]},
    })
    settle(sim, "5s")
    pod = core.read_namespaced_pod("too-big", "ml-team")
    assert pod.status.phase == "Pending" and pod.spec.node_name is None
    events = core.list_namespaced_event("ml-team", field_selector="involvedObject.name=too-big,reason=FailedScheduling").items
    assert events and events[0].type == "Warning"
    assert events[0].message.startswith("0/4 nodes are available: ")
    assert "Insufficient nvidia.com/gpu." in events[0].message


def test_dra_pod_without_its_driver_fails_to_prepare(sim: KubeSim) -> None:
    """With the DRA kubelet plugin gone, a pod sharing an allocated claim gets FailedPrepareDynamicResources."""
    core, apps = apis(sim)
    apps.delete_namespaced_daemon_set("dra-example-driver-kubeletplugin", "dra-example-driver")
    settle(sim, "10s")
    core.create_namespaced_pod("ml-team", {
        "metadata": {"name": "needs-dra"},
        "spec": {"containers": [{"name": "c", "image": "ubuntu:22.04", "resources": {"claims": [{"name": "gpu"}]}}],
                 "resourceClaims": [{"name": "gpu", "resourceClaimName": "shared-gpu"}]},
    })
    settle(sim, "20s")
    events = core.list_namespaced_event(
        "ml-team", field_selector="involvedObject.name=needs-dra,reason=FailedPrepareDynamicResources").items
    pod = core.read_namespaced_pod("needs-dra", "ml-team")
    assert pod.status.phase == "Pending"
    assert events and events[0].type == "Warning" and "gpu.example.com" in events[0].message


def test_events_expire_after_the_event_ttl() -> None:
    """With --event-ttl 1h an event is listed at 59 minutes and gone at 61, as on a real API server."""
    with KubeSim(pushed=TEST_BUILDS, scenario="gpu-small", k8s_version="1.31", event_ttl="1h") as s:
        core, _ = apis(s)
        s.fault(kind="node-not-ready", node="gpu-node2")
        s.advance("50s")  # the node lifecycle controller's grace on the stopped heartbeat
        reasons = {e.reason for e in core.list_event_for_all_namespaces().items}
        assert "NodeNotReady" in reasons
        s.fault(kind="node-ready", node="gpu-node2")
        s.advance("59m")
        assert any(e.reason == "NodeNotReady" for e in core.list_event_for_all_namespaces().items)
        s.advance("2m")
        assert not any(e.reason == "NodeNotReady" for e in core.list_event_for_all_namespaces().items)
