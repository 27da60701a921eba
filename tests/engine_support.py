"""Helpers for the run engine tests: a fake clock, scripted steps, an engine on real Redis."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bot.storage.redis_store import RedisRunStore
from kubesim import KubeSim
from runbooks.cluster import Cluster
from runbooks.daemonset.steps import DaemonSetSteps
from runbooks.engine.approving import Actor
from runbooks.engine.commands import Engine
from runbooks.engine.runs import Gate, Run, Step
from runbooks.engine.steps import Check, CheckStatus, StepContext, StepResult, StepSettings
from runbooks.policy import Policy
from tests.support import with_kubesim_mirrors

TARGET = "kube-system/nvidia-device-plugin-daemonset"
IMAGE = "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"
ALICE, BOB, CAROL = Actor("U0ALICE"), Actor("U0BOB"), Actor("U0CAROL")


class FakeClock:
    """Time that moves only when a test (or ``sleep``) moves it."""

    def __init__(self, start: dt.datetime | None = None) -> None:
        self.moment = start or dt.datetime(2025, 1, 6, 9, 0, tzinfo=dt.UTC)

    def now(self) -> dt.datetime:
        return self.moment

    def sleep(self, seconds: float) -> None:
        self.moment += dt.timedelta(seconds=seconds)

    def advance(self, **kwargs: float) -> None:
        self.moment += dt.timedelta(**kwargs)


Behaviour = Callable[[StepContext], StepResult]


def ok(ctx: StepContext) -> StepResult:
    return StepResult(ok=True, checks=[Check(name="pods ready", status=CheckStatus.PASS, scope=ctx.run.node)])


@dataclass
class ScriptedSteps:
    """Steps whose behaviour a test chooses per step name; every call is logged."""

    behaviours: dict[str, Behaviour] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)

    request_checks: list[Check] = field(default_factory=list)
    """What ``check_request`` answers (a failing one refuses the request)."""

    def check_request(self, cluster: object, run: Run, settings: StepSettings, *,
                      watches: object = None, keep: object = None) -> list[Check]:
        self.calls.append("check_request")
        return list(self.request_checks)

    def _call(self, name: str, ctx: StepContext) -> StepResult:
        self.calls.append(name)
        return self.behaviours.get(name, ok)(ctx)

    def canary(self, ctx: StepContext) -> StepResult:
        return self._call("canary", ctx)

    def verify_canary(self, ctx: StepContext) -> StepResult:
        return self._call("verify_canary", ctx)

    def promote(self, ctx: StepContext) -> StepResult:
        return self._call("promote", ctx)

    def verify_all(self, ctx: StepContext) -> StepResult:
        return self._call("verify_all", ctx)

    def rollback(self, ctx: StepContext) -> StepResult:
        return self._call("rollback", ctx)


@dataclass
class RecordingObserver:
    events: list[tuple[str, str]] = field(default_factory=list)
    progress: list[int] = field(default_factory=list)
    """The run versions each ``on_progress`` saw (kept apart: many writes store progress)."""

    def on_state(self, run: Run) -> None:
        self.events.append(("state", run.state.value))

    def on_step(self, run: Run, step: Step) -> None:
        self.events.append(("step", step.name))

    def on_gate(self, run: Run, gate: Gate) -> None:
        self.events.append(("gate", gate.kind.value))

    def on_progress(self, run: Run) -> None:
        self.progress.append(run.version)


def policy(**sections: Any) -> Policy:
    """A policy with U0LEAD approvers by default, ``sections`` overriding."""
    base: dict[str, Any] = {
        "approvers": {"users": ["U0BOB", "U0CAROL"], "usergroups": ["S0LEADS"], "quorum": 1, "expire_after": "30m"},
        "reports": {"after": []},
    }
    for key, value in sections.items():
        base[key] = {**base.get(key, {}), **value} if isinstance(value, dict) else value
    return Policy.model_validate(base)


def make_engine(
    redis_url: str, *, steps: ScriptedSteps | None = None, clock: FakeClock | None = None,
    pol: Policy | None = None, **kwargs: Any,
) -> Engine:
    return Engine(
        store=RedisRunStore.from_url(redis_url), steps=steps or ScriptedSteps(), policy=pol or policy(),
        clock=clock or FakeClock(), **kwargs,
    )


def request(engine: Engine, actor: Actor = ALICE, *, target: str = TARGET, node: str = "gpu-node1") -> Run:
    return engine.request_canary(actor=actor, target=target, image=IMAGE, node=node, container="plugin",
                                 cluster="prod").run


def kubesim_engine(sim: KubeSim, redis_url: str, pol: Policy, **kwargs: Any) -> Engine:
    """The engine with the real DaemonSet steps on a kubesim (its kubeconfig) and a real Redis; a
    policy naming no ``images.mirrors`` asks kubesim's registry what a tag resolves to now."""
    pol = with_kubesim_mirrors(pol, sim.url, sim.kubeconfig)
    return Engine(store=RedisRunStore.from_url(redis_url), steps=DaemonSetSteps(), policy=pol,
                  connect=lambda context: Cluster.from_kubeconfig(sim.kubeconfig, context), **kwargs)
