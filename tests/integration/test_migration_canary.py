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
from runbooks.engine.runs import GateKind, RunState
from tests.engine_support import ALICE, BOB
from tests.integration.test_migration_run import deployment, engine_on
from tests.support import Kubectl

DRIVER = ("-n", "dra-example-driver", "daemonset/dra-example-driver-kubeletplugin")
DRIVER_IMAGE = "registry.k8s.io/dra-example-driver/dra-example-driver:v0.1.0"


@pytest.fixture(scope="module", params=[32, 34], ids=lambda m: f"1.{m}")
def sim(request: pytest.FixtureRequest) -> Iterator[KubeSim]:
    with KubeSim(scenario="gpu-small", k8s_version=f"1.{request.param}", speed=20.0) as running:
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
