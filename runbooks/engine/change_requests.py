"""The requests of the runs that change what their steps plan from the cluster: ``migration``,
``repair`` and ``cleanup``, as methods the :class:`~runbooks.engine.commands.Engine` inherits.
Each is planned now, read-only, by its steps, checked, and stored with its plan waiting at its
request; nothing is written before an approver approves it."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from runbooks import validation
from runbooks.cluster.resources import WORKLOADS
from runbooks.engine import refusals
from runbooks.engine.approving import Actor, check_may_open
from runbooks.engine.refusals import Refused
from runbooks.engine.requesting import InvalidRequest, context_name
from runbooks.engine.runs import Run, RunKind, Step, Target, new_run_id
from runbooks.engine.steps import CheckStatus
from runbooks.policy import Policy

if TYPE_CHECKING:
    from runbooks.engine.commands import Outcome
    from runbooks.engine.driving import Driver
    from runbooks.engine.gating import Gates
    from runbooks.engine.steps import Clock
    from runbooks.engine.transitioning import Writer

MIGRATED_KINDS = tuple(WORKLOADS)
"""The kinds a migration may name (the steps say which of them a run applies)."""
CLUSTER_WIDE = "cluster-wide"
"""The namespace part of a cleanup run's target: its claims are anywhere in the cluster."""


class ChangeRequests:
    """``request_migration``, ``request_repair`` and ``request_cleanup`` of the engine."""

    policy: Policy
    clock: Clock
    connect: Callable[[str | None], Any] | None
    slack_sees_runs: bool
    driver: Driver
    writer: Writer
    gates: Gates

    if TYPE_CHECKING:  # the engine's own (runbooks.engine.commands.Engine)
        def _refuse_if_locked(self, run: Run) -> None: ...

        def _create(self, run: Run, line: Step) -> None: ...

    def request_migration(
        self, *, actor: Actor, namespace: str, name: str, kind: str | None = None, device_class: str | None = None,
        cluster: str | None = None, origin: dict[str, str] | None = None, canary: str | None = None,
    ) -> Outcome:
        """A new migration run waiting at its migration request (with ``canary``, ``<n>`` or ``<p>%``
        replicas: a duplicate of the workload runs the plan first, and the switch waits for its approval).

        The change is planned now, read-only, and stored with the run (``run.change``): the
        approvers approve exactly what ``apply`` writes. Refused before anything is stored when
        the plan cannot be made or the server's dry run refuses it, when the workload has an
        active run (``LockHeld``), or when a request check fails."""
        check_may_open(self.policy, actor, slack_sees_runs=self.slack_sees_runs)
        try:
            namespace, name = validation.node_name(namespace), validation.node_name(name)
        except ValueError as exc:
            raise InvalidRequest(str(exc)) from exc
        if kind is not None and kind not in MIGRATED_KINDS:
            raise InvalidRequest(f"{kind!r} cannot be migrated: use one of {', '.join(MIGRATED_KINDS)}")
        allowed = self.policy.migrations.namespaces
        if namespace not in allowed:
            raise Refused(f"migration runs may not change workloads in namespace {namespace}: the policy lists "
                          f"{', '.join(allowed) if allowed else 'none'} under migrations.namespaces "
                          "(`migrate` shows the plan anywhere, without changing anything)")
        now = self.clock.now()
        if self.connect is None:
            raise Refused("a migration is planned from the cluster, and this engine has none")
        context = context_name(cluster) if cluster is not None else None
        draft = Run(id=new_run_id(), kind=RunKind.MIGRATION, requester=actor.user, created_at=now, updated_at=now,
                    target=Target(cluster=context or "", namespace=namespace, name=name, kind=kind or ""),
                    image="", container="", node="", origin=origin or {},
                    change={k: v for k, v in (("device_class", device_class), ("canary_ask", canary)) if v})
        return self._request_change(actor, draft, lambda run: f"migration of {run.target.kind} {run.target.ref}")

    def request_repair(
        self, *, actor: Actor, target: str, cluster: str | None = None, origin: dict[str, str] | None = None,
    ) -> Outcome:
        """A new repair run waiting at its repair request: the workload pods a plugin's outage
        left stuck on the target's nodes (failed with ``UnexpectedAdmissionError``, or pending
        for lack of its resource) are listed now, read-only, and stored with the run; once
        approved, those with a controller are deleted so it recreates them (bare pods are listed
        only, never deleted). Refused when the plugin is not healthy yet, when nothing is stuck,
        or when the target has an active run."""
        check_may_open(self.policy, actor, slack_sees_runs=self.slack_sees_runs)
        try:
            parsed = validation.target(target, self.policy.target_refs)
        except ValueError as exc:
            raise InvalidRequest(str(exc)) from exc
        if self.connect is None:
            raise Refused("a repair is planned from the cluster, and this engine has none")
        now = self.clock.now()
        context = context_name(cluster) if cluster is not None else None
        draft = Run(id=new_run_id(), kind=RunKind.REPAIR, requester=actor.user, created_at=now, updated_at=now,
                    target=Target(cluster=context or "", namespace=parsed.namespace, name=parsed.name),
                    image="", container="", node="", origin=origin or {})
        return self._request_change(actor, draft, lambda run: f"repair of {run.target.ref}")

    def request_cleanup(self, *, actor: Actor, cluster: str | None = None,
                        origin: dict[str, str] | None = None) -> Outcome:
        """A new cleanup run waiting at its request: the broken ResourceClaims listed now (read-only,
        with the uid and resourceVersion each was read at) and stored with the run; once approved,
        each is deleted only as it was listed. Refused when none can be deleted."""
        check_may_open(self.policy, actor, slack_sees_runs=self.slack_sees_runs)
        if self.connect is None:
            raise Refused("a cleanup is planned from the cluster, and this engine has none")
        now, context = self.clock.now(), context_name(cluster) if cluster is not None else None
        draft = Run(id=new_run_id(), kind=RunKind.CLEANUP, requester=actor.user, created_at=now, updated_at=now,
                    target=Target(cluster=context or "", namespace=CLUSTER_WIDE, name="resourceclaims",
                                  kind="ResourceClaim"), image="", container="", node="", origin=origin or {})
        return self._request_change(actor, draft, lambda run: "cleanup of broken ResourceClaims")

    def _request_change(self, actor: Actor, draft: Run, what: Callable[[Run], str]) -> Outcome:
        """A run of a change kind, planned by its steps from the cluster (read-only), checked, stored
        with its plan and waiting at its request."""
        from runbooks.engine.commands import Outcome  # the engine's module imports this one

        assert self.connect is not None
        steps = self.driver.steps_for(draft)
        with self.connect(draft.target.cluster or None) as handle:
            run, summary = steps.plan(handle, draft, self.driver.settings)
            self._refuse_if_locked(run)
            failing = [c for c in steps.check_request(handle, run, self.driver.settings)
                       if c.status == CheckStatus.FAIL]
            if failing:
                raise Refused(refusals.request_checks_failed(run, [(c.name, c.detail) for c in failing]))
        line = self.writer.step("requested", kind="transition", actor=actor,
                                detail=f"{what(run)} in {run.target.cluster or 'the current context'}: {summary}")
        self._create(run, line)
        return Outcome(self.gates.open_first(run.id, actor))
