"""RuntimeClass (``node.k8s.io/v1``) with the real kubectl: NVIDIA's README's ``nvidia`` class
(k8s-device-plugin v0.20.0, README.md) is created and listed with the columns the API server
prints (NAME, HANDLER, AGE); a pod naming it is admitted; a pod naming a class that does not
exist is refused by the RuntimeClass admission plugin as kube-apiserver refuses it
(plugin/pkg/admission/runtimeclass: ``pod rejected: RuntimeClass "x" not found``)."""

from __future__ import annotations

import json

import pytest
from _simkit import per_release

from tests.support import Kubectl

pytestmark = pytest.mark.conformance
sim, kubectl = per_release()
NVIDIA_CLASS = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "nvidia"}, "handler": "nvidia"}


def pod(name: str, runtime_class: str) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
                       "spec": {"runtimeClassName": runtime_class, "restartPolicy": "Never",
                                "nodeSelector": {"kubernetes.io/hostname": "cpu-node1"},
                                "containers": [{"name": "c", "image": "busybox:1.36", "command": ["true"]}]}})


def test_the_readmes_runtime_class_is_served_and_admits_pods(kubectl: Kubectl) -> None:
    kubectl("apply", "-f", "-", input=json.dumps(NVIDIA_CLASS))
    assert kubectl.json("get", "runtimeclass", "nvidia")["handler"] == "nvidia"
    table = kubectl("get", "runtimeclasses").splitlines()
    assert table[0].split() == ["NAME", "HANDLER", "AGE"] and table[1].split()[:2] == ["nvidia", "nvidia"]
    kubectl("apply", "-f", "-", input=pod("rc-nvidia", "nvidia"))
    assert kubectl.json("-n", "default", "get", "pod", "rc-nvidia")["spec"]["runtimeClassName"] == "nvidia"
    kubectl("-n", "default", "delete", "pod", "rc-nvidia", "--wait=false")


def test_a_pod_naming_a_missing_runtime_class_is_refused(kubectl: Kubectl) -> None:
    proc = kubectl.run("apply", "-f", "-", input=pod("rc-missing", "kata-missing"), check=False)
    assert proc.returncode != 0
    assert 'pods "rc-missing" is forbidden: pod rejected: RuntimeClass "kata-missing" not found' in proc.stderr
    assert kubectl.run("-n", "default", "get", "pod", "rc-missing", check=False).returncode != 0
