"""Controllers clients rely on, refereed by the real kubectl: a new namespace gets its
``default`` ServiceAccount; a deleted one turns Terminating, refuses new content, loses
its objects and then disappears."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from kubesim import KubeSim
from tests.kubesim.test_kubectl import wait_for
from tests.support import TEST_BUILDS, Kubectl

pytestmark = pytest.mark.conformance


@pytest.fixture(scope="module")
def kubectl() -> Iterator[Kubectl]:
    with KubeSim(pushed=TEST_BUILDS, scenario="gpu-small", k8s_version="1.32", speed=5.0) as sim:
        yield Kubectl(sim.kubeconfig)


def _manifest(tmp_path, name: str, *objs: dict) -> str:  # type: ignore[no-untyped-def]
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objs)}))
    return str(path)


def test_every_namespace_has_a_default_service_account(kubectl: Kubectl) -> None:
    for ns in ("default", "kube-system", "ml-team"):
        assert kubectl("get", "serviceaccount", "default", "-n", ns, "-o", "name") == "serviceaccount/default\n"


def test_namespace_create_default_account_delete_gone(kubectl: Kubectl, tmp_path) -> None:  # type: ignore[no-untyped-def]
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-x"}}
    kubectl("apply", "-f", _manifest(tmp_path, "ns", ns))
    wait_for(lambda: kubectl.run("get", "sa", "default", "-n", "team-x", check=False).returncode == 0, timeout=10)

    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "sleeper", "namespace": "team-x"},
           "spec": {"nodeName": "cpu-node1", "terminationGracePeriodSeconds": 10,
                    "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9"}]}}
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "data": {"a": "b"},  # held until its finalizer goes
          "metadata": {"name": "settings", "namespace": "team-x", "finalizers": ["example.com/hold"]}}
    kubectl("apply", "-f", _manifest(tmp_path, "content", pod, cm))
    wait_for(lambda: "Running" in kubectl("get", "pod", "sleeper", "-n", "team-x", "--no-headers"), timeout=20)

    out = kubectl("delete", "namespace", "team-x", "--wait=false")
    assert out == 'namespace "team-x" deleted\n'
    terminating = kubectl.json("get", "namespace", "team-x")
    assert terminating["status"]["phase"] == "Terminating" and terminating["metadata"]["deletionTimestamp"]
    assert "Terminating" in kubectl("get", "namespace", "team-x", "--no-headers")

    late = {**cm, "metadata": {"name": "late", "namespace": "team-x"}}
    refused = kubectl.run("apply", "-f", _manifest(tmp_path, "late", late), check=False)
    assert refused.returncode == 1
    assert ('Error from server (Forbidden): error when creating "' in refused.stderr
            and 'configmaps "late" is forbidden: unable to create new content in namespace team-x '
                "because it is being terminated" in refused.stderr)
    again = kubectl.run("delete", "namespace", "team-x", "--wait=false", check=False)
    assert "The system is ensuring all content is removed from this namespace" in again.stderr

    def conditions() -> dict[str, str]:
        got = kubectl.run("get", "namespace", "team-x", "-o", "json", check=False)
        return {c["type"]: c["message"] for c in json.loads(got.stdout)["status"].get("conditions") or []} if (
            got.returncode == 0) else {}
    # The pod terminates gracefully first (the condition names it meanwhile); then only the held ConfigMap remains.
    held = "Some resources are remaining: configmaps has 1 resource instances"
    finalizers = "Some content in the namespace has finalizers remaining: example.com/hold in 1 resource instances"
    wait_for(lambda: (conditions().get("NamespaceContentRemaining"),
                      conditions().get("NamespaceFinalizersRemaining")) == (held, finalizers), timeout=30)
    wait_for(lambda: kubectl.run("get", "pod", "sleeper", "-n", "team-x", check=False).returncode == 1, timeout=20)
    assert kubectl.json("get", "configmap", "settings", "-n", "team-x")["metadata"]["deletionTimestamp"]

    kubectl("patch", "configmap", "settings", "-n", "team-x", "--type=merge", "-p", '{"metadata":{"finalizers":null}}')
    kubectl("wait", "--for=delete", "namespace/team-x", "--timeout=60s", timeout=90)
    gone = kubectl.run("get", "namespace", "team-x", check=False)
    assert gone.returncode == 1 and 'namespaces "team-x" not found' in gone.stderr
    assert kubectl("get", "pods,configmaps,serviceaccounts", "-n", "team-x", "--no-headers",
                   "--ignore-not-found") == ""


def test_system_namespaces_may_not_be_deleted(kubectl: Kubectl) -> None:
    refused = kubectl.run("delete", "namespace", "kube-system", "--wait=false", check=False)
    assert refused.returncode == 1
    assert 'namespaces "kube-system" is forbidden: this namespace may not be deleted' in refused.stderr


def test_a_deleted_default_account_comes_back(kubectl: Kubectl) -> None:
    uid = kubectl.json("get", "sa", "default", "-n", "ml-team")["metadata"]["uid"]
    kubectl("delete", "sa", "default", "-n", "ml-team")
    wait_for(lambda: kubectl.run("get", "sa", "default", "-n", "ml-team", check=False).returncode == 0, timeout=10)
    assert kubectl.json("get", "sa", "default", "-n", "ml-team")["metadata"]["uid"] != uid
