"""The demo's stability-report stage: both reports, with the schedule compressed.

:func:`run_reports` moves kubesim's clock (which the engine and the report scheduler read)
through the monitoring window: a kubelet restart on a GPU node early on, the event
collector storing it, then 24 h and 48 h later the scheduled reports fired by
:meth:`bot.reports.wiring.Reports.run_due`. The kubelet's event expires from the cluster
after its 1-hour TTL long before the reports, and still shows in them. :func:`demo_reports`
is the hook the story calls (``bot.demo.story.REPORTS_HOOK``) and checks each step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bot.reports.wiring import reports_of
from runbooks.cluster.resources import EVENTS
from runbooks.engine.runs import RunState

if TYPE_CHECKING:
    from bot.demo.world import DemoContext
    from bot.runtime import Runtime
    from kubesim import KubeSim

INCIDENT_NODE = "gpu-node2"


@dataclass(frozen=True)
class Shown:
    """What the stage did, for its checks."""

    fired: list[tuple[str, str, str]]
    """``(run, after, outcome)`` of each report job fired."""
    expired: bool
    """The early event was gone from the cluster before the reports."""
    records: dict[str, dict[str, str]]
    """Each report's idempotency record in Redis."""
    state: RunState


def run_reports(runtime: Runtime, run_id: str, sim: KubeSim, *, say: Callable[[str], None] = print) -> Shown:
    """Drive run ``run_id`` (monitoring) through its 24 h and 48 h reports; what happened, for checks."""
    reports = reports_of(runtime)
    if reports is None:
        raise RuntimeError("the demo policy schedules no stability reports (reports.after is empty)")
    after = runtime.policy.reports.after
    say(f"  (the reports are due {' and '.join(after)} after the promotion. The schedule is compressed: the demo "
        "moves kubesim's clock ahead, and the report scheduler reads that clock, so each report fires at once. "
        "Only the clock is moved: the event collector reads kubesim's events over the Kubernetes API, the jobs "
        "live in APScheduler's Redis job store, each report is claimed once in Redis.)")
    reports.scheduler.tick()
    reports.collectors.catch_up()
    sim.fault(kind="kubelet-restart", node=INCIDENT_NODE)
    sim.advance("10m")
    reports.collectors.catch_up()
    say(f"  (+10 min: the kubelet of {INCIDENT_NODE} restarted; the collector stored its event)")
    sim.advance("2h")
    with runtime.connect(runtime.engine.get(run_id).target.cluster or None) as cluster:
        left = [e for e in cluster.list_objects(EVENTS) if (e.get("involvedObject") or {}).get("name") == INCIDENT_NODE
                and e.get("reason") == "Starting"]
    say(f"  (+2 h: the cluster's 1-hour event TTL removed it: {len(left)} such event(s) left in the cluster)")
    fired: list[tuple[str, str, str]] = []
    for offset in after:
        sim.advance("24h")
        say(f"  (kubesim's clock moved 24 h ahead: the {offset} report is due)")
        fired += reports.run_due()
    records = {offset: runtime.store.report_record(run_id, offset) for offset in after}
    return Shown(fired=fired, expired=not left, records=records, state=runtime.engine.get(run_id).state)


def demo_reports(ctx: DemoContext) -> None:
    """The story's stage 9: both reports of ``ctx.run_id``, checked."""
    mark = ctx.transcript.mark()
    shown = run_reports(ctx.runtime, ctx.run_id, ctx.sim, say=ctx.say)
    said = ctx.transcript.since(mark)
    for offset in ctx.runtime.policy.reports.after:
        posted = [f for f in shown.fired if f[1] == offset] == [(ctx.run_id, offset, "posted")]
        ctx.expect(posted and "posted_at" in shown.records[offset] and f"Stability report ({offset}) of {ctx.run_id}" in said,
                   f"the {offset} stability report is posted once, in the run's thread and to on-call")
    ctx.expect(shown.expired and "KubeletRestart" in said,
               "an event the cluster already forgot (1 h TTL) still shows in the reports")
    ctx.expect(shown.state is RunState.DONE, "after the last (stable) report the run is done and its target free")
