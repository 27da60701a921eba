"""kubesim refuses what the API server refuses and adds what its admission chain adds (issue 35,
items 1 and 2), refereed by the real kubectl on 1.27, 1.32 and 1.34: names, labels, references
inside a pod spec, selectors against templates, DRA driver names and selectors, immutable
selectors; a created pod's defaults, tolerations and service-account token volume."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from kubesim import KubeSim, apivalidation, selectors
from tests.kubesim._simkit import per_release
from tests.support import Kubectl

pytestmark = pytest.mark.conformance


sim, kubectl = per_release()


def refusal(kubectl: Kubectl, obj: dict[str, Any], *args: str) -> str:
    """What kubectl prints when the object is refused (the refusal must happen and store nothing)."""
    proc = kubectl.run(*(args or ("create", "-f", "-")), check=False, input=json.dumps(obj))
    assert proc.returncode != 0, proc.stdout
    return proc.stderr.strip()


def pod(name: str, containers: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": containers, **spec}}


def ctr(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "image": "registry.example.com/app:1", **extra}


def daemonset(name: str, selector: dict[str, str], labels: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name, "namespace": "default"},
            "spec": {"selector": {"matchLabels": selector}, "template": {
                "metadata": {"labels": labels}, "spec": {"containers": [ctr("app")]}}}}


# ------------------------------------------------------------------ item 1: validation
def test_container_name_must_be_a_dns1123_label(kubectl: Kubectl) -> None:
    """Issue 35 item 1: a container named C_bad is refused as validateContainers refuses it."""
    out = refusal(kubectl, pod("bad-container", [ctr("C_bad")]))
    assert out == ('The Pod "bad-container" is invalid: spec.containers[0].name: Invalid value: "C_bad": '
                   + apivalidation.LABEL_MSG)
    assert kubectl.run("get", "pod", "bad-container", check=False).returncode != 0


def test_container_names_unique_and_mounts_and_claims_declared(kubectl: Kubectl) -> None:
    """Issue 35 item 1: a second container of the same name is a Duplicate value; a volumeMount naming
    no volume is Not found; resources.claims naming no pod resourceClaims entry is Not found with the
    API server's explanation."""
    assert refusal(kubectl, pod("dup", [ctr("c"), ctr("c")])) == \
        'The Pod "dup" is invalid: spec.containers[1].name: Duplicate value: "c"'
    mount = ctr("c", volumeMounts=[{"name": "data", "mountPath": "/data"}])
    assert refusal(kubectl, pod("nomount", [mount])) == \
        'The Pod "nomount" is invalid: spec.containers[0].volumeMounts[0].name: Not found: "data"'
    claimed = ctr("c", resources={"claims": [{"name": "gpu"}]})
    assert refusal(kubectl, pod("noclaim", [claimed])) == (
        'The Pod "noclaim" is invalid: spec.containers[0].resources.claims[0]: Not found: "gpu": '
        "must be one of the names in pod.spec.resourceClaims which is empty")


def test_service_names_are_dns1035_and_label_values_at_most_63(kubectl: Kubectl) -> None:
    """Issue 35 item 1: a Service name starting with a digit is refused (DNS-1035); a label value
    starting with '-' is refused (ValidateLabels), as kube-apiserver words both."""
    svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "1svc", "namespace": "default"},
           "spec": {"ports": [{"port": 80}]}}
    assert refusal(kubectl, svc) == ('The Service "1svc" is invalid: metadata.name: Invalid value: "1svc": '
                                     + apivalidation.DNS1035_MSG)
    cm = {"apiVersion": "v1", "kind": "ConfigMap",
          "metadata": {"name": "bad-label", "namespace": "default", "labels": {"app": "-bad"}}}
    assert refusal(kubectl, cm) == ('The ConfigMap "bad-label" is invalid: metadata.labels: Invalid value: "-bad": '
                                    + selectors._VALUE_MSG)


def test_workload_selector_must_match_template_and_is_immutable(sim: KubeSim, kubectl: Kubectl) -> None:
    """Issue 35 item 1: a DaemonSet whose selector does not select its template's labels is refused;
    once created, changing its selector is refused as immutable, printed as the API server prints it
    (the value with Go's %#v through 1.33, as JSON from 1.34: apimachinery's field.Error.ErrorBody)."""
    as_json = sim.minor >= 34
    out = refusal(kubectl, daemonset("mismatch", {"app": "a"}, {"app": "b"}))
    labels = '{"app":"b"}' if as_json else 'map[string]string{"app":"b"}'
    assert out == ('The DaemonSet "mismatch" is invalid: spec.template.metadata.labels: Invalid value: '
                   f'{labels}: `selector` does not match template `labels`')
    kubectl("create", "-f", "-", input=json.dumps(daemonset("fixed", {"app": "a"}, {"app": "a"})))
    try:
        out = refusal(kubectl, daemonset("fixed", {"app": "b"}, {"app": "b"}), "replace", "-f", "-")
        selector = '{"matchLabels":{"app":"b"}}' if as_json else (
            'v1.LabelSelector{MatchLabels:map[string]string{"app":"b"}, '
            'MatchExpressions:[]v1.LabelSelectorRequirement(nil)}')
        assert out == f'The DaemonSet "fixed" is invalid: spec.selector: Invalid value: {selector}: field is immutable'
        assert kubectl("get", "ds", "fixed", "-o", "jsonpath={.spec.selector.matchLabels.app}") == "a"
    finally:
        kubectl("delete", "ds", "fixed", "--wait=false")


def test_dra_driver_names_and_class_selectors(sim: KubeSim, kubectl: Kubectl) -> None:
    """Issue 35 item 1: a DRA driver name with a slash (nvidia.com/gpu) is not a DNS subdomain: refused in a
    1.27 ResourceClass's driverName and a ResourceSlice's spec.driver; a DeviceClass selector without its
    CEL expression is refused."""
    if sim.minor == 27:
        rc = {"apiVersion": "resource.k8s.io/v1alpha2", "kind": "ResourceClass", "metadata": {"name": "bad-driver"},
              "driverName": "nvidia.com/gpu"}
        assert refusal(kubectl, rc) == ('The ResourceClass "bad-driver" is invalid: driverName: Invalid value: '
                                        '"nvidia.com/gpu": ' + apivalidation.SUBDOMAIN_MSG)
        return
    version = "v1beta1" if sim.minor == 32 else "v1"
    rs = {"apiVersion": f"resource.k8s.io/{version}", "kind": "ResourceSlice", "metadata": {"name": "bad-driver"},
          "spec": {"driver": "nvidia.com/gpu", "nodeName": "gpu-node1",
                   "pool": {"name": "gpu-node1", "generation": 1, "resourceSliceCount": 1}}}
    assert refusal(kubectl, rs) == ('The ResourceSlice "bad-driver" is invalid: spec.driver: Invalid value: '
                                    '"nvidia.com/gpu": ' + apivalidation.SUBDOMAIN_MSG)
    dc = {"apiVersion": f"resource.k8s.io/{version}", "kind": "DeviceClass", "metadata": {"name": "no-cel"},
          "spec": {"selectors": [{}]}}
    assert refusal(kubectl, dc) == 'The DeviceClass "no-cel" is invalid: spec.selectors[0].cel: Required value'


def test_statefulset_pods_mount_their_claim_templates(kubectl: Kubectl) -> None:
    """Issue 35 item 1: a StatefulSet whose container mounts a volumeClaimTemplate is valid, and its pod gets
    the claim's volume (claimName <template>-<pod>) as the StatefulSet controller adds it, so the pod passes
    the pod validation that refuses a mount naming no volume."""
    sts = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "web", "namespace": "default"},
           "spec": {"selector": {"matchLabels": {"app": "web"}}, "serviceName": "web", "template": {
               "metadata": {"labels": {"app": "web"}},
               "spec": {"containers": [ctr("app", volumeMounts=[{"name": "data", "mountPath": "/data"}])]}},
               "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {
                   "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]}}
    kubectl("create", "-f", "-", input=json.dumps(sts))
    try:
        _wait(lambda: kubectl.run("get", "pod", "web-0", check=False).returncode == 0)
        volumes = kubectl.json("get", "pod", "web-0")["spec"]["volumes"]
        assert volumes[0] == {"name": "data", "persistentVolumeClaim": {"claimName": "data-web-0"}}
    finally:
        kubectl("delete", "sts", "web", "--wait=false")


# ------------------------------------------------------------------ item 2: admission defaults
def test_created_pod_gets_admission_defaults(kubectl: Kubectl) -> None:
    """Issue 35 item 2: a pod created with only a container gets SetDefaults_PodSpec's fields, the
    ServiceAccount admission's default account and kube-api-access-<5> token volume mounted read-only,
    DefaultTolerationSeconds' two tolerations and priority 0; kubectl describe shows them."""
    body = pod("defaulted", [ctr("app"), {"name": "side", "image": "busybox"}], nodeName="no-such-node")
    kubectl("create", "-f", "-", input=json.dumps(body))
    try:
        spec = kubectl.json("get", "pod", "defaulted")["spec"]
        assert {k: spec.get(k) for k in ("dnsPolicy", "restartPolicy", "terminationGracePeriodSeconds", "securityContext",
                                         "schedulerName", "enableServiceLinks", "serviceAccountName", "serviceAccount",
                                         "priority", "preemptionPolicy")} == {
            "dnsPolicy": "ClusterFirst", "restartPolicy": "Always", "terminationGracePeriodSeconds": 30,
            "securityContext": {}, "schedulerName": "default-scheduler", "enableServiceLinks": True,
            "serviceAccountName": "default", "serviceAccount": "default", "priority": 0,
            "preemptionPolicy": "PreemptLowerPriority"}
        assert [c["imagePullPolicy"] for c in spec["containers"]] == ["IfNotPresent", "Always"]
        assert {c["terminationMessagePath"] for c in spec["containers"]} == {"/dev/termination-log"}
        assert spec["tolerations"] == [
            {"effect": "NoExecute", "key": k, "operator": "Exists", "tolerationSeconds": 300}
            for k in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")]
        [volume] = spec["volumes"]
        assert re.fullmatch(r"kube-api-access-[bcdfghjklmnpqrstvwxz2456789]{5}", volume["name"])
        assert volume["projected"]["sources"][0] == {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}
        for c in spec["containers"]:
            assert c["volumeMounts"] == [{"mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                                          "name": volume["name"], "readOnly": True}]
        described = kubectl("describe", "pod", "defaulted")
        assert "node.kubernetes.io/not-ready:NoExecute op=Exists for 300s" in described
        assert "node.kubernetes.io/unreachable:NoExecute op=Exists for 300s" in described
        assert re.search(rf"Volumes:\n  {volume['name']}:\n    Type:\s+Projected", described), described
        assert "/var/run/secrets/kubernetes.io/serviceaccount from " + volume["name"] + " (ro)" in described
    finally:
        kubectl("delete", "pod", "defaulted", "--wait=false")


def test_admission_keeps_what_the_pod_says(kubectl: Kubectl) -> None:
    """Issue 35 item 2: a pod tolerating every NoExecute taint gets no default toleration, a pod with
    automountServiceAccountToken false no token volume; its own account is kept."""
    body = pod("own", [ctr("app")], nodeName="no-such-node", automountServiceAccountToken=False,
               serviceAccountName="default", tolerations=[{"operator": "Exists", "effect": "NoExecute"}])
    kubectl("create", "-f", "-", input=json.dumps(body))
    try:
        spec = kubectl.json("get", "pod", "own")["spec"]
        assert spec["tolerations"] == [{"operator": "Exists", "effect": "NoExecute"}]
        assert "volumes" not in spec and "volumeMounts" not in spec["containers"][0]
    finally:
        kubectl("delete", "pod", "own", "--wait=false")


def test_workload_template_defaulted_but_not_admitted(kubectl: Kubectl) -> None:
    """Issue 35 item 2: a DaemonSet's template gets SetDefaults_PodSpec's fields (no enableServiceLinks,
    a pod-only default) and no admission: no default tolerations, no token volume, no account."""
    kubectl("create", "-f", "-", input=json.dumps(daemonset("tmpl", {"app": "t"}, {"app": "t"})))
    try:
        spec = kubectl.json("get", "ds", "tmpl")["spec"]["template"]["spec"]
        assert spec["dnsPolicy"] == "ClusterFirst" and spec["schedulerName"] == "default-scheduler"
        assert spec["containers"][0]["imagePullPolicy"] == "IfNotPresent"
        for absent in ("enableServiceLinks", "tolerations", "volumes", "serviceAccountName", "priority"):
            assert absent not in spec, absent
    finally:
        kubectl("delete", "ds", "tmpl", "--wait=false")


def test_every_namespace_has_the_root_ca_the_token_volume_projects(sim: KubeSim, kubectl: Kubectl) -> None:
    """Issue 35 item 2: the kube-root-ca.crt ConfigMap the token volume projects is in every namespace, a new
    one too, with the cluster's CA (the one in the kubeconfig), so a created pod's volumes mount and it runs."""
    import base64

    import yaml
    ca = base64.b64decode(yaml.safe_load(sim.kubeconfig.read_text())["clusters"][0]["cluster"][
        "certificate-authority-data"]).decode()
    kubectl("create", "namespace", "rootca")
    try:
        for ns in ("default", "kube-system", "rootca"):
            _wait(lambda n=ns: kubectl.run("get", "configmap", "kube-root-ca.crt", "-n", n, check=False).returncode == 0)
            assert kubectl("get", "configmap", "kube-root-ca.crt", "-n", ns, "-o", r"jsonpath={.data.ca\.crt}") == ca
        body = pod("runs", [ctr("app")], nodeName="gpu-node1")
        body["metadata"]["namespace"] = "rootca"
        kubectl("create", "-f", "-", input=json.dumps(body))
        _wait(lambda: kubectl("get", "pod", "runs", "-n", "rootca", "-o", "jsonpath={.status.phase}") == "Running")
    finally:
        kubectl("delete", "namespace", "rootca", "--wait=false")


def _wait(predicate: Any, timeout: float = 60.0) -> None:
    import time
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.2)
