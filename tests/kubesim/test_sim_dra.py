"""Dynamic Resource Allocation in the simulation, for each shape of resource.k8s.io."""

from __future__ import annotations

import pytest
from _simkit import DAEMONSETS, PODS, create, events, get, small

from kubesim import dra

RELEASES = [27, 30, 31, 32, 34]


def _claim_pod(minor: int, name: str, *, claim: str | None = None, template: str | None = None) -> dict:
    return {
        "metadata": {"name": name, "namespace": "ml-team"},
        "spec": {
            "containers": [{"name": "main", "image": "registry.example.com/ml/infer:1.0",
                            "resources": {"claims": [{"name": "gpu"}]}}],
            "resourceClaims": [dra.pod_claim_ref(minor, "gpu", claim=claim, template=template)],
        },
    }


def _break_dra_plugin(sim) -> None:
    def apply(obj: dict) -> None:
        obj["spec"]["updateStrategy"] = {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "100%"}}
        obj["spec"]["template"]["spec"]["containers"][0]["image"] += "-crash"

    sim.store.mutate(DAEMONSETS, "dra-example-driver", "dra-example-driver-kubeletplugin", apply)
    sim.advance(10)


@pytest.mark.parametrize("minor", RELEASES)
def test_scenario_dra_objects_have_the_release_shape(minor):
    """The class kind, slices and the allocated/pending claims follow the release's storage version."""
    sim = small(minor)
    shared = get(sim, dra.CLAIMS, "ml-team", "shared-gpu")
    assert shared["apiVersion"] == f"resource.k8s.io/{dra.storage_version(minor)}"
    assert shared["status"]["reservedFor"] == [
        {"resource": "pods", "name": "inference-0", "uid": get(sim, PODS, "ml-team", "inference-0")["metadata"]["uid"]}]
    assert "status" not in get(sim, dra.CLAIMS, "ml-team", "pending-gpu")
    if minor <= 30:
        assert get(sim, dra.RESOURCE_CLASSES, "", "gpu.example.com")["driverName"] == "gpu.example.com"
        alloc = shared["status"]["allocation"]
        assert alloc["availableOnNodes"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["gpu-node3"]
        assert alloc["resourceHandles"][0]["driverName"] == "gpu.example.com"
        assert shared["spec"]["resourceClassName"] == "gpu.example.com"
    else:
        klass = get(sim, dra.DEVICE_CLASSES, "", "gpu.example.com")
        assert klass["spec"]["selectors"] == [{"cel": {"expression": "device.driver == 'gpu.example.com'"}}]
        assert shared["status"]["allocation"]["devices"]["results"] == [
            {"request": "gpu", "driver": "gpu.example.com", "pool": "gpu-node3", "device": "gpu-0"}]
        assert shared["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["gpu-node3"]
    if minor < 30:
        return
    slices = sim.store.list(dra.SLICES)
    assert sorted(dra.slice_node_driver(s) for s in slices) == [(f"gpu-node{i}", "gpu.example.com") for i in (1, 2, 3)]
    one = slices[0]
    assert one["metadata"]["name"].startswith(f"{dra.slice_node_driver(one)[0]}-gpu.example.com-")
    if minor == 30:
        assert len(one["namedResources"]["instances"]) == 8 and "spec" not in one
    elif minor in (31, 32):
        device = one["spec"]["devices"][0]
        assert set(device) == {"name", "basic"} and "uuid" in device["basic"]["attributes"]
        assert one["spec"]["pool"] == {"name": one["spec"]["nodeName"], "generation": 0, "resourceSliceCount": 1}
        capacity = device["basic"]["capacity"]["memory"]
        assert capacity == ("80Gi" if minor == 31 else {"value": "80Gi"})
    else:
        device = one["spec"]["devices"][0]
        assert set(device) == {"name", "attributes", "capacity"}


@pytest.mark.parametrize("minor", RELEASES)
def test_claim_from_template_is_created_allocated_and_reserved(minor):
    """A pod's template claim is created with an owner ref, allocated on the pod's node and reserved for it."""
    sim = small(minor)
    create(sim, dra.TEMPLATES, {"metadata": {"name": "one-gpu", "namespace": "ml-team"}, "spec": {"spec": dra.claim_spec(minor)}})
    create(sim, PODS, _claim_pod(minor, "job", template="one-gpu"))
    sim.advance(3)
    pod = get(sim, PODS, "ml-team", "job")
    assert pod["status"]["phase"] == "Running"
    if minor == 27:
        name = "job-gpu"
        assert "resourceClaimStatuses" not in pod["status"]
    else:
        [entry] = pod["status"]["resourceClaimStatuses"]
        name = entry["resourceClaimName"]
        assert entry["name"] == "gpu" and name.startswith("job-gpu-")
    claim = get(sim, dra.CLAIMS, "ml-team", name)
    assert claim["metadata"]["ownerReferences"][0]["uid"] == pod["metadata"]["uid"]
    assert dra.allocated_node(claim) == pod["spec"]["nodeName"]
    assert dra.reserved_uids(claim) == [pod["metadata"]["uid"]]
    shared = set(dra.allocated_devices(get(sim, dra.CLAIMS, "ml-team", "shared-gpu")))
    assert not set(dra.allocated_devices(claim)) & shared
    sim.store.delete(PODS, "ml-team", "job")
    sim.advance(3)
    assert get(sim, dra.CLAIMS, "ml-team", name) is None


@pytest.mark.parametrize("minor", RELEASES)
def test_missing_driver_fails_prepare_and_slices_go(minor):
    """With the DRA plugin crash-looping, slices disappear and a pod of an allocated claim fails to prepare."""
    sim = small(minor)
    _break_dra_plugin(sim)
    if minor >= 30:
        assert sim.store.list(dra.SLICES) == []
    create(sim, PODS, _claim_pod(minor, "inference-1", claim="shared-gpu"))
    sim.advance(15)
    pod = get(sim, PODS, "ml-team", "inference-1")
    assert pod["spec"]["nodeName"] == "gpu-node3"
    assert pod["status"]["containerStatuses"][0]["state"] == {"waiting": {"reason": "ContainerCreating"}}
    [ev] = events(sim, reason="FailedPrepareDynamicResources", name="inference-1")
    assert ev["type"] == "Warning" and ev["count"] >= 2
    assert ev["message"].startswith("Failed to prepare dynamic resources: ")
    assert "gpu.example.com" in ev["message"]
    if minor >= 33:
        assert ev["message"].endswith("DRA driver gpu.example.com is not registered")


@pytest.mark.parametrize("minor", RELEASES)
def test_unallocatable_claim_fails_scheduling_until_the_driver_returns(minor):
    """Without devices a template claim cannot be allocated; once the plugin is fixed the pod runs."""
    sim = small(minor)
    _break_dra_plugin(sim)
    create(sim, dra.TEMPLATES, {"metadata": {"name": "one-gpu", "namespace": "ml-team"}, "spec": {"spec": dra.claim_spec(minor)}})
    create(sim, PODS, _claim_pod(minor, "job", template="one-gpu"))
    [ev] = events(sim, reason="FailedScheduling", name="job")
    assert ev["message"].startswith("0/4 nodes are available: 4 cannot allocate all claims.")

    def fix(obj: dict) -> None:
        ctr = obj["spec"]["template"]["spec"]["containers"][0]
        ctr["image"] = ctr["image"].removesuffix("-crash")

    sim.store.mutate(DAEMONSETS, "dra-example-driver", "dra-example-driver-kubeletplugin", fix)
    sim.advance(30)
    pod = get(sim, PODS, "ml-team", "job")
    assert pod["spec"].get("nodeName") and pod["status"]["phase"] == "Running"
    if minor >= 30:
        assert len(sim.store.list(dra.SLICES)) == 3


def _set_dra_image(sim, suffix: str) -> None:
    def apply(obj: dict) -> None:
        obj["spec"]["updateStrategy"] = {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "100%"}}
        ctr = obj["spec"]["template"]["spec"]["containers"][0]
        ctr["image"] = ctr["image"].rsplit(":", 1)[0] + ":v0.2.0" + suffix

    sim.store.mutate(DAEMONSETS, "dra-example-driver", "dra-example-driver-kubeletplugin", apply)
    sim.advance(20)


@pytest.mark.parametrize("minor", RELEASES)
def test_a_noalloc_driver_registers_publishes_and_yet_nothing_can_be_allocated(minor):
    """A ``-noalloc`` driver image runs, registers and (from 1.31) publishes its devices in a pool it
    says has two slices: the pool is incomplete, so new claims fail scheduling as on a real cluster,
    while claims allocated before keep their devices."""
    sim = small(minor)
    _set_dra_image(sim, "-noalloc")
    pods = [p for p in sim.store.list(PODS, "dra-example-driver") if not p["metadata"].get("deletionTimestamp")]
    assert pods and all(p["status"]["phase"] == "Running" for p in pods)
    if dra.has_pools(minor):
        slices = sim.store.list(dra.SLICES)
        assert len(slices) == 3 and all(s["spec"]["pool"]["resourceSliceCount"] == 2 for s in slices)
        assert all(len(s["spec"]["devices"]) == 8 for s in slices)
    create(sim, dra.TEMPLATES, {"metadata": {"name": "one-gpu", "namespace": "ml-team"}, "spec": {"spec": dra.claim_spec(minor)}})
    create(sim, PODS, _claim_pod(minor, "job", template="one-gpu"))
    sim.advance(5)
    [ev] = events(sim, reason="FailedScheduling", name="job")
    assert "cannot allocate all claims" in ev["message"]
    assert dra.allocated_node(get(sim, dra.CLAIMS, "ml-team", "shared-gpu")) == "gpu-node3"

    _set_dra_image(sim, "")
    pod = get(sim, PODS, "ml-team", "job")
    assert pod["spec"].get("nodeName") and pod["status"]["phase"] == "Running"


@pytest.mark.parametrize("minor", [30, 31, 34])
def test_the_cuda_sample_passes_with_a_device_from_a_claim(minor):
    """The CUDA vectoradd sample gets its GPU through a DRA claim: Test PASSED, and once the pod is
    deleted its generated claim goes and the device is free again."""
    sim = small(minor)
    create(sim, dra.TEMPLATES, {"metadata": {"name": "one-gpu", "namespace": "ml-team"}, "spec": {"spec": dra.claim_spec(minor)}})
    body = _claim_pod(minor, "smoke", template="one-gpu")
    body["spec"]["containers"][0]["image"] = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0"
    body["spec"]["restartPolicy"] = "Never"
    create(sim, PODS, body)
    sim.advance(10)
    pod = get(sim, PODS, "ml-team", "smoke")
    assert pod["status"]["phase"] == "Succeeded"
    assert "Test PASSED" in sim.logs.read("ml-team", "smoke", "main")
    claim = dra.resolved_claim_names(pod, minor)["gpu"]
    assert get(sim, dra.CLAIMS, "ml-team", claim) is not None
    sim.store.delete(PODS, "ml-team", "smoke")
    sim.advance(3)
    assert get(sim, dra.CLAIMS, "ml-team", claim) is None
    in_use = [d for c in sim.store.list(dra.CLAIMS) for d in dra.allocated_devices(c)]
    assert in_use == [("gpu.example.com", "gpu-node3", "gpu-0")]  # only the scenario's shared claim
