"""A ResourceClaim's life as the API server and the resourceclaim controller lead it (issue 38,
items 2 and 3): claims made for every pod that names a template, pinned or not; allocation (and
the ``resource.kubernetes.io/delete-protection`` finalizer) only through the scheduler; a claim
deleted under a running pod stays ``deletionTimestamp``-ed while reserved, is not made again,
and goes once the pod is gone."""

from __future__ import annotations

import json
import time

import pytest
from _simkit import PODS, create, events, get, small

from kubesim import KubeSim, dra
from tests.support import TEST_BUILDS, Kubectl

RELEASES = [31, 32, 34]


def _template(minor: int) -> dict:
    return {"metadata": {"name": "one-gpu", "namespace": "ml-team"}, "spec": {"spec": dra.claim_spec(minor)}}


def _pod(minor: int, name: str, *, node: str | None = None) -> dict:
    spec: dict = {"containers": [{"name": "main", "image": "registry.example.com/ml/infer:1.0",
                                  "resources": {"claims": [{"name": "gpu"}]}}],
                  "resourceClaims": [dra.pod_claim_ref(minor, "gpu", template="one-gpu")]}
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name, "namespace": "ml-team"}, "spec": spec}


def _claim_name(pod: dict) -> str:
    [entry] = pod["status"]["resourceClaimStatuses"]
    return str(entry["resourceClaimName"])


def _claims_of(sim, pod_uid: str) -> list[dict]:
    return [c for c in sim.store.list(dra.CLAIMS, "ml-team")
            if any(o.get("uid") == pod_uid for o in c["metadata"].get("ownerReferences") or [])]


@pytest.mark.parametrize("minor", RELEASES)
def test_a_pinned_pod_gets_its_claim_made_but_never_allocated(minor):
    """Item 2 of issue 38: a pod created with ``spec.nodeName`` skips the scheduler. The resourceclaim
    controller still makes its claim from the template, but nothing allocates or reserves it, so the
    kubelet refuses to prepare it on every retry and the pod never starts (ContainerCreating)."""
    sim = small(minor)
    create(sim, dra.TEMPLATES, _template(minor))
    create(sim, PODS, _pod(minor, "pinned", node="gpu-node2"))
    sim.advance(60)
    pod = get(sim, PODS, "ml-team", "pinned")
    claim = get(sim, dra.CLAIMS, "ml-team", _claim_name(pod))
    assert claim["metadata"]["ownerReferences"][0]["uid"] == pod["metadata"]["uid"]
    assert "allocation" not in (claim.get("status") or {}) and not dra.reserved_uids(claim)
    assert "finalizers" not in claim["metadata"]
    assert pod["status"]["phase"] == "Pending"
    [waiting] = pod["status"]["containerStatuses"]
    assert waiting["state"]["waiting"]["reason"] == "ContainerCreating"
    [event] = events(sim, reason="FailedPrepareDynamicResources", name="pinned")
    said = "ResourceClaim" if minor >= 33 else "resource claim"
    assert f"is not allowed to use {said} {claim['metadata']['name']}" in event["message"]
    assert event.get("count", 1) > 1  # the kubelet keeps trying


@pytest.mark.parametrize("minor", RELEASES)
def test_a_claim_deleted_under_a_running_pod_stays_terminating_until_the_pod_is_gone(minor):
    """Item 3 of issue 38: the scheduler sets the delete-protection finalizer before it allocates;
    deleting the claim of a running pod only sets its deletionTimestamp: the pod keeps running, the
    claim keeps its allocation and reservation, no second claim is made for the pod; once the pod
    is gone the claim is deallocated, its finalizer removed, and it is gone too."""
    sim = small(minor)
    create(sim, dra.TEMPLATES, _template(minor))
    create(sim, PODS, _pod(minor, "user"))
    sim.advance(5)
    pod = get(sim, PODS, "ml-team", "user")
    name = _claim_name(pod)
    claim = get(sim, dra.CLAIMS, "ml-team", name)
    assert claim["metadata"]["finalizers"] == [dra.BUILTIN_FINALIZER]
    sim.store.delete(dra.CLAIMS, "ml-team", name)
    sim.advance(120)
    claim = get(sim, dra.CLAIMS, "ml-team", name)
    assert claim is not None and claim["metadata"]["deletionTimestamp"]
    assert dra.reserved_uids(claim) == [pod["metadata"]["uid"]] and dra.allocated_node(claim)
    assert get(sim, PODS, "ml-team", "user")["status"]["phase"] == "Running"
    assert [c["metadata"]["name"] for c in _claims_of(sim, pod["metadata"]["uid"])] == [name]
    sim.store.delete(PODS, "ml-team", "user")
    sim.advance(5)
    assert get(sim, PODS, "ml-team", "user") is None
    assert get(sim, dra.CLAIMS, "ml-team", name) is None
    assert _claims_of(sim, pod["metadata"]["uid"]) == []


def test_kubectl_deletes_a_claim_under_a_running_pod_and_it_stays_terminating():
    """Item 3 of issue 38, with the real kubectl: ``kubectl delete resourceclaim --wait=false`` under
    a running pod leaves the claim with a deletionTimestamp and the pod Running."""
    with KubeSim(pushed=TEST_BUILDS, scenario="gpu-small", k8s_version="1.34") as sim:
        kubectl = Kubectl(sim.kubeconfig)
        template = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", **_template(34)}
        pod = {"apiVersion": "v1", "kind": "Pod", **_pod(34, "user")}
        kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [template, pod]}))
        deadline = time.monotonic() + 60
        while kubectl("get", "pod", "user", "-n", "ml-team", "-o", "jsonpath={.status.phase}") != "Running":
            assert time.monotonic() < deadline, "the pod never ran"
            sim.advance("2s")
        name = kubectl("get", "pod", "user", "-n", "ml-team", "-o",
                       "jsonpath={.status.resourceClaimStatuses[0].resourceClaimName}")
        out = kubectl("delete", "resourceclaim", name, "-n", "ml-team", "--wait=false")
        assert f'resourceclaim.resource.k8s.io "{name}" deleted' in out
        sim.advance("30s")
        stamp = kubectl("get", "resourceclaim", name, "-n", "ml-team", "-o", "jsonpath={.metadata.deletionTimestamp}")
        assert stamp.strip()
        assert kubectl("get", "pod", "user", "-n", "ml-team", "-o", "jsonpath={.status.phase}") == "Running"
        kubectl("delete", "pod", "user", "-n", "ml-team", "--wait=false")
        deadline = time.monotonic() + 60
        while kubectl.run("get", "resourceclaim", name, "-n", "ml-team", check=False).returncode == 0:
            assert time.monotonic() < deadline, "the claim outlived its pod"
            sim.advance("2s")


def test_a_cuda_sample_told_to_sleep_keeps_running():
    """The DRA smoke test's holding pod (item 3 of issue 38): the CUDA sample image with ``command:
    [sleep, infinity]`` runs that, not the sample, so it keeps running; without it the sample exits."""
    sim = small(34)
    image = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0"
    for name, command in (("sleeper", ["sleep", "infinity"]), ("sample", None)):
        container: dict = {"name": "main", "image": image, "resources": {"limits": {"nvidia.com/gpu": "1"}}}
        if command:
            container["command"] = command
        create(sim, PODS, {"metadata": {"name": name, "namespace": "ml-team"},
                           "spec": {"restartPolicy": "Never", "containers": [container]}})
    sim.advance(120)
    assert get(sim, PODS, "ml-team", "sleeper")["status"]["phase"] == "Running"
    assert get(sim, PODS, "ml-team", "sample")["status"]["phase"] == "Succeeded"


@pytest.mark.parametrize("minor", [31, 34])
def test_a_claim_being_deleted_takes_no_new_pod(minor):
    """Item 3 of issue 38: a shared claim deleted while a pod uses it stays for that pod, but the
    scheduler gives it to no other pod (``resourceclaim "<name>" is being deleted``)."""
    sim = small(minor)
    create(sim, dra.CLAIMS, {"metadata": {"name": "team-gpu", "namespace": "ml-team"}, "spec": dra.claim_spec(minor)})
    first = _pod(minor, "first")
    first["spec"]["resourceClaims"] = [dra.pod_claim_ref(minor, "gpu", claim="team-gpu")]
    create(sim, PODS, first)
    sim.advance(5)
    assert get(sim, PODS, "ml-team", "first")["status"]["phase"] == "Running"
    sim.store.delete(dra.CLAIMS, "ml-team", "team-gpu")
    second = _pod(minor, "second")
    second["spec"]["resourceClaims"] = [dra.pod_claim_ref(minor, "gpu", claim="team-gpu")]
    create(sim, PODS, second)
    sim.advance(5)
    assert get(sim, PODS, "ml-team", "second")["status"]["phase"] == "Pending"
    [event] = events(sim, reason="FailedScheduling", name="second")
    assert 'resourceclaim "team-gpu" is being deleted' in event["message"]
    assert get(sim, PODS, "ml-team", "first")["status"]["phase"] == "Running"
    assert get(sim, dra.CLAIMS, "ml-team", "team-gpu")["metadata"]["deletionTimestamp"]


@pytest.mark.parametrize("minor", [27, 34])
def test_the_scenarios_allocated_claim_is_protected_like_any_other(minor):
    """gpu-small's ``shared-gpu`` is allocated and reserved for ``inference-0``: it carries the
    finalizer the allocator sets (a classic driver's own up to 1.29), so deleting it leaves it
    Terminating while ``inference-0`` runs."""
    sim = small(minor)
    sim.store.delete(dra.CLAIMS, "ml-team", "shared-gpu")
    sim.advance(5)
    claim = get(sim, dra.CLAIMS, "ml-team", "shared-gpu")
    assert claim["metadata"]["finalizers"] == [dra.claim_finalizer(minor, dra.DRIVER)]
    assert claim["metadata"]["deletionTimestamp"] and dra.reserved_uids(claim)
    sim.store.delete(PODS, "ml-team", "inference-0")
    sim.advance(5)
    assert get(sim, dra.CLAIMS, "ml-team", "shared-gpu") is None
