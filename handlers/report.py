"""``report <run>``: a run's stability report now, and the "Request rollback" button on it.

Thin, as every handler: :func:`handle` reads the run, what the bot collected of its events
(``read_tally``, the Redis store's) and the cluster, and returns the
:class:`~runbooks.stability.reports.StabilityReport`; :func:`present` turns it into a
surface-neutral :class:`Reply` (the shell prints the model with ``--json``). The scheduled
24 h / 48 h reports are the same reply (``bot/reports/posting.py``).

A report that is not ``stable`` carries a "Request rollback" button
(:func:`handlers.run_views.rollback_button`); :mod:`handlers.clicks` opens the rollback
request, which still needs an approver's click.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from handlers import messages as msg
from handlers.arguments import run_id
from handlers.charts import report_chart
from handlers.replies import Attachment, Item, Message, Reply, Table, Tone
from handlers.routing import EXIT_FAILED, EXIT_OK, Caller, Command, Deps, ReadTally
from handlers.run_views import rollback_button
from handlers.verbs import entry
from runbooks.engine.refusals import moment_text
from runbooks.errors import plural

if TYPE_CHECKING:  # types only; the reporting is imported by `handle` (issue 39: the shell's other verbs skip it)
    from runbooks.cluster import Cluster
    from runbooks.engine.commands import Engine
    from runbooks.policy import Policy
    from runbooks.stability.reports import Count, MetricNode, StabilityReport

log = logging.getLogger("upgradebot.report")
USAGE = entry("report").usage
TONE: dict[str, Tone] = {"stable": "ok", "degraded": "warn", "failing": "error"}
MAX_EVENT_ROWS = 10
LAST_STABLE = "The last scheduled report: monitoring ends, the run is done and its target free."
LAST_UNSTABLE = ("The last scheduled report, and not stable: the run stays in monitoring (its target locked) until "
                 "someone requests the rollback (an approver decides) or closes it with `close {run}`.")


def parse(words: Sequence[str]) -> str:
    return run_id(words, usage=USAGE)[0]


def handle(run: str, *, engine: Engine, connect: Callable[[str | None], Cluster], policy: Policy,
           read_tally: ReadTally, due: str | None = None) -> StabilityReport:
    """The report of ``run`` now (``Refused`` before the promotion)."""
    from runbooks.stability.reporting import check_reportable, report_of

    found = engine.get(run)
    check_reportable(found)
    tally, info = read_tally(found.id)
    with connect(found.target.cluster or None) as cluster:
        return report_of(found, cluster=cluster, tally=tally, info=info, policy=policy, due=due)


# ------------------------------------------------------------------ chat surfaces
def _when(report: StabilityReport) -> str:
    return (f"{moment_text(report.window_start)} to {moment_text(report.window_end)} "
            f"({_hours(report.window.total_seconds())} since the promotion)")


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"


def _counts(counts: Sequence[Count], more: int) -> str:
    text = ", ".join(f"{c.name} ({c.count})" for c in counts)
    return text + (f" +{more} more" if more else "")


def present(report: StabilityReport, *, lead: str = "", last: bool = False) -> Reply:
    """The report as a message (verdict, reasons, key numbers, events by reason) and thread
    items (the nodes against the baseline, sample messages, what was collected and how).
    ``last``: the last scheduled report, which says what becomes of the run."""
    title = (f"Stability report{' (' + report.due + ')' if report.due else ''} of {report.run_id}: "
             f"{report.verdict.upper()}")
    lines = [lead] if lead else []
    lines.append(f"{report.target} on {report.cluster or 'the current context'}, image {report.image}")
    lines += [f"- {f.severity}: {f.text}" for f in report.findings] or ["- no trouble found"]
    if last:
        lines.append(LAST_STABLE if report.stable else LAST_UNSTABLE.format(run=report.run_id))
    drops = sorted({d.node for d in report.capacity_drops})
    fields = [
        Item(label="Window", value=_when(report)),
        Item(label="Events that matter", value=f"{report.collection.occurrences} ({report.collection.events} distinct)"
             if report.collection.collected else "not collected"),
        Item(label="Plugin restarts", value=str(sum(r.restarts for r in report.restarts))),
        Item(label="GPUs below baseline", value=", ".join(drops) or "none"),
        Item(label="Claims pending", value=", ".join(p.claim + (" (before)" if p.pre_existing else "")
                                                      for p in report.claims_pending) or "none"),
        *_metric_fields(report),
    ]
    table = None
    if report.events:
        table = Table(header=["reason", "count", "nodes", "objects", "last"],
                      rows=[[e.reason, str(e.count), _counts(e.nodes, e.more_nodes) or "-",
                             _counts(e.objects, e.more_objects), moment_text(e.last) if e.last else "-"]
                            for e in report.events[:MAX_EVENT_ROWS]],
                      note=f"… {len(report.events) - MAX_EVENT_ROWS} more reasons" if len(report.events) > MAX_EVENT_ROWS else "")
    buttons = [] if report.stable else [rollback_button(report.run_id)]
    files, thread = [], _thread(report)
    try:
        png = report_chart(report)
    except ModuleNotFoundError:  # the [charts] extra is not installed (the image): the text is the report
        thread.append(Message(title=msg.CHART_NOT_INSTALLED))
        png = None
    except Exception as exc:  # the text says it all; a chart that cannot be drawn is noted, never fatal
        log.warning("the chart of %s could not be drawn: %s", report.run_id, type(exc).__name__)
        thread.append(Message(title=msg.CHART_FAILED))
        png = None
    if png:
        files.append(Attachment(filename=f"stability-{report.run_id}-{report.due or 'now'}.png",
                                title=msg.chart_title(report.run_id), data=png))
    return Reply(title=title, text="\n".join(lines), fields=fields, table=table, buttons=buttons,
                 tone=TONE[report.verdict], thread=thread, files=files)


def _thread(report: StabilityReport) -> list[Message]:
    rows = [[n.node, "-" if n.ready is None else ("yes" if n.ready else "NO"), n.gpus_before, n.gpus_now,
             n.pod_now or "-", "-" if n.pod_ready is None else ("yes" if n.pod_ready else "NO"), str(n.restarts),
             n.image_now or "-"] + ([f"{n.slices_before}/{n.slices_now}"] if n.slices_before or n.slices_now else [])
            for n in report.nodes]
    header = ["node", "ready", "GPUs before", "GPUs now", "plugin pod", "pod ready", "restarts", "image"]
    if any(len(r) > len(header) for r in rows):
        header.append("devices before/now")
        rows = [r + ["-"] * (len(header) - len(r)) for r in rows]
    items = [Message(title="Nodes against the baseline (capacity/allocatable)", table=Table(header=header, rows=rows))]
    if report.warnings:
        items.insert(0, Message(title="Warnings", text="\n".join(report.warnings), tone="warn"))
    items += _metric_items(report)
    samples = [f"{e.reason}: {s}" for e in report.events for s in e.samples]
    if samples:
        items.append(Message(title="Sample messages", text="\n".join(samples[:15])))
    c, notes = report.collection, list(report.notes)
    if c.collected and c.flushed_at:
        notes.insert(0, f"Events watched since {moment_text(c.started or c.since or c.flushed_at)}, last stored "
                        f"{moment_text(c.flushed_at)}, {c.relists} re-list(s) after 410 Gone")
    if report.claims_lost:
        notes.append(f"claims no longer allocated: {', '.join(report.claims_lost)}")
    if notes:
        items.append(Message(title="How this report was made", text="\n".join(notes)))
    return items


def _num(value: float | None, unit: str = "") -> str:
    return "-" if value is None else f"{value:g}{unit}"


NOT_MEASURED = "not measured"


def _xids(node: MetricNode) -> str:
    if node.xid_new is None:
        return NOT_MEASURED
    return ", ".join(node.xid_codes) if node.xid_codes else "none"


def _ecc(node: MetricNode) -> str:
    if node.ecc_new is None or node.ecc_start is None or node.ecc_now is None:
        return NOT_MEASURED
    return f"{node.ecc_start:g} -> {node.ecc_now:g}" + (f" ({node.ecc_new:g} new)" if node.ecc_new else "")


def _metric_fields(report: StabilityReport) -> list[Item]:
    """XID/ECC errors since the promotion and utilisation before/now, from Prometheus; what was
    not measured says so, never 0."""
    view = report.metrics
    if view is None:
        return []
    if view.error:
        return [Item(label="GPU metrics", value=f"not read: {view.error}")]
    xids = [n.xid_new for n in view.nodes if n.xid_new is not None]
    eccs = [n.ecc_new for n in view.nodes if n.ecc_new is not None]
    xid = f"{plural(sum(xids), 'GPU')} with a new XID" if xids else f"XIDs {NOT_MEASURED}"
    ecc = f"{sum(eccs):g} double-bit ECC errors" if eccs else f"ECC errors {NOT_MEASURED}"
    if xids and (missed := sum(n.xid_new is None for n in view.nodes)):
        xid += f" ({NOT_MEASURED} on {plural(missed, 'node')})"
    if eccs and (missed := sum(n.ecc_new is None for n in view.nodes)):
        ecc += f" ({NOT_MEASURED} on {plural(missed, 'node')})"
    gone = [g for n in view.nodes for g in n.vanished]
    if gone:
        ecc += f"; {plural(len(gone), 'GPU')} {NOT_MEASURED} now ({', '.join(gone[:3])})"
    util = [n for n in view.nodes if n.util_before is not None or n.util_now is not None]
    return [Item(label="New XID / ECC errors", value=f"{xid} / {ecc}"),
            Item(label="GPU utilisation before -> now",
                 value=", ".join(f"{n.node} {_num(n.util_before, '%')} -> {_num(n.util_now, '%')}" for n in util[:5])
                 or "no workload on the GPUs")]


def _metric_items(report: StabilityReport) -> list[Message]:
    view = report.metrics
    if view is None or not view.nodes:
        return []
    rows = [[n.node, _xids(n), _ecc(n), f"{_num(n.util_before, '%')} -> {_num(n.util_now, '%')}"] for n in view.nodes]
    items = [Message(title="GPU metrics per node (Prometheus): new XIDs since the promotion, ECC errors at the "
                           "promotion -> now, workload utilisation before the run -> now",
                     table=Table(header=["node", "new XIDs", "ECC errors", "utilisation"], rows=rows))]
    if view.hours:
        items.append(Message(title="New XID / ECC errors per node and hour", text="\n".join(
            f"{moment_text(h.hour)} {h.node}: {h.xid:g} GPU(s) with a new XID, {h.ecc:g} ECC" for h in view.hours[:24])))
    return items


def _handle(run: str, deps: Deps, caller: Caller) -> StabilityReport:
    # Identical requests while one reads (a channel asking after a noisy night) share its report.
    return deps.in_flight.do(("report", run), lambda: handle(run, engine=deps.engine, connect=deps.connect,
                                                             policy=deps.policy, read_tally=deps.read_tally))


COMMAND = Command.of(entry("report"), parse, _handle, present,
                     exit_code=lambda report: EXIT_OK if report.stable else EXIT_FAILED)
