"""Events that betray a broken plugin, and which of them are new since a step began.

:func:`read_events` lists the few reasons that matter, one field-selected list each;
the rest is pure. An event is *new* when it first happened at or after ``since`` (the
API server's clock, so both sides agree); one that first happened earlier and merely
recurred is pre-existing trouble: reported (``warn``), not blamed on the upgrade.
Times have whole seconds, so ``since`` is compared floored to its second.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from runbooks.characters import shown
from runbooks.cluster import Cluster
from runbooks.cluster.resources import EVENTS
from runbooks.engine.recording import failed, passed, warned
from runbooks.engine.steps import Check
from runbooks.inventory.reading import Obj, parse_time

WATCHED = ("FailedScheduling", "BackOff", "UnexpectedAdmissionError", "FailedPrepareDynamicResources", "Starting")
MAX_SHOWN = 5


@dataclass(frozen=True)
class Event:
    reason: str
    message: str
    kind: str
    namespace: str
    name: str
    host: str
    component: str
    first: dt.datetime | None
    last: dt.datetime | None
    count: int

    @property
    def object(self) -> str:
        return f"{self.kind.lower()}/{self.namespace + '/' if self.namespace and self.kind != 'Node' else ''}{self.name}"

    def brief(self) -> str:
        times = f" x{self.count}" if self.count > 1 else ""
        where = f" on {self.host}" if self.host else ""
        return f"{self.reason} {self.object}{where}{times}: {self.message[:160]}"


def node_of_reporter(obj: Obj) -> str:
    """The node a kubelet's ``reportingInstance`` names; "" for any other reporter (kube-scheduler's
    new-style events carry ``default-scheduler-<its host>``, no node)."""
    return str(obj.get("reportingInstance") or "") if obj.get("reportingComponent") == "kubelet" else ""


def event_from(obj: Obj) -> Event:
    """An event as read: its strings :func:`~runbooks.characters.shown` (its message is the
    cluster's words, quoted to people)."""
    involved, source = obj.get("involvedObject") or {}, obj.get("source") or {}
    first = parse_time(obj.get("firstTimestamp")) or parse_time(obj.get("eventTime")) \
        or parse_time((obj.get("metadata") or {}).get("creationTimestamp"))
    last = parse_time(obj.get("lastTimestamp")) or parse_time((obj.get("series") or {}).get("lastObservedTime")) or first
    return Event(
        reason=shown(str(obj.get("reason") or "")), message=shown(str(obj.get("message") or "")),
        kind=shown(str(involved.get("kind") or "")), namespace=shown(str(involved.get("namespace") or "")),
        name=shown(str(involved.get("name") or "")),
        host=shown(str(source.get("host") or node_of_reporter(obj))),
        component=shown(str(source.get("component") or obj.get("reportingComponent") or "")),
        first=first, last=last, count=int(obj.get("count") or (obj.get("series") or {}).get("count") or 1),
    )


def read_events(cluster: Cluster, reasons: Sequence[str] = WATCHED) -> dict[str, list[Event]]:
    """Events of each reason, cluster-wide (one list per reason, field-selected by the server)."""
    return {r: cluster.list_objects(EVENTS, field_selector=f"reason={r}", project=event_from) for r in reasons}


def split(events: Sequence[Event], since: dt.datetime) -> tuple[list[Event], list[Event]]:
    """(new since ``since``, recurring: first seen before and seen again since)."""
    floor = since.replace(microsecond=0)
    new = [e for e in events if e.first is not None and e.first >= floor]
    again = [e for e in events if e.first is not None and e.first < floor and e.last is not None and e.last >= floor]
    return new, again


def _verdict(name: str, what: str, new: list[Event], again: list[Event], scope: str) -> Check:
    evidence = {"new": [e.brief() for e in new[:MAX_SHOWN]], "recurring": [e.brief() for e in again[:MAX_SHOWN]],
                "new_count": len(new), "recurring_count": len(again)}
    if new:
        return failed(name, f"{len(new)} new {what}: " + "; ".join(e.brief() for e in new[:2]), scope, **evidence)
    if again:
        return warned(name, f"no new {what}, but {len(again)} from before the step recur: {again[0].brief()}", scope, **evidence)
    return passed(name, f"no new {what}", scope, **evidence)


def event_checks(
    events: dict[str, list[Event]], *, since: dt.datetime, nodes: Sequence[str], scope: str,
    gpu_resources: Sequence[str], dra: bool,
) -> list[Check]:
    """One check per kind of trouble: scheduling for lack of GPUs (anywhere), back-offs and
    admission errors on the nodes in scope, DRA prepare failures (DRA drivers), kubelet restarts."""
    on_nodes = set(nodes)
    insufficient = tuple(f"Insufficient {r}" for r in gpu_resources)
    scheduling = [e for e in events.get("FailedScheduling", []) if any(s in e.message for s in insufficient)]
    checks = [_verdict("events-failed-scheduling", f"FailedScheduling events for {' or '.join(insufficient)}",
                       *split(scheduling, since), "all nodes")]
    for name, reason in (("events-backoff", "BackOff"), ("events-admission", "UnexpectedAdmissionError")):
        here = [e for e in events.get(reason, []) if e.host in on_nodes]
        checks.append(_verdict(name, f"{reason} events", *split(here, since), scope))
    if dra:
        here = [e for e in events.get("FailedPrepareDynamicResources", []) if e.host in on_nodes]
        checks.append(_verdict("events-dra-prepare", "FailedPrepareDynamicResources events", *split(here, since), scope))
    restarts = [e for e in events.get("Starting", []) if e.kind == "Node" and e.name in on_nodes and e.component == "kubelet"]
    new, _ = split(restarts, since)
    if new:
        where = sorted({e.name for e in new})
        checks.append(failed("kubelet-restarts", f"the kubelet restarted on {', '.join(where)} during the step: plugin "
                             "registrations were reset while the new version was under watch, so it is not proven; "
                             "verify again once the node is stable",
                             scope, nodes=where, events=[e.brief() for e in new[:MAX_SHOWN]]))
    else:
        checks.append(passed("kubelet-restarts", "no kubelet restart since the step began", scope))
    return checks
