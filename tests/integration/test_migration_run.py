"""A migration as a run on kubesim: requested (the plan stored with the run), approved,
applied, verified by its pods running with allocated claims; a migration whose pods cannot
get their devices fails verification and is rolled back to the saved pod template, its
ResourceClaimTemplates deleted. kubectl referees the end state."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from bot.storage.redis_store import RedisRunStore
from kubesim import KubeSim
from runbooks.cluster import Cluster
from runbooks.daemonset.steps import DaemonSetSteps
from runbooks.dra.migration_run import RUN_LABEL, MigrationSteps
from runbooks.engine.commands import Engine
from runbooks.engine.refusals import Refused
from runbooks.engine.runs import GateKind, RunKind, RunState
from runbooks.engine.scoping import OutOfScope, ScopedCluster
from tests.engine_support import ALICE, BOB, policy
from tests.support import TEST_BUILDS, Kubectl

TRAINER = "registry.example.com/ml/trainer:2.1.0"


def deployment(name: str, gpus: int) -> dict:
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "ml-team"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}}, "progressDeadlineSeconds": 20,
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [
                                  {"name": "train", "image": TRAINER,
                                   "resources": {"limits": {"nvidia.com/gpu": str(gpus), "cpu": "1"}}}]}}},
    }


POLICY = policy(migrations={"namespaces": ["ml-team"]},
                steps={"ready_timeout": "60s", "poll_interval": "1s"})


@pytest.fixture(scope="module", params=[32, 34], ids=lambda m: f"1.{m}")
def sim(request: pytest.FixtureRequest) -> Iterator[KubeSim]:
    with KubeSim(pushed=TEST_BUILDS, scenario="gpu-small", k8s_version=f"1.{request.param}", speed=20.0) as running:
        yield running


def engine_on(sim: KubeSim, redis_url: str) -> Engine:
    return Engine(store=RedisRunStore.from_url(redis_url), steps=DaemonSetSteps(), policy=POLICY,
                  connect=lambda context: Cluster.from_kubeconfig(sim.kubeconfig, context),
                  kinds={RunKind.MIGRATION: MigrationSteps()})


def _deploy(kubectl: Kubectl, obj: dict) -> None:
    kubectl("apply", "-f", "-", input=json.dumps(obj))
    kubectl("rollout", "status", f"deployment/{obj['metadata']['name']}", "-n", "ml-team", "--timeout=60s", timeout=90)


def _run_to_end(engine: Engine, name: str):  # type: ignore[no-untyped-def]
    outcome = engine.request_migration(actor=ALICE, namespace="ml-team", name=name, device_class="gpu.example.com")
    run = outcome.run
    assert run.kind is RunKind.MIGRATION and run.state is RunState.AWAITING_APPROVAL
    assert run.gate is not None and run.gate.kind is GateKind.MIGRATION
    assert run.target.kind == "Deployment" and run.change["templates"][0]["metadata"]["labels"][RUN_LABEL] == run.id
    engine.decide(run.id, actor=BOB, approve=True, kind=GateKind.MIGRATION)
    return run, engine.advance(run.id)


def test_an_applied_migration_runs_its_pods_with_allocated_claims(sim: KubeSim, redis_url: str) -> None:
    kubectl = Kubectl(sim.kubeconfig)
    _deploy(kubectl, deployment("trainer", 2))
    engine = engine_on(sim, redis_url)
    run, done = _run_to_end(engine, "trainer")
    assert done.state is RunState.DONE, done.reason
    assert "run with allocated claims" in done.reason
    pods = kubectl.json("get", "pods", "-n", "ml-team", "-l", "app=trainer")["items"]
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")  # the scenario's bare pods share the label
            and (p["metadata"].get("ownerReferences") or [{}])[0].get("kind") == "ReplicaSet"]
    assert len(live) == 1 and live[0]["status"]["phase"] == "Running"
    [container] = live[0]["spec"]["containers"]
    assert "nvidia.com/gpu" not in str(container.get("resources")) and container["resources"]["claims"]
    [status] = live[0]["status"]["resourceClaimStatuses"]
    claim = kubectl.json("get", "resourceclaims", status["resourceClaimName"], "-n", "ml-team")
    assert len(claim["status"]["allocation"]["devices"]["results"]) == 2
    names = [e["name"] for e in engine.audit(run.id)]
    assert names.index("apply.template") < names.index("apply.workload") < names.index("verify.claims-allocated")
    assert kubectl("get", "resourceclaimtemplates", "trainer-train-gpu", "-n", "ml-team", "-o", "name").strip()


def test_a_migration_that_cannot_allocate_is_rolled_back(sim: KubeSim, redis_url: str) -> None:
    """The DRA driver runs and registers but cannot allocate (a ``-noalloc`` image): the
    migrated pod stays Pending with the scheduler's message, verify fails, and the rollback
    puts the saved pod template back (the pod gets its GPUs from the device plugin again) and
    deletes the run's ResourceClaimTemplate."""
    kubectl = Kubectl(sim.kubeconfig)
    _deploy(kubectl, deployment("greedy", 1))
    before = kubectl.json("get", "deployment", "greedy", "-n", "ml-team")["spec"]["template"]
    driver = ("-n", "dra-example-driver", "daemonset/dra-example-driver-kubeletplugin")
    kubectl("set", "image", *driver, "plugin=registry.k8s.io/dra-example-driver/dra-example-driver:v0.1.0-noalloc")
    kubectl("rollout", "status", *driver, "--timeout=60s", timeout=90)
    try:
        run, end = _run_to_end(engine_on(sim, redis_url), "greedy")
    finally:
        kubectl("set", "image", *driver, "plugin=registry.k8s.io/dra-example-driver/dra-example-driver:v0.1.0")
        kubectl("rollout", "status", *driver, "--timeout=60s", timeout=90)
    assert end.state is RunState.ROLLED_BACK, end.reason
    assert "the migration's verification failed" in end.reason
    audit = engine_on(sim, redis_url).audit(run.id)
    verify = next(e for e in audit if e["name"] == "verify.claims-allocated")
    assert verify["status"] == "failed" and "Pending" in verify["detail"], verify["detail"]
    assert any(e["name"] == "rollback.workload" and e["status"] == "ok" for e in audit)
    assert next(e for e in audit if e["name"] == "rollback.rollout")["status"] == "ok"
    assert kubectl.json("get", "deployment", "greedy", "-n", "ml-team")["spec"]["template"] == before
    gone = kubectl.run("get", "resourceclaimtemplates", "greedy-train-gpu", "-n", "ml-team", check=False)
    assert gone.returncode == 1 and "NotFound" in gone.stderr


def test_a_statefulset_is_migrated_pod_by_pod(sim: KubeSim, redis_url: str) -> None:
    """A StatefulSet's pods are replaced from the highest ordinal down; each ends with its claim."""
    kubectl = Kubectl(sim.kubeconfig)
    obj = deployment("shards", 1)
    obj["kind"] = "StatefulSet"
    obj["spec"].pop("progressDeadlineSeconds")
    obj["spec"].update(replicas=2, serviceName="shards")
    kubectl("apply", "-f", "-", input=json.dumps(obj))
    kubectl("rollout", "status", "statefulset/shards", "-n", "ml-team", "--timeout=60s", timeout=90)
    engine = engine_on(sim, redis_url)
    run = engine.request_migration(actor=ALICE, namespace="ml-team", name="shards", kind="StatefulSet",
                                   device_class="gpu.example.com").run
    assert run.target.kind == "StatefulSet"
    engine.decide(run.id, actor=BOB, approve=True, kind=GateKind.MIGRATION)
    done = engine.advance(run.id)
    assert done.state is RunState.DONE, done.reason
    assert "2 pods of ml-team/shards run with allocated claims" in done.reason
    pods = kubectl.json("get", "pods", "-n", "ml-team", "-l", "app=shards")["items"]
    assert sorted(p["metadata"]["name"] for p in pods) == ["shards-0", "shards-1"]
    assert all(p["status"]["resourceClaimStatuses"] for p in pods)


def test_refusals_change_nothing(sim: KubeSim, redis_url: str) -> None:
    kubectl = Kubectl(sim.kubeconfig)
    engine = engine_on(sim, redis_url)
    with pytest.raises(Refused, match="may not change workloads in namespace kube-system"):
        engine.request_migration(actor=ALICE, namespace="kube-system", name="anything")
    with pytest.raises(Refused, match="there is no Deployment or StatefulSet or Job or Pod ml-team/nothing"):
        engine.request_migration(actor=ALICE, namespace="ml-team", name="nothing")
    with pytest.raises(Refused, match="a migration run applies to a Deployment or StatefulSet; Pod ml-team/trainer-0"):
        engine.request_migration(actor=ALICE, namespace="ml-team", name="trainer-0", kind="Pod")
    _deploy(kubectl, deployment("taken", 1))
    kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "resource.k8s.io/v1beta1" if "1.32" in kubectl("version", "-o", "json") else "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate", "metadata": {"name": "taken-train-gpu", "namespace": "ml-team"},
        "spec": {"spec": {}}}))
    with pytest.raises(Refused, match="ResourceClaimTemplate ml-team/taken-train-gpu exists already"):
        engine.request_migration(actor=ALICE, namespace="ml-team", name="taken")
    assert engine.runs() == []


def test_the_scope_lets_a_migration_touch_its_workload_and_templates_only(sim: KubeSim) -> None:
    from runbooks.engine.runs import Target
    from runbooks.errors import Action

    with Cluster.from_kubeconfig(sim.kubeconfig) as cluster:
        scoped = ScopedCluster(cluster, Target(cluster="", namespace="ml-team", name="trainer", kind="Deployment"),
                               templates=("trainer-train-gpu",))
        for method, path in (("PATCH", "/apis/apps/v1/namespaces/ml-team/deployments/other"),
                             ("DELETE", "/apis/apps/v1/namespaces/ml-team/deployments/trainer"),
                             ("PATCH", "/apis/apps/v1/namespaces/kube-system/daemonsets/nvidia-device-plugin-daemonset"),
                             ("DELETE", "/apis/resource.k8s.io/v1/namespaces/ml-team/resourceclaimtemplates/other"),
                             ("DELETE", "/api/v1/namespaces/ml-team/pods/trainer-0")):
            with pytest.raises(OutOfScope):
                scoped.write_json(method, path, action=Action("test", "x", None, None))
