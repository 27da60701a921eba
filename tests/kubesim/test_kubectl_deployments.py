"""Deployments and ReplicaSets, refereed by the real kubectl: ``rollout status`` follows a
rolling update to the end, ``rollout undo`` brings the previous ReplicaSet back under a new
revision, ``get rs`` prints the printer's columns, a crash-looping image times out
progressing, and a pod asking for a claim template gets an allocated claim."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from kubesim import KubeSim
from tests.kubesim.test_kubectl import wait_for
from tests.support import TEST_BUILDS, Kubectl

pytestmark = pytest.mark.conformance
IMAGE = "registry.example.com/team/app:1.0"


@pytest.fixture(scope="module")
def kubectl() -> Iterator[Kubectl]:
    with KubeSim(pushed=TEST_BUILDS, scenario="gpu-small", k8s_version="1.32", speed=20.0) as sim:
        yield Kubectl(sim.kubeconfig)


def _apply(kubectl: Kubectl, tmp_path, *objs: dict) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "objs.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objs)}))
    kubectl("apply", "-f", str(path))


def deployment(name: str, image: str, *, replicas: int = 3, **spec: object) -> dict:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "default"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"nodeSelector": {"kubernetes.io/hostname": "cpu-node1"},
                                           "containers": [{"name": "app", "image": image}]}}, **spec}}


def test_rollout_update_and_undo(kubectl: Kubectl, tmp_path) -> None:  # type: ignore[no-untyped-def]
    _apply(kubectl, tmp_path, deployment("web", IMAGE))
    out = kubectl("rollout", "status", "deployment/web", "--timeout=60s", timeout=90)
    assert 'deployment "web" successfully rolled out' in out
    first = kubectl.json("get", "deployment", "web")
    assert first["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "1"
    assert {c["type"]: c["reason"] for c in first["status"]["conditions"]} == {
        "Available": "MinimumReplicasAvailable", "Progressing": "NewReplicaSetAvailable"}
    assert first["status"]["readyReplicas"] == first["status"]["availableReplicas"] == 3
    sets = kubectl.json("get", "rs", "-l", "app=web")["items"]
    assert len(sets) == 1 and sets[0]["metadata"]["ownerReferences"][0]["kind"] == "Deployment"
    pods = kubectl.json("get", "pods", "-l", "app=web")["items"]
    assert len(pods) == 3 and all(p["spec"]["nodeName"] == "cpu-node1" for p in pods)
    assert all(p["metadata"]["name"].startswith(sets[0]["metadata"]["name"] + "-") for p in pods)

    kubectl("set", "image", "deployment/web", "app=registry.example.com/team/app:2.0")
    out = kubectl("rollout", "status", "deployment/web", "--timeout=60s", timeout=90)
    assert "Waiting for deployment" in out or "successfully rolled out" in out
    sets = {s["metadata"]["annotations"]["deployment.kubernetes.io/revision"]: s
            for s in kubectl.json("get", "rs", "-l", "app=web")["items"]}
    assert sets["1"]["spec"]["replicas"] == 0 and sets["2"]["spec"]["replicas"] == 3
    images = {c["image"] for p in kubectl.json("get", "pods", "-l", "app=web")["items"] for c in p["spec"]["containers"]}
    assert images == {"registry.example.com/team/app:2.0"}
    table = kubectl("get", "rs", "-l", "app=web")
    assert table.splitlines()[0].split() == ["NAME", "DESIRED", "CURRENT", "READY", "AGE"]
    events = kubectl("get", "events", "--field-selector", "involvedObject.name=web", "-o", "json")
    assert "Scaled up replica set web-" in events and "Scaled down replica set web-" in events

    kubectl("rollout", "undo", "deployment/web")
    kubectl("rollout", "status", "deployment/web", "--timeout=60s", timeout=90)
    back = {s["metadata"]["annotations"]["deployment.kubernetes.io/revision"]: s["spec"]["replicas"]
            for s in kubectl.json("get", "rs", "-l", "app=web")["items"]}
    assert back == {"3": 3, "2": 0}  # revision 1's ReplicaSet is new again, as revision 3
    history = kubectl("rollout", "history", "deployment/web")
    assert "2 " in history and "3 " in history


def test_crash_looping_image_times_out_progressing(kubectl: Kubectl, tmp_path) -> None:  # type: ignore[no-untyped-def]
    _apply(kubectl, tmp_path, deployment("api", IMAGE, replicas=2, progressDeadlineSeconds=30))
    kubectl("rollout", "status", "deployment/api", "--timeout=60s", timeout=90)
    kubectl("set", "image", "deployment/api", "app=registry.example.com/team/app:2.0-crash")
    failed = kubectl.run("rollout", "status", "deployment/api", "--timeout=90s", check=False, timeout=120)
    assert failed.returncode == 1
    assert 'error: deployment "api" exceeded its progress deadline' in failed.stderr
    status = kubectl.json("get", "deployment", "api")["status"]
    assert status["availableReplicas"] >= 1  # maxUnavailable 25% of 2 rounds to 0: the old pods stay
    progressing = next(c for c in status["conditions"] if c["type"] == "Progressing")
    assert progressing["status"] == "False" and progressing["reason"] == "ProgressDeadlineExceeded"


def test_recreate_strategy_stops_old_pods_first(kubectl: Kubectl, tmp_path) -> None:  # type: ignore[no-untyped-def]
    _apply(kubectl, tmp_path, deployment("batch", IMAGE, replicas=2, strategy={"type": "Recreate"}))
    kubectl("rollout", "status", "deployment/batch", "--timeout=60s", timeout=90)
    kubectl("set", "image", "deployment/batch", "app=registry.example.com/team/app:3.0")
    kubectl("rollout", "status", "deployment/batch", "--timeout=60s", timeout=90)
    wait_for(lambda: {c["image"] for p in kubectl.json("get", "pods", "-l", "app=batch")["items"]
                      for c in p["spec"]["containers"]} == {"registry.example.com/team/app:3.0"}, timeout=30)


def statefulset(name: str, image: str, *, replicas: int = 3, **spec: object) -> dict:
    return {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": name, "namespace": "default"},
            "spec": {"replicas": replicas, "serviceName": name, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"nodeSelector": {"kubernetes.io/hostname": "cpu-node1"},
                                           "containers": [{"name": "db", "image": image}]}}, **spec}}


def test_statefulset_ordered_pods_rolling_update_and_undo(kubectl: Kubectl, tmp_path) -> None:  # type: ignore[no-untyped-def]
    _apply(kubectl, tmp_path, statefulset("db", IMAGE))
    stored = kubectl.json("get", "statefulset", "db")["spec"]
    assert stored["updateStrategy"] == {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}
    assert stored["podManagementPolicy"] == "OrderedReady"  # the API server's defaults
    out = kubectl("rollout", "status", "statefulset/db", "--timeout=60s", timeout=90)
    assert "partitioned roll out complete: 3 new pods have been updated" in out  # kubectl, with the defaulted partition 0
    pods = kubectl.json("get", "pods", "-l", "app=db")["items"]
    assert sorted(p["metadata"]["name"] for p in pods) == ["db-0", "db-1", "db-2"]
    created = {p["metadata"]["name"]: p["metadata"]["creationTimestamp"] for p in pods}
    assert created["db-0"] <= created["db-1"] <= created["db-2"]  # one after the other
    assert pods[0]["spec"]["hostname"] == pods[0]["metadata"]["name"] and pods[0]["spec"]["subdomain"] == "db"
    assert kubectl("get", "statefulset", "db").splitlines()[0].split() == ["NAME", "READY", "AGE"]
    assert kubectl("get", "statefulset", "db", "--no-headers").split()[1] == "3/3"

    kubectl("set", "image", "statefulset/db", "db=registry.example.com/team/app:2.0")
    kubectl("rollout", "status", "statefulset/db", "--timeout=60s", timeout=90)
    status = kubectl.json("get", "statefulset", "db")["status"]
    assert status["currentRevision"] == status["updateRevision"] and status["updatedReplicas"] == 3
    images = {c["image"] for p in kubectl.json("get", "pods", "-l", "app=db")["items"] for c in p["spec"]["containers"]}
    assert images == {"registry.example.com/team/app:2.0"}
    history = kubectl("rollout", "history", "statefulset/db")
    assert "1 " in history and "2 " in history
    kubectl("rollout", "undo", "statefulset/db")
    kubectl("rollout", "status", "statefulset/db", "--timeout=60s", timeout=90)
    images = {c["image"] for p in kubectl.json("get", "pods", "-l", "app=db")["items"] for c in p["spec"]["containers"]}
    assert images == {IMAGE}


def test_statefulset_partition_keeps_lower_ordinals(kubectl: Kubectl, tmp_path) -> None:  # type: ignore[no-untyped-def]
    _apply(kubectl, tmp_path, statefulset("cache", IMAGE, replicas=3, updateStrategy={
        "type": "RollingUpdate", "rollingUpdate": {"partition": 2}}))
    kubectl("rollout", "status", "statefulset/cache", "--timeout=60s", timeout=90)
    kubectl("set", "image", "statefulset/cache", "db=registry.example.com/team/app:2.0")
    out = kubectl("rollout", "status", "statefulset/cache", "--timeout=60s", timeout=90)
    assert "partitioned roll out complete: 1 new pods have been updated" in out
    by_name = {p["metadata"]["name"]: p["spec"]["containers"][0]["image"]
               for p in kubectl.json("get", "pods", "-l", "app=cache")["items"]}
    assert by_name == {"cache-0": IMAGE, "cache-1": IMAGE, "cache-2": "registry.example.com/team/app:2.0"}
