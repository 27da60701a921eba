"""The GPU operator's reconcile as the real kubectl sees it (scenario gpu-operator): the ClusterPolicy kind served
from its CRD, a ClusterPolicy edit (patch, edit) re-rendering the owned DaemonSets, and a direct ``kubectl set
image`` of an owned DaemonSet staying until the next ClusterPolicy change, as in the operator's source
(``isDaemonsetSpecChanged`` compares the hash annotation, not the live spec). Waits end on kubectl's own watches
(``kubectl wait``, ``kubectl rollout status``) or on the operator's recorded reconciles, never on a sleep."""

from __future__ import annotations

import json
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubesim import KubeSim
from kubesim.gpuoperator import HASH_ANNOTATION
from tests.support import Kubectl

pytestmark = pytest.mark.conformance

NS, PLUGIN = "gpu-operator", "nvidia-device-plugin-daemonset"
RUNNING, NEXT = "nvcr.io/nvidia/k8s-device-plugin:v0.20.0", "nvcr.io/nvidia/k8s-device-plugin:v0.19.3"
IMAGE = "jsonpath={.spec.template.spec.containers[0].image}"


@pytest.fixture
def sim() -> Iterator[KubeSim]:
    with KubeSim(scenario="gpu-operator", k8s_version="1.31", speed=20.0) as s:
        yield s


@pytest.fixture
def kubectl(sim: KubeSim) -> Kubectl:
    return Kubectl(sim.kubeconfig)


def _ds(kubectl: Kubectl) -> dict:
    return kubectl.json("get", "ds", PLUGIN, "-n", NS)


def test_get_clusterpolicies_prints_its_status_and_the_daemonsets_name_their_owner(kubectl: Kubectl) -> None:
    """``kubectl get clusterpolicies`` prints the CRD's printer columns (Status, Age); the plugin DaemonSet is
    controlled by cluster-policy and carries the operator's hash annotation."""
    lines = kubectl("get", "clusterpolicies").splitlines()
    assert lines[0].split() == ["NAME", "STATUS", "AGE"]
    assert lines[1].split()[:2] == ["cluster-policy", "ready"]
    crd = kubectl.json("get", "crd", "clusterpolicies.nvidia.com")
    assert crd["spec"]["scope"] == "Cluster" and crd["spec"]["versions"][0]["name"] == "v1"
    policy = kubectl.json("get", "clusterpolicy", "cluster-policy")
    ds = _ds(kubectl)
    owner = ds["metadata"]["ownerReferences"]
    assert owner == [{"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "name": "cluster-policy",
                      "uid": policy["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]
    assert ds["metadata"]["annotations"][HASH_ANNOTATION].isdigit()


def test_a_patch_of_the_policy_rolls_the_plugin_to_the_new_version(sim: KubeSim, kubectl: Kubectl) -> None:
    """``kubectl patch clusterpolicy`` of devicePlugin.version: the operator updates the DaemonSet (new hash,
    generation 2), the rollout completes, and the ClusterPolicy says ready again."""
    before = _ds(kubectl)["metadata"]["annotations"][HASH_ANNOTATION]
    kubectl("patch", "clusterpolicy", "cluster-policy", "--type", "merge",
            "-p", json.dumps({"spec": {"devicePlugin": {"version": "v0.19.3"}}}))
    kubectl("wait", "-n", NS, f"ds/{PLUGIN}", f"--for={IMAGE}={NEXT}", "--timeout=30s")
    kubectl("rollout", "status", "-n", NS, f"ds/{PLUGIN}", "--timeout=60s")
    ds = _ds(kubectl)
    assert ds["metadata"]["generation"] == 2 and ds["metadata"]["annotations"][HASH_ANNOTATION] != before
    kubectl("wait", "clusterpolicy/cluster-policy", "--for=jsonpath={.status.state}=ready", "--timeout=30s")
    images = {p["spec"]["nodeName"]: p["spec"]["containers"][0]["image"]
              for p in kubectl.json("get", "pods", "-n", NS, "-l", f"app={PLUGIN}")["items"]
              if not p["metadata"].get("deletionTimestamp")}
    assert images == dict.fromkeys(("gpu-node1", "gpu-node2", "gpu-node3"), NEXT)
    reconciles = [r for r in sim.operator_reconciles() if r["generation"] == 2]
    assert reconciles[0]["daemonsets"][PLUGIN] == "updated"


def test_set_image_stays_until_a_policy_edit_replaces_it(sim: KubeSim, kubectl: Kubectl, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """``kubectl set image`` on the operator's DaemonSet: the operator reconciles (its owned DaemonSet changed)
    and finds the hash unchanged, so the image stays; a later ``kubectl edit clusterpolicy`` of an unrelated
    field (maxUnavailable) makes the operator replace the DaemonSet, and the image goes back to the policy's."""
    seen = len(sim.operator_reconciles())
    kubectl("set", "image", "-n", NS, f"ds/{PLUGIN}", f"nvidia-device-plugin={NEXT}")
    after = sim.operator_reconciles()[seen:]
    assert after and all(r["daemonsets"][PLUGIN] == "identical" for r in after)
    assert _ds(kubectl)["spec"]["template"]["spec"]["containers"][0]["image"] == NEXT
    editor = tmp_path / "editor.sh"
    editor.write_text("#!/bin/sh\nsed -i 's/maxUnavailable: \"1\"/maxUnavailable: \"2\"/' \"$1\"\n")
    editor.chmod(editor.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("EDITOR", str(editor))
    out = kubectl("edit", "clusterpolicy", "cluster-policy")
    assert "edited" in out
    kubectl("wait", "-n", NS, f"ds/{PLUGIN}", f"--for={IMAGE}={RUNNING}", "--timeout=30s")
    ds = _ds(kubectl)
    assert ds["spec"]["updateStrategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 2,
                                                                                       "maxSurge": 0}}
    assert next(r["daemonsets"][PLUGIN] for r in sim.operator_reconciles() if r["generation"] == 2) == "updated"
    served = json.loads(kubectl("get", "--raw", "/sim/v1/gpu-operator"))  # the same log over the control API
    assert served["namespace"] == NS and served["reconciles"][: len(after)] == sim.operator_reconciles()[: len(after)]
    assert [r["seq"] for r in served["reconciles"]] == list(range(1, len(served["reconciles"]) + 1))


def test_a_policy_outside_the_crds_schema_is_refused(kubectl: Kubectl) -> None:
    """The API server checks a ClusterPolicy against the CRD's schema: kubectl prints its refusal, nothing changes."""
    proc = kubectl.run("patch", "clusterpolicy", "cluster-policy", "--type", "merge",
                       "-p", json.dumps({"spec": {"daemonsets": {"updateStrategy": "Sometimes"}}}), check=False)
    assert proc.returncode != 0
    assert ('The ClusterPolicy "cluster-policy" is invalid: spec.daemonsets.updateStrategy: Unsupported value: '
            '"Sometimes": supported values: "RollingUpdate", "OnDelete"') in proc.stderr
    assert kubectl.json("get", "clusterpolicy", "cluster-policy")["metadata"]["generation"] == 1


def test_the_crd_and_the_policy_files_create_with_kubectl_on_a_plain_cluster() -> None:
    """kubesim/manifests/gpu-operator-v26.7.0/: the CRD as shipped becomes Established, then the chart's
    cluster-policy is accepted as rendered (no GPU operator runs on gpu-small: nothing renders it)."""
    from kubesim.gpuoperator import FILES

    with KubeSim(scenario="gpu-small", k8s_version="1.31") as sim:
        kubectl = Kubectl(sim.kubeconfig)
        kubectl("create", "-f", str(FILES / "nvidia.com_clusterpolicies.yaml"))
        kubectl("wait", "--for=condition=established", "crd/clusterpolicies.nvidia.com", "--timeout=30s")
        kubectl("create", "-f", str(FILES / "clusterpolicy.yaml"))
        policy = kubectl.json("get", "clusterpolicy", "cluster-policy")
        assert policy["spec"]["devicePlugin"]["version"] == "v0.20.0"
        assert policy["spec"]["hostPaths"]["kubeletRootDir"] == "/var/lib/kubelet"  # the schema's default
