"""A DRA driver's registration seen in the API, and the smoke test's device class chosen by what
its selectors ask (issue 59), on kubesim's gpu-small (the example driver, gpu.example.com).

The example driver's chart runs it at verbosity 0, where no registration line is logged: its
ResourceSlices are the proof, so a driver whose log says nothing readable still passes
``plugin-registered``; a ``-noalloc`` build (an incomplete pool) fails it, naming the pool. The
classes planted here are NVIDIA-like (a ``type == 'mig'`` class of the driver sorted first by
name, as ``compute-domain-daemon.nvidia.com`` is before ``gpu.nvidia.com``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from kubesim import KubeSim
from runbooks.daemonset.steps import DaemonSetSteps
from runbooks.daemonset.verifying import verify
from runbooks.engine.steps import CheckStatus
from runbooks.inventory import Inventory
from tests.integration.stepkit import FAST, SPEED, harness
from tests.support import TEST_BUILDS, Kubectl

STEPS = DaemonSetSteps()
DRA_NS, DRA_DS = "dra-example-driver", "dra-example-driver-kubeletplugin"
DRA_NEW = "registry.k8s.io/dra-example-driver/dra-example-driver:v0.2.0"
SAMPLE = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0"
MIG = """apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: a-mig.example.com}
spec:
  selectors:
  - cel: {expression: "device.driver == 'gpu.example.com' && device.attributes['gpu.example.com'].type == 'mig'"}
"""
TWIN = """apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: b-gpu.example.com}
spec:
  selectors:
  - cel: {expression: "device.driver == 'gpu.example.com'"}
"""


def test_a_driver_whose_log_shows_nothing_is_registered_by_its_slices_and_noalloc_fails_by_its_pool() -> None:
    with KubeSim(pushed=TEST_BUILDS, scenario="gpu-small", k8s_version="1.34", speed=SPEED) as sim:
        sim.fault(kind="forbid", path=f"/api/v1/namespaces/{DRA_NS}/pods/", verb="get")  # no log to read
        cluster = harness(sim).ctx.cluster
        result = verify(cluster, f"{DRA_NS}/{DRA_DS}", settings=FAST)
        check = next(c for c in result.checks if c.name == "plugin-registered")
        assert check.status is CheckStatus.PASS, check.detail
        assert "ResourceSlices of gpu.example.com published" in check.detail and "3 nodes" in check.detail
        sim.fault(kind="allow")

        broken = harness(sim, image=DRA_NEW + "-noalloc", ns=DRA_NS, ds=DRA_DS, container="plugin", node="gpu-node1")
        assert STEPS.canary(broken.ctx).ok
        outcome = STEPS.verify_canary(broken.ctx)
        check = next(c for c in outcome.checks if c.name == "plugin-registered")
        assert check.status is CheckStatus.FAIL, check.detail
        assert "gpu.example.com not registered on gpu-node1" in check.detail and "incomplete" in check.detail
        assert "1 of 2 ResourceSlices" in check.detail, check.detail


def test_the_smoke_test_claims_from_the_class_asking_a_gpu_not_the_first_by_name() -> None:
    with KubeSim(pushed=TEST_BUILDS, scenario="gpu-small", k8s_version="1.34", speed=SPEED) as sim:
        kubectl = Kubectl(sim.kubeconfig)
        kubectl("apply", "-f", "-", input="apiVersion: v1\nkind: Namespace\nmetadata: {name: upgradebot-smoke}\n")
        kubectl("apply", "-f", "-", input=MIG)
        settings = dataclasses.replace(FAST, smoke_test={"image": SAMPLE, "timeout": 5.0})
        cluster = harness(sim).ctx.cluster
        result = verify(cluster, f"{DRA_NS}/{DRA_DS}", nodes=["gpu-node1"], settings=settings)
        smoke = next(c for c in result.checks if c.name == "smoke-test")
        assert smoke.evidence["device_class"] == "gpu.example.com", smoke.detail
        assert smoke.status is CheckStatus.PASS, smoke.detail

        kubectl("apply", "-f", "-", input=TWIN)
        result = verify(cluster, f"{DRA_NS}/{DRA_DS}", nodes=["gpu-node1"], settings=settings)
        smoke = next(c for c in result.checks if c.name == "smoke-test")
        assert smoke.status is CheckStatus.UNKNOWN, smoke.detail
        assert "b-gpu.example.com" in smoke.detail and "steps.smoke_test.device_class" in smoke.detail
        named = dataclasses.replace(FAST, smoke_test={"image": SAMPLE, "timeout": 5.0,
                                                      "device_class": "b-gpu.example.com"})
        result = verify(cluster, f"{DRA_NS}/{DRA_DS}", nodes=["gpu-node1"], settings=named)
        smoke = next(c for c in result.checks if c.name == "smoke-test")
        assert smoke.evidence["device_class"] == "b-gpu.example.com" and smoke.status is CheckStatus.PASS, smoke.detail
        missing = dataclasses.replace(FAST, smoke_test={"image": SAMPLE, "device_class": "nope.example.com"})
        result = verify(cluster, f"{DRA_NS}/{DRA_DS}", nodes=["gpu-node1"], settings=missing)
        smoke = next(c for c in result.checks if c.name == "smoke-test")
        assert smoke.status is CheckStatus.UNKNOWN and "nope.example.com" in smoke.detail, smoke.detail
        assert kubectl("get", "pods", "-n", "upgradebot-smoke", "-o", "name").strip() == ""


def test_the_inventory_sees_a_dra_drivers_registration_in_its_slices(inventory_of: Callable[..., Inventory]) -> None:
    """Its log unreadable (or silent, at verbosity 0), each pod of the example driver is registered by
    its slices; the pod of a -noalloc build (an incomplete pool) is not."""
    ref = f"{DRA_NS}/{DRA_DS}"
    with KubeSim(pushed=TEST_BUILDS, scenario="gpu-small", k8s_version="1.34", speed=SPEED) as sim:
        sim.fault(kind="forbid", path=f"/api/v1/namespaces/{DRA_NS}/pods/", verb="get")
        dra = inventory_of(sim).daemonset(ref)
        assert dra is not None and dra.drivers == ["gpu.example.com"]
        assert {p.node: p.registered for p in dra.pods} == {"gpu-node1": True, "gpu-node2": True, "gpu-node3": True}
        sim.fault(kind="allow")
        broken = harness(sim, image=DRA_NEW + "-noalloc", ns=DRA_NS, ds=DRA_DS, container="plugin", node="gpu-node1")
        assert STEPS.canary(broken.ctx).ok
        dra = inventory_of(sim).daemonset(ref)
        assert dra is not None
        assert {p.node: p.registered for p in dra.pods} == {"gpu-node1": False, "gpu-node2": True, "gpu-node3": True}


NVIDIA_NS, NVIDIA_DS = "nvidia-dra-driver-gpu", "nvidia-dra-driver-gpu-kubelet-plugin"
NVIDIA_OLD, NVIDIA_NEW = "nvcr.io/nvidia/k8s-dra-driver-gpu:v25.8.1", "nvcr.io/nvidia/k8s-dra-driver-gpu:v25.12.0"


def _nvidia_daemonset() -> str:
    """NVIDIA's kubelet-plugin DaemonSet in the shape its chart renders it (NVIDIA/k8s-dra-driver-gpu
    v25.12.0, ``templates/kubeletplugin.yaml``: two containers of one image, each running its plugin
    through ``bash -c``), trimmed to what the canary reads; kubesim runs its containers as generic ones."""
    def container(name: str, program: str) -> str:
        return (f"      - name: {name}\n        image: {NVIDIA_OLD}\n        command: [bash, -c]\n"
                f"        args: ['{program} -v $(LOG_VERBOSITY)']\n"
                "        env: [{name: LOG_VERBOSITY, value: '4'}]\n")
    return (f"apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {{name: {NVIDIA_DS}, namespace: {NVIDIA_NS}}}\n"
            "spec:\n  selector: {matchLabels: {nvidia-dra-driver-gpu-component: kubelet-plugin}}\n"
            "  updateStrategy: {type: RollingUpdate}\n"
            "  template:\n    metadata: {labels: {nvidia-dra-driver-gpu-component: kubelet-plugin}}\n"
            "    spec:\n      nodeSelector: {nvidia.com/gpu.present: 'true'}\n      containers:\n"
            + container("compute-domains", "compute-domain-kubelet-plugin") + container("gpus", "gpu-kubelet-plugin"))


NVIDIA_CLASSES = {  # deviceclass-*.yaml of NVIDIA/k8s-dra-driver-gpu v25.12.0, as rendered for resource.k8s.io/v1
    "compute-domain-daemon.nvidia.com": "device.driver == 'compute-domain.nvidia.com' && "
                                        "device.attributes['compute-domain.nvidia.com'].type == 'daemon'",
    "compute-domain-default-channel.nvidia.com": "device.driver == 'compute-domain.nvidia.com' && "
                                                 "device.attributes['compute-domain.nvidia.com'].type == 'channel' && "
                                                 "device.attributes['compute-domain.nvidia.com'].id == 0",
    "gpu.nvidia.com": "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'",
    "mig.nvidia.com": "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'",
}


def test_a_canary_of_nvidias_dra_driver_changes_gpus_and_leaves_compute_domains_as_it_was(
        settle_until: Callable[..., None], inventory_of: Callable[..., Inventory]) -> None:
    """Without container=, the canary of NVIDIA's two-container DaemonSet changes ``gpus`` (it runs
    gpu-kubelet-plugin); ``compute-domains`` keeps its image in the template and in the canary's pod."""
    from runbooks.engine.requesting import CanaryRequest, resolve

    with KubeSim(pushed=TEST_BUILDS, scenario="gpu-small", k8s_version="1.34", speed=SPEED) as sim:
        kubectl = Kubectl(sim.kubeconfig)
        kubectl("create", "namespace", NVIDIA_NS)
        kubectl("apply", "-f", "-", input=_nvidia_daemonset())
        for name, expression in NVIDIA_CLASSES.items():
            kubectl("apply", "-f", "-", input=f"apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: "
                    f"{{name: {name}}}\nspec:\n  selectors:\n  - cel: {{expression: \"{expression}\"}}\n")
        settle_until(sim, lambda: kubectl.json("-n", NVIDIA_NS, "get", "daemonset", NVIDIA_DS)
                     .get("status", {}).get("numberReady") == 3, step="2s")
        inventory = inventory_of(sim)  # both drivers of the one DaemonSet, and their classes
        nvidia = inventory.daemonset(f"{NVIDIA_NS}/{NVIDIA_DS}")
        assert nvidia is not None and nvidia.kind == "dra-kubelet-plugin"
        assert nvidia.drivers == ["compute-domain.nvidia.com", "gpu.nvidia.com"]
        assert {c.name: c.drivers for c in inventory.device_classes if c.name.endswith("nvidia.com")} == {
            n: [e.split("'")[1]] for n, e in NVIDIA_CLASSES.items()}
        # kubesim serves no slices of gpu.nvidia.com yet, so the baseline finds every node degraded: no settling
        h = harness(sim, image=NVIDIA_NEW, ns=NVIDIA_NS, ds=NVIDIA_DS, container="gpus", node="gpu-node1",
                    settings=dataclasses.replace(FAST, settle_window=0.1))
        _, container = resolve(h.ctx.cluster, CanaryRequest(NVIDIA_NS, NVIDIA_DS, NVIDIA_NEW, "gpu-node1"))
        assert container == "gpus"
        assert STEPS.canary(h.ctx).ok
        template = kubectl.json("-n", NVIDIA_NS, "get", "daemonset", NVIDIA_DS)["spec"]["template"]["spec"]
        assert {c["name"]: c["image"] for c in template["containers"]} == {"compute-domains": NVIDIA_OLD,
                                                                            "gpus": NVIDIA_NEW}
        pods = kubectl.json("-n", NVIDIA_NS, "get", "pods")["items"]
        images = {p["spec"]["nodeName"]: {c["name"]: c["image"] for c in p["spec"]["containers"]} for p in pods}
        assert images["gpu-node1"] == {"compute-domains": NVIDIA_OLD, "gpus": NVIDIA_NEW}
        assert images["gpu-node2"] == {"compute-domains": NVIDIA_OLD, "gpus": NVIDIA_OLD}


def test_an_ambiguous_smoke_test_class_refuses_the_request_before_anything_changes() -> None:
    """Two classes of the driver fit the smoke test: the canary's request fails in one line naming
    them, before an approver is asked and before anything changes; the policy's device_class settles it."""
    with KubeSim(pushed=TEST_BUILDS, scenario="gpu-small", k8s_version="1.34", speed=SPEED) as sim:
        Kubectl(sim.kubeconfig)("apply", "-f", "-", input=TWIN)
        settings = dataclasses.replace(FAST, smoke_test={"image": SAMPLE})
        h = harness(sim, image=DRA_NEW, ns=DRA_NS, ds=DRA_DS, container="plugin", node="gpu-node1", settings=settings)
        before = len(sim.mutations())
        checks = STEPS.check_request(h.ctx.cluster, h.run, settings)
        smoke = [c for c in checks if c.name == "smoke-test"]
        assert [c.status for c in smoke] == [CheckStatus.FAIL], checks
        assert "b-gpu.example.com" in smoke[0].detail and "gpu.example.com" in smoke[0].detail
        assert "steps.smoke_test.device_class" in smoke[0].detail
        assert [m for m in sim.mutations()[before:] if not m["dryRun"]] == []
        named = dataclasses.replace(FAST, smoke_test={"image": SAMPLE, "device_class": "gpu.example.com"})
        assert not [c for c in STEPS.check_request(h.ctx.cluster, h.run, named) if c.name == "smoke-test"]
