"""The requests of the runs that change one node of a target: ``quarantine`` and ``release``
(:mod:`runbooks.daemonset.quarantining`), as methods the :class:`~runbooks.engine.commands.Engine`
inherits. Like every change run, the change is planned now, read-only, from the cluster, checked,
and stored with its request; nothing is written before an approver approves it."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from runbooks import validation
from runbooks.engine.approving import Actor, check_may_open
from runbooks.engine.refusals import Refused
from runbooks.engine.requesting import InvalidRequest, context_name
from runbooks.engine.runs import Run, RunKind, Target, new_run_id
from runbooks.policy import Policy

if TYPE_CHECKING:
    from runbooks.engine.commands import Outcome
    from runbooks.engine.steps import Clock


class NodeRequests:
    """``request_quarantine`` and ``request_release`` of the engine."""

    policy: Policy
    clock: Clock
    connect: Callable[[str | None], Any] | None
    slack_sees_runs: bool

    if TYPE_CHECKING:  # the engine's own (runbooks.engine.commands.Engine)
        def _outside_window(self, ref: str, now: dt.datetime, when: str) -> str: ...

        def _request_change(self, actor: Actor, draft: Run, what: Callable[[Run], str]) -> Outcome: ...

    def request_quarantine(self, *, actor: Actor, target: str, node: str, cluster: str | None = None,
                           origin: dict[str, str] | None = None, when: str = "now") -> Outcome:
        """A new quarantine run waiting at its request: ``node`` taken out of the DaemonSet's reach.
        Refused when the node does not exist, runs no pod of the target, is quarantined already, or
        the target has an active run; outside the target's maintenance windows as a canary is
        (``when=next-window``: it waits for one)."""
        return self._request_node_change(RunKind.QUARANTINE, actor=actor, target=target, node=node, cluster=cluster,
                                         origin=origin, when=when)

    def request_release(self, *, actor: Actor, target: str, node: str, cluster: str | None = None,
                        origin: dict[str, str] | None = None, when: str = "now") -> Outcome:
        """A new release run waiting at its request: a quarantined ``node`` given back to the
        DaemonSet. Refused when the node does not exist or is not quarantined from the target."""
        return self._request_node_change(RunKind.RELEASE, actor=actor, target=target, node=node, cluster=cluster,
                                         origin=origin, when=when)

    def _request_node_change(self, kind: RunKind, *, actor: Actor, target: str, node: str, cluster: str | None,
                             origin: dict[str, str] | None, when: str) -> Outcome:
        check_may_open(self.policy, actor, slack_sees_runs=self.slack_sees_runs)
        try:
            parsed, node = validation.target(target, self.policy.target_refs), validation.node_name(node)
        except ValueError as exc:
            raise InvalidRequest(str(exc)) from exc
        if self.connect is None:
            raise Refused(f"a {kind.value} is planned from the cluster, and this engine has none")
        now, context = self.clock.now(), context_name(cluster) if cluster is not None else None
        queued = self._outside_window(str(parsed), now, when)
        draft = Run(id=new_run_id(), kind=kind, requester=actor.user, created_at=now, updated_at=now,
                    target=Target(cluster=context or "", namespace=parsed.namespace, name=parsed.name),
                    image="", container="", node=node, origin=origin or {})
        return self._request_change(actor, draft, lambda run: f"{kind.value} of {run.node} from {run.target.ref}"
                                    + (f" ({queued})" if queued else ""))
