"""A migration canary (``apply-migration … canary=<n>|<p>%``): the plan tried on a duplicate first.

At request time (:func:`plan_canary`, read-only) the duplicate is written out whole and stored
with the run, so the approvers approve exactly it: the workload's spec with the plan's pod
template, named ``<name>-upgradebot-canary``, labelled ``upgradebot.io/canary: <run id>`` (on
itself, its selector and its pod template: the original's selector plus the label), with
the replicas asked (``canary=2``, or ``canary=25%`` of the original's, at least one).

- ``canary`` (:func:`create_duplicate`): the plan's ResourceClaimTemplates created, then the
  duplicate (its name saved in the run's progress first, so a rollback after a crash knows it);
  a workload of that name that is not this run's stops the step. The original is not touched.
- ``verify_canary`` (:func:`verify_duplicate`): the duplicate's rollout followed; its pods
  Running and Ready with each claim allocated and reserved for them (the migration's own
  check); then, with ``prometheus`` in the policy, the metric checks over verify's window
  (:func:`compare_metrics`): the canary's pods against the original's for the checks over
  pods, the canary's nodes against their own values for the others. Passed, the switch
  request opens; the switch is the migration as without a canary.
- the duplicate is deleted once the switched workload is verified, and by the rollback
  (:func:`delete_duplicate`: only the object this run created, by uid and label).
"""

from __future__ import annotations

import contextlib
import copy
import math
from typing import Any

from runbooks import rollouts
from runbooks.cluster.resources import WORKLOADS
from runbooks.engine.recording import failed, note, passed
from runbooks.engine.refusals import Refused
from runbooks.engine.runs import Run
from runbooks.engine.steps import Check, StepContext
from runbooks.errors import Conflict, NotFound
from runbooks.metrics.comparing import PodGroup, canary_watches
from runbooks.metrics.prometheus import client_of

CANARY_LABEL = "upgradebot.io/canary"
"""On the duplicate, its selector and its pods: the run's id."""
SUFFIX = "-upgradebot-canary"
MAX_NAME = 52
"""A StatefulSet's pods carry its name in a 63-character label with a revision hash: kept short for both kinds."""


def canary_replicas(ask: str, original: int) -> int:
    """``2`` -> 2; ``25%`` -> a quarter of ``original``, rounded up, at least 1."""
    text = ask.strip()
    if text.endswith("%"):
        percent = int(text[:-1])
        if not 0 < percent <= 100:
            raise Refused(f"canary={ask}: a percentage is between 1% and 100%")
        return max(1, math.ceil(original * percent / 100))
    count = int(text)
    if count < 1:
        raise Refused(f"canary={ask}: at least one replica")
    return count


def plan_canary(run: Run, workload: dict[str, Any], template: dict[str, Any], ask: str) -> dict[str, Any]:
    """The duplicate to create (stored in ``run.change['canary']``)."""
    target = run.target
    name = f"{target.name}{SUFFIX}"
    if len(name) > MAX_NAME:
        raise Refused(f"a canary of {target.ref} would be named {name}, longer than {MAX_NAME} characters: migrate "
                      "it without canary=")
    spec = copy.deepcopy(workload.get("spec") or {})
    replicas = canary_replicas(ask, int(spec.get("replicas", 1) or 0))
    selector = spec.get("selector") or {}
    spec["selector"] = {**selector, "matchLabels": {**(selector.get("matchLabels") or {}), CANARY_LABEL: run.id}}
    pod = copy.deepcopy(template)
    pod.setdefault("metadata", {})["labels"] = {**(pod["metadata"].get("labels") or {}), CANARY_LABEL: run.id}
    spec.update(replicas=replicas, template=pod)
    labels = {**(workload["metadata"].get("labels") or {}), CANARY_LABEL: run.id}
    body = {"metadata": {"name": name, "namespace": target.namespace, "labels": labels}, "spec": spec}
    return {"name": name, "replicas": replicas, "ask": ask, "object": body}


def create_duplicate(ctx: StepContext) -> Check:
    """The duplicate created (or found, this run's, after a restart)."""
    run, target = ctx.run, ctx.run.target
    canary = run.change["canary"]
    resource = WORKLOADS[target.kind]
    if not run.progress.get("canary_created"):
        ctx.run = ctx.save_progress({"canary_created": canary["name"]})
    try:
        ctx.cluster.create(resource, canary["object"], namespace=target.namespace)
        note(ctx, "canary.duplicate", "ok", f"created {target.kind} {target.namespace}/{canary['name']} "
             f"({canary['replicas']} replica(s), the migrated pod template)", kind="mutation")
    except Conflict:
        existing = ctx.cluster.get(resource, canary["name"], target.namespace)
        if (existing["metadata"].get("labels") or {}).get(CANARY_LABEL) != run.id:
            return failed("canary-created", f"a {target.kind} {target.namespace}/{canary['name']} exists already and "
                          "is not this run's: delete or rename it first", target.ref)
    return passed("canary-created", f"{target.kind} {target.namespace}/{canary['name']} runs the plan with "
                  f"{canary['replicas']} replica(s); {target.ref} is unchanged", target.ref)


def follow_duplicate(ctx: StepContext) -> Check:
    """Wait until the duplicate's rollout is complete (or stuck past its deadline)."""
    target, canary = ctx.run.target, ctx.run.change["canary"]
    read = rollouts.reader(ctx.cluster, WORKLOADS[target.kind], target.namespace, canary["name"])
    want = canary["object"]["spec"]["template"]
    state, last = rollouts.follow(read, want, clock=ctx.clock, timeout=ctx.settings.ready_timeout,
                                  interval=ctx.settings.poll_interval)
    what = f"{target.kind} {target.namespace}/{canary['name']}"
    if state == rollouts.COMPLETE:
        return passed("canary-rollout", f"{what} rolled out: {rollouts.counts(last)}", target.ref)
    why = (rollouts.progressing(last).get("message") if state == rollouts.STUCK
           else f"not finished in {ctx.settings.ready_timeout:g}s")
    return failed("canary-rollout", f"{what} did not roll out ({rollouts.counts(last)}): {why}", target.ref)


def delete_duplicate(ctx: StepContext, step: str) -> Check | None:
    """The duplicate this run created deleted (None when it made none)."""
    run, target = ctx.run, ctx.run.target
    name = run.progress.get("canary_created")
    if not name:
        return None
    resource = WORKLOADS[target.kind]
    try:
        existing = ctx.cluster.get(resource, name, target.namespace)
    except NotFound:
        return passed("canary-deleted", f"{target.kind} {target.namespace}/{name} is gone", target.ref)
    if (existing["metadata"].get("labels") or {}).get(CANARY_LABEL) != run.id:
        return failed("canary-deleted", f"{target.kind} {target.namespace}/{name} is not this run's: left",
                      target.ref)
    with contextlib.suppress(NotFound):
        ctx.cluster.delete(WORKLOADS[target.kind], name, namespace=target.namespace, uid=existing["metadata"]["uid"])
    note(ctx, f"{step}.duplicate", "ok", f"deleted the canary {target.kind} {target.namespace}/{name}",
         kind="mutation")
    return passed("canary-deleted", f"the canary {target.kind} {target.namespace}/{name} is deleted", target.ref)


def plan_if_asked(run: Run, workload: dict[str, Any], template: dict[str, Any]) -> dict[str, Any]:
    """``{'canary': …}`` for the run's change when ``canary=`` was asked, else {}."""
    ask = run.change.get("canary_ask")
    if not ask:
        return {}
    return {"canary": plan_canary(run, workload, template, str(ask))}


def compare_metrics(ctx: StepContext, *, canary: list[dict[str, Any]], original: list[dict[str, Any]]) -> list[Check]:
    """The policy's metric checks over verify's window (none without ``prometheus``): see
    :mod:`runbooks.metrics.comparing` for what is compared with what."""
    settings = ctx.settings
    source = client_of(settings.prometheus)
    if source is None or not settings.metric_checks:
        return []
    namespace = ctx.run.target.namespace
    started = ctx.clock.now()

    def elapsed() -> float:
        return (ctx.clock.now() - started).total_seconds()

    nodes, pods = canary_watches(source, settings.metric_checks, canary=PodGroup.of(namespace, canary),
                                 original=PodGroup.of(namespace, original), window=settings.observe_window,
                                 elapsed=elapsed)
    while (left := settings.observe_window - elapsed()) > 0:
        ctx.clock.sleep(min(settings.poll_interval, left))
        nodes.tick()
        pods.tick()
    return nodes.checks() + pods.checks()
