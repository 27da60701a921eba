"""Issue 35: the pods kubesim's own controllers make (DaemonSet, ReplicaSet, StatefulSet, Job)
and the pods a scenario seeds go through the admission chain a pod created through the API
goes through (service-account token volume, default tolerations, priority from the
PriorityClass, schedulerName, enableServiceLinks), and a DaemonSet's pods carry the
tolerations the DaemonSet controller adds (``AddOrUpdateDaemonPodTolerations``). Refereed by
the real kubectl on 1.27, 1.32 and 1.34."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.kubesim._simkit import per_release
from tests.kubesim.test_kubectl import wait_for
from tests.support import Kubectl

pytestmark = pytest.mark.conformance

sim, kubectl = per_release()

TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
TOKEN_VOLUME = re.compile(r"kube-api-access-[bcdfghjklmnpqrstvwxz2456789]{5}")
DEFAULT_TOLERATIONS = [{"effect": "NoExecute", "key": k, "operator": "Exists", "tolerationSeconds": 300}
                       for k in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")]
DAEMON_TOLERATIONS = [
    {"effect": "NoExecute", "key": "node.kubernetes.io/not-ready", "operator": "Exists"},
    {"effect": "NoExecute", "key": "node.kubernetes.io/unreachable", "operator": "Exists"},
    {"effect": "NoSchedule", "key": "node.kubernetes.io/disk-pressure", "operator": "Exists"},
    {"effect": "NoSchedule", "key": "node.kubernetes.io/memory-pressure", "operator": "Exists"},
    {"effect": "NoSchedule", "key": "node.kubernetes.io/pid-pressure", "operator": "Exists"},
    {"effect": "NoSchedule", "key": "node.kubernetes.io/unschedulable", "operator": "Exists"},
]
NETWORK_UNAVAILABLE = {"effect": "NoSchedule", "key": "node.kubernetes.io/network-unavailable", "operator": "Exists"}
GPU_TOLERATION = {"effect": "NoSchedule", "key": "nvidia.com/gpu", "operator": "Exists"}


def admitted(spec: dict[str, Any], *, priority: int) -> None:
    """What the admission chain adds to every pod it admits, checked on ``spec``."""
    assert {k: spec.get(k) for k in ("serviceAccountName", "serviceAccount", "schedulerName", "enableServiceLinks",
                                     "priority", "preemptionPolicy")} == {
        "serviceAccountName": "default", "serviceAccount": "default",
        "schedulerName": "default-scheduler", "enableServiceLinks": True, "priority": priority,
        "preemptionPolicy": "PreemptLowerPriority"}
    tokens = [v for v in spec.get("volumes") or [] if TOKEN_VOLUME.fullmatch(v["name"])]
    assert len(tokens) == 1, spec.get("volumes")
    [token] = tokens
    assert [s.get("configMap", {}).get("name") for s in token["projected"]["sources"]] == [None, "kube-root-ca.crt", None]
    assert token["projected"]["sources"][0] == {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}
    for ctr in spec["containers"]:
        assert {"mountPath": TOKEN_PATH, "name": token["name"], "readOnly": True} in ctr["volumeMounts"], ctr


def pods_of(kubectl: Kubectl, ns: str, selector: str) -> list[dict[str, Any]]:
    return kubectl.json("get", "pods", "-n", ns, "-l", selector)["items"]  # type: ignore[no-any-return]


def without_token(spec: dict[str, Any]) -> dict[str, Any]:
    """The spec with the token volume's random name made constant, its node pinning dropped."""
    text = TOKEN_VOLUME.sub("kube-api-access-xxxxx", json.dumps(spec))
    out: dict[str, Any] = json.loads(text)
    for per_node in ("nodeName", "affinity"):
        out.pop(per_node, None)
    return out


def test_controller_pods_are_admitted_like_api_pods(kubectl: Kubectl) -> None:
    """issue 35: the pods of a DaemonSet, a Deployment's ReplicaSet, a StatefulSet and a Job get the
    token volume mounted in every container, the default account, schedulerName and
    enableServiceLinks, their PriorityClass's value as priority; the ReplicaSet's, StatefulSet's and
    Job's pods DefaultTolerationSeconds' two tolerations; the DaemonSet's pods the DaemonSet
    controller's tolerations (not-ready and unreachable NoExecute for ever, the pressure and
    unschedulable NoSchedule ones, network-unavailable for a hostNetwork pod), a template
    toleration of the same key, effect and operator replaced by the controller's; kubectl
    describe shows them."""
    kubectl("create", "priorityclass", "gpu-critical", "--value=1000000")
    template = {"containers": [{"name": "app", "image": "registry.example.com/app:1"},
                               {"name": "side", "image": "registry.example.com/side:1"}],
                "nodeSelector": {"kubernetes.io/hostname": "cpu-node1"}}
    daemon_tpl = {**template, "hostNetwork": True, "priorityClassName": "gpu-critical", "nodeSelector": {
        "kubernetes.io/hostname": "gpu-node1"}, "tolerations": [
        GPU_TOLERATION, {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
                         "tolerationSeconds": 60}]}

    def workload(kind: str, api: str, name: str, spec: dict[str, Any], **extra: Any) -> dict[str, Any]:
        return {"apiVersion": api, "kind": kind, "metadata": {"name": name, "namespace": "default"},
                "spec": {"selector": {"matchLabels": {"app": name}}, **extra,
                         "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}}

    objs = [workload("DaemonSet", "apps/v1", "agent", daemon_tpl),
            workload("Deployment", "apps/v1", "web", {**template, "priorityClassName": "gpu-critical"}, replicas=1),
            workload("StatefulSet", "apps/v1", "db", template, replicas=1, serviceName="db"),
            {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "once", "namespace": "default"},
             "spec": {"template": {"spec": {**template, "restartPolicy": "Never"}}}}]
    kubectl("create", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}))
    try:
        found = {sel: wait_for(lambda s=sel: pods_of(kubectl, "default", s), what=f"a pod of {sel}")
                 for sel in ("app=agent", "app=web", "app=db", "job-name=once")}
        [agent] = found["app=agent"]
        admitted(agent["spec"], priority=1000000)
        assert agent["spec"]["tolerations"] == [
            GPU_TOLERATION, *DAEMON_TOLERATIONS, NETWORK_UNAVAILABLE]
        admitted(found["app=web"][0]["spec"], priority=1000000)
        for sel in ("app=web", "app=db", "job-name=once"):
            spec = found[sel][0]["spec"]
            admitted(spec, priority=1000000 if sel == "app=web" else 0)
            assert spec["tolerations"] == DEFAULT_TOLERATIONS, sel
        described = kubectl("describe", "pod", "-n", "default", agent["metadata"]["name"])
        assert re.search(r"Priority:\s+1000000\n", described) and re.search(r"Priority Class Name:\s+gpu-critical", described)
        assert re.search(r"Volumes:\n  kube-api-access-\w{5}:\n    Type:\s+Projected", described), described
        assert "node.kubernetes.io/disk-pressure:NoSchedule op=Exists\n" in described
        assert "node.kubernetes.io/not-ready:NoExecute op=Exists\n" in described
        assert "node.kubernetes.io/network-unavailable:NoSchedule op=Exists\n" in described
        web = kubectl("describe", "pod", "-n", "default", found["app=web"][0]["metadata"]["name"])
        assert "node.kubernetes.io/unreachable:NoExecute op=Exists for 300s" in web
        assert f"{TOKEN_PATH} from kube-api-access-" in web
    finally:
        kubectl("delete", "-f", "-", "--wait=false", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}))
        kubectl("delete", "priorityclass", "gpu-critical", "--wait=false")


def test_seeded_pods_are_admitted_as_their_controller_would_make_them(kubectl: Kubectl) -> None:
    """issue 35: the pods a scenario seeds are admitted too: a seeded workload pod has the token volume
    and the default tolerations, and a seeded device plugin pod is the pod its DaemonSet controller
    makes for the same node (deleted, it is made again with the same spec but for its token
    volume's random name): the controller's tolerations, the token volume, system-node-critical's
    priority."""
    trainer = kubectl.json("get", "pod", "-n", "ml-team", "trainer-0")["spec"]
    admitted(trainer, priority=0)
    assert trainer["tolerations"] == DEFAULT_TOLERATIONS
    selector = "name=nvidia-device-plugin-ds"
    seeded = [p for p in pods_of(kubectl, "kube-system", selector) if p["spec"]["nodeName"] == "gpu-node2"]
    assert len(seeded) == 1
    spec = seeded[0]["spec"]
    admitted(spec, priority=2000001000)
    assert spec["tolerations"] == [GPU_TOLERATION, *DAEMON_TOLERATIONS]
    kubectl("delete", "pod", "-n", "kube-system", seeded[0]["metadata"]["name"], "--wait=false")

    def remade() -> list[dict[str, Any]]:
        return [p for p in pods_of(kubectl, "kube-system", selector) if p["spec"]["nodeName"] == "gpu-node2"
                and p["metadata"]["uid"] != seeded[0]["metadata"]["uid"]]

    [made] = wait_for(remade, what="the device plugin pod made again")
    assert without_token(made["spec"]) == without_token(spec)
    assert made["spec"]["volumes"] != spec["volumes"], "each pod its own token volume name"
