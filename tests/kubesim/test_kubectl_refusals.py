"""Finding 9 of the security review: kubesim refuses what the API server refuses, refereed by the
real kubectl. A user ID outside 0..2147483647 in a DaemonSet's pod template is a 422 Invalid
naming the field; a pod naming no PriorityClass is refused by the Priority admission plugin
(403); a DaemonSet naming one is stored, and its controller's pods are refused (FailedCreate),
as on a real cluster. A dry run (``--dry-run=server``) is refused alike and changes nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from kubesim import KubeSim
from tests.kubesim.test_kubectl import wait_for
from tests.support import TEST_BUILDS, Kubectl

pytestmark = pytest.mark.conformance
DS, NS = "nvidia-device-plugin-daemonset", "kube-system"
RUN_AS = json.dumps([{"op": "add", "path": "/spec/template/spec/containers/0/securityContext",
                      "value": {"runAsUser": 9999999999}}])
INVALID = (f'The DaemonSet "{DS}" is invalid: spec.template.spec.containers[0].securityContext.runAsUser: '
           "Invalid value: 9999999999: must be between 0 and 2147483647, inclusive")
POD = """apiVersion: v1
kind: Pod
metadata: {name: x, namespace: default}
spec:
  priorityClassName: does-not-exist
  containers: [{name: c, image: "busybox:1.36"}]
"""


@pytest.fixture
def sim() -> Iterator[KubeSim]:
    with KubeSim(pushed=TEST_BUILDS, scenario="gpu-small", k8s_version="1.31", speed=10.0) as served:
        yield served


def test_a_user_id_out_of_int32_is_invalid_as_kubectl_prints_it(sim: KubeSim) -> None:
    """finding 9: runAsUser 9999999999 in the template: kubectl prints the API server's 422
    sentence, for the write and for its server-side dry run; the DaemonSet is unchanged."""
    kubectl = Kubectl(sim.kubeconfig)
    before = kubectl.json("get", "daemonset", DS, "-n", NS)["metadata"]["generation"]
    for dry in ((), ("--dry-run=server",)):
        proc = kubectl.run("patch", "daemonset", DS, "-n", NS, "--type=json", "-p", RUN_AS, *dry, check=False)
        assert proc.returncode == 1 and proc.stderr.strip() == INVALID, proc.stderr
    pod_spec = json.dumps({"spec": {"securityContext": {"fsGroup": -1}}})
    proc = kubectl.run("run", "y", "--image=busybox:1.36", "--overrides", pod_spec, check=False)
    assert proc.returncode == 1 and proc.stderr.strip() == (
        'The Pod "y" is invalid: spec.securityContext.fsGroup: Invalid value: -1: '
        "must be between 0 and 2147483647, inclusive"), proc.stderr
    assert kubectl.json("get", "daemonset", DS, "-n", NS)["metadata"]["generation"] == before


def test_a_pod_naming_no_priority_class_is_forbidden_by_admission(sim: KubeSim) -> None:
    """finding 9: the Priority admission plugin's 403, as kubectl prints it (also for a dry run);
    the system classes are admitted."""
    kubectl = Kubectl(sim.kubeconfig)
    for dry in ((), ("--dry-run=server",)):
        proc = kubectl.run("create", "-f", "-", *dry, input=POD, check=False)
        assert proc.returncode == 1, proc.stderr
        assert proc.stderr.strip() == ('Error from server (Forbidden): error when creating "STDIN": pods "x" is '
                                       "forbidden: no PriorityClass with name does-not-exist was found"), proc.stderr
    ok = POD.replace("does-not-exist", "system-node-critical")
    assert kubectl("create", "-f", "-", "--dry-run=server", input=ok).strip() == "pod/x created (server dry run)"


def test_a_daemonset_naming_no_priority_class_is_stored_but_its_pods_are_refused(sim: KubeSim) -> None:
    """finding 9: as on a real cluster the DaemonSet itself is accepted (its dry run too, so a dry
    run of the DaemonSet alone cannot catch it); the pod it then makes is refused, and the
    controller says so in a FailedCreate event."""
    kubectl = Kubectl(sim.kubeconfig)
    patch = json.dumps({"spec": {"template": {"spec": {"priorityClassName": "does-not-exist"}}}})
    before = kubectl.json("get", "daemonset", DS, "-n", NS)["metadata"]["generation"]
    assert "patched" in kubectl("patch", "daemonset", DS, "-n", NS, "-p", patch, "--dry-run=server")
    assert kubectl.json("get", "daemonset", DS, "-n", NS)["metadata"]["generation"] == before
    kubectl("patch", "daemonset", DS, "-n", NS, "-p", patch)
    pods = kubectl.json("get", "pods", "-n", NS, "-l", "name=nvidia-device-plugin-ds")["items"]
    # the controller may replace it first (the template changed): either way a new pod is asked for
    kubectl("delete", "pod", "-n", NS, pods[0]["metadata"]["name"], "--wait=false", "--ignore-not-found")

    def refused() -> str:
        events = kubectl.json("get", "events", "-n", NS, "--field-selector", "reason=FailedCreate")["items"]
        return next((e["message"] for e in events if e["involvedObject"]["name"] == DS), "")

    message = wait_for(refused)
    assert message == (f'Error creating: pods "{DS}-" is forbidden: no PriorityClass with name does-not-exist '
                       "was found"), message
