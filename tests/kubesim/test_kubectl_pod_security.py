"""Pod Security admission by namespace label, with the real kubectl, as kube-apiserver's built-in
PodSecurity plugin answers (kubernetes/pod-security-admission v0.34.2: ``admission/admission.go``,
``api/helpers.go``, ``policy/check_*.go``, ``policy/registry.go``): a namespace's
``pod-security.kubernetes.io/enforce`` level refuses a pod with the checks' reasons and details,
in the registry's order (baseline checks, then restricted, each sorted by id); ``warn`` (which
defaults to the enforce level) answers a workload's template and an allowed pod with a
``Warning``; a label value the library cannot parse is refused on the namespace; labelling a
namespace stricter warns about the pods already there."""

from __future__ import annotations

import json
from typing import Any

import pytest
from _simkit import per_release

from tests.support import Kubectl

pytestmark = pytest.mark.conformance
sim, kubectl = per_release()

SMOKE = {"name": "smoke", "image": "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0"}
RESTRICTED_SMOKE = (
    'violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false (container "smoke" must set '
    'securityContext.allowPrivilegeEscalation=false), unrestricted capabilities (container "smoke" must set '
    'securityContext.capabilities.drop=["ALL"]), runAsNonRoot != true (pod or container "smoke" must set '
    'securityContext.runAsNonRoot=true), seccompProfile (pod or container "smoke" must set '
    'securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")')


def namespace(kubectl: Kubectl, name: str, **labels: str) -> None:
    full = {f"pod-security.kubernetes.io/{k.replace('_', '-')}": v for k, v in labels.items()}
    kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "Namespace",
                                                   "metadata": {"name": name, "labels": full}}))


def pod(name: str, ns: str, *, containers: list[dict[str, Any]] | None = None, **spec: Any) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
                       "spec": {"restartPolicy": "Never", "nodeSelector": {"kubernetes.io/hostname": "cpu-node1"},
                                "containers": containers or [dict(SMOKE)], **spec}})


def test_restricted_refuses_the_smoke_pod_with_pod_securitys_own_words(kubectl: Kubectl) -> None:
    namespace(kubectl, "psa-restricted", enforce="restricted")
    proc = kubectl.run("create", "-f", "-", input=pod("smoke-1", "psa-restricted"), check=False)
    assert proc.returncode != 0
    assert f'Error from server (Forbidden): error when creating "STDIN": pods "smoke-1" is forbidden: {RESTRICTED_SMOKE}' \
        in proc.stderr
    assert kubectl.run("-n", "psa-restricted", "get", "pod", "smoke-1", check=False).returncode != 0


def test_restricted_admits_a_pod_that_meets_it_and_names_the_version_label(kubectl: Kubectl) -> None:
    namespace(kubectl, "psa-pinned", enforce="restricted", enforce_version="v1.24")
    hardened = {**SMOKE, "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                                             "runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}}
    kubectl("create", "-f", "-", input=pod("hardened", "psa-pinned", containers=[hardened]))
    proc = kubectl.run("create", "-f", "-", input=pod("soft", "psa-pinned", securityContext={"runAsUser": 0},
                                                         containers=[{**hardened, "name": "s"}]), check=False)
    assert 'pods "soft" is forbidden: violates PodSecurity "restricted:v1.24": runAsUser=0 (pod must not set ' \
        'runAsUser=0)' in proc.stderr


def test_baseline_refuses_what_a_device_plugin_pod_may_carry_in_the_registry_order(kubectl: Kubectl) -> None:
    namespace(kubectl, "psa-baseline", enforce="baseline")
    plugin = {"name": "plugin", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.0",
              "securityContext": {"privileged": True, "capabilities": {"add": ["SYS_ADMIN", "CHOWN"]}}}
    body = pod("plugin", "psa-baseline", containers=[plugin], hostNetwork=True, hostPID=True,
               securityContext={"seccompProfile": {"type": "Unconfined"}},
               volumes=[{"name": "device-plugin", "hostPath": {"path": "/var/lib/kubelet/device-plugins"}}])
    proc = kubectl.run("create", "-f", "-", input=body, check=False)
    assert ('pods "plugin" is forbidden: violates PodSecurity "baseline:latest": non-default capabilities '
            '(container "plugin" must not include "SYS_ADMIN" in securityContext.capabilities.add), host namespaces '
            '(hostNetwork=true, hostPID=true), hostPath volumes (volume "device-plugin"), privileged (container '
            '"plugin" must not set securityContext.privileged=true), seccompProfile (pod must not set '
            'securityContext.seccompProfile.type to "Unconfined")') in proc.stderr
    kubectl("create", "-f", "-", input=pod("plain", "psa-baseline"))  # baseline asks nothing of a plain pod


def test_privileged_and_unlabelled_namespaces_admit_anything(kubectl: Kubectl) -> None:
    namespace(kubectl, "psa-privileged", enforce="privileged")
    root = {**SMOKE, "securityContext": {"privileged": True}}
    for ns in ("psa-privileged", "default"):
        proc = kubectl.run("create", "-f", "-", input=pod("root", ns, containers=[root], hostNetwork=True))
        assert "Warning" not in proc.stderr


def test_warn_answers_an_allowed_pod_and_a_workload_template_with_a_warning(kubectl: Kubectl) -> None:
    namespace(kubectl, "psa-warn", warn="baseline")
    proc = kubectl.run("create", "-f", "-", input=pod("host", "psa-warn", hostNetwork=True))
    assert 'Warning: would violate PodSecurity "baseline:latest": host namespaces (hostNetwork=true)' in proc.stderr
    assert kubectl.json("-n", "psa-warn", "get", "pod", "host")["spec"]["hostNetwork"] is True
    namespace(kubectl, "psa-enforced", enforce="restricted")  # warn defaults to the enforce level
    ds = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent", "namespace": "psa-enforced"},
          "spec": {"selector": {"matchLabels": {"app": "agent"}},
                   "template": {"metadata": {"labels": {"app": "agent"}}, "spec": {"containers": [dict(SMOKE)]}}}}
    proc = kubectl.run("create", "-f", "-", input=json.dumps(ds))
    assert "Warning: would violate" + RESTRICTED_SMOKE.removeprefix("violates") in proc.stderr


def test_a_label_value_pod_security_cannot_parse_is_refused_on_the_namespace(kubectl: Kubectl) -> None:
    proc = kubectl.run("create", "-f", "-", check=False, input=json.dumps({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "psa-bad", "labels": {"pod-security.kubernetes.io/enforce": "strict"}}}))
    assert ('The Namespace "psa-bad" is invalid: metadata.labels[pod-security.kubernetes.io/enforce]: Invalid value: '
            '"strict": must be one of privileged, baseline, restricted') in proc.stderr


def test_labelling_a_namespace_stricter_warns_about_the_pods_already_there(kubectl: Kubectl) -> None:
    namespace(kubectl, "psa-later")
    kubectl("create", "-f", "-", input=pod("old-1", "psa-later"))
    kubectl("create", "-f", "-", input=pod("old-2", "psa-later"))
    proc = kubectl.run("label", "namespace", "psa-later", "pod-security.kubernetes.io/enforce=restricted")
    assert 'Warning: existing pods in namespace "psa-later" violate the new PodSecurity enforce level ' \
        '"restricted:latest"' in proc.stderr
    assert ("Warning: old-1 (and 1 other pod): allowPrivilegeEscalation != false, unrestricted capabilities, "
            "runAsNonRoot != true, seccompProfile") in proc.stderr
