"""Inventory findings for stuck claims (issue 36, item 5) on kubesim gpu-small, Kubernetes 1.27,
1.32 and 1.34: a pod Pending on a ResourceClaim or a ResourceClaimTemplate that does not exist
(the scheduler's ``resourceclaim "my-gpu" not found``), and a claim allocated on a node whose
DRA driver no longer publishes a ResourceSlice there (from 1.30, when slices exist), each with
its fix; ``upgradebot inventory --json`` lists them too."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from kubesim import KubeSim
from kubesim.dra import pod_claim_ref
from runbooks.inventory import Inventory
from tests.support import TEST_BUILDS, Kubectl

UPGRADEBOT = str(Path(sys.executable).parent / "upgradebot")


def _pod(minor: int, name: str, *, claim: str | None = None, template: str | None = None) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ml-team"},
            "spec": {"resourceClaims": [pod_claim_ref(minor, "gpu", claim=claim, template=template)],
                     "containers": [{"name": "train", "image": "registry.example.com/train:1.0",
                                     "resources": {"claims": [{"name": "gpu"}]}}]}}


@pytest.mark.parametrize("minor", [27, 32, 34])
def test_pods_pending_on_missing_claims_and_claims_whose_driver_is_gone_are_findings(
        minor: int, inventory_of: Callable[..., Inventory], settle_until: Callable[..., None]) -> None:
    """Issue 36 item 5: ``claim-missing`` for each pod Pending on a claim or a template that does
    not exist, naming it and saying to create it or fix the pod; once the DRA driver's kubelet
    plugin is deleted, ``claim-driver-gone`` for ml-team/shared-gpu, allocated on a node
    without its driver's slice, saying to repair the plugin or delete the pods and the claim
    (1.27 serves no ResourceSlices: not judged there). Before any of this: neither finding."""
    with KubeSim(pushed=TEST_BUILDS, scenario="gpu-small", k8s_version=f"1.{minor}") as sim:
        kubectl = Kubectl(sim.kubeconfig)
        before = inventory_of(sim)
        assert not [f for f in before.findings if f.code in ("claim-missing", "claim-driver-gone")], before.findings
        for pod in (_pod(minor, "waits-for-claim", claim="my-gpu"), _pod(minor, "waits-for-template", template="no-tpl")):
            kubectl("apply", "-f", "-", input=json.dumps(pod))

        def said() -> bool:
            pods = kubectl.json("get", "pods", "-n", "ml-team")["items"]
            return sum(1 for p in pods for c in (p.get("status") or {}).get("conditions") or []
                       if c.get("type") == "PodScheduled" and "not found" in c.get("message", "")) == 2

        settle_until(sim, said, step="5s", steps=30)
        inv = inventory_of(sim)
        missing = {f.object: f for f in inv.findings if f.code == "claim-missing"}
        claim, template = missing["pod/ml-team/waits-for-claim"], missing["pod/ml-team/waits-for-template"]
        assert "ResourceClaim 'my-gpu'" in claim.message and 'resourceclaim "my-gpu" not found' in claim.message
        assert claim.next_step.startswith("create the ResourceClaim my-gpu in ml-team"), claim.next_step
        assert "spec.resourceClaims[].resourceClaimName" in claim.next_step
        assert "ResourceClaimTemplate 'no-tpl'" in template.message
        assert "resourceClaimTemplateName" in template.next_step
        kubectl("delete", "ds", "dra-example-driver-kubeletplugin", "-n", "dra-example-driver")
        if minor < 30:
            assert not [f for f in inventory_of(sim).findings if f.code == "claim-driver-gone"]
            return
        settle_until(sim, lambda: not kubectl.json("get", "resourceslices")["items"], step="5s", steps=30)
        gone = [f for f in inventory_of(sim).findings if f.code == "claim-driver-gone"]
        assert [f.object for f in gone] == ["resourceclaim/ml-team/shared-gpu"], gone
        assert "to gpu.example.com, which publishes no ResourceSlice there any more" in gone[0].message
        assert gone[0].next_step.startswith("repair or redeploy the kubelet plugin of gpu.example.com on ")
        assert "kubectl -n ml-team delete resourceclaim shared-gpu" in gone[0].next_step
        out = subprocess.run([UPGRADEBOT, "inventory", "--json", "--kubeconfig", str(sim.kubeconfig)],
                             capture_output=True, text=True, timeout=120)
        codes = [f["code"] for f in json.loads(out.stdout)["findings"]]
        assert codes.count("claim-missing") == 2 and "claim-driver-gone" in codes, out.stderr
