"""A migration canary (``apply-migration … canary=<n>|<p>%``): the plan tried on a duplicate first.

At request time (:func:`plan_canary`, read-only) the duplicate is written out whole and stored
with the run, so the approvers approve exactly it: the workload's spec with the plan's pod
template, named ``<name>-upgradebot-canary``, labelled ``upgradebot.io/canary: <run id>`` (on
itself, its selector and its pod template: the original's selector plus the label), with
the replicas asked (``canary=2``, or ``canary=25%`` of the original's, at least one).

- ``canary`` (:func:`create_duplicate`): the plan's ResourceClaimTemplates created, then the
  duplicate, which the run proves it made by its uid, never by its name or label (anyone
  allowed to create a Deployment there can set those, and the run id is in the request).
  Before the create the step saves in the run's progress the SHA-256 of a random token it
  puts on the duplicate (annotation ``upgradebot.io/canary-token``, the token itself kept
  nowhere else), then creates it and saves its uid. After a crash between the create and
  that save, the object of that name whose token hashes to the saved hash is the run's: only
  the run knew the token, and it is on no other object (the progress, which ``status`` shows,
  has its hash only). A workload of that name whose uid or token is not the run's, one there
  before the run's first create above all, is never adopted and never deleted: the step
  fails naming it (delete or rename it and request again). The original is not touched.
- ``verify_canary`` (:func:`verify_duplicate`): the duplicate's rollout followed; its pods
  Running and Ready with each claim allocated and reserved for them (the migration's own
  check); then, with ``prometheus`` in the policy, the metric checks over verify's window
  (:func:`compare_metrics`): the canary's pods against the original's for the checks over
  pods, the canary's nodes against their own values for the others. Passed, the switch
  request opens; the switch is the migration as without a canary.
- the duplicate is deleted once the switched workload is verified, and by the rollback
  (:func:`delete_duplicate`: only the object this run created, by its saved uid, or by its
  token when the run died before saving it; the delete has the uid as its precondition).

What this keeps in ``run.progress``: ``canary_created`` (the name), ``canary_token_sha256``
(saved before each create) and ``canary_uid`` (saved right after it).
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import math
import secrets
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
"""On the duplicate, its selector and its pods: the run's id (to select its pods; it proves nothing)."""
TOKEN_ANNOTATION = "upgradebot.io/canary-token"
"""On the duplicate: the random token whose SHA-256 the run saved before creating it."""
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


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _owned(run: Run, obj: dict[str, Any]) -> bool:
    """Whether ``obj`` is the duplicate this run created: its saved uid, or (the run died between
    the create and saving the uid) the token whose hash it saved just before the create."""
    meta = obj["metadata"]
    if run.progress.get("canary_uid"):
        return bool(meta.get("uid") == run.progress["canary_uid"])
    token = (meta.get("annotations") or {}).get(TOKEN_ANNOTATION)
    saved = run.progress.get("canary_token_sha256")
    return bool(token and saved and secrets.compare_digest(_digest(str(token)), str(saved)))


def create_duplicate(ctx: StepContext) -> Check:
    """The duplicate created, or found after a restart when this run provably created it."""
    run, target = ctx.run, ctx.run.target
    canary = run.change["canary"]
    resource, what = WORKLOADS[target.kind], f"{target.kind} {target.namespace}/{canary['name']}"
    not_ours = failed("canary-created", f"a {what} exists already and was not created by this run (a label or a "
                      "name proves nothing): left as it is; delete or rename it, then request the migration again",
                      target.ref)
    try:
        existing = ctx.cluster.get(resource, canary["name"], target.namespace)
    except NotFound:
        existing = None
    if existing is not None:
        if not _owned(run, existing):
            return not_ours
        if not run.progress.get("canary_uid"):  # made before a crash, its uid not saved then
            ctx.run = ctx.save_progress({"canary_uid": existing["metadata"]["uid"]})
        return passed("canary-created", f"{what} runs the plan with {canary['replicas']} replica(s); {target.ref} is "
                      "unchanged", target.ref)
    token = secrets.token_hex(16)
    body = copy.deepcopy(canary["object"])
    body["metadata"]["annotations"] = {**(body["metadata"].get("annotations") or {}), TOKEN_ANNOTATION: token}
    ctx.run = ctx.save_progress({"canary_created": canary["name"], "canary_token_sha256": _digest(token),
                                 "canary_uid": None})
    try:
        made = ctx.cluster.create(resource, body, namespace=target.namespace)
    except Conflict:  # someone made one of that name since the read: not this run's
        return not_ours
    ctx.run = ctx.save_progress({"canary_uid": made["metadata"]["uid"]})
    note(ctx, "canary.duplicate", "ok", f"created {what} ({canary['replicas']} replica(s), the migrated pod "
         "template)", kind="mutation", uid=made["metadata"]["uid"])
    return passed("canary-created", f"{what} runs the plan with {canary['replicas']} replica(s); {target.ref} is "
                  "unchanged", target.ref)


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
    """The duplicate this run created deleted (None when it tried to create none)."""
    run, target = ctx.run, ctx.run.target
    name = run.progress.get("canary_created")
    if not name:
        return None
    resource, what = WORKLOADS[target.kind], f"{target.kind} {target.namespace}/{name}"
    try:
        existing = ctx.cluster.get(resource, name, target.namespace)
    except NotFound:
        return passed("canary-deleted", f"{what} is gone", target.ref)
    if not _owned(run, existing):
        if not run.progress.get("canary_uid") and not run.progress.get("canary_token_sha256"):
            return failed("canary-deleted", f"{what} was recorded without its uid (by an older version): left for a "
                          "person to check and delete", target.ref)
        return passed("canary-deleted", f"the {what} there is not the one this run created: left as it is",
                      target.ref)
    with contextlib.suppress(NotFound):
        ctx.cluster.delete(resource, name, namespace=target.namespace, uid=existing["metadata"]["uid"])
    note(ctx, f"{step}.duplicate", "ok", f"deleted the canary {what}", kind="mutation", uid=existing["metadata"]["uid"])
    return passed("canary-deleted", f"the canary {what} is deleted", target.ref)


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
