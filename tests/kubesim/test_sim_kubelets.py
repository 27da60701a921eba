"""The simulated kubelets: pod lifecycles, image behaviours, device plugins, node faults."""

from __future__ import annotations

import re

from _simkit import (
    DAEMONSETS,
    NODES,
    PODS,
    condition,
    create,
    events,
    get,
    pods_of,
    set_image,
    small,
)

DP_NS, DP_DS, DP_LABEL = "kube-system", "nvidia-device-plugin-daemonset", ("name", "nvidia-device-plugin-ds")
DP_CTR = "nvidia-device-plugin-ctr"
KLOG = re.compile(r"^[IEW]\d{4} \d\d:\d\d:\d\d\.\d{6} {7}1 [a-z_]+\.go:\d+\] ")


def _pod(name: str, image: str, node: str = "cpu-node1", ns: str = "default") -> dict:
    return {"metadata": {"name": name, "namespace": ns},
            "spec": {"nodeName": node, "containers": [{"name": "main", "image": image}]}}


def _gpu(sim, node: str = "gpu-node1") -> tuple[str | None, str | None]:
    st = get(sim, NODES, "", node)["status"]
    return st["capacity"].get("nvidia.com/gpu"), st["allocatable"].get("nvidia.com/gpu")


def _plugin_pod(sim, node: str = "gpu-node1") -> dict:
    return next(p for p in pods_of(sim, DP_NS, *DP_LABEL, alive=True) if p["spec"]["nodeName"] == node)


def test_pod_goes_pending_then_running_and_ready():
    """A bound pod shows ContainerCreating with host/pod IPs, then runs and is Ready within ~2 s."""
    sim = small()
    create(sim, PODS, _pod("web", "registry.example.com/web:1.0"))
    sim.advance(0.7)
    pod = get(sim, PODS, "default", "web")
    assert pod["status"]["phase"] == "Pending"
    assert pod["status"]["containerStatuses"][0]["state"] == {"waiting": {"reason": "ContainerCreating"}}
    assert pod["status"]["hostIP"] == "10.0.0.8" and pod["status"]["podIP"].startswith("10.244.4.")
    assert condition(pod, "PodReadyToStartContainers")["status"] == "True"
    assert condition(pod, "Ready")["reason"] == "ContainersNotReady"
    sim.advance(1.5)
    pod = get(sim, PODS, "default", "web")
    assert pod["status"]["phase"] == "Running"
    assert [c["type"] for c in pod["status"]["conditions"]] == [
        "PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"]
    assert all(c["status"] == "True" for c in pod["status"]["conditions"])
    cs = pod["status"]["containerStatuses"][0]
    assert cs["ready"] and cs["started"] and cs["containerID"].startswith("containerd://")
    msgs = [(e["reason"], e["message"]) for e in sorted(events(sim, name="web"), key=lambda e: e["metadata"]["name"])]
    assert msgs[0] == ("Pulling", 'Pulling image "registry.example.com/web:1.0"')
    assert msgs[1][0] == "Pulled" and msgs[1][1].startswith('Successfully pulled image "registry.example.com/web:1.0" in 1.2s')
    assert msgs[2:] == [("Created", "Created container main"), ("Started", "Started container main")]


def test_release_specific_conditions_and_messages():
    """1.28 has no PodReadyToStartContainers condition; 1.33+ words events 'Created container: x'."""
    old, new = small(28), small(34)
    for sim in (old, new):
        create(sim, PODS, _pod("web", "registry.example.com/web:1.0"))
        sim.advance(3)
    assert condition(get(old, PODS, "default", "web"), "PodReadyToStartContainers") is None
    assert {e["message"] for e in events(new, reason="Created")} == {"Created container: main"}
    assert {e["message"] for e in events(new, reason="Started")} == {"Started container: main"}


def test_graceful_deletion_removes_pod_after_a_second_and_forgets_logs():
    """A deleted pod gets a deletionTimestamp, is removed ~1 s later and its logs are forgotten."""
    sim = small()
    pod = _plugin_pod(sim)
    name = pod["metadata"]["name"]
    assert sim.logs.read(DP_NS, name, DP_CTR)
    sim.store.delete(PODS, DP_NS, name)
    sim.settle()
    assert get(sim, PODS, DP_NS, name)["metadata"]["deletionTimestamp"]
    sim.advance(1.5)
    assert get(sim, PODS, DP_NS, name) is None
    assert sim.logs.read(DP_NS, name, DP_CTR) is None
    assert any(e["message"] == f"Stopping container {DP_CTR}" for e in events(sim, reason="Killing", name=name))


def test_crash_image_crash_loops_with_backoff_events_and_previous_logs():
    """A -crash image restarts, shows CrashLoopBackOff with the real message, BackOff events and --previous logs."""
    sim = small()
    create(sim, PODS, _pod("plugin", "nvcr.io/nvidia/k8s-device-plugin:v0.15.0-crash"))
    sim.advance(30)
    pod = get(sim, PODS, "default", "plugin")
    uid = pod["metadata"]["uid"]
    cs = pod["status"]["containerStatuses"][0]
    assert pod["status"]["phase"] == "Running"
    assert cs["restartCount"] >= 2 and not cs["ready"]
    if "waiting" in cs["state"]:
        assert cs["state"]["waiting"]["reason"] == "CrashLoopBackOff"
        assert re.fullmatch(rf"back-off (10|20)s restarting failed container=main pod=plugin_default\({uid}\)",
                            cs["state"]["waiting"]["message"])
    term = cs["lastState"]["terminated"]
    assert term["exitCode"] == 1 and term["reason"] == "Error" and term["startedAt"] and term["finishedAt"]
    [backoff] = events(sim, reason="BackOff", name="plugin")
    assert backoff["type"] == "Warning"
    assert backoff["message"] == f"Back-off restarting failed container main in pod plugin_default({uid})"
    for previous in (False, True):
        text = sim.logs.read("default", "plugin", "main", previous=previous)
        line = text.splitlines()[-1]
        assert KLOG.match(line) and line.startswith("E")
        assert line.endswith("main.go:132] failed to create FS watcher for /var/lib/kubelet/device-plugins/: too many open files")


def test_crash_backoff_doubles_up_to_five_minutes():
    """The restart back-off grows 10s, 20s, 40s ... and stops at 5m0s."""
    sim = small()
    create(sim, PODS, _pod("plugin", "registry.example.com/agent:1.0-crash"))
    seen = set()
    for _ in range(200):
        sim.advance(5)
        state = get(sim, PODS, "default", "plugin")["status"]["containerStatuses"][0]["state"]
        if "waiting" in state:
            seen.add(state["waiting"]["message"].split()[1])
    assert {"10s", "20s", "40s", "1m20s", "2m40s", "5m0s"} <= seen
    assert not seen - {"10s", "20s", "40s", "1m20s", "2m40s", "5m0s"}


def test_registered_device_plugin_logs_and_node_resources():
    """A healthy plugin logs the v0.14 registration lines and the node advertises its 8 GPUs."""
    sim = small()
    lines = sim.logs.read(DP_NS, _plugin_pod(sim)["metadata"]["name"], DP_CTR).splitlines()
    assert "Starting to serve 'nvidia.com/gpu' on /var/lib/kubelet/device-plugins/nvidia-gpu.sock" in lines[-2]
    assert lines[-1].endswith("server.go:125] Registered device plugin for 'nvidia.com/gpu' with Kubelet")
    assert KLOG.match(lines[-1])
    assert _gpu(sim) == ("8", "8")
    assert _gpu(sim, "cpu-node1") == (None, None)


def test_silent_image_is_ready_but_never_registers():
    """A -silent plugin is Running/Ready, logs 'No devices found', and allocatable drops to 0 while capacity stays."""
    sim = small()
    set_image(sim, DP_NS, DP_DS, "nvcr.io/nvidia/k8s-device-plugin:v0.15.0-silent")
    sim.advance(30)
    for node in ("gpu-node1", "gpu-node2", "gpu-node3"):
        assert _gpu(sim, node) == ("8", "0")
    pod = _plugin_pod(sim)
    assert condition(pod, "Ready")["status"] == "True"
    assert sim.logs.read(DP_NS, pod["metadata"]["name"], DP_CTR).splitlines()[-1].endswith(
        "main.go:308] No devices found. Waiting indefinitely.")  # v0.15.0's line
    assert get(sim, DAEMONSETS, DP_NS, DP_DS)["status"]["numberAvailable"] == 3


def test_crashing_plugin_leaves_allocatable_zero():
    """While the plugin crash-loops on a node its nvidia.com/gpu allocatable is 0, capacity 8."""
    sim = small()
    set_image(sim, DP_NS, DP_DS, "nvcr.io/nvidia/k8s-device-plugin:v0.15.0-crash")
    sim.advance(30)
    assert _gpu(sim, "gpu-node1") == ("8", "0")
    assert _gpu(sim, "gpu-node2") == ("8", "8")


def test_slow_image_is_ready_only_after_180_seconds():
    """A -slow image stays ContainerCreating and not ready for 180 s, then becomes healthy."""
    sim = small()
    create(sim, PODS, _pod("slow", "registry.example.com/agent:1.0-slow"))
    sim.advance(170)
    pod = get(sim, PODS, "default", "slow")
    assert pod["status"]["containerStatuses"][0]["state"] == {"waiting": {"reason": "ContainerCreating"}}
    assert condition(pod, "Ready")["status"] == "False"
    sim.advance(15)
    pod = get(sim, PODS, "default", "slow")
    assert condition(pod, "Ready")["status"] == "True"
    pulled = events(sim, reason="Pulled", name="slow")[0]["message"]
    assert " in 3m0s (3m0s including waiting)" in pulled


def test_deleted_plugin_zeroes_allocatable_until_its_replacement_registers():
    """Deleting the plugin pod drops allocatable to 0; the DaemonSet's new pod registers it back."""
    sim = small()
    sim.store.delete(PODS, DP_NS, _plugin_pod(sim)["metadata"]["name"])
    sim.settle()
    assert _gpu(sim) == ("8", "0")
    sim.advance(5)
    assert _gpu(sim) == ("8", "8")


def test_kubelet_restart_loses_and_regains_registration():
    """A kubelet restart zeroes allocatable, records 'Starting kubelet.', and the plugin re-registers ~2 s later."""
    sim = small()
    name = _plugin_pod(sim)["metadata"]["name"]
    sim.controllers["kubelet"].restart_kubelet("gpu-node1")
    sim.settle()
    assert _gpu(sim) == ("8", "0")
    [started] = events(sim, reason="Starting", name="gpu-node1")
    assert started["message"] == "Starting kubelet." and started["involvedObject"]["kind"] == "Node"
    sim.advance(3)
    assert _gpu(sim) == ("8", "8")
    log = sim.logs.read(DP_NS, name, DP_CTR)
    assert "inotify: /var/lib/kubelet/device-plugins/kubelet.sock created, restarting." in log
    assert log.splitlines()[-1].endswith("Registered device plugin for 'nvidia.com/gpu' with Kubelet")
    assert get(sim, PODS, DP_NS, name)["status"]["containerStatuses"][0]["restartCount"] == 0


def test_node_not_ready_and_back():
    """A node that stops reporting goes Unknown with unreachable taints and NotReady pods; recovery reverses it."""
    sim = small()
    kubelet = sim.controllers["kubelet"]
    kubelet.set_node_ready("gpu-node2", False)
    sim.settle()
    node = get(sim, NODES, "", "gpu-node2")
    ready = condition(node, "Ready")
    assert ready["status"] == "Unknown" and ready["message"] == "Kubelet stopped posting node status."
    assert {(t["key"], t["effect"]) for t in node["spec"]["taints"]} == {
        ("node.kubernetes.io/unreachable", "NoSchedule"), ("node.kubernetes.io/unreachable", "NoExecute")}
    assert events(sim, reason="NodeNotReady", name="gpu-node2")[0]["message"] == "Node gpu-node2 status is now: NodeNotReady"
    assert condition(get(sim, PODS, "ml-team", "trainer-1"), "Ready")["status"] == "False"
    assert events(sim, reason="NodeNotReady", name="trainer-1")[0]["message"] == "Node is not ready"
    kubelet.set_node_ready("gpu-node2", True)
    sim.settle()
    node = get(sim, NODES, "", "gpu-node2")
    assert condition(node, "Ready")["status"] == "True" and "taints" not in node["spec"]
    assert condition(get(sim, PODS, "ml-team", "trainer-1"), "Ready")["status"] == "True"


def test_pods_on_unreachable_node_stay_terminating_until_it_returns():
    """A pod deleted on a node that does not report stays Terminating; it goes once the node is back."""
    sim = small()
    kubelet = sim.controllers["kubelet"]
    kubelet.set_node_ready("gpu-node1", False)
    sim.settle()
    sim.store.delete(PODS, "ml-team", "trainer-0")
    sim.advance(30)
    assert get(sim, PODS, "ml-team", "trainer-0") is not None
    kubelet.set_node_ready("gpu-node1", True)
    sim.advance(2)
    assert get(sim, PODS, "ml-team", "trainer-0") is None


def test_pods_of_a_deleted_node_are_garbage_collected():
    """Pods bound to a node that is deleted are removed after PodGC's 40 s quarantine."""
    sim = small()
    sim.store.delete(NODES, "", "gpu-node1")
    sim.advance(30)
    assert get(sim, PODS, "ml-team", "trainer-0") is not None
    sim.advance(15)
    assert get(sim, PODS, "ml-team", "trainer-0") is None
    assert not [p for p in sim.store.list(PODS) if p["spec"].get("nodeName") == "gpu-node1"]
