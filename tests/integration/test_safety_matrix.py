"""The safety matrix: situations planted in kubesim, one invariant checked on each.

Whatever happens, the plugin DaemonSet ends either as requested (the upgrade went through)
or exactly as it was before the run (anything else), and every write the run sent was to
its target: the DaemonSet itself or one of its pods. kubesim's log of mutating requests
and the DaemonSet as kubectl reads it are the referees. A refused request sends nothing.

Elsewhere: SIGKILL at every step boundary (``test_crash_resume.py``), a Redis restart
with persistence (``test_safety_halts.py``) and without (``tests/e2e/test_store_durability.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from bot.demo.world import SimulatedClock
from bot.storage.redis_store import RedisRunStore
from kubesim import KubeSim
from runbooks.cluster import Cluster, RetryPolicy
from runbooks.daemonset import canarying
from runbooks.daemonset.steps import DaemonSetSteps
from runbooks.engine.approving import Actor
from runbooks.engine.commands import Engine
from runbooks.engine.driving import StepPaused
from runbooks.engine.refusals import Refused
from runbooks.engine.runs import RunState
from runbooks.policy import Policy
from tests.support import TEST_BUILDS, Kubectl

S = RunState
NS, NAME = "kube-system", "nvidia-device-plugin-daemonset"
TARGET = f"{NS}/{NAME}"
DRA_TARGET = "dra-example-driver/dra-example-driver-kubeletplugin"
REPO = "nvcr.io/nvidia/k8s-device-plugin"
OLD, NEW = f"{REPO}:v0.14.2", f"{REPO}:v0.17.0"
ALICE, BOB, CAROL = Actor("U0ALICE"), Actor("U0BOB"), Actor("U0CAROL")
SPEED = 8
"""kubesim's clock runs 8 times as fast, and so does the engine's (``SimulatedClock``): the
durations below are on that clock, each the same wall time as before (a 1 s window, a 0.1 s
poll), and the engine's back-off between two tries of a step is an eighth of its wall time."""
POLICY = Policy.model_validate({
    "approvers": {"users": ["U0BOB", "U0CAROL"]},
    "reports": {"after": []},
    "steps": {"observe_window": "8s", "poll_interval": "0.8s", "ready_timeout": "480s", "settle_window": "80s"},
    "halt": {"rollback_after": "8s"},
})
RETRIES = RetryPolicy(base_delay=0.02, max_delay=0.2)
"""The adapter's five tries per read as in production, without its seconds of back-off."""
DS_PATH = f"/apis/apps/v1/namespaces/{NS}/daemonsets/{NAME}"
PODS_PATH = f"/api/v1/namespaces/{NS}/pods/{NAME}-"


@dataclass
class World:
    sim: KubeSim
    engine: Engine
    hooks: dict[str, Callable[[], None]] = field(default_factory=dict)
    """Engine checkpoint -> what the situation does there (once)."""

    def checkpoint(self, point: str) -> None:
        hook = self.hooks.pop(point, None)
        if hook is not None:
            hook()

    def daemonset(self) -> tuple[Any, Any]:
        spec = Kubectl(self.sim.kubeconfig).json("-n", NS, "get", f"ds/{NAME}")["spec"]
        return spec["template"], spec["updateStrategy"]


@pytest.fixture
def world(redis_url: str) -> Iterator[World]:
    with KubeSim(pushed=TEST_BUILDS, scenario="gpu-small", k8s_version="1.31", speed=SPEED) as sim:
        holder: list[World] = []
        engine = Engine(store=RedisRunStore.from_url(redis_url), steps=DaemonSetSteps(), policy=POLICY,
                        connect=lambda context: Cluster.from_kubeconfig(sim.kubeconfig, context, retry=RETRIES),
                        checkpoint=lambda point: holder[0].checkpoint(point), clock=SimulatedClock(sim))
        holder.append(World(sim, engine))
        yield holder[0]


def canary(w: World, image: str = NEW, node: str = "gpu-node1", target: str = TARGET) -> str:
    return w.engine.request_canary(actor=ALICE, target=target, image=image, node=node).run.id


def through(w: World, run_id: str, *, promote: bool = True) -> RunState:
    """Approve the canary, drive it, and approve the promotion when it is offered."""
    w.engine.approve(run_id, actor=BOB)
    run = w.engine.advance(run_id)
    if promote and run.state is S.AWAITING_PROMOTION:
        w.engine.approve(run_id, actor=CAROL)
        run = w.engine.advance(run_id)
    return run.state


def forbid(w: World, path: str, verb: str) -> Callable[[], None]:
    return lambda: w.sim.fault(kind="forbid", path=path, verb=verb)


# --------------------------------------------------------------- the situations
# Each returns what the DaemonSet must end as: "requested" or "before" (the state it had
# when the run was requested), and raises nothing but the assertions it makes itself.
def refused(w: World, match: str, **request: str) -> str:
    with pytest.raises(Refused, match=match):
        canary(w, **request)
    return "before"


def unchanged_image(w: World) -> str:
    return refused(w, "already runs", image=OLD)


def gpu_less_node(w: World) -> str:
    return refused(w, "no GPU hardware", node="cpu-node1")


def not_ready_node(w: World) -> str:
    w.sim.fault(kind="node-not-ready", node="gpu-node2")
    w.sim.advance("50s")  # the node lifecycle controller's grace on the stopped heartbeat
    return refused(w, "is not Ready", node="gpu-node2")


def cordoned_node(w: World) -> str:
    return refused(w, "is cordoned", node="gpu-node3")


def fail_finding_on_target(w: World) -> str:
    w.sim.fault(kind="feature-gate", name="DynamicResourceAllocation", enabled=False)
    return refused(w, "feature gate is disabled", target=DRA_TARGET,
                   image="registry.k8s.io/dra-example-driver/dra-example-driver:v0.2.0")


def target_locked(w: World) -> str:
    first = canary(w)
    refused(w, "already has an active run", node="gpu-node2")
    w.engine.reject(first, actor=BOB)
    return "before"


def unexpected_error_mid_canary(w: World, monkeypatch: pytest.MonkeyPatch) -> str:
    def broken(*args: object, **kwargs: object) -> None:
        raise AttributeError("'NoneType' object has no attribute 'decode'")

    monkeypatch.setattr(canarying, "delete_pod", broken)
    run_id = canary(w)
    assert through(w, run_id) is S.HALTED
    monkeypatch.undo()
    w.engine.rollback(run_id, actor=ALICE)
    w.engine.approve(run_id, actor=CAROL)
    assert w.engine.advance(run_id).state is S.ROLLED_BACK
    return "before"


def events_unreadable_during_verify(w: World) -> str:
    w.hooks["transition:canary_verifying"] = lambda: w.sim.fault(kind="forbid", path="/api/v1/events", verb="list")
    assert through(w, canary(w)) is S.ROLLED_BACK
    return "before"


def pod_delete_forbidden_during_canary(w: World) -> str:
    w.hooks["transition:canary_rolling"] = forbid(w, f"/api/v1/namespaces/{NS}/pods", "delete")
    state = through(w, canary(w))
    assert state is S.ROLLED_BACK, state
    return "before"


def daemonset_patch_forbidden_during_promote(w: World) -> str:
    w.hooks["transition:promoting"] = forbid(w, f"/apis/apps/v1/namespaces/{NS}/daemonsets", "patch")
    run_id = canary(w)
    assert through(w, run_id) is S.HALTED  # the promotion cannot patch, nor can its rollback
    w.sim.fault(kind="allow")
    assert w.engine.rollback(run_id, actor=ALICE).run.state is S.ROLLING_BACK  # a retried rollback
    assert w.engine.advance(run_id).state is S.ROLLED_BACK
    return "before"


def kubelet_restart_during_the_baseline(w: World) -> str:
    run_id = canary(w)
    w.sim.fault(kind="kubelet-restart", node="gpu-node2")
    assert through(w, run_id) is S.DONE
    return "requested"


def crash_looping_image(w: World) -> str:
    assert through(w, canary(w, image=NEW + "-crash")) is S.ROLLED_BACK
    return "before"


def image_that_never_registers(w: World) -> str:
    assert through(w, canary(w, image=NEW + "-silent")) is S.ROLLED_BACK
    return "before"


def another_vendors_plugin(w: World) -> str:
    assert through(w, canary(w, image="registry.example.com/acme/gpu-device-plugin:v2.0.0")) is S.DONE
    return "requested"


def promotion_rejected(w: World) -> str:
    run_id = canary(w)
    assert through(w, run_id, promote=False) is S.AWAITING_PROMOTION
    w.engine.reject(run_id, actor=CAROL)
    assert w.engine.advance(run_id).state is S.ROLLED_BACK
    return "before"


def api_outage_past_the_limit(w: World) -> str:
    """The API answers 503 to every read of the DaemonSet for a while (15 requests: the canary's
    three tries of five reads each), longer than halt.rollback_after (the cluster's clock moved
    past it): the next drive rolls back."""
    w.hooks["transition:canary_rolling"] = lambda: w.sim.fault(
        kind="api-errors", code=503, count=15, path=f"/apis/apps/v1/namespaces/{NS}/daemonsets")
    run_id = canary(w)
    w.engine.approve(run_id, actor=BOB)
    with pytest.raises(StepPaused):
        w.engine.advance(run_id)
    w.sim.advance("9s")
    run = w.engine.advance(run_id)
    assert run.state is S.ROLLED_BACK and "did not answer for more than 8s" in run.reason, run.reason
    return "before"


def healthy_upgrade(w: World) -> str:
    assert through(w, canary(w)) is S.DONE
    return "requested"


SITUATIONS: dict[str, Callable[..., str]] = {f.__name__: f for f in (
    unchanged_image, gpu_less_node, not_ready_node, cordoned_node, fail_finding_on_target, target_locked,
    unexpected_error_mid_canary, events_unreadable_during_verify, pod_delete_forbidden_during_canary,
    daemonset_patch_forbidden_during_promote, kubelet_restart_during_the_baseline, crash_looping_image,
    image_that_never_registers, another_vendors_plugin, promotion_rejected, api_outage_past_the_limit,
    healthy_upgrade,
)}


@pytest.mark.parametrize("situation", SITUATIONS)
def test_the_daemonset_ends_as_requested_or_exactly_as_before(
    world: World, situation: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    if situation == "cordoned_node":
        Kubectl(world.sim.kubeconfig).run("cordon", "gpu-node3")  # the test's own write, before the mark
    before = world.daemonset()
    mark = len(world.sim.mutations())
    plant = SITUATIONS[situation]
    expect = plant(world, monkeypatch) if situation == "unexpected_error_mid_canary" else plant(world)
    world.sim.fault(kind="allow")
    template, strategy = world.daemonset()
    if expect == "before":
        assert (template, strategy) == before
    else:
        assert strategy == before[1]
        assert {c["name"]: c["image"] for c in template["spec"]["containers"]} != \
            {c["name"]: c["image"] for c in before[0]["spec"]["containers"]}
    sent = [m for m in world.sim.mutations()[mark:] if m.get("code", 200) < 400]
    stray = [m for m in sent if not (m["path"] == DS_PATH or m["path"].startswith(PODS_PATH))]
    assert stray == [], f"writes outside the target: {stray}"
    if situation in ("unchanged_image", "gpu_less_node", "not_ready_node", "cordoned_node",
                     "fail_finding_on_target"):
        assert sent == [], f"a refused request sent {sent}"
