"""A migration canary (issue 38 item 1): ``apply-migration … canary=<n>|<p>%`` runs a duplicate
of the workload with the plan first (suffixed name, ``upgradebot.io/canary`` label, the
original's selector plus the label, the plan's claims, the replicas asked), verifies its pods
run with allocated and reserved claims, then waits for the switch approval; the switch is the
migration; with the DRA driver unable to allocate (``-noalloc``) the canary fails, its
duplicate and templates are deleted and nothing of the original changed. On kubesim 1.32 and
1.34; kubectl referees."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from handlers.run_views import gate_message, root_message
from kubesim import KubeSim
from runbooks.dra.migration_canary import CANARY_LABEL
from runbooks.engine.commands import Engine
from runbooks.engine.runs import GateKind, RunState
from tests.engine_support import ALICE, BOB
from tests.integration.test_migration_run import deployment, engine_on
from tests.support import TEST_BUILDS, Kubectl

DRIVER = ("-n", "dra-example-driver", "daemonset/dra-example-driver-kubeletplugin")
DRIVER_IMAGE = "registry.k8s.io/dra-example-driver/dra-example-driver:v0.1.0"


@pytest.fixture(scope="module", params=[32, 34], ids=lambda m: f"1.{m}")
def sim(request: pytest.FixtureRequest) -> Iterator[KubeSim]:
    with KubeSim(pushed=TEST_BUILDS, scenario="gpu-small", k8s_version=f"1.{request.param}", speed=10.0) as running:  # a Deployment's 600 s progress deadline is a minute of a loaded CI's wall clock
        yield running


def _deploy(kubectl: Kubectl, obj: dict) -> None:
    kind = obj["kind"].lower()
    kubectl("apply", "-f", "-", input=json.dumps(obj))
    kubectl("rollout", "status", f"{kind}/{obj['metadata']['name']}", "-n", "ml-team", "--timeout=60s", timeout=90)


def _state(kubectl: Kubectl, kind: str, name: str) -> tuple[str, dict]:
    obj = kubectl.json("get", kind, name, "-n", "ml-team")
    return obj["metadata"]["resourceVersion"], obj["spec"]


def _absent(kubectl: Kubectl, *what: str) -> bool:
    proc = kubectl.run("get", *what, "-n", "ml-team", check=False)
    return proc.returncode == 1 and "NotFound" in proc.stderr


def test_a_canary_is_verified_then_the_switch_approved_migrates_the_original(sim: KubeSim, redis_url: str) -> None:
    """Issue 38 item 1: the duplicate runs the plan with its claims allocated and reserved while
    the original is untouched (same resourceVersion); the switch request opens; approved by
    another person, the original is migrated and verified and the duplicate deleted."""
    kubectl = Kubectl(sim.kubeconfig)
    obj = deployment("canaried", 1)
    obj["spec"]["replicas"] = 2
    _deploy(kubectl, obj)
    before = _state(kubectl, "deployment", "canaried")
    engine = engine_on(sim, redis_url)
    run = engine.request_migration(actor=ALICE, namespace="ml-team", name="canaried", device_class="gpu.example.com",
                                   canary="50%").run
    assert run.change["canary"]["name"] == "canaried-upgradebot-canary" and run.change["canary"]["replicas"] == 1
    assert _absent(kubectl, "deployment", "canaried-upgradebot-canary")  # nothing before approval
    engine.decide(run.id, actor=BOB, approve=True, kind=GateKind.MIGRATION)
    waiting = engine.advance(run.id)
    assert waiting.state is RunState.AWAITING_PROMOTION, waiting.reason
    assert waiting.gate is not None and waiting.gate.kind is GateKind.PROMOTION
    assert _state(kubectl, "deployment", "canaried") == before
    dup = kubectl.json("get", "deployment", "canaried-upgradebot-canary", "-n", "ml-team")
    assert dup["metadata"]["labels"][CANARY_LABEL] == run.id and dup["spec"]["replicas"] == 1
    assert dup["spec"]["selector"]["matchLabels"] == {"app": "canaried", CANARY_LABEL: run.id}
    pods = kubectl.json("get", "pods", "-n", "ml-team", "-l", f"{CANARY_LABEL}={run.id}")["items"]
    assert [p["status"]["phase"] for p in pods] == ["Running"]
    [status] = pods[0]["status"]["resourceClaimStatuses"]
    claim = kubectl.json("get", "resourceclaim", status["resourceClaimName"], "-n", "ml-team")
    assert claim["status"]["allocation"] and claim["status"]["reservedFor"][0]["uid"] == pods[0]["metadata"]["uid"]
    verify = next(e for e in engine.audit(run.id) if e["name"] == "verify_canary.claims-allocated")
    assert verify["status"] == "ok", verify
    root, request = root_message(waiting), gate_message(waiting, waiting.gate)
    assert "the workload itself is migrated" in root.text and "canaried-upgradebot-canary" in request.text

    engine.decide(run.id, actor=BOB, approve=True, kind=GateKind.PROMOTION)
    done = engine.advance(run.id)
    assert done.state is RunState.DONE, done.reason
    migrated = kubectl.json("get", "deployment", "canaried", "-n", "ml-team")
    [container] = migrated["spec"]["template"]["spec"]["containers"]
    assert "nvidia.com/gpu" not in str(container["resources"]) and container["resources"]["claims"]
    assert _absent(kubectl, "deployment", "canaried-upgradebot-canary")
    assert kubectl("get", "resourceclaimtemplates", "canaried-train-gpu", "-n", "ml-team", "-o", "name").strip()


def test_a_canary_that_cannot_allocate_fails_and_the_original_is_unchanged(sim: KubeSim, redis_url: str) -> None:
    """Issue 38 item 1, with the DRA kubelet plugin on a ``-noalloc`` image: the duplicate's pod
    stays Pending, the canary's verification fails, the rollback deletes the duplicate and the
    run's templates; the original's spec and resourceVersion are as before and no switch was asked."""
    kubectl = Kubectl(sim.kubeconfig)
    _deploy(kubectl, deployment("steady", 1))
    before = _state(kubectl, "deployment", "steady")
    kubectl("set", "image", *DRIVER, f"plugin={DRIVER_IMAGE}-noalloc")
    kubectl("rollout", "status", *DRIVER, "--timeout=60s", timeout=90)
    try:
        engine = engine_on(sim, redis_url)
        run = engine.request_migration(actor=ALICE, namespace="ml-team", name="steady",
                                       device_class="gpu.example.com", canary="1").run
        engine.decide(run.id, actor=BOB, approve=True, kind=GateKind.MIGRATION)
        end = engine.advance(run.id)
    finally:
        kubectl("set", "image", *DRIVER, f"plugin={DRIVER_IMAGE}")
        kubectl("rollout", "status", *DRIVER, "--timeout=60s", timeout=90)
    assert end.state is RunState.ROLLED_BACK, end.reason
    assert "the migration canary" in end.reason and "was never changed" in end.reason, end.reason
    assert all(g.kind is not GateKind.PROMOTION for g in [end.gate] if g is not None)
    assert _state(kubectl, "deployment", "steady") == before
    assert _absent(kubectl, "deployment", "steady-upgradebot-canary")
    assert _absent(kubectl, "resourceclaimtemplates", "steady-train-gpu")
    audit = engine.audit(run.id)
    assert not any(e["name"].startswith("apply") for e in audit)
    assert any(e["name"] == "rollback.duplicate" and e["status"] == "ok" for e in audit)


def test_a_statefulset_canary_then_switch(sim: KubeSim, redis_url: str) -> None:
    """Issue 38 item 1 for a StatefulSet: its duplicate (same serviceName, the label added) runs
    the plan, then the switch migrates the original's pods."""
    kubectl = Kubectl(sim.kubeconfig)
    obj = deployment("ordered", 1)
    obj["kind"] = "StatefulSet"
    obj["spec"].pop("progressDeadlineSeconds")
    obj["spec"].update(replicas=2, serviceName="ordered")
    _deploy(kubectl, obj)
    before = _state(kubectl, "statefulset", "ordered")
    engine = engine_on(sim, redis_url)
    run = engine.request_migration(actor=ALICE, namespace="ml-team", name="ordered", kind="StatefulSet",
                                   device_class="gpu.example.com", canary="1").run
    engine.decide(run.id, actor=BOB, approve=True, kind=GateKind.MIGRATION)
    assert engine.advance(run.id).state is RunState.AWAITING_PROMOTION
    assert _state(kubectl, "statefulset", "ordered") == before
    pod = kubectl.json("get", "pod", "ordered-upgradebot-canary-0", "-n", "ml-team")
    assert pod["status"]["phase"] == "Running" and pod["status"]["resourceClaimStatuses"]
    engine.decide(run.id, actor=BOB, approve=True, kind=GateKind.PROMOTION)
    done = engine.advance(run.id)
    assert done.state is RunState.DONE, done.reason
    assert _absent(kubectl, "statefulset", "ordered-upgradebot-canary")
    pods = kubectl.json("get", "pods", "-n", "ml-team", "-l", "app=ordered")["items"]
    assert sorted(p["metadata"]["name"] for p in pods if not p["metadata"].get("deletionTimestamp")) == [
        "ordered-0", "ordered-1"]


def test_canary_values_are_checked_before_anything_is_asked() -> None:
    """``canary=`` takes replicas or a percentage on ``apply-migration`` only; anything else is a
    one-line usage error (issue 38 item 1)."""
    from handlers.arguments import UsageError
    from handlers.migrate import APPLY_COMMAND, COMMAND

    assert APPLY_COMMAND.parse(["ml-team/trainer", "canary=2"]).canary == "2"
    assert APPLY_COMMAND.parse(["ml-team/trainer", "canary=25%"]).canary == "25%"
    for bad in ("0", "-1", "0%", "150%", "two", "2.5", "%"):
        with pytest.raises(UsageError, match="is not a number of replicas"):
            APPLY_COMMAND.parse(["ml-team/trainer", f"canary={bad}"])
    with pytest.raises(UsageError):
        COMMAND.parse(["ml-team/trainer", "canary=2"])


class _Killed(BaseException):
    """The process dying mid-step: nothing in the engine catches it, and the run is left as stored."""


def _engine_killed_at_create(sim: KubeSim, redis_url: str, *, before: bool) -> tuple[Engine, list[str]]:
    """An engine whose cluster dies at its first create of a canary workload: just ``before`` it
    is sent, or just after the server created it (before the step could save anything)."""
    from bot.storage.redis_store import RedisRunStore
    from runbooks.cluster import Cluster
    from runbooks.daemonset.steps import DaemonSetSteps
    from runbooks.dra.migration_run import MigrationSteps
    from runbooks.engine.runs import RunKind
    from tests.integration.test_migration_run import POLICY

    killed: list[str] = []

    class Dying(Cluster):  # the steps' writes reach it through the engine's ScopedCluster as write_json
        def write_json(self, method, path, **kw):  # type: ignore[no-untyped-def]
            body = kw.get("body")
            name = (body.get("metadata") or {}).get("name", "") if isinstance(body, dict) else ""
            if method == "POST" and name.endswith("-upgradebot-canary") and not kw.get("query") and not killed:
                killed.append(name)
                if before:
                    raise _Killed(name)
                super().write_json(method, path, **kw)
                raise _Killed(name)
            return super().write_json(method, path, **kw)

    def connect(context: str | None) -> Cluster:
        plain = Cluster.from_kubeconfig(sim.kubeconfig, context)
        plain.__class__ = Dying
        return plain

    engine = Engine(store=RedisRunStore.from_url(redis_url), steps=DaemonSetSteps(), policy=POLICY,
                    connect=connect, kinds={RunKind.MIGRATION: MigrationSteps()})
    return engine, killed


def _lookalike(kubectl: Kubectl, run_id: str, planned: dict) -> str:
    """Someone else's Deployment of the canary's name, labelled with the run as the canary is; its uid."""
    body = {"apiVersion": "apps/v1", "kind": "Deployment", **json.loads(json.dumps(planned))}
    body["metadata"]["annotations"] = {"upgradebot.io/canary-token": "guessed"}
    body["spec"]["replicas"] = 0
    kubectl("apply", "-f", "-", input=json.dumps(body))
    made = kubectl.json("get", "deployment", body["metadata"]["name"], "-n", "ml-team")
    assert made["metadata"]["labels"][CANARY_LABEL] == run_id
    return str(made["metadata"]["uid"])


def test_a_lookalike_made_before_approval_is_never_adopted_nor_deleted(sim: KubeSim, redis_url: str) -> None:
    """Attack finding 7: a Deployment of the canary's name, with the run's label, made by someone
    else between the request and its approval, is not taken for the run's duplicate: the
    canary step refuses, naming it, the run rolls back, and the look-alike is still there
    (same uid, never deleted); the original is unchanged."""
    kubectl = Kubectl(sim.kubeconfig)
    _deploy(kubectl, deployment("copied", 1))
    before = _state(kubectl, "deployment", "copied")
    engine = engine_on(sim, redis_url)
    run = engine.request_migration(actor=ALICE, namespace="ml-team", name="copied", device_class="gpu.example.com",
                                   canary="1").run
    uid = _lookalike(kubectl, run.id, run.change["canary"]["object"])
    start = len(sim.mutations())
    engine.decide(run.id, actor=BOB, approve=True, kind=GateKind.MIGRATION)
    end = engine.advance(run.id)
    assert end.state is RunState.ROLLED_BACK, end.reason
    refused = next(e for e in engine.audit(run.id) if e["name"] == "canary.canary-created")
    assert refused["status"] == "failed" and "not created by this run" in refused["detail"], refused
    assert kubectl.json("get", "deployment", "copied-upgradebot-canary", "-n", "ml-team")["metadata"]["uid"] == uid
    assert not [m for m in sim.mutations()[start:] if m["verb"] == "delete" and
                m["path"].endswith("/copied-upgradebot-canary")]
    assert _state(kubectl, "deployment", "copied") == before
    kubectl("delete", "deployment", "copied-upgradebot-canary", "-n", "ml-team")


def test_a_run_killed_just_after_creating_its_duplicate_adopts_it_on_resume(sim: KubeSim, redis_url: str) -> None:
    """Attack finding 7, crash-resume: killed after the server created the duplicate and before
    the step saved its uid, the run resumed finds it (the token it saved the hash of before
    the create is on it), saves its uid, does not create it again, and deletes it once the switch is verified."""
    kubectl = Kubectl(sim.kubeconfig)
    _deploy(kubectl, deployment("resumed", 1))
    engine, killed = _engine_killed_at_create(sim, redis_url, before=False)
    run = engine.request_migration(actor=ALICE, namespace="ml-team", name="resumed", device_class="gpu.example.com",
                                   canary="1").run
    engine.decide(run.id, actor=BOB, approve=True, kind=GateKind.MIGRATION)
    with pytest.raises(_Killed):
        engine.advance(run.id)
    assert killed == ["resumed-upgradebot-canary"]
    made = kubectl.json("get", "deployment", "resumed-upgradebot-canary", "-n", "ml-team")["metadata"]
    start = len(sim.mutations())
    waiting = engine.advance(run.id)
    assert waiting.state is RunState.AWAITING_PROMOTION, waiting.reason
    assert waiting.progress["canary_uid"] == made["uid"]
    assert not [m for m in sim.mutations()[start:] if m["verb"] == "create" and "deployments" in m["path"]]
    engine.decide(run.id, actor=BOB, approve=True, kind=GateKind.PROMOTION)
    done = engine.advance(run.id)
    assert done.state is RunState.DONE, (done.reason, [(e["name"], e["detail"]) for e in engine.audit(run.id)][-8:])
    assert _absent(kubectl, "deployment", "resumed-upgradebot-canary")


def test_a_run_killed_before_its_create_does_not_adopt_a_lookalike_made_meanwhile(sim: KubeSim, redis_url: str) -> None:
    """Attack finding 7, crash-resume: killed after saving what it would create but before
    creating it; meanwhile someone makes a look-alike (the run's label, a made-up token). The
    resumed run refuses it and rolls back without deleting it."""
    kubectl = Kubectl(sim.kubeconfig)
    _deploy(kubectl, deployment("raced", 1))
    engine, killed = _engine_killed_at_create(sim, redis_url, before=True)
    run = engine.request_migration(actor=ALICE, namespace="ml-team", name="raced", device_class="gpu.example.com",
                                   canary="1").run
    engine.decide(run.id, actor=BOB, approve=True, kind=GateKind.MIGRATION)
    with pytest.raises(_Killed):
        engine.advance(run.id)
    assert killed == ["raced-upgradebot-canary"] and _absent(kubectl, "deployment", "raced-upgradebot-canary")
    uid = _lookalike(kubectl, run.id, run.change["canary"]["object"])
    end = engine.advance(run.id)
    assert end.state is RunState.ROLLED_BACK, end.reason
    assert kubectl.json("get", "deployment", "raced-upgradebot-canary", "-n", "ml-team")["metadata"]["uid"] == uid
    kubectl("delete", "deployment", "raced-upgradebot-canary", "-n", "ml-team")
