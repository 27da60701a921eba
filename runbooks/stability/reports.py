"""The stability report of a run, as pydantic models: what every surface shows.

Purely data. A :class:`StabilityReport` says which window it covers, its verdict
(``stable``, ``degraded`` or ``failing``) with the reasons, the warning events of the
window by reason (with the nodes and objects most affected), the plugin's restarts since
the promotion, the nodes whose GPU capacity or allocatable fell below the baseline, the
claims pending too long, and a node-by-node comparison with the baseline. Slack, the
console and the shell render it (``handlers/report.py``); ``--json`` prints it as is.
"""

from __future__ import annotations

import datetime as dt
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Verdict = Literal["stable", "degraded", "failing"]


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Finding(Model):
    """One reason for the verdict: how bad, what, and where."""

    severity: Literal["degraded", "failing"]
    code: str = Field(description="stable identifier, e.g. gpu-capacity-dropped")
    text: str
    nodes: list[str] = Field(default_factory=list)


class Count(Model):
    name: str
    count: int


class EventSummary(Model):
    """The occurrences of one reason in the window."""

    reason: str
    count: int
    first: dt.datetime | None = None
    last: dt.datetime | None = None
    nodes: list[Count] = Field(default_factory=list, description="most affected first")
    objects: list[Count] = Field(default_factory=list, description="most affected first")
    more_nodes: int = Field(0, description="nodes left out of ``nodes``")
    more_objects: int = Field(0, description="objects left out of ``objects``")
    samples: list[str] = Field(default_factory=list)


class Collection(Model):
    """How the events were gathered, so a reader knows what the counts cover."""

    collected: bool = Field(description="a bot process watched the run's events")
    since: dt.datetime | None = None
    started: dt.datetime | None = Field(None, description="when a bot began watching (earlier events may have expired)")
    flushed_at: dt.datetime | None = None
    relists: int = 0
    events: int = Field(0, description="distinct events that counted")
    occurrences: int = 0


class CapacityDrop(Model):
    node: str
    resource: str
    field: Literal["capacity", "allocatable"]
    baseline: int
    now: int


class Restart(Model):
    node: str
    pod: str
    restarts: int = Field(description="since the promotion")


class PendingClaim(Model):
    claim: str = Field(description="namespace/name")
    age: str
    pre_existing: bool = Field(description="created before the upgrade began: not blamed on it")
    waiting_pods: list[str] = Field(default_factory=list)


class NodeComparison(Model):
    """One node of the plugin: the baseline next to now."""

    node: str
    ready: bool | None = None
    gpus_before: str = Field(description="capacity/allocatable per resource at the baseline")
    gpus_now: str
    image_before: str = ""
    image_now: str = ""
    pod_now: str = ""
    pod_ready: bool | None = None
    restarts: int = 0
    slices_before: int = 0
    slices_now: int = 0


class HourCount(Model):
    """Occurrences of one reason's events in one hour (the chart's bars)."""

    hour: dt.datetime
    reason: str
    count: int


class GpuSample(Model):
    """Allocatable GPUs at one moment: one node's, or (``node`` empty) the total of the run's GPU nodes."""

    at: dt.datetime
    node: str = ""
    allocatable: int


class MetricNode(Model):
    """One GPU node in the metric view: its GPUs that raised an XID since the promotion, its
    double-bit ECC errors at the promotion and now, the workloads' mean GPU utilisation (%)
    before the run and now (None: not measured, never 0)."""

    node: str
    xid_new: int | None = Field(None, description="GPUs whose last XID code changed since the promotion")
    xid_codes: list[str] = Field(default_factory=list, description="those GPUs with their XID code")
    ecc_new: float | None = Field(None, description="double-bit ECC errors since the promotion, GPU by GPU")
    vanished: list[str] = Field(default_factory=list, description="GPUs with values at the promotion and none now")
    ecc_start: float | None = None
    ecc_now: float | None = None
    util_before: float | None = None
    util_now: float | None = None


class MetricHour(Model):
    """New XIDs and ECC errors on one node in one hour of monitoring (the chart's marks)."""

    hour: dt.datetime
    node: str
    xid: float = 0
    ecc: float = 0


class MetricView(Model):
    """The report's metric view (policy ``prometheus``), from Prometheus."""

    nodes: list[MetricNode] = Field(default_factory=list)
    hours: list[MetricHour] = Field(default_factory=list, description="hours with new errors only")
    error: str = Field("", description="why Prometheus gave no values now")
    recorded: bool = Field(False, description="values were recorded before the run or at the promotion")
    gaps: list[str] = Field(default_factory=list, description="what could not be measured, and why")


class StabilityReport(Model):
    run_id: str
    target: str = Field(description="namespace/name of the DaemonSet")
    cluster: str
    image: str
    due: str | None = Field(None, description="the scheduled offset (24h, 48h); None: on demand")
    generated_at: dt.datetime
    window_start: dt.datetime
    window_end: dt.datetime
    verdict: Verdict
    findings: list[Finding] = Field(default_factory=list)
    events: list[EventSummary] = Field(default_factory=list, description="by count, largest first")
    collection: Collection
    restarts: list[Restart] = Field(default_factory=list)
    capacity_drops: list[CapacityDrop] = Field(default_factory=list)
    claims_pending: list[PendingClaim] = Field(default_factory=list)
    nodes: list[NodeComparison] = Field(default_factory=list)
    claims_lost: list[str] = Field(default_factory=list, description="allocated at the baseline, not now")
    notes: list[str] = Field(default_factory=list, description="what could not be read, and why")
    warnings: list[str] = Field(default_factory=list, description="what may undo the run though the plugin is "
                                "stable (a Helm release whose values may still name the old image)")
    hourly: list[HourCount] = Field(default_factory=list, description="events that matter per hour, by reason")
    gpu_samples: list[GpuSample] = Field(
        default_factory=list, description="allocatable GPUs over the window: at the baseline, hourly as collected, "
        "and now (the lowest nodes when there are many; the total under node '')")
    metrics: MetricView | None = Field(None, description="XID/ECC per node and hour, utilisation before and now "
                                       "(policy prometheus); None without one")

    @property
    def stable(self) -> bool:
        return self.verdict == "stable"

    @property
    def window(self) -> dt.timedelta:
        return self.window_end - self.window_start

    def nodes_named(self) -> list[str]:
        return sorted({n for f in self.findings for n in f.nodes})
