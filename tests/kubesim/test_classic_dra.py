"""Issue 35 item 5, the 1.27 classic-DRA behaviours (``resource.k8s.io/v1alpha2``), refereed by
the real kubectl: a claim's ``allocationMode`` is defaulted, the scheduler makes a
PodSchedulingContext for a pod with claims, a pod with ``spec.nodeName`` gets its claim from
its template."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from kubesim import KubeSim
from tests.kubesim.test_kubectl import wait_for
from tests.support import TEST_BUILDS, Kubectl

pytestmark = pytest.mark.conformance

CLASS = "gpu.example.com"


@pytest.fixture(scope="module")
def kubectl() -> Iterator[Kubectl]:
    with KubeSim(pushed=TEST_BUILDS, scenario="gpu-small", k8s_version="1.27", speed=5.0) as s:
        yield Kubectl(s.kubeconfig)


def apply(kubectl: Kubectl, *objs: dict[str, Any]) -> None:
    kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objs)}))


def template(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1alpha2", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": "default"}, "spec": {"spec": spec}}


def claim_pod(name: str, tmpl: str, node: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": "c", "image": "registry.example.com/app:1", "resources": {"claims": [{"name": "gpu"}]}}],
        "resourceClaims": [{"name": "gpu", "source": {"resourceClaimTemplateName": tmpl}}],
    }
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"}, "spec": spec}


def test_a_claims_allocation_mode_is_defaulted(kubectl: Kubectl) -> None:
    """issue 35 item 5: on 1.27 a ResourceClaim (and a template's claim) sent without
    ``allocationMode`` is stored with ``WaitForFirstConsumer``; an explicit mode is kept."""
    apply(kubectl,
          {"apiVersion": "resource.k8s.io/v1alpha2", "kind": "ResourceClaim",
           "metadata": {"name": "plain", "namespace": "default"}, "spec": {"resourceClassName": CLASS}},
          {"apiVersion": "resource.k8s.io/v1alpha2", "kind": "ResourceClaim",
           "metadata": {"name": "eager", "namespace": "default"},
           "spec": {"resourceClassName": CLASS, "allocationMode": "Immediate"}},
          template("tmpl-plain", {"resourceClassName": CLASS}))
    assert kubectl.json("get", "resourceclaim", "plain")["spec"]["allocationMode"] == "WaitForFirstConsumer"
    assert kubectl.json("get", "resourceclaim", "eager")["spec"]["allocationMode"] == "Immediate"
    tmpl = kubectl.json("get", "resourceclaimtemplate", "tmpl-plain")
    assert tmpl["spec"]["spec"]["allocationMode"] == "WaitForFirstConsumer"


def test_the_scheduler_makes_a_pod_scheduling_context(kubectl: Kubectl) -> None:
    """issue 35 item 5: a pod whose claim waits for its first consumer gets a PodSchedulingContext
    named as the pod and owned by it, with the chosen node as ``selectedNode`` among the
    ``potentialNodes``; the pod is bound to that node."""
    apply(kubectl, template("tmpl-ctx", {"resourceClassName": CLASS}), claim_pod("ctx-pod", "tmpl-ctx"))
    pod = wait_for(lambda: (lambda p: p if p["spec"].get("nodeName") else None)(kubectl.json("get", "pod", "ctx-pod")),
                   60.0, what="the pod bound")
    ctx = kubectl.json("get", "podschedulingcontexts", "ctx-pod")
    assert ctx["apiVersion"] == "resource.k8s.io/v1alpha2"
    assert ctx["spec"]["selectedNode"] == pod["spec"]["nodeName"]
    assert ctx["spec"]["selectedNode"] in ctx["spec"]["potentialNodes"]
    [owner] = ctx["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "Pod", "ctx-pod", pod["metadata"]["uid"], True)
    assert "ctx-pod" in kubectl("get", "podschedulingcontexts")


def test_a_pinned_pod_gets_its_claim_from_the_template(kubectl: Kubectl) -> None:
    """issue 35 item 5: a pod created with ``spec.nodeName`` bypasses the scheduler, yet the
    resourceclaim controller makes its claim (``<pod>-<claim>`` on 1.27) from the template."""
    apply(kubectl, template("tmpl-pinned", {"resourceClassName": CLASS}), claim_pod("pinned", "tmpl-pinned", "gpu-node1"))
    claim = wait_for(lambda: json.loads(kubectl.run("get", "resourceclaim", "pinned-gpu", "-o", "json", check=False).stdout
                                        or "null"), 60.0, what="the claim")
    assert claim["spec"]["allocationMode"] == "WaitForFirstConsumer"
    assert claim["metadata"]["ownerReferences"][0]["name"] == "pinned"
