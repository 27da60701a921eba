"""What of a DRA object may change after create, as each release's API server decides it (issue 35
item 1), refereed by the real kubectl on 1.27, 1.32 and 1.34: a ResourceClaim's spec is immutable
(``ValidateClaimUpdate`` / ``ValidateResourceClaimUpdate``: ``spec: Invalid value: <the new spec>:
field is immutable``, the value printed with ``%#v`` of the internal Go type up to 1.33 and as its JSON
from 1.34); a DeviceClass's spec (a 1.27 ResourceClass's driverName) may change."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from kubesim import KubeSim
from tests.kubesim._simkit import per_release
from tests.support import Kubectl

pytestmark = pytest.mark.conformance


sim, kubectl = per_release()

IMMUTABLE_SPEC = {
    27: ('resource.ResourceClaimSpec{{ResourceClassName:"{cls}", '
         'ParametersRef:(*resource.ResourceClaimParametersReference)(nil), AllocationMode:"WaitForFirstConsumer"}}'),
    32: ('resource.ResourceClaimSpec{{Devices:resource.DeviceClaim{{Requests:[]resource.DeviceRequest{{'
         'resource.DeviceRequest{{Name:"gpu", DeviceClassName:"{cls}", Selectors:[]resource.DeviceSelector(nil), '
         'AllocationMode:"ExactCount", Count:{count}, AdminAccess:(*bool)(nil)}}}}, '
         'Constraints:[]resource.DeviceConstraint(nil), Config:[]resource.DeviceClaimConfiguration(nil)}}}}'),
    34: ('{{"Devices":{{"Requests":[{{"Name":"gpu","Exactly":{{"DeviceClassName":"{cls}","Selectors":null,'
         '"AllocationMode":"ExactCount","Count":{count},"AdminAccess":null,"Tolerations":null,"Capacity":null}},'
         '"FirstAvailable":null}}],"Constraints":null,"Config":null}}}}'),
}
"""The new spec as each release's field error prints it (kubernetes/apimachinery field.Error.ErrorBody:
``%#v`` through 1.33, ``json.Marshal`` from 1.34; the internal types have no JSON tags)."""


def api_version(minor: int) -> str:
    return {27: "v1alpha2", 32: "v1beta1"}.get(minor, "v1")


def claim(minor: int, name: str, *, cls: str = "gpu.nvidia.com", count: int = 1) -> dict[str, Any]:
    if minor == 27:
        spec: dict[str, Any] = {"resourceClassName": cls}
    elif minor == 32:
        spec = {"devices": {"requests": [{"name": "gpu", "deviceClassName": cls, "count": count}]}}
    else:
        spec = {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": cls, "count": count}}]}}
    return {"apiVersion": f"resource.k8s.io/{api_version(minor)}", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "default"}, "spec": spec}


def refused(kubectl: Kubectl, *args: str, body: dict[str, Any] | None = None) -> str:
    proc = kubectl.run(*args, check=False, input=None if body is None else json.dumps(body))
    assert proc.returncode != 0, proc.stdout
    return proc.stderr.strip()


@pytest.fixture
def made_claim(sim: KubeSim, kubectl: Kubectl, request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    name = f"fixed-{request.node.name.split('[')[0][-20:].replace('_', '-').strip('-')}"
    kubectl("apply", "-f", "-", input=json.dumps(claim(sim.minor, name)))
    yield kubectl.json("get", "resourceclaim", name, "-o", "json")
    kubectl("delete", "resourceclaim", name, "--wait=false")


def expected(minor: int, name: str, *, cls: str = "gpu.nvidia.com", count: int = 1) -> str:
    shown = IMMUTABLE_SPEC[minor].format(cls=cls, count=count)
    return f'The ResourceClaim "{name}" is invalid: spec: Invalid value: {shown}: field is immutable'


def unchanged(kubectl: Kubectl, before: dict[str, Any]) -> None:
    after = kubectl.json("get", "resourceclaim", before["metadata"]["name"], "-o", "json")
    assert after["spec"] == before["spec"]
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]


def test_claim_spec_change_by_apply_is_refused_as_immutable(sim: KubeSim, kubectl: Kubectl,
                                                            made_claim: dict[str, Any]) -> None:
    """Issue 35 item 1: `kubectl apply` of a claim whose device class changed is refused with the API server's
    Invalid body for an immutable spec (the new spec printed as that release prints it); nothing is written."""
    name = made_claim["metadata"]["name"]
    out = refused(kubectl, "apply", "-f", "-", body=claim(sim.minor, name, cls="other.nvidia.com"))
    assert out == expected(sim.minor, name, cls="other.nvidia.com")
    unchanged(kubectl, made_claim)


def test_claim_spec_change_by_replace_is_refused_as_immutable(sim: KubeSim, kubectl: Kubectl,
                                                              made_claim: dict[str, Any]) -> None:
    """Issue 35 item 1: `kubectl replace` of a claim with another spec is refused the same way, and the
    Status names the field, its reason and the kind as the API server's NewInvalid does."""
    name = made_claim["metadata"]["name"]
    body = claim(sim.minor, name, cls="other.nvidia.com")
    out = refused(kubectl, "replace", "-f", "-", body=body)
    assert out == expected(sim.minor, name, cls="other.nvidia.com")
    objects = client.CustomObjectsApi(config.new_client_from_config(config_file=str(sim.kubeconfig)))
    body["metadata"]["resourceVersion"] = made_claim["metadata"]["resourceVersion"]
    with pytest.raises(ApiException) as refusal:
        objects.replace_namespaced_custom_object("resource.k8s.io", api_version(sim.minor), "default",
                                                 "resourceclaims", name, body)
    status = json.loads(refusal.value.body)
    assert (status["code"], status["reason"], status["details"]["kind"]) == (422, "Invalid", "ResourceClaim")
    assert [(c["field"], c["reason"]) for c in status["details"]["causes"]] == [("spec", "FieldValueInvalid")]
    unchanged(kubectl, made_claim)


def test_claim_spec_change_by_patch_is_refused_as_immutable(sim: KubeSim, kubectl: Kubectl,
                                                            made_claim: dict[str, Any]) -> None:
    """Issue 35 item 1: `kubectl patch` of a claim's spec (its class on 1.27, its device count after) is
    refused as immutable, the patched spec in the message; a metadata-only patch is still accepted."""
    name = made_claim["metadata"]["name"]
    if sim.minor == 27:
        patch, want = {"spec": {"resourceClassName": "other.nvidia.com"}}, expected(27, name, cls="other.nvidia.com")
    else:
        path = "/spec/devices/requests/0/count" if sim.minor == 32 else "/spec/devices/requests/0/exactly/count"
        patch, want = [{"op": "replace", "path": path, "value": 2}], expected(sim.minor, name, count=2)
    kind = "merge" if isinstance(patch, dict) else "json"
    assert refused(kubectl, "patch", "resourceclaim", name, "--type", kind, "-p", json.dumps(patch)) == want
    unchanged(kubectl, made_claim)
    out = kubectl("patch", "resourceclaim", name, "--type", "merge", "-p", '{"metadata":{"labels":{"team":"ml"}}}')
    assert out.strip() == f"resourceclaim.resource.k8s.io/{name} patched"


def test_device_class_spec_may_change(sim: KubeSim, kubectl: Kubectl) -> None:
    """Issue 35 item 1: a DeviceClass's spec is mutable (ValidateDeviceClassUpdate checks only its metadata
    for immutability), so a new selector is accepted and bumps its generation; on 1.27 a ResourceClass's
    driverName may change likewise (ValidateClassUpdate)."""
    if sim.minor == 27:
        rc = {"apiVersion": "resource.k8s.io/v1alpha2", "kind": "ResourceClass", "metadata": {"name": "mutable"},
              "driverName": "gpu.nvidia.com"}
        kubectl("apply", "-f", "-", input=json.dumps(rc))
        try:
            out = kubectl("apply", "-f", "-", input=json.dumps({**rc, "driverName": "gpu.example.com"}))
            assert out.strip() == "resourceclass.resource.k8s.io/mutable configured"
            assert kubectl("get", "resourceclass", "mutable", "-o", "jsonpath={.driverName}") == "gpu.example.com"
        finally:
            kubectl("delete", "resourceclass", "mutable")
        return
    dc = {"apiVersion": f"resource.k8s.io/{api_version(sim.minor)}", "kind": "DeviceClass",
          "metadata": {"name": "mutable"}, "spec": {"selectors": [
              {"cel": {"expression": 'device.driver == "gpu.nvidia.com"'}}]}}
    kubectl("apply", "-f", "-", input=json.dumps(dc))
    try:
        before = kubectl.json("get", "deviceclass", "mutable", "-o", "json")
        patch = {"spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.example.com"'}}]}}
        out = kubectl("patch", "deviceclass", "mutable", "--type", "merge", "-p", json.dumps(patch))
        assert out.strip() == "deviceclass.resource.k8s.io/mutable patched"
        after = kubectl.json("get", "deviceclass", "mutable", "-o", "json")
        assert after["spec"]["selectors"] == patch["spec"]["selectors"]
        assert after["metadata"]["generation"] == before["metadata"]["generation"] + 1
    finally:
        kubectl("delete", "deviceclass", "mutable")
