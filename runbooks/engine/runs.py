"""Runs: the data of an upgrade run and the one table of allowed state transitions.

Purely data-manipulative, no I/O. A :class:`Run` is what the store keeps (as JSON);
:func:`check_transition` is the only judge of whether a state may follow another. The
store applies a transition as an atomic compare-and-set on ``(state, version)``.

::

    requested -> awaiting_approval -> canary_rolling -> canary_verifying
      -> awaiting_promotion -> promoting -> verifying -> monitoring -> done
    promoting -> awaiting_promotion -> promoting   (a promotion in waves: the next wave's request)
    canary_rolling .. monitoring -> rolling_back -> rolled_back   (failed check, or approved rollback)
    awaiting_approval -> rejected | expired ;  awaiting_promotion -(rejected, expired)-> rolling_back
    any working state -> halted -> (the state it halted in: resume) | rolling_back
    any -> failed (with the reason) -> (resume) | rolling_back   (takes the lock again)

A migration run (``kind: migration``: one workload's device-plugin resources replaced by
ResourceClaims) has its own, shorter table, with the same halts, failures and rollbacks::

    requested -> awaiting_approval -> applying -> verifying -> done
    applying, verifying -> rolling_back -> rolled_back
"""

from __future__ import annotations

import datetime as dt
import enum
import re
import secrets
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from runbooks.templates import Edits


class RunState(enum.StrEnum):
    REQUESTED = "requested"
    AWAITING_APPROVAL = "awaiting_approval"
    APPLYING = "applying"
    """A migration's change is being applied (templates created, the workload's pod template replaced)."""
    CANARY_ROLLING = "canary_rolling"
    CANARY_VERIFYING = "canary_verifying"
    AWAITING_PROMOTION = "awaiting_promotion"
    PROMOTING = "promoting"
    VERIFYING = "verifying"
    MONITORING = "monitoring"
    DONE = "done"
    ROLLING_BACK = "rolling_back"
    HALTED = "halted"
    """An unexpected error stopped a working step (or a rollback failed): the run keeps its
    lock and waits for ``resume`` (the step again) or ``rollback``; past the policy's
    ``halt.rollback_after`` it is rolled back by itself."""
    ROLLED_BACK = "rolled_back"
    REJECTED = "rejected"
    EXPIRED = "expired"
    FAILED = "failed"


S = RunState
TERMINAL: frozenset[RunState] = frozenset({S.DONE, S.ROLLED_BACK, S.REJECTED, S.EXPIRED, S.FAILED})
ACTIVE: frozenset[RunState] = frozenset(set(RunState) - TERMINAL)
GATES: frozenset[RunState] = frozenset({S.AWAITING_APPROVAL, S.AWAITING_PROMOTION})
WORKING: frozenset[RunState] = frozenset(
    {S.APPLYING, S.CANARY_ROLLING, S.CANARY_VERIFYING, S.PROMOTING, S.VERIFYING, S.ROLLING_BACK}
)
"""States in which the engine runs a cluster step (the others wait for people or time)."""
UNSUCCESSFUL: frozenset[RunState] = frozenset({S.ROLLED_BACK, S.REJECTED, S.EXPIRED, S.FAILED})
"""Ends in which the upgrade did not happen."""

# The one table of allowed transitions. ``failed`` may follow any non-terminal state.
TRANSITIONS: dict[RunState, frozenset[RunState]] = {
    S.REQUESTED: frozenset({S.AWAITING_APPROVAL}),
    S.APPLYING: frozenset(),  # a migration's state: an upgrade never enters it
    S.AWAITING_APPROVAL: frozenset({S.CANARY_ROLLING, S.REJECTED, S.EXPIRED}),
    S.CANARY_ROLLING: frozenset({S.CANARY_VERIFYING, S.ROLLING_BACK, S.HALTED}),
    S.CANARY_VERIFYING: frozenset({S.AWAITING_PROMOTION, S.ROLLING_BACK, S.HALTED}),
    S.AWAITING_PROMOTION: frozenset({S.PROMOTING, S.ROLLING_BACK}),
    S.PROMOTING: frozenset({S.VERIFYING, S.AWAITING_PROMOTION, S.ROLLING_BACK, S.HALTED}),
    S.VERIFYING: frozenset({S.MONITORING, S.ROLLING_BACK, S.HALTED}),
    S.MONITORING: frozenset({S.DONE, S.ROLLING_BACK}),
    S.ROLLING_BACK: frozenset({S.ROLLED_BACK, S.HALTED}),
    S.HALTED: frozenset({S.CANARY_ROLLING, S.CANARY_VERIFYING, S.PROMOTING, S.VERIFYING, S.ROLLING_BACK}),
    S.DONE: frozenset(),
    S.ROLLED_BACK: frozenset(),
    S.REJECTED: frozenset(),
    S.EXPIRED: frozenset(),
    S.FAILED: frozenset({S.CANARY_ROLLING, S.CANARY_VERIFYING, S.PROMOTING, S.VERIFYING, S.ROLLING_BACK}),
}
MIGRATION_TRANSITIONS: dict[RunState, frozenset[RunState]] = {
    S.REQUESTED: frozenset({S.AWAITING_APPROVAL}),
    S.AWAITING_APPROVAL: frozenset({S.APPLYING, S.CANARY_ROLLING, S.REJECTED, S.EXPIRED}),
    S.CANARY_ROLLING: frozenset({S.CANARY_VERIFYING, S.ROLLING_BACK, S.HALTED}),  # a migration canary's duplicate
    S.CANARY_VERIFYING: frozenset({S.AWAITING_PROMOTION, S.ROLLING_BACK, S.HALTED}),
    S.AWAITING_PROMOTION: frozenset({S.APPLYING, S.ROLLING_BACK}),  # the switch request
    S.APPLYING: frozenset({S.VERIFYING, S.ROLLING_BACK, S.HALTED}),
    S.VERIFYING: frozenset({S.DONE, S.ROLLING_BACK, S.HALTED}),
    S.ROLLING_BACK: frozenset({S.ROLLED_BACK, S.HALTED}),
    S.HALTED: frozenset({S.CANARY_ROLLING, S.CANARY_VERIFYING, S.APPLYING, S.VERIFYING, S.ROLLING_BACK}),
    S.FAILED: frozenset({S.CANARY_ROLLING, S.CANARY_VERIFYING, S.APPLYING, S.VERIFYING, S.ROLLING_BACK}),
    **{end: frozenset() for end in (S.DONE, S.ROLLED_BACK, S.REJECTED, S.EXPIRED)},
}
"""A change's table: no promotion, no monitoring; a migration with ``canary=`` runs its duplicate
(canary states) and waits at the switch request (``awaiting_promotion``) before it applies."""
REOPENABLE: frozenset[RunState] = frozenset({S.FAILED})
"""Ended states a run may leave again: a failed run (stored by an older version, whose cluster
may be half-changed) may be resumed or rolled back; it takes its target's lock again."""


APART = "$stored_apart"
"""The key of the marker that stands for a large progress value read apart (its size in bytes)."""


class RunKind(enum.StrEnum):
    UPGRADE = "upgrade"
    """A plugin DaemonSet's new image: canary, verify, promote, monitor."""
    MIGRATION = "migration"
    """One workload moved from device-plugin resources to ResourceClaims: apply, verify."""
    REPAIR = "repair"
    """The workload pods a plugin's outage left stuck on its nodes, deleted so their controllers
    recreate them: apply, verify."""
    CLEANUP = "cleanup"
    """The broken ResourceClaims listed at request time, deleted as listed: apply, verify."""
    QUARANTINE = "quarantine"
    """One node taken out of a plugin DaemonSet's reach (label, template affinity term, cordon): apply, verify."""
    RELEASE = "release"
    """A quarantined node given back to its plugin DaemonSet: apply, verify."""


CHANGE_KINDS = frozenset({RunKind.MIGRATION, RunKind.REPAIR, RunKind.CLEANUP, RunKind.QUARANTINE, RunKind.RELEASE})
"""The runs that apply one change planned at request time (their steps are ``ChangeSteps``)."""


def transitions_of(kind: RunKind) -> dict[RunState, frozenset[RunState]]:
    return MIGRATION_TRANSITIONS if kind in CHANGE_KINDS else TRANSITIONS


class IllegalTransition(ValueError):
    """A transition the table does not allow; nothing was changed."""

    def __init__(self, run_id: str, current: RunState, wanted: RunState, kind: RunKind = RunKind.UPGRADE) -> None:
        table = transitions_of(kind)
        allowed = ", ".join(sorted(table.get(current, frozenset()) | ({S.FAILED} if current in ACTIVE else set())))
        if current in REOPENABLE:
            allowed = f"{allowed} (`resume` or `rollback` reopens it)"
        super().__init__(
            f"run {run_id} is {current.value}; it cannot become {wanted.value} "
            f"(allowed next: {allowed or 'nothing, the run has ended'})"
        )
        self.run_id, self.current, self.wanted = run_id, current, wanted


def allowed(current: RunState, wanted: RunState, kind: RunKind = RunKind.UPGRADE) -> bool:
    table = transitions_of(kind)
    if current not in table:
        return False
    if wanted is S.FAILED:
        return current in ACTIVE
    return wanted in table[current]


def check_transition(run_id: str, current: RunState, wanted: RunState, kind: RunKind = RunKind.UPGRADE) -> None:
    if not allowed(current, wanted, kind):
        raise IllegalTransition(run_id, current, wanted, kind)


_RUN_ID = re.compile(r"^r-[0-9a-z]{8}$")


def new_run_id() -> str:
    alphabet = "0123456789abcdefghijklmnopqrstuvwxyz"
    return "r-" + "".join(secrets.choice(alphabet) for _ in range(8))


def is_run_id(text: str) -> bool:
    return bool(_RUN_ID.fullmatch(text))


_DEFERRED = ConfigDict(defer_build=True)
"""The run's models build their schema when a run is first read or written, not at import: a
verb that reads no run (``status`` with none active, ``--help``) pays none (issue 39)."""


class Part(BaseModel):
    """Another workload of the target's namespace upgraded in the same run (a DRA driver's
    controller Deployment), from the policy's ``workloads`` at request time."""

    model_config = _DEFERRED

    kind: str = Field(description="Deployment or DaemonSet")
    name: str
    container: str = Field(default="", description="'' = the one running the target's image repository")
    before: bool = Field(description="upgraded before the target's canary pod (else after its promotion)")

    @property
    def ref(self) -> str:
        return f"{self.kind.lower()}/{self.name}"


class Target(BaseModel):
    """What a run changes: one DaemonSet (an upgrade) or one workload (a migration) in one
    cluster (kubeconfig context)."""

    model_config = _DEFERRED

    cluster: str = Field(description="kubeconfig context name ('' = the current context)")
    namespace: str
    name: str
    kind: str = "DaemonSet"
    parts: list[Part] = Field(default_factory=list, description="other workloads upgraded with it, in order")
    drain: bool = Field(default=False, description="each node is cordoned and drained before its plugin pod is "
                        "replaced (policy targets[].drain at request time): the run may cordon nodes and evict pods")
    owner: str = Field(default="", description="clusterpolicy/<name>: the GPU operator renders the DaemonSet from "
                       "that ClusterPolicy, and the run changes it there, never the DaemonSet (policy targets[].owner at "
                       "request time)")

    @property
    def clusterpolicy(self) -> str:
        """The ClusterPolicy the run changes instead of the DaemonSet; '' for a plain run."""
        return self.owner.partition("/")[2] if self.owner.startswith("clusterpolicy/") else ""

    @property
    def key(self) -> str:
        """``cluster/namespace/name`` (other kinds than DaemonSet: ``cluster/namespace/Kind/name``):
        the unit of the one-active-run lock."""
        if self.kind == "DaemonSet":
            return f"{self.cluster}/{self.namespace}/{self.name}"
        return f"{self.cluster}/{self.namespace}/{self.kind}/{self.name}"

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"


class Decision(BaseModel):
    model_config = _DEFERRED

    user: str
    approve: bool
    at: dt.datetime
    comment: str = ""


class GateKind(enum.StrEnum):
    CANARY = "canary"
    MIGRATION = "migration"
    REPAIR = "repair"
    CLEANUP = "cleanup"
    QUARANTINE = "quarantine"
    RELEASE = "release"
    PROMOTION = "promotion"
    ROLLBACK = "rollback"


class Gate(BaseModel):
    """An open (or decided) approval request on a run."""

    model_config = _DEFERRED

    kind: GateKind
    opened_at: dt.datetime
    expires_at: dt.datetime
    requested_by: str
    decisions: list[Decision] = Field(default_factory=list)
    outcome: str | None = Field(default=None, description="approved | rejected | expired")
    decided_at: dt.datetime | None = None
    reason: str = Field(default="", description="why it was opened (a rollback request says why)")
    wave: int = Field(default=0, description="a promotion in waves: the wave this request starts (1-based); "
                      "0: the whole promotion")

    @property
    def is_open(self) -> bool:
        return self.outcome is None

    def decision_of(self, user: str) -> Decision | None:
        return next((d for d in self.decisions if d.user == user), None)

    @property
    def approvers(self) -> list[str]:
        return [d.user for d in self.decisions if d.approve]


class Step(BaseModel):
    """One entry of a run's story: a transition, a check, a mutation, a decision."""

    model_config = _DEFERRED

    name: str
    status: str = Field(description="ok | failed | unknown | info | skipped")
    kind: str = Field(default="step", description="transition | decision | gate | check | mutation | step")
    detail: str = ""
    evidence: dict[str, Any] = Field(default_factory=dict)
    actor: str = "upgradebot"
    surface: str = ""
    """Where the actor acted from (``slack``, ``shell``…); empty: the engine wrote it."""
    account: str = ""
    """From a shell: the OS account or CI identity (``alice``, ``ci:release``)."""
    at: dt.datetime


class Pause(BaseModel):
    """Someone paused the run: no new node or wave starts until ``continue``."""

    model_config = _DEFERRED

    by: str
    at: dt.datetime
    reason: str = ""


class Run(BaseModel):
    """One upgrade run, as kept in the store."""

    model_config = _DEFERRED

    id: str
    kind: RunKind = RunKind.UPGRADE
    target: Target
    image: str
    container: str
    node: str
    requester: str
    state: RunState = RunState.REQUESTED
    reason: str = ""
    created_at: dt.datetime
    updated_at: dt.datetime
    version: int = Field(default=0, description="bumped by every stored write (compare-and-set)")
    gate: Gate | None = None
    previous_state: RunState | None = None
    halted: bool = Field(
        default=False,
        description="a step failed with rollback.automatic off: the run waits at a rollback gate",
    )
    progress: dict[str, Any] = Field(
        default_factory=dict,
        description="what the steps recorded so far (saved template, strategy, revision, "
        "baseline...), so a resumed step does only what is still missing",
    )
    origin: dict[str, str] = Field(
        default_factory=dict, description="where the run was requested (surface, channel, thread)"
    )
    pause: Pause | None = Field(default=None, description="set by `pause`, cleared by `continue`")
    edits: Edits = Field(
        default_factory=Edits,
        description="what the canary changes in the pod template besides the image (env, args, resources, "
        "security contexts, priority class, tolerations), fixed at request time",
    )
    change: dict[str, Any] = Field(
        default_factory=dict,
        description="a migration: what the approvers approve and the run applies, fixed at request time "
        "(the objects, the workload's pod template they were planned from)",
    )
    evidence: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="the failure's own words, one entry per failed check (`<step>.<check>`: step, check, "
        "status, scope, detail, items), as its step reported them; a step that passes again drops its own",
    )

    @property
    def active(self) -> bool:
        return self.state in ACTIVE

    @property
    def canary_nodes(self) -> list[str]:
        """The canary's nodes: ``node`` is one name or several joined by commas (one per hardware class)."""
        return [n for n in self.node.split(",") if n]

    def shown(self, key: str) -> Any:
        """``progress[key]`` for a view: None when the run was read without its large values
        (the store's ``whole=False``) and this is one of them (a marker, :data:`APART`)."""
        value = self.progress.get(key)
        return None if isinstance(value, dict) and APART in value else value


STEP_OF: dict[RunState, str] = {
    RunState.APPLYING: "apply",
    RunState.CANARY_ROLLING: "canary",
    RunState.CANARY_VERIFYING: "verify_canary",
    RunState.PROMOTING: "promote",
    RunState.VERIFYING: "verify_all",
    RunState.ROLLING_BACK: "rollback",
}
"""The step each working state runs, by the name the step log, the views and the metrics give it
(here, not in the driver: a run view needs the names, not the driving; issue 39)."""


NODE_CHOICE = "node_choice"
"""``run.progress[NODE_CHOICE]``: which node ``node=auto`` chose and why, for the request people approve
(:mod:`runbooks.engine.requesting` writes it; the replies read it without loading the requesting)."""
