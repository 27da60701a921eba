"""The ServiceAccount admission plugin with the real kubectl (kubernetes/kubernetes v1.34.2,
``plugin/pkg/admission/serviceaccount/admission.go``, ``Admit``): a pod naming a ServiceAccount its
namespace does not have is refused, ``pods "p" is forbidden: error looking up service account
ns/name: serviceaccount "name" not found``; a controller's pod likewise, and the controller records
the refusal as ``FailedCreate`` (``Error creating: …``, the ReplicaSet and DaemonSet controllers'
event); the scenario's DRA driver's account exists, as its chart creates it."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from _simkit import per_release

from tests.support import Kubectl

pytestmark = pytest.mark.conformance
sim, kubectl = per_release()
IMAGE = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0"


def pod(name: str, account: str) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
                       "spec": {"serviceAccountName": account, "restartPolicy": "Never",
                                "nodeSelector": {"kubernetes.io/hostname": "cpu-node1"},
                                "containers": [{"name": "c", "image": IMAGE}]}})


def failed_creates(kubectl: Kubectl, name: str) -> list[str]:
    """The FailedCreate messages on ``name``, once kubectl's watch of them shows one (kubesim's
    controllers run on its clock)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBE")}
    env.update(KUBECONFIG=str(kubectl.kubeconfig), HOME=str(kubectl.kubeconfig.parent))
    selector = f"reason=FailedCreate,involvedObject.name={name}"
    with subprocess.Popen([kubectl.binary, "-n", "default", "get", "events", "-w", "-o", "name",
                           "--field-selector", selector, "--request-timeout=60s"],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env) as watch:
        assert watch.stdout is not None
        watch.stdout.readline()  # the first one listed or watched, or nothing after 60 s
        watch.kill()
    return [e["message"] for e in kubectl.json("-n", "default", "get", "events", "--field-selector", selector)["items"]]


def test_a_pod_naming_a_missing_account_is_refused_as_the_admission_plugin_says(kubectl: Kubectl) -> None:
    proc = kubectl.run("create", "-f", "-", input=pod("sa-missing", "trainer"), check=False)
    assert proc.returncode != 0
    assert ('Error from server (Forbidden): error when creating "STDIN": pods "sa-missing" is forbidden: error looking '
            'up service account default/trainer: serviceaccount "trainer" not found') in proc.stderr
    kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "ServiceAccount",
                                                  "metadata": {"name": "trainer", "namespace": "default"}}))
    kubectl("create", "-f", "-", input=pod("sa-missing", "trainer"))
    assert kubectl.json("-n", "default", "get", "pod", "sa-missing")["spec"]["serviceAccountName"] == "trainer"


def test_a_controllers_pod_naming_a_missing_account_is_a_failed_create(kubectl: Kubectl) -> None:
    ds = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "sa-agent", "namespace": "default"},
          "spec": {"selector": {"matchLabels": {"app": "sa-agent"}},
                   "template": {"metadata": {"labels": {"app": "sa-agent"}},
                                "spec": {"serviceAccountName": "agent-missing",
                                         "containers": [{"name": "agent", "image": IMAGE}]}}}}
    kubectl("apply", "-f", "-", input=json.dumps(ds))
    messages = failed_creates(kubectl, "sa-agent")
    assert messages, "no FailedCreate"
    assert all(m.startswith('Error creating: pods "sa-agent-') and m.endswith(
        '" is forbidden: error looking up service account default/agent-missing: serviceaccount "agent-missing" '
        'not found') for m in messages), messages
    assert kubectl.json("-n", "default", "get", "pods", "-l", "app=sa-agent")["items"] == []


def test_the_dra_drivers_account_exists_as_its_chart_creates_it(kubectl: Kubectl) -> None:
    account = kubectl.json("-n", "dra-example-driver", "get", "serviceaccount", "dra-example-driver-service-account")
    assert account["metadata"]["labels"]["app.kubernetes.io/name"] == "dra-example-driver"
    pods = kubectl.json("-n", "dra-example-driver", "get", "pods")["items"]
    assert pods and {p["spec"]["serviceAccountName"] for p in pods} == {"dra-example-driver-service-account"}
