"""Rollouts of Deployments and DaemonSets, read as ``kubectl rollout status`` reads them.

A DaemonSet, Deployment or StatefulSet is complete as ``kubectl rollout status`` says (a
StatefulSet's pods above its partition updated and every pod Ready); only a Deployment can
be stuck (its progress deadline). Used by the steps that change a workload other than the
target's own plugin DaemonSet pod by pod: a target's companion workloads (a DRA driver's controller Deployment,
:mod:`runbooks.daemonset.companions`) and a migration's Deployment
(:mod:`runbooks.dra.migration_run`). Pure reads; waiting is on the step's clock.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from runbooks.cluster.resources import Resource
from runbooks.daemonset.observing import daemonset_done, wait_for
from runbooks.engine.steps import Clock
from runbooks.templates import same

COMPLETE, STUCK, CHANGED, ROLLING = "complete", "stuck", "changed", "rolling"


def template_of(workload: dict[str, Any]) -> dict[str, Any]:
    template: dict[str, Any] = (workload.get("spec") or {}).get("template") or {}
    return template


def with_image(template: dict[str, Any], container: str, image: str) -> dict[str, Any]:
    """A copy of the pod template with ``image`` on ``container``."""
    changed = copy.deepcopy(template)
    for ctr in (changed.get("spec") or {}).get("containers") or []:
        if ctr.get("name") == container:
            ctr["image"] = image
    return changed


def rollout_state(workload: dict[str, Any], want: dict[str, Any]) -> str:
    """``complete``, ``stuck`` (a Deployment past its progress deadline), ``changed`` (its pod
    template is not ``want`` any more) or ``rolling``."""
    if not same(template_of(workload), want):
        return CHANGED
    spec, status = workload.get("spec") or {}, workload.get("status") or {}
    observed = status.get("observedGeneration", 0) >= workload["metadata"].get("generation", 0)
    if workload.get("kind") == "DaemonSet":
        return COMPLETE if daemonset_done(workload) else ROLLING
    if workload.get("kind") == "StatefulSet":
        desired = spec.get("replicas", 1)
        partition = int(((spec.get("updateStrategy") or {}).get("rollingUpdate") or {}).get("partition") or 0)
        done = status.get("readyReplicas", 0) == desired and status.get("updatedReplicas", 0) >= desired - partition \
            and (partition > 0 or status.get("currentRevision") == status.get("updateRevision"))
        return COMPLETE if observed and done else ROLLING
    desired = spec.get("replicas", 1)
    if observed and status.get("updatedReplicas", 0) == desired and status.get("replicas", 0) == desired \
            and status.get("availableReplicas", 0) == desired:
        return COMPLETE
    if progressing(workload).get("reason") == "ProgressDeadlineExceeded":
        return STUCK
    return ROLLING


def progressing(workload: dict[str, Any]) -> dict[str, Any]:
    """The Deployment's ``Progressing`` condition (``{}`` when it has none)."""
    conditions = (workload.get("status") or {}).get("conditions") or []
    found: dict[str, Any] = next((c for c in conditions if c.get("type") == "Progressing"), {})
    return found


def counts(workload: dict[str, Any]) -> str:
    """``2 updated, 1 available of 3``."""
    status = workload.get("status") or {}
    if workload.get("kind") == "DaemonSet":
        return (f"{status.get('updatedNumberScheduled', 0)} updated, {status.get('numberAvailable', 0)} available of "
                f"{status.get('desiredNumberScheduled', 0)}")
    if workload.get("kind") == "StatefulSet":
        return (f"{status.get('updatedReplicas', 0)} updated, {status.get('readyReplicas', 0)} ready of "
                f"{(workload.get('spec') or {}).get('replicas', 1)}")
    return (f"{status.get('updatedReplicas', 0)} updated, {status.get('availableReplicas', 0)} available of "
            f"{(workload.get('spec') or {}).get('replicas', 1)}")


def follow(read: Callable[[], dict[str, Any]], want: dict[str, Any], *, clock: Clock, timeout: float,
           interval: float) -> tuple[str, dict[str, Any]]:
    """Wait until the rollout of ``want`` ends (complete, stuck or changed) or ``timeout``
    passes (``rolling``); the state and the workload as last read (with its ``kind``)."""
    last: dict[str, Any] = {}

    def ended() -> str | None:
        nonlocal last
        last = read()
        state = rollout_state(last, want)
        return state if state != ROLLING else None

    state = wait_for(clock, timeout=timeout, interval=interval, probe=ended)
    return state or ROLLING, last


def reader(cluster: Any, resource: Resource, namespace: str, name: str) -> Callable[[], dict[str, Any]]:
    """``read()`` for :func:`follow`: the workload, with its ``kind`` (a typed get may lack it)."""
    return lambda: {**cluster.get(resource, name, namespace), "kind": resource.kind}
