"""What matters among a cluster's events, and the bounded tally of it kept for a run.

Purely data-manipulative, no I/O, and the collector's hot path (``bench/bench_collector.py``):
events are the plain dicts of the API, read with ``dict.get`` only.

An event *matters* to a run (:meth:`Scope.matters`) when it is one of :data:`REASONS` and is
about the plugin's own pods, a GPU node or a workload on one; when it is a
``FailedScheduling`` for lack of a GPU resource (``Insufficient nvidia.com/gpu``); when it
is a DRA or device admission error anywhere; or when it is a Warning whose message names
the driver. The :class:`Tally` keeps, per reason, the count of occurrences, first and last
seen, the nodes and objects most affected and a few sample messages; every part is capped
(:data:`MAX_REASONS`, :data:`MAX_KEYS`, :data:`MAX_SAMPLES`), what falls beyond a cap is
counted as ``other``, so memory and the stored JSON stay small however many events come.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from runbooks.daemonset.baselines import Baseline
from runbooks.daemonset.events import node_of_reporter

REASONS = frozenset({
    "BackOff", "Failed", "FailedScheduling", "UnexpectedAdmissionError", "FailedPrepareDynamicResources",
    "FailedResourceClaimCreation", "NodeNotReady", "Evicted", "FailedMount", "Starting",
})
"""Reasons that may matter (``Starting`` only as the kubelet of a GPU node restarting)."""
ANYWHERE = frozenset({"UnexpectedAdmissionError", "FailedPrepareDynamicResources", "FailedResourceClaimCreation"})
"""Reasons that are GPU or DRA trouble wherever they happen."""
KUBELET_RESTART = "KubeletRestart"
"""The reason a kubelet's ``Starting`` event on a GPU node is tallied under."""
MAX_REASONS = 24
MAX_KEYS = 50
MAX_SAMPLES = 3
SAMPLE_LENGTH = 200
MAX_HOURS = 72
"""Hours kept per reason and of GPU samples (the last report is at most 48 h after the promotion)."""
TOTAL = "*"
"""The key of an hourly GPU sample's total over every GPU node of the run."""


@dataclass(frozen=True)
class Seen:
    """One event that matters, reduced to what the tally keeps."""

    reason: str
    node: str
    object: str
    message: str
    first: str
    last: str


def _stamp(value: Any) -> str:
    """``2025-01-06T09:00:00`` from any Kubernetes time (seconds: comparable as text)."""
    return str(value)[:19] if value else ""


def hour_of(stamp: str) -> str:
    """``2025-01-06T09`` of a stamp: the hour its occurrences are counted in."""
    return stamp[:13]


def hour_moment(hour: str) -> dt.datetime:
    """The start of an hour stamp (``2025-01-06T09``), in UTC."""
    return dt.datetime.fromisoformat(hour + ":00:00").replace(tzinfo=dt.UTC)


def lowest(values: dict[str, int], count: int = MAX_KEYS) -> dict[str, int]:
    """The ``count`` smallest of ``values`` (ties by key): the nodes worth drawing."""
    return dict(sorted(values.items(), key=lambda item: (item[1], item[0]))[:count])


def _keep_last(hours: dict[str, Any]) -> None:
    if len(hours) <= MAX_HOURS:
        return
    for old in sorted(hours)[: len(hours) - MAX_HOURS]:
        del hours[old]


def stamp_of(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S")


def moment_of(stamp: str) -> dt.datetime | None:
    try:
        return dt.datetime.fromisoformat(stamp).replace(tzinfo=dt.UTC) if stamp else None
    except ValueError:
        return None


@dataclass(frozen=True)
class Scope:
    """What matters for one run: its DaemonSet, the GPU nodes, resources and driver names."""

    namespace: str
    daemonset: str
    nodes: frozenset[str]
    gpu_resources: tuple[str, ...] = ("nvidia.com/gpu",)
    drivers: tuple[str, ...] = ()
    since: str = ""
    """Events last seen before this stamp are not counted (they are older than the window)."""

    @classmethod
    def of(cls, baseline: Baseline, *, since: dt.datetime) -> Scope:
        namespace, _, name = baseline.daemonset.partition("/")
        names = {name, *baseline.drivers}
        for image in baseline.images.values():
            repo = image.rsplit("/", 1)[-1].split(":", 1)[0].split("@", 1)[0]
            if len(repo) > 5:
                names.add(repo)
        return cls(namespace=namespace, daemonset=name, nodes=frozenset(baseline.nodes),
                   gpu_resources=tuple(baseline.gpu_resources), drivers=tuple(sorted(names)), since=stamp_of(since))

    def matters(self, obj: dict[str, Any]) -> Seen | None:
        """The event reduced to what the tally keeps, or ``None`` when it does not matter."""
        reason = obj.get("reason") or ""
        message = obj.get("message") or ""
        involved = obj.get("involvedObject") or {}
        kind = involved.get("kind") or ""
        name = involved.get("name") or ""
        namespace = involved.get("namespace") or ""
        source = obj.get("source") or {}
        node = source.get("host") or node_of_reporter(obj) or (name if kind == "Node" else "")
        if reason in REASONS:
            if reason == "FailedScheduling":
                keep = any(f"Insufficient {r}" in message for r in self.gpu_resources)
            elif reason == "Starting":
                keep = kind == "Node" and name in self.nodes
                reason = KUBELET_RESTART
            else:
                keep = (reason in ANYWHERE or node in self.nodes
                        or (namespace == self.namespace and name.startswith(self.daemonset)))
        else:
            keep = obj.get("type") == "Warning" and any(d in message for d in self.drivers)
        if not keep:
            return None
        where = f"{kind.lower()}/{namespace}/{name}" if namespace and kind != "Node" else f"{kind.lower()}/{name}"
        first = _stamp(obj.get("firstTimestamp") or obj.get("eventTime") or (obj.get("metadata") or {}).get("creationTimestamp"))
        last = _stamp(obj.get("lastTimestamp") or (obj.get("series") or {}).get("lastObservedTime")) or first
        return Seen(reason=reason, node=node, object=where, message=message, first=first, last=last)


def occurrences(obj: dict[str, Any]) -> int:
    """How many times the event happened so far (its ``count``, or its series' count)."""
    return int(obj.get("count") or (obj.get("series") or {}).get("count") or 1)


def _bump(counts: dict[str, int], key: str, by: int) -> int:
    """Add ``by`` under ``key`` if it is there or there is room; what did not fit, else 0."""
    if key in counts:
        counts[key] += by
        return 0
    if len(counts) < MAX_KEYS:
        counts[key] = by
        return 0
    return by


@dataclass
class ReasonTally:
    count: int = 0
    first: str = ""
    last: str = ""
    nodes: dict[str, int] = field(default_factory=dict)
    objects: dict[str, int] = field(default_factory=dict)
    other_nodes: int = 0
    other_objects: int = 0
    samples: list[str] = field(default_factory=list)
    hours: dict[str, int] = field(default_factory=dict)
    """Occurrences by the hour (``2025-01-06T09``) of each event's last occurrence."""

    def add(self, seen: Seen, by: int) -> None:
        self.count += by
        hour = hour_of(seen.last or seen.first)
        if hour:
            self.hours[hour] = self.hours.get(hour, 0) + by
            _keep_last(self.hours)
        if seen.first and (not self.first or seen.first < self.first):
            self.first = seen.first
        if seen.last > self.last:
            self.last = seen.last
        if seen.node:
            self.other_nodes += _bump(self.nodes, seen.node, by)
        self.other_objects += _bump(self.objects, seen.object, by)
        if len(self.samples) < MAX_SAMPLES and seen.message:
            sample = seen.message[:SAMPLE_LENGTH]
            if sample not in self.samples:
                self.samples.append(sample)

    def to_dict(self) -> dict[str, Any]:
        return {"count": self.count, "first": self.first, "last": self.last, "nodes": self.nodes,
                "objects": self.objects, "other_nodes": self.other_nodes, "other_objects": self.other_objects,
                "samples": self.samples, "hours": self.hours}


@dataclass
class Tally:
    """Occurrences of the events that matter, by reason; bounded whatever comes in."""

    reasons: dict[str, ReasonTally] = field(default_factory=dict)
    events: int = 0
    """Distinct events (by uid) that counted at least once."""
    other: int = 0
    """Occurrences of reasons beyond :data:`MAX_REASONS`."""
    gpus: dict[str, dict[str, int]] = field(default_factory=dict)
    """By hour: allocatable GPUs of the :data:`MAX_KEYS` lowest GPU nodes, and their total under :data:`TOTAL`."""
    metrics: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    """By hour: the metric view's values (XIDs, ECC errors, utilisation) per check and node, read
    from Prometheus as the hour's GPU sample is taken (the simulated or real hour of the cluster)."""

    def sample(self, stamp: str, allocatable: dict[str, int]) -> None:
        """The GPU nodes' allocatable GPUs at ``stamp`` (the hour's first sample is kept)."""
        hour = hour_of(stamp)
        if not hour or hour in self.gpus:
            return
        self.gpus[hour] = {**lowest(allocatable), TOTAL: sum(allocatable.values())}
        _keep_last(self.gpus)

    def sampled(self, stamp: str) -> bool:
        return hour_of(stamp) in self.gpus

    def sample_metrics(self, stamp: str, values: dict[str, dict[str, float]]) -> None:
        """The metric view's values at ``stamp`` (per check, per node; the hour's first kept):
        counts keep their :data:`MAX_KEYS` largest nodes, utilisation its lowest."""
        hour = hour_of(stamp)
        if not hour or hour in self.metrics:
            return
        kept: dict[str, dict[str, float]] = {}
        for check, by_node in values.items():
            low = check.endswith("utilisation")
            ranked = sorted(by_node.items(), key=lambda kv: (kv[1] if low else -kv[1], kv[0]))[:MAX_KEYS]
            kept[check] = dict(ranked)
        self.metrics[hour] = kept
        _keep_last(self.metrics)

    def add(self, seen: Seen, by: int, *, new: bool) -> None:
        if by <= 0:
            return
        entry = self.reasons.get(seen.reason)
        if entry is None:
            if len(self.reasons) >= MAX_REASONS:
                self.other += by
                return
            entry = self.reasons[seen.reason] = ReasonTally()
        entry.add(seen, by)
        self.events += new

    @property
    def total(self) -> int:
        return sum(r.count for r in self.reasons.values()) + self.other

    def to_dict(self) -> dict[str, Any]:
        return {"reasons": {k: v.to_dict() for k, v in self.reasons.items()}, "events": self.events, "other": self.other,
                "gpus": self.gpus, "metrics": self.metrics}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Tally:
        reasons = {k: ReasonTally(**v) for k, v in (data.get("reasons") or {}).items()}
        return cls(reasons=reasons, events=int(data.get("events") or 0), other=int(data.get("other") or 0),
                   gpus={h: {k: int(v) for k, v in n.items()} for h, n in (data.get("gpus") or {}).items()},
                   metrics={h: {c: {n: float(v) for n, v in by.items()} for c, by in checks.items()}
                            for h, checks in (data.get("metrics") or {}).items()})
