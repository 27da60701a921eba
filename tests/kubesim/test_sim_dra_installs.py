"""The DRA drivers' own charts as kubesim installs them (kubesim.dra_installs): the example driver v0.2.0
and NVIDIA's DRA driver v25.8.1, each object as kubesim/manifests/ holds it, settled; slices published per
node by the pod running there (owned by the Node, as the kubeletplugin helper sets them); each container's
log lines as its source writes them at the chart's verbosity."""

from __future__ import annotations

import pytest
from _simkit import DAEMONSETS, PODS, create, events, get

from kubesim import dra
from kubesim.clock import parse_time
from kubesim.dra_installs import EXAMPLE_FILE, NVIDIA_FILE
from kubesim.installs import manifest
from kubesim.scenarios import SCENARIOS, build
from tests.support import push_test_builds

EXAMPLE_NS, EXAMPLE_DS = "dra-example-driver", "dra-example-driver-kubeletplugin"
NVIDIA_NS, NVIDIA_DS = "nvidia-dra-driver-gpu", "nvidia-dra-driver-gpu-kubelet-plugin"
GPU_NODES = ["gpu-node1", "gpu-node2", "gpu-node3"]
ALL_NODES = [*GPU_NODES, "cpu-node1"]
SA, RBAC = ("", "serviceaccounts"), "rbac.authorization.k8s.io"
NVIDIA_CLASSES = ["compute-domain-daemon.nvidia.com", "compute-domain-default-channel.nvidia.com",
                  "gpu.nvidia.com", "mig.nvidia.com"]


def _live(sim, ns: str) -> list[dict]:
    return [p for p in sim.store.list(PODS, ns) if not p["metadata"].get("deletionTimestamp")]


def _ready(pod: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions") or [])


def _slices(sim, driver: str) -> dict[str, dict]:
    out = {}
    for obj in sim.store.list(dra.SLICES):
        node, drv = dra.slice_node_driver(obj)
        if drv == driver:
            assert node not in out, f"two slices of {driver} for {node}"
            out[node] = obj
    return out


def _attrs(device: dict) -> dict:
    return (device.get("basic") or device)["attributes"]


def _set_image(sim, ns: str, ds: str, container: str, image: str) -> None:
    def apply(obj: dict) -> None:
        obj["spec"]["updateStrategy"] = {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "100%"}}
        for ctr in obj["spec"]["template"]["spec"]["containers"]:
            if ctr["name"] == container:
                ctr["image"] = image

    sim.store.mutate(DAEMONSETS, ns, ds, apply)
    sim.advance(20)


def test_both_scenarios_are_named_for_the_bot():
    assert {"dra-example-driver", "nvidia-dra-driver"} <= set(SCENARIOS)


# ------------------------------------------------------------------ the example driver
@pytest.fixture(scope="module")
def example():
    return push_test_builds(build(scenario="dra-example-driver", minor=32))


def test_example_driver_runs_as_its_chart_renders_it(example):
    """The chart's DaemonSet (no nodeSelector: on every node), its ServiceAccount, RBAC and class, as the file holds them."""
    ds = get(example, DAEMONSETS, EXAMPLE_NS, EXAMPLE_DS)
    want = next(o for o in manifest(EXAMPLE_FILE) if o["kind"] == "DaemonSet")
    [ctr] = ds["spec"]["template"]["spec"]["containers"]
    assert ctr["image"] == "registry.k8s.io/dra-example-driver/dra-example-driver:v0.2.0"
    assert ctr["command"] == ["dra-example-kubeletplugin"] and "args" not in ctr
    assert ds["spec"]["selector"] == want["spec"]["selector"]
    assert ds["spec"]["template"]["spec"]["serviceAccountName"] == "dra-example-driver-service-account"
    assert get(example, SA, EXAMPLE_NS, "dra-example-driver-service-account") is not None
    assert get(example, (RBAC, "clusterroles"), "", "dra-example-driver-role") is not None
    assert get(example, (RBAC, "clusterrolebindings"), "", "dra-example-driver-role-binding") is not None
    klass = get(example, dra.DEVICE_CLASSES, "", "gpu.example.com")
    assert klass["spec"]["selectors"] == [{"cel": {"expression": "device.driver == 'gpu.example.com'"}}]
    pods = _live(example, EXAMPLE_NS)
    assert sorted(p["spec"]["nodeName"] for p in pods) == sorted(ALL_NODES)
    assert all(_ready(p) for p in pods)
    assert ds["status"]["numberReady"] == len(ALL_NODES)


def test_example_driver_publishes_its_simulated_devices_per_node_owned_by_the_node(example):
    """NUM_DEVICES=8 on every node the plugin runs on (the example driver pretends its GPUs), the
    attributes of cmd/dra-example-kubeletplugin/discovery.go, a slice owned by its Node."""
    slices = _slices(example, "gpu.example.com")
    assert sorted(slices) == sorted(ALL_NODES)
    for node, obj in slices.items():
        node_obj = get(example, ("", "nodes"), "", node)
        assert obj["metadata"]["generateName"] == f"{node}-gpu.example.com-"
        assert obj["metadata"]["ownerReferences"] == [{"apiVersion": "v1", "kind": "Node", "name": node,
                                                       "uid": node_obj["metadata"]["uid"], "controller": True}]
        assert obj["spec"]["pool"] == {"name": node, "generation": 0, "resourceSliceCount": 1}
        devices = obj["spec"]["devices"]
        assert [d["name"] for d in devices] == [f"gpu-{i}" for i in range(8)]
        assert set(_attrs(devices[0])) == {"index", "uuid", "model", "driverVersion"}


def test_example_driver_logs_at_verbosity_zero_say_nothing_of_registration(example):
    """The chart sets no -v: at klog's default 0 only health.go's three lines are written (the
    kubeletplugin helper's "GRPC server started" is V(3)); nobody logs registered=true."""
    for pod in _live(example, EXAMPLE_NS):
        log = example.logs.read(EXAMPLE_NS, pod["metadata"]["name"], "plugin")
        lines = log.splitlines()
        assert len(lines) == 3, log
        assert lines[0].endswith('health.go:70] "connecting to registration socket" '
                                 'path="unix:///var/lib/kubelet/plugins_registry/gpu.example.com-reg.sock"')
        assert lines[1].endswith('health.go:83] "connecting to DRA socket" '
                                 'path="unix:///var/lib/kubelet/plugins/gpu.example.com/dra.sock"')
        assert lines[2].endswith('health.go:103] "starting healthcheck service" addr="[::]:51515"')
        assert "registered=true" not in log and "GRPC server started" not in log


def test_example_driver_needs_the_charts_kubernetes():
    with pytest.raises(ValueError, match=r">=1\.32\.0-0"):
        build(scenario="dra-example-driver", minor=31)


def test_a_new_plugin_pod_republishes_its_nodes_slices():
    """The pod running on a node publishes that node's slices: its pod deleted, they go; the
    DaemonSet's next pod publishes new ones, created once it runs."""
    sim = push_test_builds(build(scenario="dra-example-driver", minor=34))
    before = _slices(sim, "gpu.example.com")["gpu-node2"]
    old = next(p for p in _live(sim, EXAMPLE_NS) if p["spec"]["nodeName"] == "gpu-node2")
    sim.store.delete(PODS, EXAMPLE_NS, old["metadata"]["name"])
    sim.advance(20)
    now = _slices(sim, "gpu.example.com")["gpu-node2"]
    assert now["metadata"]["name"] != before["metadata"]["name"]
    assert get(sim, dra.SLICES, "", before["metadata"]["name"]) is None
    new = next(p for p in _live(sim, EXAMPLE_NS) if p["spec"]["nodeName"] == "gpu-node2")
    started = new["status"]["containerStatuses"][0]["state"]["running"]["startedAt"]
    assert parse_time(now["metadata"]["creationTimestamp"]) >= parse_time(started)


def test_a_noalloc_build_of_the_example_driver_registers_yet_allocates_nothing():
    sim = push_test_builds(build(scenario="dra-example-driver", minor=34))
    _set_image(sim, EXAMPLE_NS, EXAMPLE_DS, "plugin", "registry.k8s.io/dra-example-driver/dra-example-driver:v0.2.0-noalloc")
    pods = _live(sim, EXAMPLE_NS)
    assert pods and all(p["status"]["phase"] == "Running" for p in pods)
    assert all(s["spec"]["pool"]["resourceSliceCount"] == 2 for s in _slices(sim, "gpu.example.com").values())
    create(sim, dra.TEMPLATES, {"metadata": {"name": "one-gpu", "namespace": "default"},
                                "spec": {"spec": dra.claim_spec(34)}})
    create(sim, PODS, {"metadata": {"name": "job", "namespace": "default"}, "spec": {
        "containers": [{"name": "main", "image": "registry.example.com/ml/infer:1.0",
                        "resources": {"claims": [{"name": "gpu"}]}}],
        "resourceClaims": [dra.pod_claim_ref(34, "gpu", template="one-gpu")]}})
    sim.advance(5)
    [ev] = events(sim, reason="FailedScheduling", name="job")
    assert "cannot allocate all claims" in ev["message"]


# ------------------------------------------------------------------ NVIDIA's DRA driver
@pytest.fixture(scope="module")
def nvidia():
    return push_test_builds(build(scenario="nvidia-dra-driver", minor=34))


def test_nvidia_driver_runs_both_kubelet_plugins_in_one_daemonset(nvidia):
    ds = get(nvidia, DAEMONSETS, NVIDIA_NS, NVIDIA_DS)
    want = next(o for o in manifest(NVIDIA_FILE) if o["kind"] == "DaemonSet")
    spec = ds["spec"]["template"]["spec"]
    assert ds["spec"]["selector"] == want["spec"]["selector"]
    assert spec["affinity"] == want["spec"]["template"]["spec"]["affinity"]
    assert [c["name"] for c in spec["containers"]] == ["compute-domains", "gpus"]
    assert [c["name"] for c in spec["initContainers"]] == ["init-container"]
    assert {c["image"] for c in spec["containers"]} == {"nvcr.io/nvidia/k8s-dra-driver-gpu:v25.8.1"}
    assert spec["containers"][1]["args"][0].endswith("gpu-kubelet-plugin -v $(LOG_VERBOSITY)")
    assert spec["serviceAccountName"] == "nvidia-dra-driver-gpu-service-account-kubeletplugin"
    pods = _live(nvidia, NVIDIA_NS)
    plugin = [p for p in pods if p["metadata"]["name"].startswith(NVIDIA_DS)]
    assert sorted(p["spec"]["nodeName"] for p in plugin) == GPU_NODES  # the chart's nodeAffinity: GPU nodes
    assert all(_ready(p) for p in pods)
    controller = [p for p in pods if p["metadata"]["name"].startswith("nvidia-dra-driver-gpu-controller-")]
    assert [p["spec"]["nodeName"] for p in controller] == ["control-plane1"]
    classes = {c["metadata"]["name"]: c for c in nvidia.store.list(dra.DEVICE_CLASSES)}
    assert sorted(classes) == NVIDIA_CLASSES
    assert classes["gpu.nvidia.com"]["spec"]["selectors"] == [{"cel": {"expression":
        "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"}}]


def test_nvidia_driver_publishes_gpus_with_nvidias_attributes_and_compute_domain_devices(nvidia):
    """Per GPU node: a gpu.nvidia.com slice of gpu-0..7 with the attributes of cmd/gpu-kubelet-plugin/deviceinfo.go
    (as NVML reports an H100 on driver 570.172.08), and a compute-domain.nvidia.com slice of channel-0 and daemon-0."""
    gpus, domains = _slices(nvidia, "gpu.nvidia.com"), _slices(nvidia, "compute-domain.nvidia.com")
    assert sorted(gpus) == sorted(domains) == GPU_NODES
    for node in GPU_NODES:
        uid = get(nvidia, ("", "nodes"), "", node)["metadata"]["uid"]
        for obj in (gpus[node], domains[node]):
            assert obj["metadata"]["ownerReferences"][0] == {"apiVersion": "v1", "kind": "Node", "name": node,
                                                             "uid": uid, "controller": True}
        devices = gpus[node]["spec"]["devices"]
        assert [d["name"] for d in devices] == [f"gpu-{i}" for i in range(8)]
        attrs = devices[0]["attributes"]
        assert set(attrs) == {"type", "uuid", "productName", "brand", "architecture", "cudaComputeCapability",
                              "driverVersion", "cudaDriverVersion", "pcieBusID", "resource.kubernetes.io/pcieRoot"}
        assert attrs["type"] == {"string": "gpu"} and attrs["uuid"]["string"].startswith("GPU-")
        assert attrs["productName"] == {"string": "NVIDIA H100 80GB HBM3"}
        assert attrs["architecture"] == {"string": "Hopper"} and attrs["brand"] == {"string": "Nvidia"}
        assert attrs["driverVersion"] == {"version": "570.172.8"}
        assert attrs["cudaDriverVersion"] == {"version": "12.8.0"}
        assert attrs["cudaComputeCapability"] == {"version": "9.0.0"}
        assert devices[0]["capacity"] == {"memory": {"value": "81559Mi"}}
        assert [(d["name"], d["attributes"]) for d in domains[node]["spec"]["devices"]] == [
            ("channel-0", {"type": {"string": "channel"}, "id": {"int": 0}}),
            ("daemon-0", {"type": {"string": "daemon"}, "id": {"int": 0}})]


def test_nvidia_driver_logs_at_the_charts_verbosity_four(nvidia):
    """logVerbosity "4": each container's V(0) lines and the kubeletplugin helper's V(3) lines."""
    pod = next(p for p in _live(nvidia, NVIDIA_NS) if p["metadata"]["name"].startswith(NVIDIA_DS))
    name = pod["metadata"]["name"]
    gpus = nvidia.logs.read(NVIDIA_NS, name, "gpus")
    assert "nvlib.go:132] Adding device gpu-0 to allocatable devices" in gpus
    assert "device_state.go:71] using devRoot=/driver-root" in gpus
    assert ('nonblockinggrpcserver.go:90] "GRPC server started" logger="registrar" '
            'endpoint="/var/lib/kubelet/plugins_registry/gpu.nvidia.com-reg.sock"') in gpus
    assert "health.go:100] starting healthcheck service at [::]:51516" in gpus
    domains = nvidia.logs.read(NVIDIA_NS, name, "compute-domains")
    assert "device_state.go:687] Driver version validation passed: 570.172.8 >= 570.158.1" in domains
    assert "no-clique fallback: fabric not attached (device 0/GPU-" in domains
    assert 'endpoint="/var/lib/kubelet/plugins_registry/compute-domain.nvidia.com-reg.sock"' in domains
    assert "registered=true" not in gpus + domains


def test_nvidia_driver_needs_the_charts_kubernetes():
    with pytest.raises(ValueError, match=r">=1\.32\.0-0"):
        build(scenario="nvidia-dra-driver", minor=31)


def test_a_crashing_gpus_container_takes_only_its_own_driver_away():
    """The gpus container on a build that crashes: gpu.nvidia.com's slices go, compute-domain.nvidia.com's stay."""
    sim = push_test_builds(build(scenario="nvidia-dra-driver", minor=34))
    domains = {n: s["metadata"]["name"] for n, s in _slices(sim, "compute-domain.nvidia.com").items()}
    _set_image(sim, NVIDIA_NS, NVIDIA_DS, "gpus", "nvcr.io/nvidia/k8s-dra-driver-gpu:v25.8.1-crash")
    assert _slices(sim, "gpu.nvidia.com") == {}
    assert sorted(_slices(sim, "compute-domain.nvidia.com")) == GPU_NODES
    assert {n: s["metadata"]["name"] for n, s in _slices(sim, "compute-domain.nvidia.com").items()} != domains


def test_the_cuda_sample_gets_a_gpu_from_nvidias_class():
    """A claim on gpu.nvidia.com is allocated on a GPU node and prepared by the gpus plugin: Test PASSED."""
    sim = push_test_builds(build(scenario="nvidia-dra-driver", minor=34))
    create(sim, dra.TEMPLATES, {"metadata": {"name": "one-gpu", "namespace": "default"},
                                "spec": {"spec": dra.claim_spec(34, class_name="gpu.nvidia.com")}})
    create(sim, PODS, {"metadata": {"name": "smoke", "namespace": "default"}, "spec": {
        "restartPolicy": "Never",
        "containers": [{"name": "main", "image": "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0",
                        "resources": {"claims": [{"name": "gpu"}]}}],
        "resourceClaims": [dra.pod_claim_ref(34, "gpu", template="one-gpu")]}})
    sim.advance(10)
    pod = get(sim, PODS, "default", "smoke")
    assert pod["status"]["phase"] == "Succeeded" and pod["spec"]["nodeName"] in GPU_NODES
    assert "Test PASSED" in sim.logs.read("default", "smoke", "main")


@pytest.mark.parametrize("scenario", ["dra-example-driver", "nvidia-dra-driver"])
def test_no_node_reports_nvidia_gpu_where_no_device_plugin_ever_registered(scenario):
    """The kubelet reports an extended resource only from a registered device plugin (0 once it is
    gone): neither chart runs one, so no node reports nvidia.com/gpu; the GPUs are DRA devices."""
    sim = push_test_builds(build(scenario=scenario, minor=34))
    sim.advance(20)
    for node in sim.store.list(("", "nodes"), ""):
        status = node["status"]
        assert "nvidia.com/gpu" not in status["capacity"] and "nvidia.com/gpu" not in status["allocatable"], node


@pytest.mark.parametrize(("scenario", "release"), [("dra-example-driver", "dra-example-driver"),
                                                   ("nvidia-dra-driver", "nvidia-dra-driver-gpu")])
def test_every_object_of_the_chart_carries_its_helm_release(scenario, release):
    """``helm install`` writes the release on everything it creates (helm's pkg/action/install.go visits
    the release's resources with setMetadataVisitor, pkg/action/validate.go: the managed-by label and
    the meta.helm.sh/release-name and release-namespace annotations); the DaemonSet's pods do not get them."""
    from kubesim.dra_installs import FILES, KINDS, NAMESPACES

    sim = push_test_builds(build(scenario=scenario, minor=34))
    rendered = manifest(FILES[scenario])
    assert rendered
    for obj in rendered:
        kind = KINDS.get(obj["kind"], DAEMONSETS if obj["kind"] == "DaemonSet" else None)
        namespace = "" if obj["kind"] in ("ClusterRole", "ClusterRoleBinding", "DeviceClass") else NAMESPACES[scenario]
        stored = get(sim, kind, namespace, obj["metadata"]["name"])
        assert stored["metadata"]["annotations"]["meta.helm.sh/release-name"] == release, stored["metadata"]
        assert stored["metadata"]["annotations"]["meta.helm.sh/release-namespace"] == NAMESPACES[scenario]
        assert stored["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
    for pod in _live(sim, NAMESPACES[scenario]):
        assert "meta.helm.sh/release-name" not in (pod["metadata"].get("annotations") or {})
