"""``migrate``'s plans, applied as printed (item 2 of issue 38): every kind of plan goes through the
real ``kubectl apply --server-side -f <plan>`` against kubesim, and the workload's pods run with
their claims allocated on a node and reserved for them.

A pod pinned with ``spec.nodeName`` skips the scheduler, and the scheduler is what allocates
claims: the plan must hand the pod back to the scheduler (a required node affinity on the node's
hostname), or the pod waits in ``ContainerCreating`` for a claim nobody allocates."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from handlers.migrate import manifest_text
from kubesim import KubeSim
from runbooks.cluster import Cluster
from runbooks.dra.migrating import migrate
from tests.support import TEST_BUILDS, Kubectl

NS = "ml-team"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def _pod_spec(name: str, gpus: int) -> dict[str, Any]:
    return {"containers": [{"name": "train", "image": "registry.example.com/ml/trainer:2.1.0",
                            "resources": {"limits": {"nvidia.com/gpu": str(gpus), "cpu": "2"}}}]}


DEPLOYMENT = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "trainer", "namespace": NS},
              "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "trainer-deploy"}},
                       "template": {"metadata": {"labels": {"app": "trainer-deploy"}}, "spec": _pod_spec("t", 2)}}}
STATEFULSET = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "ranker", "namespace": NS},
               "spec": {"replicas": 1, "serviceName": "ranker", "selector": {"matchLabels": {"app": "ranker"}},
                        "template": {"metadata": {"labels": {"app": "ranker"}}, "spec": _pod_spec("r", 1)}}}
PINNED = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pinned", "namespace": NS, "labels": {"app": "pinned"}},
          "spec": {"nodeName": "gpu-node2", **_pod_spec("p", 1)}}
WORKLOADS = {"Deployment": (DEPLOYMENT, "trainer-deploy"), "StatefulSet": (STATEFULSET, "ranker"),
             "Pod": (PINNED, "pinned")}


@pytest.fixture(scope="module", params=("1.31", "1.32", "1.34"))
def sim(request: pytest.FixtureRequest) -> Iterator[KubeSim]:
    with KubeSim(pushed=TEST_BUILDS, scenario="gpu-small", k8s_version=request.param) as sim:
        kubectl = Kubectl(sim.kubeconfig)
        for obj, _ in WORKLOADS.values():  # client-side apply: each carries a last-applied annotation
            kubectl("apply", "-f", "-", input=json.dumps(obj))
        yield sim


def _running_with_claims(kubectl: Kubectl, app: str) -> list[str]:
    """What is still wrong with the pods labelled ``app``: [] once each one runs on the node its
    claims were allocated on, reserved for it, and no pod asks for ``nvidia.com/gpu`` any more."""
    pods = kubectl.json("get", "pods", "-n", NS, "-l", f"app={app}")["items"]
    if not pods:
        return ["no pod"]
    wrong = []
    for pod in pods:
        name, status = pod["metadata"]["name"], pod.get("status") or {}
        if pod["metadata"].get("deletionTimestamp"):
            wrong.append(f"{name} terminating")
            continue
        if status.get("phase") != "Running":
            wrong.append(f"{name} {status.get('phase')}")
            continue
        claims = {s["name"]: s.get("resourceClaimName") for s in status.get("resourceClaimStatuses") or []}
        if not claims:
            wrong.append(f"{name} runs without a claim")
        for claim_name in claims.values():
            claim = kubectl.json("get", "resourceclaim", claim_name or "?", "-n", NS)
            cstatus = claim.get("status") or {}
            terms = cstatus.get("allocation", {}).get("nodeSelector", {}).get("nodeSelectorTerms") or [{}]
            nodes = [f["values"][0] for f in terms[0].get("matchFields") or []]
            if nodes != [pod["spec"]["nodeName"]]:
                wrong.append(f"{claim_name} allocated on {nodes}, pod on {pod['spec']['nodeName']}")
            if pod["metadata"]["uid"] not in [r["uid"] for r in cstatus.get("reservedFor") or []]:
                wrong.append(f"{claim_name} not reserved for {name}")
    return wrong


@pytest.mark.parametrize("kind", sorted(WORKLOADS))
def test_every_plan_applies_with_kubectl_server_side_and_its_pods_run_with_claims(
        sim: KubeSim, kind: str, tmp_path: Path, settle_until: Callable[..., None]) -> None:
    """Item 2 of issue 38: the plan ``migrate`` prints for a Deployment, a StatefulSet and a pinned
    Pod, applied as printed with ``kubectl apply --server-side``, runs: every pod Running on the node
    of its claims, which are allocated and reserved for it. The printed plan holds no server-set
    field (no last-applied annotation, no status, no uid) and no ``spec.nodeName``."""
    kubectl = Kubectl(sim.kubeconfig)
    obj, app = WORKLOADS[kind]
    with Cluster.from_kubeconfig(str(sim.kubeconfig)) as cluster:
        result = migrate(cluster, NS, obj["metadata"]["name"], kind=kind)
    assert result.accepted, [d.answer for d in result.dry_runs]
    text = manifest_text(result)
    workload = list(yaml.safe_load_all(text))[-1]
    assert LAST_APPLIED not in (workload["metadata"].get("annotations") or {})
    assert not {"uid", "resourceVersion", "creationTimestamp", "managedFields"} & set(workload["metadata"])
    assert "status" not in workload
    if kind == "Pod":
        assert "nodeName" not in workload["spec"]
        [term] = workload["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"]
        assert term["matchExpressions"] == [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": ["gpu-node2"]}]
        kubectl("delete", "pod", "pinned", "-n", NS, "--wait=false")  # a pod's spec cannot change in place
        settle_until(sim, lambda: not kubectl("get", "pods", "-n", NS, "--field-selector=metadata.name=pinned",
                                              "-o", "name").strip(), step="2s")
    plan = tmp_path / "plan.yaml"
    plan.write_text(text)
    out = kubectl("apply", "--server-side", "-f", str(plan))
    assert "serverside-applied" in out, out
    settle_until(sim, lambda: not _running_with_claims(kubectl, app), step="5s", steps=60)
    if kind == "Pod":
        pod = kubectl.json("get", "pod", "pinned", "-n", NS)
        assert pod["spec"]["nodeName"] == "gpu-node2"  # the affinity kept it on its node



def test_a_pod_a_workload_owns_is_planned_with_a_note_to_migrate_its_owner(
        sim: KubeSim, settle_until: Callable[..., None]) -> None:
    """Item 2 of issue 38: the plan holds no owner reference, so a pod of a StatefulSet re-created from
    it would run beside the one its owner makes again: the notes say to migrate the owner instead."""
    kubectl = Kubectl(sim.kubeconfig)
    scorer = json.loads(json.dumps(STATEFULSET).replace("ranker", "scorer"))
    kubectl("apply", "-f", "-", input=json.dumps(scorer))
    settle_until(sim, lambda: bool(kubectl("get", "pods", "-n", NS, "-l", "app=scorer", "-o", "name").strip()),
                 step="2s")
    with Cluster.from_kubeconfig(str(sim.kubeconfig)) as cluster:
        result = migrate(cluster, NS, "scorer-0", kind="Pod")
    assert "ownerReferences" not in result.objects[-1]["metadata"]
    assert any("belongs to StatefulSet scorer" in n and "migrate the workload that owns it" in n
               for n in result.notes), result.notes
