"""The failure's own words (issue 36, item 4; issue 61 items 3 and 4): what a failed plugin
container left behind, and what a plugin that runs without registering prints.

For a pod whose container failed, :func:`gather` reads the container's last state (reason,
exit code) from the pod's status, the tail of its ``--previous`` log (bounded:
:data:`TAIL_LINES` lines, :data:`TAIL_BYTES` bytes; secrets scrubbed) through the adapter, its
error and warning lines, and matches them against
:data:`~runbooks.daemonset.signatures.SIGNATURES`, the known failures of GPU device plugins
(each with what it means, the fix and its source). For a plugin that runs and never registered,
:func:`current_log` makes the same evidence of its *current* log, as the registration check read
it (:class:`~runbooks.inventory.plugins.LogResult`: its tail and its error and warning lines).
:func:`pull_failure` names a container whose image cannot be pulled (``ErrImagePull``,
``ImagePullBackOff``, ``InvalidImageName``) with the registry's message: waiting longer does not
make a tag exist. What the cluster said (a message, each log line) is kept
:func:`~runbooks.characters.shown`: quoted to people, it mentions nobody and writes nothing a
terminal acts on.

The keys written here are read into items, kind by kind, by
:mod:`runbooks.evidence_items` (what every surface shows); :func:`of_checks` gathers
the items of a step's failed checks, one entry per check, for the run to keep.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from runbooks.characters import shown
from runbooks.cluster import Cluster
from runbooks.cluster.resources import PODS
from runbooks.daemonset.observing import Snapshot
from runbooks.daemonset.signatures import SIGNATURES, Signature, matches
from runbooks.engine.steps import Check, CheckStatus
from runbooks.errors import ClusterError, scrub, shorten
from runbooks.evidence_items import PULL_ERRORS, items
from runbooks.inventory.plugins import LogResult
from runbooks.log_lines import TAIL_BYTES, TAIL_LINES, errors, tail

__all__ = ["EVIDENCED", "PULL_ERRORS", "SIGNATURES", "TAIL_BYTES", "TAIL_LINES", "Signature", "attach",
           "current_log", "gather", "image_id", "items", "matches", "of_checks", "pull_failure", "read_pod",
           "summary", "tail"]


def _status(pod: dict[str, Any], container: str) -> dict[str, Any]:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == container:
            return dict(status)
    return {}


def pull_failure(pod: dict[str, Any]) -> tuple[str, str, str] | None:
    """(container, reason, registry's message) of the first container whose image cannot be pulled."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        waiting = (status.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in PULL_ERRORS:
            return (shown(str(status.get("name") or "")), shown(str(waiting["reason"])),
                    shown(scrub(str(waiting.get("message") or ""))))
    return None


def read_pod(cluster: Cluster, namespace: str, name: str) -> dict[str, Any] | None:
    """One pod, listed by name (the bot may list and watch pods, not get them); None if gone."""
    found = cluster.list_objects(PODS, namespace=namespace, field_selector=f"metadata.name={name}")
    return found[0] if found else None


def image_id(pod: dict[str, Any], container: str) -> str:
    """The digest the runtime resolved for ``container`` (``status.containerStatuses[].imageID``)."""
    return str(_status(pod, container).get("imageID") or "")


def gather(cluster: Cluster, pod: dict[str, Any], container: str) -> dict[str, Any]:
    """The evidence of a failed container: ``last_state``, ``log`` (``previous``), ``log_tail``,
    ``log_errors``, ``signatures`` (and ``log_problem`` when the previous log could not be read)."""
    meta, status = pod.get("metadata") or {}, _status(pod, container)
    term = (status.get("lastState") or {}).get("terminated") or {}
    out: dict[str, Any] = {"container": container}
    if term:
        out["last_state"] = {"reason": shown(str(term.get("reason") or "")), "exit_code": term.get("exitCode")}
    try:
        text = cluster.pod_log(meta.get("namespace", ""), meta.get("name", ""), container=container,
                               tail_lines=TAIL_LINES, previous=True)
    except ClusterError as exc:
        out["log_problem"] = shown(shorten(scrub(str(exc)), 200))
        text = ""
    out["log"] = "previous"
    out["log_tail"] = tail(text)
    out["log_errors"] = errors(text)
    out["signatures"] = matches([*out["log_errors"], *out["log_tail"]])
    return out


def current_log(pod: str, containers: Sequence[str], result: LogResult) -> dict[str, Any]:
    """The evidence of a running container's current log as a check read it (``result``): its
    last lines, its error and warning lines, and the known signatures they show."""
    lines, problems = list(result.tail), list(result.errors)
    found: dict[str, Any] = {"pod": shown(pod), "container": ", ".join(shown(c) for c in containers),
                             "log": "current", "log_tail": lines, "log_errors": problems,
                             "signatures": matches([*problems, *lines])}
    if not result.read:
        found["log_problem"] = shown(shorten(scrub(result.problem or "not read"), 200))
    return found


def summary(evidence: dict[str, Any]) -> str:
    """One sentence: the last state and the first known signature's meaning and fix."""
    parts = []
    last = evidence.get("last_state")
    if last:
        parts.append(f"last exit {last.get('reason') or 'unknown'} (code {last.get('exit_code')})")
    sigs = evidence.get("signatures") or []
    if sigs:
        parts.append(f"{sigs[0]['meaning']}: {sigs[0]['fix']}")
    elif evidence.get("log_tail"):
        parts.append(f"last log line: {shorten(evidence['log_tail'][-1], 200)}")
    return "; ".join(parts)


EVIDENCED = ("no-crashloop", "restarts-stable", "pods-ready")
"""The checks of verify that a failed plugin container makes fail, in the order evidence is attached."""


def attach(cluster: Cluster, snap: Snapshot, checks: list[Check], *, scope: Sequence[str],
           container: str | None) -> list[Check]:
    """``checks`` with the evidence of the first failing plugin pod in ``scope`` (restarted,
    crash-looping or unable to pull its image) added to the first of :data:`EVIDENCED` that
    failed or could not be made: one pod's previous log is read, whatever the fleet's size. A pod the
    scheduler cannot place (issue 61) carries the scheduler's message instead."""
    target = next((c for name in EVIDENCED for c in checks
                   if c.name == name and c.status in (CheckStatus.FAIL, CheckStatus.UNKNOWN)), None)
    if target is None:
        return checks
    pod = next((p for n in scope if (p := snap.pod_on(n)) is not None and not p.deleting
                and (p.restarts or p.crashloop or p.waiting_reason in PULL_ERRORS or p.unschedulable is not None)), None)
    if pod is None:
        return checks
    if pod.unschedulable is not None:  # issue 61: the scheduler's words, as the canary's pod-scheduled check has them
        placing = {"pod": pod.name, "node": pod.node, "reason": "FailedScheduling", "message": pod.unschedulable}
        why = f"{pod.name} cannot be scheduled on {pod.node}: the scheduler said: {pod.unschedulable}"
        return [c.model_copy(update={"detail": f"{c.detail}; {why}", "evidence": {**c.evidence, **placing}})
                if c is target else c for c in checks]
    try:
        raw = read_pod(cluster, str(snap.meta.get("namespace") or ""), pod.name)
    except ClusterError:
        return checks
    if raw is None:
        return checks
    pulling = pull_failure(raw)
    if pulling:
        found: dict[str, Any] = {"pod": pod.name, "container": pulling[0], "reason": pulling[1], "message": pulling[2]}
        said = f"{pod.name} cannot pull its image: {pulling[1]}: {pulling[2]}"
    else:
        names = [str(c.get("name")) for c in (raw.get("spec") or {}).get("containers") or []]
        found = {"pod": pod.name, **gather(cluster, raw, container or (names[0] if names else ""))}
        said = f"{pod.name}: {summary(found)}" if summary(found) else ""
    detail = f"{target.detail}; {said}" if said else target.detail
    return [c.model_copy(update={"detail": detail, "evidence": {**c.evidence, **found}}) if c is target else c
            for c in checks]


def of_checks(step: str, checks: Iterable[Check]) -> dict[str, dict[str, Any]]:
    """The evidence of ``step``'s checks that failed or could not be made, one entry per check
    (``<step>.<check>``; the same check on several nodes, as a canary per hardware class, is one
    entry with the items of each): ``step``, ``check``, ``status`` (as the audit says it),
    ``scope``, ``detail`` and ``items`` (:func:`~runbooks.evidence_items.items`)."""
    out: dict[str, dict[str, Any]] = {}
    for check in checks:
        if check.status not in (CheckStatus.FAIL, CheckStatus.UNKNOWN):
            continue
        found = items(check.evidence)
        if not found:
            continue
        key = f"{step}.{check.name}"
        entry = out.setdefault(key, {"step": step, "check": check.name,
                                     "status": "failed" if check.status is CheckStatus.FAIL else "unknown",
                                     "scope": check.scope, "detail": check.detail, "items": []})
        if check.scope and check.scope not in entry["scope"].split(", "):
            entry["scope"] = f"{entry['scope']}, {check.scope}" if entry["scope"] else check.scope
        entry["items"] += [item for item in found if item not in entry["items"]]
    return out
