"""The DRA Done-when lines of issue 59, end to end through the bot's canary path (request,
approval, canary, verify, promotion) on kubesim's scenarios installed from the drivers' own charts:
``dra-example-driver`` (chart v0.2.0, verbosity 0: no registration line in its log) and
``nvidia-dra-driver`` (chart v25.8.1: one DaemonSet, two containers, two drivers, four classes).
No policy here sets ``registration:``; kubectl referees."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from handlers.inventory import summarize
from kubesim import KubeSim
from runbooks.engine.approving import Actor
from runbooks.engine.runs import RunState
from runbooks.inventory import Inventory
from runbooks.policy import Policy
from tests.engine_support import kubesim_engine
from tests.support import TEST_BUILDS, Kubectl

ALICE, BOB, CAROL = Actor("U0ALICE"), Actor("U0BOB"), Actor("U0CAROL")
SAMPLE = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0"
SMOKE_NS = "apiVersion: v1\nkind: Namespace\nmetadata: {name: upgradebot-smoke}\n"

EXAMPLE = "dra-example-driver/dra-example-driver-kubeletplugin"
EXAMPLE_OLD = "registry.k8s.io/dra-example-driver/dra-example-driver:v0.2.0"
EXAMPLE_NEW = "registry.k8s.io/dra-example-driver/dra-example-driver:v0.2.1"
"""A released tag the chart's kubeVersion (>=1.32.0-0) and the driver matrix admit at 1.32."""
NOALLOC = EXAMPLE_NEW + "-noalloc"

NVIDIA_NS, NVIDIA_DS = "nvidia-dra-driver-gpu", "nvidia-dra-driver-gpu-kubelet-plugin"
NVIDIA = f"{NVIDIA_NS}/{NVIDIA_DS}"
NVIDIA_OLD, NVIDIA_NEW = "nvcr.io/nvidia/k8s-dra-driver-gpu:v25.8.1", "nvcr.io/nvidia/k8s-dra-driver-gpu:v25.12.0"


def policy(target: str, **steps: Any) -> Policy:
    """Each chart's objects belong to its Helm release: the target says ``owner: helm`` (and nothing
    of ``registration:``)."""
    namespace, name = target.split("/")
    return Policy.model_validate({
        "approvers": {"users": ["U0BOB", "U0CAROL"]}, "reports": {"after": []},
        "targets": [{"namespace": namespace, "name": name, "owner": "helm"}],
        "steps": {"observe_window": "1s", "poll_interval": "0.1s", "ready_timeout": "60s", "settle_window": "1s",
                  **steps},
    })


def pinned(sim: KubeSim, image: str) -> str:
    """``image`` as a promotion pins it: ``<repository>@<the digest its tag resolves to>``."""
    found = sim.call(lambda s: s.registry.image_id(image))
    assert found, image
    return str(found)


def images(kubectl: Kubectl, namespace: str) -> dict[str, dict[str, str]]:
    """node -> container -> image of the live pods of ``namespace``'s DaemonSet."""
    pods = kubectl.json("get", "pods", "-n", namespace)["items"]
    return {p["spec"]["nodeName"]: {c["name"]: c["image"] for c in p["spec"]["containers"]} for p in pods
            if not p["metadata"].get("deletionTimestamp") and p["metadata"]["name"].startswith(namespace)
            and "controller" not in p["metadata"]["name"]}


@pytest.fixture(scope="module", params=["1.32", "1.34"])
def example(request: pytest.FixtureRequest) -> Iterator[KubeSim]:
    """The chart's oldest admitted minor and the newest kubesim serves (v1 resource API, 0.34 kubelet)."""
    with KubeSim(pushed=(*TEST_BUILDS, NOALLOC), scenario="dra-example-driver", k8s_version=request.param,
                 speed=20) as sim:
        yield sim


def test_the_example_driver_at_verbosity_0_passes_a_healthy_canary_without_registration(
        example: KubeSim, redis_url: str) -> None:
    kubectl = Kubectl(example.kubeconfig)
    kubectl("apply", "-f", "-", input=SMOKE_NS)
    engine = kubesim_engine(example, redis_url, policy(EXAMPLE, smoke_test={"image": SAMPLE, "timeout": 30}))
    assert engine.policy.registration == {}
    run = engine.request_canary(actor=ALICE, target=EXAMPLE, image=EXAMPLE_NEW, node="gpu-node1").run
    assert run.container == "plugin"
    assert run.progress["owner"] == "Helm release dra-example-driver/dra-example-driver"
    engine.decide(run.id, actor=BOB, approve=True)
    run = engine.advance(run.id)
    assert run.state is RunState.AWAITING_PROMOTION, run.reason
    audit = {e["name"]: e for e in engine.audit(run.id)}
    assert audit["canary.precheck.baseline"]["detail"] == "baseline of 4 nodes recorded", audit["canary.precheck.baseline"]
    registered = audit["verify_canary.plugin-registered"]
    assert registered["status"] == "ok", registered
    assert "ResourceSlices of gpu.example.com published" in registered["detail"], registered
    smoke = audit["verify_canary.smoke-test"]
    assert smoke["status"] == "ok" and smoke["evidence"]["device_class"] == "gpu.example.com", smoke
    assert images(kubectl, "dra-example-driver")["gpu-node1"] == {"plugin": EXAMPLE_NEW}
    engine.decide(run.id, actor=CAROL, approve=True)
    run = engine.advance(run.id)
    assert run.state is RunState.DONE, run.reason
    # the promotion pins the digest the canary's pod pulled (images.pin_digest)
    assert {c["plugin"] for c in images(kubectl, "dra-example-driver").values()} == {pinned(example, EXAMPLE_NEW)}


def test_the_example_driver_at_verbosity_0_fails_a_noalloc_canary_and_rolls_back(
        example: KubeSim, redis_url: str) -> None:
    kubectl = Kubectl(example.kubeconfig)
    before = {n: c["plugin"] for n, c in images(kubectl, "dra-example-driver").items()}
    engine = kubesim_engine(example, redis_url, policy(EXAMPLE))
    run = engine.request_canary(actor=ALICE, target=EXAMPLE, image=NOALLOC, node="gpu-node2").run
    engine.decide(run.id, actor=BOB, approve=True)
    run = engine.advance(run.id)
    assert run.state is RunState.ROLLED_BACK, run.reason
    registered = next(e for e in engine.audit(run.id) if e["name"] == "verify_canary.plugin-registered")
    assert registered["status"] == "failed", registered
    assert "gpu.example.com not registered on gpu-node2" in registered["detail"], registered
    assert "plugin-registered" in run.reason and "rolling back automatically" in run.reason, run.reason
    assert {n: c["plugin"] for n, c in images(kubectl, "dra-example-driver").items()} == before


def test_nvidias_dra_driver_inventory_and_a_gpus_canary_smoke_tested_from_gpu_nvidia_com(
        redis_url: str, inventory_of: Callable[..., Inventory]) -> None:
    with KubeSim(pushed=TEST_BUILDS, scenario="nvidia-dra-driver", k8s_version="1.34", speed=20) as sim:
        kubectl = Kubectl(sim.kubeconfig)
        kubectl("apply", "-f", "-", input=SMOKE_NS)
        inventory = inventory_of(sim)
        nvidia = inventory.daemonset(NVIDIA)
        assert nvidia is not None and nvidia.drivers == ["compute-domain.nvidia.com", "gpu.nvidia.com"]
        assert nvidia.owner is not None and nvidia.owner.ref == f"Helm release {NVIDIA_NS}/nvidia-dra-driver-gpu"
        assert nvidia.owner.read_from == "meta.helm.sh/release-name", nvidia.owner
        assert {c.name: c.drivers for c in inventory.device_classes} == {
            "compute-domain-daemon.nvidia.com": ["compute-domain.nvidia.com"],
            "compute-domain-default-channel.nvidia.com": ["compute-domain.nvidia.com"],
            "gpu.nvidia.com": ["gpu.nvidia.com"], "mig.nvidia.com": ["gpu.nvidia.com"]}
        thread = summarize(inventory).thread  # what every surface shows
        kind = next(m for m in thread if m.title == NVIDIA).fields[0]
        assert kind.value == "dra-kubelet-plugin (driver compute-domain.nvidia.com, gpu.nvidia.com)", kind
        dra = next(m.text for m in thread if m.title == "Dynamic Resource Allocation").splitlines()
        assert dra == [
            "DeviceClass compute-domain-daemon.nvidia.com: driver compute-domain.nvidia.com",
            "DeviceClass compute-domain-default-channel.nvidia.com: driver compute-domain.nvidia.com",
            "DeviceClass gpu.nvidia.com: driver gpu.nvidia.com", "DeviceClass mig.nvidia.com: driver gpu.nvidia.com",
            "ResourceSlices of compute-domain.nvidia.com: 3 on 3 node(s), 6 device(s)",
            "ResourceSlices of gpu.nvidia.com: 3 on 3 node(s), 24 device(s)"], dra

        engine = kubesim_engine(sim, redis_url, policy(NVIDIA, smoke_test={"image": SAMPLE, "timeout": 30}))
        run = engine.request_canary(actor=ALICE, target=NVIDIA, image=NVIDIA_NEW, node="gpu-node1").run
        assert run.container == "gpus"
        engine.decide(run.id, actor=BOB, approve=True)
        run = engine.advance(run.id)
        assert run.state is RunState.AWAITING_PROMOTION, run.reason
        audit = {e["name"]: e for e in engine.audit(run.id)}
        assert audit["canary.precheck.baseline"]["detail"] == "baseline of 3 nodes recorded", audit
        has_gpu = audit["canary.precheck.node-has-gpu"]["detail"]  # its GPUs are the DRA driver's devices
        assert has_gpu.startswith("gpu-node1 has GPUs (no extended resource: a DRA driver's devices)"), has_gpu
        assert audit["verify_canary.plugin-registered"]["status"] == "ok", audit["verify_canary.plugin-registered"]
        smoke = audit["verify_canary.smoke-test"]
        assert smoke["status"] == "ok", smoke
        assert smoke["evidence"]["device_class"] == "gpu.nvidia.com", smoke
        live = images(kubectl, NVIDIA_NS)
        assert live["gpu-node1"] == {"compute-domains": NVIDIA_OLD, "gpus": NVIDIA_NEW}
        assert live["gpu-node2"] == {"compute-domains": NVIDIA_OLD, "gpus": NVIDIA_OLD}
        engine.decide(run.id, actor=CAROL, approve=True)
        run = engine.advance(run.id)
        assert run.state is RunState.DONE, run.reason
        template = kubectl.json("-n", NVIDIA_NS, "get", "daemonset", NVIDIA_DS)["spec"]["template"]["spec"]
        promoted = {"compute-domains": NVIDIA_OLD, "gpus": pinned(sim, NVIDIA_NEW)}  # the verified digest
        assert {c["name"]: c["image"] for c in template["containers"]} == promoted
        assert set(map(frozenset, (c.items() for c in images(kubectl, NVIDIA_NS).values()))) == {
            frozenset(promoted.items())}
