"""The contract between the run engine and the cluster steps (canary, verify, promote, rollback).

The engine owns states, gates, leases and persistence; a step owns what happens on the
cluster. A step receives a :class:`StepContext`, reads the cluster first and does only
what is still missing (so a step re-entered after the bot was killed repeats no
mutation), records what it learned with ``ctx.save_progress`` *before* it relies on it,
and reports each check and mutation with ``ctx.record``. It returns a
:class:`StepResult`; it never changes the run's state itself.
"""

from __future__ import annotations

import datetime as dt
import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel, Field

from runbooks.engine.runs import Run, Step
from runbooks.metrics.spec import MetricCheckSpec, PrometheusPolicy
from runbooks.policy import Target
from runbooks.registries import Mirror

if TYPE_CHECKING:
    from runbooks.cluster.informing import ClusterWatches


class CheckStatus(enum.StrEnum):
    PASS = "pass"
    FAIL = "fail"
    UNKNOWN = "unknown"
    """The check could not be made (a 403, a timeout, missing data): not a pass. It blocks a
    step like a failure unless the policy says ``verify.unknown: warn``."""
    WARN = "warn"
    SKIP = "skip"


class Check(BaseModel):
    """One verification check: what was checked, where, the verdict and its evidence."""

    name: str
    status: CheckStatus
    detail: str = ""
    scope: str = Field(default="", description="node name, or 'all nodes'")
    evidence: dict[str, Any] = Field(default_factory=dict)


class Again(BaseModel):
    """A step that is not finished yet (a promotion between its waves): the engine keeps the
    run in its state and calls the step again once ``at`` has passed (a soak), once
    ``approval`` was granted (the next wave's request), or at once when neither is set and
    the run is not paused."""

    why: str
    """What the run waits for, in a sentence (``wave 2 of 4 soaks until 10:40 UTC``)."""
    at: dt.datetime | None = None
    approval: bool = False
    wave: int = 0
    """The wave the approval would start (1-based; 0: none)."""


class StepResult(BaseModel):
    """What a step reports back: ok or not, why, and the checks it ran."""

    ok: bool
    reason: str = ""
    checks: list[Check] = Field(default_factory=list)
    again: Again | None = None
    """Set by a step that did part of its work and must be called again (only with ``ok``)."""
    evidence: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """The failure's evidence, one entry per check (``<step>.<check>``): what the run keeps in
    :attr:`~runbooks.engine.runs.Run.evidence` for every surface (issue 61 item 4)."""

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if c.status is CheckStatus.FAIL]

    @property
    def unknown(self) -> list[Check]:
        """The checks that could not be made."""
        return [c for c in self.checks if c.status is CheckStatus.UNKNOWN]


class Clock(Protocol):
    def now(self) -> dt.datetime: ...

    def sleep(self, seconds: float) -> None: ...


@dataclass(frozen=True)
class StepSettings:
    """Timeouts and options of the steps (from the policy file; defaults for the shell)."""

    ready_timeout: float = 300.0
    """Seconds to wait for a replaced pod (canary, promotion, rollback) to become Ready."""
    observe_window: float = 30.0
    """Seconds verify watches restart counts for a rise."""
    smoke_test: dict[str, Any] | None = None
    """Optional smoke-test pod: ``{image, command, expect, namespace, timeout}``."""
    poll_interval: float = 1.0
    settle_window: float = 30.0
    """Seconds the baseline waits for a node caught mid-change (a kubelet restart) to settle."""
    claim_grace: float = 60.0
    """Seconds a claim made during a DRA driver's step may stay pending while a pod waits for it."""
    gpu_resources: tuple[str, ...] = ("nvidia.com/gpu",)
    unknown_blocks: bool = True
    """A check that could not be made fails the step (policy ``verify.unknown: fail``)."""
    registration: dict[str, str] = field(default_factory=dict)
    """``{namespace/name: pattern}``: the log line that says a target's plugin registered
    (policy ``targets[].registration``); a target not listed uses its kind's default."""
    targets: dict[str, Target] = field(default_factory=dict)
    """The policy's entries for the targets, by ``namespace/name`` (waves, spread labels)."""
    canary_per_class: bool = False
    """Every hardware class needs its own canary node before promotion (policy ``canary.per_class``)."""
    log_budget: int = 200
    """Plugin logs verify reads at most (a sample covering every failure domain); the other
    nodes' registration is judged from the GPUs they advertise."""
    metric_checks: tuple[MetricCheckSpec, ...] = ()
    """Policy ``verify.metrics`` (or the built-in checks), run when ``prometheus`` is set."""
    prometheus: PrometheusPolicy | None = None
    """Policy ``prometheus``: where the metric checks read."""
    pin_digest: bool = True
    """Policy ``images.pin_digest``: the promotion writes the digest the canary verified
    (:mod:`runbooks.digests`); a rollback the digest the pods ran before the run."""
    mirrors: dict[str, Mirror] = field(default_factory=dict)
    """Policy ``images.mirrors``: where a tag's digest now is asked (:mod:`runbooks.registries`)."""


@dataclass
class StepContext:
    """What a step may use. ``cluster`` is a :class:`runbooks.cluster.Cluster`."""

    cluster: Any
    run: Run
    save_progress: Callable[[dict[str, Any]], Run]
    """Merge keys into ``run.progress`` and store it (compare-and-set); returns the new run."""
    record: Callable[[Step], None]
    """Append a step to the run's audit trail (and its thread)."""
    clock: Clock
    settings: StepSettings = field(default_factory=StepSettings)
    paused: Callable[[], bool] = lambda: False
    """Whether someone paused the run (read fresh from the store): a step that moves node by
    node stops starting new nodes and returns :class:`Again`."""
    watches: ClusterWatches | None = None
    """The process's watch cache of the run's cluster (None: a step keeps caches of its own)."""


class Steps(Protocol):
    """The cluster steps the engine calls, one per active state, and the checks of a request."""

    def check_request(self, cluster: Any, run: Run, settings: StepSettings, *,
                      watches: ClusterWatches | None = None,
                      keep: Callable[[dict[str, Any]], None] | None = None) -> list[Check]:
        """Read-only, before anything is stored or any approver asked: every check that can be
        made now (the image, the node, the target's health). A failing one refuses the request.
        ``watches``: the process's watch cache of the run's cluster, which the run's steps will
        follow after approval (None: the engine has none). ``keep(progress)``: what the run keeps
        of the request's reads in its progress, for its steps after approval (None: nothing kept)."""
        ...

    def pick_node(self, cluster: Any, run: Run, settings: StepSettings) -> tuple[str, str]:
        """``node=auto``: the node to run the canary on and why it was chosen, read-only, before
        anyone is asked; :class:`~runbooks.engine.refusals.Refused` when no node qualifies."""
        ...

    def canary(self, ctx: StepContext) -> StepResult:
        """canary_rolling: record the baseline and template, OnDelete, new image, replace the
        canary node's pod, wait until it is Ready."""
        ...

    def verify_canary(self, ctx: StepContext) -> StepResult:
        """canary_verifying: the checks, scoped to the canary node."""
        ...

    def promote(self, ctx: StepContext) -> StepResult:
        """promoting: restore the original update strategy and follow the rollout."""
        ...

    def verify_all(self, ctx: StepContext) -> StepResult:
        """verifying: the checks on every node."""
        ...

    def rollback(self, ctx: StepContext) -> StepResult:
        """rolling_back: previous template back, strategy restored, new-revision pods
        replaced, every node back to the baseline."""
        ...


class ChangeSteps(Protocol):
    """The cluster steps of a run that applies one fixed change (a migration): what it
    changes is planned and stored in ``run.change`` at request time, so the approvers
    approve exactly what ``apply`` writes."""

    def plan(self, cluster: Any, run: Run, settings: StepSettings) -> tuple[Run, str]:
        """Read-only, before anything is stored: the run with its target and ``change`` filled
        in, and a sentence for the request; :class:`~runbooks.engine.refusals.Refused` when the
        change cannot be made (the server's dry run refused it, nothing to change...)."""
        ...

    def check_request(self, cluster: Any, run: Run, settings: StepSettings) -> list[Check]:
        """Read-only checks before any approver is asked; a failing one refuses the request."""
        ...

    def apply(self, ctx: StepContext) -> StepResult:
        """applying: save what the change replaces, then write it."""
        ...

    def verify_all(self, ctx: StepContext) -> StepResult:
        """verifying: the change works (a migration: the pods run with allocated claims)."""
        ...

    def rollback(self, ctx: StepContext) -> StepResult:
        """rolling_back: what was saved before the change goes back; what the run created goes."""
        ...
