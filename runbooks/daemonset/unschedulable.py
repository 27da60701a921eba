"""A plugin pod the scheduler cannot place (issue 61, item 2): named at once, with the scheduler's
words and the change of the run that caused it.

Since Kubernetes 1.12 a DaemonSet's new pod is created unbound, pinned to its node by node
affinity, and bound by the default scheduler; one its node has no room for (a request above what
the node offers) or cannot take (a taint the pod no longer tolerates) stays Pending with
``PodScheduled=False`` (reason ``Unschedulable``) and a ``FailedScheduling`` event, and waiting
longer changes nothing. :func:`gather` reads the event (its message, how often it recurred) — the
condition's message when the event is gone — and :func:`cause` names the run's edit behind it:
``requests=``/``limits=`` of a resource the scheduler calls insufficient (with what the node
offers), or a toleration the run removed whose taint the node carries. The evidence has the shape
of a pull failure's (``pod``, ``reason``, ``message``), plus ``cause`` and ``node``.
"""

from __future__ import annotations

import re
from typing import Any

from runbooks.characters import shown
from runbooks.cluster import Cluster
from runbooks.cluster.resources import EVENTS, NODES
from runbooks.errors import ClusterError, scrub, shorten
from runbooks.templates import Edits

REASON = "FailedScheduling"
_INSUFFICIENT = re.compile(r"\d+ Insufficient ([A-Za-z0-9./_-]*[A-Za-z0-9])")
_TAINT = re.compile(r"\d+ node\(s\) had untolerated taint \{([^:}]*): ?([^}]*)\}")


def gather(cluster: Cluster, pod: dict[str, Any], *, node: str, edits: Edits, condition: str) -> dict[str, Any]:
    """The evidence of ``pod`` (as listed) that cannot be scheduled on ``node``: the newest
    ``FailedScheduling`` event's message (``condition``, the PodScheduled condition's, when no event
    can be read), how many times the scheduler said it, and :func:`cause`."""
    meta = pod.get("metadata") or {}
    name, namespace = str(meta.get("name") or ""), str(meta.get("namespace") or "")
    message, count = condition, 0
    try:
        found = cluster.list_objects(EVENTS, namespace=namespace, field_selector=(
            f"involvedObject.name={name},involvedObject.namespace={namespace},reason={REASON}"))
    except ClusterError:
        found = []
    if found:
        newest = max(found, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))
        message = str(newest.get("message") or condition)
        count = int(newest.get("count") or (newest.get("series") or {}).get("count") or 1)
    said = shown(shorten(scrub(message), 1000))
    out: dict[str, Any] = {"pod": shown(name), "node": shown(node), "reason": REASON, "message": said}
    if count:
        out["count"] = count
    why = cause(message, edits, _allocatable(cluster, node) if _INSUFFICIENT.search(message) else {}, node=node)
    if why:
        out["cause"] = why
    return out


def _allocatable(cluster: Cluster, node: str) -> dict[str, str]:
    try:
        return dict(((cluster.get(NODES, node).get("status") or {}).get("allocatable")) or {})
    except ClusterError:
        return {}


def cause(message: str, edits: Edits, allocatable: dict[str, str], *, node: str) -> str:
    """The run's change the scheduler's ``message`` points at, as a sentence ('' when none is)."""
    parts: list[str] = []
    for resource in dict.fromkeys(_INSUFFICIENT.findall(message)):
        offers = f" ({node} offers {allocatable[resource]} allocatable)" if resource in allocatable else \
            f" ({node} offers none)" if allocatable else ""
        if resource in edits.requests:
            parts.append(f"the run's requests={resource}={edits.requests[resource]}{offers}")
        elif resource in edits.limits:  # a limit stands for the request a container does not make
            parts.append(f"the run's limits={resource}={edits.limits[resource]} (also the request when none is set)"
                         f"{offers}")
    for key, value in dict.fromkeys(_TAINT.findall(message)):
        removed = [t for t in edits.untolerate if t.key in ("", key) and t.value in ("", value.strip())]
        parts += [f"the run removed the toleration {t}, and {node} carries the taint {key}"
                  f"{'=' + value.strip() if value.strip() else ''}" for t in removed[:1]]
    return shown("; ".join(parts))


def detail(pod: str, node: str, evidence: dict[str, Any]) -> str:
    """The failed check's sentence: the pod, the scheduler's words, the cause (or that none of the run's is)."""
    why = evidence.get("cause")
    blame = f"; caused by {why}" if why else "; none of this run's edits explains it"
    return f"{pod} cannot be scheduled on {node}: the scheduler said: {evidence.get('message')}{blame}"
