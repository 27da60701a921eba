"""kubesim behaves as the API server where issue 35 found it did not, refereed by the real kubectl
and the official client on 1.27, 1.32 and 1.34: the create strategies' fields, no-op writes,
unique pod IPs, self reviews, CSIDrivers and the feature gates in ``/metrics``."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client, config

from kubesim import KubeSim
from tests.kubesim._simkit import RELEASES, per_release
from tests.kubesim.test_kubectl import wait_for
from tests.support import Kubectl

pytestmark = pytest.mark.conformance


sim, kubectl = per_release()


@pytest.fixture(scope="module")
def core(sim: KubeSim) -> client.CoreV1Api:
    return client.CoreV1Api(config.new_client_from_config(config_file=str(sim.kubeconfig)))


def minor(sim: KubeSim) -> int:
    return sim.minor


def pod(name: str, *, resources: dict[str, Any] | None = None, pod_resources: dict[str, Any] | None = None,
        gates: bool = False, containers: int = 1) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [
        {"name": f"c{i}", "image": "registry.example.com/app:1", "resources": resources or {}}
        for i in range(containers)]}
    if pod_resources is not None:
        spec["resources"] = pod_resources
    if gates:
        spec["schedulingGates"] = [{"name": "example.com/wait"}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"}, "spec": spec}


# ------------------------------------------------------------------ item 1: create strategies
@pytest.mark.parametrize(("name", "resources", "qos"), [
    ("qos-besteffort", None, "BestEffort"),
    ("qos-burstable", {"requests": {"cpu": "100m"}}, "Burstable"),
    ("qos-guaranteed", {"limits": {"cpu": "1", "memory": "1Gi"}}, "Guaranteed"),
    ("qos-gpu-only", {"limits": {"nvidia.com/gpu": "1"}}, "BestEffort"),
    ("qos-zero", {"requests": {"cpu": "0"}, "limits": {"cpu": "0"}}, "BestEffort"),
    ("qos-unequal", {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
     "Burstable"),
])
def test_pod_create_answer_has_pending_phase_and_qos_class(
        core: client.CoreV1Api, kubectl: Kubectl, name: str, resources: dict[str, Any] | None, qos: str) -> None:
    """Issue 35 item 1: the pod answered to create_namespaced_pod has the status the pod create strategy
    sets (phase Pending, qosClass from requests and limits as Kubernetes computes it), not none."""
    body = pod(name, resources=resources)
    body["spec"]["nodeName"] = "no-such-node"  # stays Pending: no kubelet ever writes its status
    body["status"] = {"phase": "Running", "podIP": "1.2.3.4"}  # a client's status is dropped
    resp = core.create_namespaced_pod("default", body)
    try:
        assert resp.status is not None and resp.status.phase == "Pending"
        assert resp.status.qos_class == qos
        assert resp.status.pod_ip is None
        assert kubectl("get", "pod", name, "-o", "jsonpath={.status.phase} {.status.qosClass}") == f"Pending {qos}"
    finally:
        core.delete_namespaced_pod(name, "default", grace_period_seconds=0)


def test_pod_level_resources_decide_qos_from_1_34(sim: KubeSim, core: client.CoreV1Api) -> None:
    """Issue 35 item 1: with PodLevelResources (beta, on by default from 1.34) the pod's own resources
    decide its QoS class; before, they are dropped and the containers' decide."""
    body = pod("qos-podlevel", pod_resources={"limits": {"cpu": "1", "memory": "1Gi"}}, containers=2)
    body["spec"]["nodeName"] = "no-such-node"
    resp = core.create_namespaced_pod("default", body)
    try:
        assert resp.status.qos_class == ("Guaranteed" if minor(sim) >= 34 else "BestEffort")
    finally:
        core.delete_namespaced_pod("qos-podlevel", "default", grace_period_seconds=0)


def test_gated_pod_is_created_with_scheduling_gated_condition(core: client.CoreV1Api, kubectl: Kubectl) -> None:
    """Issue 35 item 1: a pod with scheduling gates is created with PodScheduled False, reason SchedulingGated,
    and kubectl shows it SchedulingGated."""
    resp = core.create_namespaced_pod("default", pod("gated", gates=True))
    try:
        conditions = {c.type: c for c in resp.status.conditions or []}
        assert conditions["PodScheduled"].status == "False"
        assert conditions["PodScheduled"].reason == "SchedulingGated"
        assert conditions["PodScheduled"].message == "Scheduling is blocked due to non-empty scheduling gates"
        line = kubectl("get", "pod", "gated", "--no-headers").split()
        assert line[2] == "SchedulingGated", line
    finally:
        core.delete_namespaced_pod("gated", "default", grace_period_seconds=0)


def test_namespace_create_sets_phase_label_and_finalizer(core: client.CoreV1Api, kubectl: Kubectl) -> None:
    """Issue 35 item 1: a namespace is created Active, labelled kubernetes.io/metadata.name with its name
    (also when a client sends another value or updates the label away), with the kubernetes finalizer
    added to a spec that lacks it."""
    resp = core.create_namespace({"metadata": {"name": "strategy-ns", "labels": {"kubernetes.io/metadata.name": "x"}},
                                  "spec": {"finalizers": ["example.com/keep"]}, "status": {"phase": "Terminating"}})
    try:
        assert resp.status.phase == "Active"
        assert resp.metadata.labels == {"kubernetes.io/metadata.name": "strategy-ns"}
        assert resp.spec.finalizers == ["example.com/keep", "kubernetes"]
        kubectl("label", "namespace", "strategy-ns", "kubernetes.io/metadata.name-")
        assert kubectl("get", "ns", "-l", "kubernetes.io/metadata.name=strategy-ns", "-o", "name") == \
            "namespace/strategy-ns\n"
        assert kubectl("get", "ns", "strategy-ns", "--no-headers").split()[1] == "Active"
    finally:
        core.delete_namespace("strategy-ns")


def test_node_create_defaults_allocatable_to_capacity(core: client.CoreV1Api, kubectl: Kubectl) -> None:
    """Issue 35 item 1: a node created with a capacity and no allocatable gets allocatable = capacity
    (SetDefaults_NodeStatus); a node keeps the status its client sends (the node strategy allows it)."""
    resp = core.create_node({"metadata": {"name": "strategy-node"},
                             "status": {"capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"}}})
    try:
        assert resp.status.capacity == {"cpu": "4", "memory": "8Gi", "pods": "110"}
        assert resp.status.allocatable == resp.status.capacity
        described = kubectl("describe", "node", "strategy-node")
        assert "Allocatable:" in described and "8Gi" in described.split("Allocatable:")[1]
    finally:
        core.delete_node("strategy-node")


def test_resource_claim_create_drops_status(sim: KubeSim, kubectl: Kubectl) -> None:
    """Issue 35 item 1: a ResourceClaim is created with an empty status (what a client sends as the
    allocation is dropped): kubectl shows it pending, not allocated."""
    version = {27: "v1alpha2", 32: "v1beta1", 34: "v1"}[minor(sim)]
    if minor(sim) == 27:
        spec: dict[str, Any] = {"resourceClassName": "gpu.nvidia.com"}
        allocation: dict[str, Any] = {"allocation": {"shareable": False}, "driverName": "gpu.nvidia.com"}
    else:
        spec = {"devices": {"requests": [{"name": "gpu", **(
            {"exactly": {"deviceClassName": "gpu.nvidia.com"}} if minor(sim) >= 34
            else {"deviceClassName": "gpu.nvidia.com"})}]}}
        allocation = {"allocation": {"devices": {"results": [
            {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "gpu-node1", "device": "gpu-0"}]}}}
    claim = {"apiVersion": f"resource.k8s.io/{version}", "kind": "ResourceClaim",
             "metadata": {"name": "strategy-claim", "namespace": "default"}, "spec": spec, "status": allocation}
    created = json.loads(kubectl("create", "-f", "-", "-o", "json", input=json.dumps(claim)))
    try:
        assert not created.get("status"), created.get("status")
        head, row = kubectl("get", "resourceclaim", "strategy-claim").splitlines()
        assert row.split()[head.split().index("STATE")] == "pending", (head, row)
    finally:
        kubectl("delete", "resourceclaim", "strategy-claim", "--wait=false")


# ------------------------------------------------------------------ item 2: no-op writes
def _rv(kubectl: Kubectl, name: str) -> str:
    return kubectl("get", "configmap", name, "-o", "jsonpath={.metadata.resourceVersion}")


def test_noop_patch_update_and_apply_keep_resource_version(
        core: client.CoreV1Api, kubectl: Kubectl) -> None:
    """Issue 35 item 2: a repeated no-op kubectl patch prints 'patched (no change)'; a no-op patch, PUT
    (kubectl replace) and server-side apply leave resourceVersion as it was and emit no watch event:
    the first event a watch from before them sees is the next real change."""
    kubectl("create", "-f", "-", input="apiVersion: v1\nkind: ConfigMap\nmetadata: {name: noop}\ndata: {a: '1'}\n")
    try:
        patch = '{"metadata":{"labels":{"tier":"gpu"}}}'
        assert kubectl("patch", "configmap", "noop", "-p", patch).strip() == "configmap/noop patched"
        start = _rv(kubectl, "noop")
        assert kubectl("patch", "configmap", "noop", "-p", patch).strip() == "configmap/noop patched (no change)"
        assert kubectl("patch", "configmap", "noop", "--type=json", "-p",
                       '[{"op":"replace","path":"/data/a","value":"1"}]').strip() == \
            "configmap/noop patched (no change)"
        live = kubectl("get", "configmap", "noop", "-o", "json")
        kubectl("replace", "-f", "-", input=live)
        core.replace_namespaced_config_map("noop", "default", json.loads(live))
        applied = ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: noop, namespace: default}\n"
                   "data: {b: '2'}\n")
        kubectl("apply", "--server-side", "-f", "-", input=applied)
        after_apply = _rv(kubectl, "noop")
        assert after_apply != start
        kubectl("apply", "--server-side", "-f", "-", input=applied)
        assert kubectl("patch", "configmap", "noop", "-p", patch).strip() == "configmap/noop patched (no change)"
        assert _rv(kubectl, "noop") == after_apply
        kubectl("label", "configmap", "noop", "next=change")
        from kubernetes import watch
        seen = []
        for event in watch.Watch().stream(core.list_namespaced_config_map, "default", resource_version=after_apply,
                                          field_selector="metadata.name=noop", timeout_seconds=30):
            seen.append((event["type"], dict(event["object"].metadata.labels or {})))
            break
        assert seen == [("MODIFIED", {"tier": "gpu", "next": "change"})]
    finally:
        kubectl("delete", "configmap", "noop")


# ------------------------------------------------------------------ item 3: pod IPs
def _ips_on(kubectl: Kubectl, node: str) -> dict[str, str] | None:
    """pod name -> IP of every pod on ``node`` not on the host network; None while one has none."""
    pods = kubectl.json("get", "pods", "-A", "--field-selector", f"spec.nodeName={node}")["items"]
    out = {}
    for p in pods:
        if p["spec"].get("hostNetwork") or p["metadata"].get("deletionTimestamp"):
            continue
        ip = p.get("status", {}).get("podIP")
        if not ip:
            return None
        out[f"{p['metadata']['namespace']}/{p['metadata']['name']}"] = ip
    return out


def test_pod_ips_are_distinct_and_inside_the_node_pod_cidr(core: client.CoreV1Api, kubectl: Kubectl) -> None:
    """Issue 35 item 3: every node has a podCIDR of its own (a node created through the API gets one),
    and the pods on a node get distinct IPs from it, also with the scenario's pods there and after pods
    are deleted and others take their place (an address is released with its pod)."""
    import ipaddress
    nodes = kubectl.json("get", "nodes")["items"]
    cidrs = {n["metadata"]["name"]: n["spec"].get("podCIDR") for n in nodes}
    assert all(cidrs.values()) and len(set(cidrs.values())) == len(cidrs), cidrs
    core.create_node({"metadata": {"name": "ipam-node"}})
    try:
        added = wait_for(lambda: kubectl("get", "node", "ipam-node", "-o", "jsonpath={.spec.podCIDR}"), 60.0)
        assert added not in cidrs.values()
        assert kubectl("get", "node", "ipam-node", "-o", "jsonpath={.spec.podCIDRs[0]}") == added
    finally:
        core.delete_node("ipam-node")
    node = "gpu-node1"
    names = [f"ipam-{i}" for i in range(40)]
    for name in names:
        body = pod(name)
        body["spec"]["nodeName"] = node
        core.create_namespaced_pod("default", body)
    try:
        for name in names[:10]:
            core.delete_namespaced_pod(name, "default", grace_period_seconds=0)
        for name in names[:10]:
            wait_for(lambda n=name: not kubectl("get", "pod", n, "--ignore-not-found", "-o", "name"), 60.0)
            body = pod(name)
            body["spec"]["nodeName"] = node
            core.create_namespaced_pod("default", body)
        ips = wait_for(lambda: (lambda got: got if got and all(f"default/{n}" in got for n in names) else None)(
            _ips_on(kubectl, node)), 60.0)
        assert len(set(ips.values())) == len(ips), sorted(ips.items(), key=lambda kv: kv[1])
        network = ipaddress.ip_network(cidrs[node])
        assert all(ipaddress.ip_address(ip) in network for ip in ips.values()), (network, ips)
        wide = kubectl("get", "pods", "-o", "wide", "--field-selector", f"spec.nodeName={node}")
        assert ips["default/ipam-0"] in wide
    finally:
        for name in names:
            core.delete_namespaced_pod(name, "default", grace_period_seconds=0)


# ------------------------------------------------------------------ item 4: self reviews
RBAC_OBJECTS = """
apiVersion: v1
kind: Namespace
metadata: {name: reviews}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: viewer, namespace: reviews}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: pod-reader, namespace: reviews}
rules:
- {apiGroups: [""], resources: [pods], verbs: [get, list, watch]}
- {apiGroups: [apps], resources: [daemonsets], resourceNames: [agent], verbs: [patch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: viewer-reads-pods, namespace: reviews}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: pod-reader}
subjects:
- {kind: ServiceAccount, name: viewer, namespace: reviews}
"""


@pytest.fixture(scope="module")
def viewer_token(kubectl: Kubectl) -> str:
    kubectl("apply", "-f", "-", input=RBAC_OBJECTS)
    return kubectl("create", "token", "viewer", "-n", "reviews").strip()


def _table(text: str) -> list[list[str]]:
    import re
    return [re.split(r"\s{2,}", line.strip()) for line in text.splitlines() if line.strip()]


def test_auth_whoami_answers_from_1_28(sim: KubeSim, kubectl: Kubectl, viewer_token: str) -> None:
    """Issue 35 item 4: kubectl auth whoami is answered by SelfSubjectReview (authentication.k8s.io/v1, served
    from 1.28; 1.27 serves it only in v1beta1, off by default, so kubectl says the API is not enabled there):
    the admin's name and groups; a ServiceAccount's name, the account's UID, its groups and its token's id."""
    if minor(sim) < 28:
        proc = kubectl.run("auth", "whoami", check=False)
        assert proc.returncode != 0
        assert "the selfsubjectreviews API is not enabled in the cluster" in proc.stderr
        assert "selfsubjectreviews" not in kubectl("api-resources", "--api-group=authentication.k8s.io")
        return
    assert "selfsubjectreviews" in kubectl("api-resources", "--api-group=authentication.k8s.io")
    admin = dict((row[0], row[1]) for row in _table(kubectl("auth", "whoami"))[1:])
    assert admin["Username"] == "system:serviceaccount:upgradebot:upgradebot"
    assert admin["Groups"] == "[system:masters system:authenticated]"
    rows = _table(kubectl("auth", "whoami", "--token", viewer_token))
    assert rows[0] == ["ATTRIBUTE", "VALUE"]
    viewer = dict((row[0], row[1]) for row in rows[1:])
    assert viewer["Username"] == "system:serviceaccount:reviews:viewer"
    assert viewer["UID"] == kubectl("get", "sa", "viewer", "-n", "reviews", "-o", "jsonpath={.metadata.uid}")
    assert viewer["Groups"] == "[system:serviceaccounts system:serviceaccounts:reviews system:authenticated]"
    as_json = json.loads(kubectl("auth", "whoami", "--token", viewer_token, "-o", "json"))
    assert as_json["apiVersion"] == "authentication.k8s.io/v1" and as_json["kind"] == "SelfSubjectReview"
    jti = json.loads(_b64(viewer_token.split(".")[1]))["jti"]
    # ServiceAccountTokenJTI (on from 1.30): the token's id is in the user's extra
    assert viewer["Extra: authentication.kubernetes.io/credential-id"] == f"[JTI={jti}]"


def _b64(text: str) -> bytes:
    import base64
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def test_auth_can_i_list_answers_from_rbac(kubectl: Kubectl, viewer_token: str) -> None:
    """Issue 35 item 4: kubectl auth can-i --list is answered by SelfSubjectRulesReview from kubesim's RBAC:
    a ServiceAccount sees its Role's rules in the Role's namespace (not elsewhere) and what every
    authenticated user may do; the admin sees every right."""
    assert "selfsubjectrulesreviews" in kubectl("api-resources", "--api-group=authorization.k8s.io")
    rows = _table(kubectl("auth", "can-i", "--list", "-n", "reviews", "--token", viewer_token))
    assert rows[0] == ["Resources", "Non-Resource URLs", "Resource Names", "Verbs"]
    assert ["pods", "[]", "[]", "[get list watch]"] in rows
    assert ["daemonsets.apps", "[]", "[agent]", "[patch]"] in rows
    assert ["selfsubjectaccessreviews.authorization.k8s.io", "[]", "[]", "[create]"] in rows
    assert ["[/healthz]", "[]", "[get]"] in rows
    elsewhere = _table(kubectl("auth", "can-i", "--list", "-n", "default", "--token", viewer_token))
    assert not any(row[0] == "pods" for row in elsewhere)
    admin = _table(kubectl("auth", "can-i", "--list"))
    assert ["*.*", "[]", "[]", "[*]"] in admin and ["[*]", "[]", "[*]"] in admin


# ------------------------------------------------------------------ item 5: CSIDriver
CSI_DRIVER = """
apiVersion: storage.k8s.io/v1
kind: CSIDriver
metadata: {name: csi.example.com}
spec:
  podInfoOnMount: true
  tokenRequests: [{audience: vault}, {audience: gcp}]
  volumeLifecycleModes: [Persistent, Ephemeral]
"""


def test_csidrivers_are_served_empty_by_default(kubectl: Kubectl) -> None:
    """Issue 35 item 5: storage.k8s.io/v1 CSIDrivers are served (discovery, list, get, create, delete), none at
    first; kubectl get prints the API server's CSIDriver columns, and a driver is stored with its defaults."""
    assert "csidrivers" in kubectl("api-resources", "--api-group=storage.k8s.io")
    empty = kubectl.run("get", "csidrivers")
    assert empty.stdout == "" and "No resources found" in empty.stderr
    assert kubectl("create", "-f", "-", input=CSI_DRIVER).strip() == "csidriver.storage.k8s.io/csi.example.com created"
    try:
        head, row = kubectl("get", "csidrivers").splitlines()
        assert head.split() == ["NAME", "ATTACHREQUIRED", "PODINFOONMOUNT", "STORAGECAPACITY", "TOKENREQUESTS",
                                "REQUIRESREPUBLISH", "MODES", "AGE"]
        assert row.split()[:7] == ["csi.example.com", "true", "true", "false", "vault,gcp", "false",
                                   "Persistent,Ephemeral"]
        stored = kubectl.json("get", "csidriver", "csi.example.com")
        assert stored["spec"]["attachRequired"] is True
        assert stored["spec"]["fsGroupPolicy"] == "ReadWriteOnceWithFSType"
        assert stored["spec"]["requiresRepublish"] is False and stored["spec"]["storageCapacity"] is False
        assert stored["spec"]["seLinuxMount"] is False
        assert "generation" not in stored["metadata"]
    finally:
        assert kubectl("delete", "csidriver", "csi.example.com").strip() == \
            'csidriver.storage.k8s.io "csi.example.com" deleted'
    assert "No resources found" in kubectl.run("get", "csidrivers").stderr


# ------------------------------------------------------------------ item 6: feature gates in /metrics
def _gates(kubectl: Kubectl) -> dict[str, tuple[str, int]]:
    import re
    out: dict[str, tuple[str, int]] = {}
    for line in kubectl("get", "--raw", "/metrics").splitlines():
        found = re.fullmatch(r'kubernetes_feature_enabled\{name="([A-Za-z0-9]+)",stage="([A-Z]*)"\} ([01])', line)
        if line.startswith("kubernetes_feature_enabled{"):
            assert found, line
            assert found[1] not in out, line
            out[found[1]] = (found[2], int(found[3]))
    return out


GPU_GATES = {
    # gate: (1.27, 1.32, 1.34) as (stage, enabled), None where the release does not have it
    "DynamicResourceAllocation": (("ALPHA", 1), ("BETA", 1), ("", 1)),  # the scenarios turn DRA on
    "DRAControlPlaneController": (None, None, None),  # a gate of 1.31 only: 1.27's classic DRA is DRA's own
    "DRAAdminAccess": (None, ("ALPHA", 0), ("BETA", 1)),
    "DRAResourceClaimDeviceStatus": (None, ("ALPHA", 0), ("BETA", 1)),
    "DRAPrioritizedList": (None, None, ("BETA", 1)),
    "DRAPartitionableDevices": (None, None, ("ALPHA", 0)),
    "DRAConsumableCapacity": (None, None, ("ALPHA", 0)),
    "DevicePluginCDIDevices": (None, ("", 1), None),  # GA in 1.31, removed in 1.34
    "KubeletPodResourcesGet": (("ALPHA", 0), ("ALPHA", 0), ("BETA", 1)),
    "KubeletPodResourcesDynamicResources": (("ALPHA", 0), ("ALPHA", 0), ("BETA", 1)),
    "KubeletPodResourcesGetAllocatable": (("BETA", 1), None, None),
    "PodLevelResources": (None, ("ALPHA", 0), ("BETA", 1)),
    "WatchList": (("ALPHA", 0), ("BETA", 1), ("BETA", 1)),  # off in 1.33, on again in 1.34
}


def test_metrics_report_every_feature_gate_of_the_release(sim: KubeSim, kubectl: Kubectl) -> None:
    """Issue 35 item 6: /metrics has a kubernetes_feature_enabled sample for every feature gate the release
    registers (not 3), each with the stage and default of that release; the DRA and device-plugin gates
    appear, graduate and go as in Kubernetes."""
    gates = _gates(kubectl)
    column = RELEASES.index(f"1.{minor(sim)}")
    assert len(gates) == (149, 181, 208)[column], sorted(gates)  # issue 35 item 5: the removed gates too
    for name, by_release in GPU_GATES.items():
        assert gates.get(name) == by_release[column], (name, gates.get(name))
