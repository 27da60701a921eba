"""The chart of a stability report: a small PNG, drawn headless from what the report holds.

Two panels over the report's window (three with a Prometheus: new XID/ECC errors per hour by
node and each node's workload utilisation before -> now, in the middle): the events that
matter per hour, stacked by reason (from the collector's tally), and the allocatable GPUs (each node when there are few, the
lowest ones and the total otherwise), at the baseline, hourly as sampled, and now. Nothing
here reads the cluster: :func:`report_chart` takes the report and returns PNG bytes, or
None when there is nothing to draw. matplotlib is imported on first use (commands that draw
nothing never pay for it) and used through ``Figure`` and the Agg canvas, without pyplot's
global state, so reports drawn at once in several threads do not meet.
"""

from __future__ import annotations

import datetime as dt
import io
from collections import defaultdict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.axes import Axes

    from runbooks.stability.reports import StabilityReport

WIDTH, HEIGHT, DPI = 8.0, 5.0, 100
MAX_NODE_LINES = 8
"""Nodes drawn one line each; beyond, the lowest ones and the total."""
HOUR = 1 / 24
"""An hour in matplotlib's date units (days)."""


def _x(moment: dt.datetime) -> float:
    from matplotlib.dates import date2num

    return float(date2num(moment))


def report_chart(report: StabilityReport) -> bytes | None:
    """The report's chart as PNG bytes (800 x 500), or None with nothing to draw."""
    if not report.hourly and not report.gpu_samples and not report.metrics:
        return None
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.dates import DateFormatter, HourLocator
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    figure = Figure(figsize=(WIDTH, HEIGHT), dpi=DPI, layout="constrained")
    FigureCanvasAgg(figure)
    panels = figure.subplots(3 if report.metrics else 2, 1, sharex=True)
    events, gpus = panels[0], panels[-1]
    _events(events, report)
    _gpus(gpus, report)
    if report.metrics:
        _metrics(panels[1], report)
    hours = max(1.0, (report.window_end - report.window_start).total_seconds() / 3600)
    gpus.xaxis.set_major_locator(HourLocator(interval=max(1, round(hours / 6))))
    gpus.xaxis.set_major_formatter(DateFormatter("%d %b %H:%M"))
    for axes in panels:
        axes.yaxis.set_major_locator(MaxNLocator(integer=True))
        axes.set_ylim(0, axes.get_ylim()[1] * 1.2 + 0.5)  # room above the highest bar and line
    gpus.set_xlim(_x(report.window_start), max(_x(report.window_end), _x(report.window_start) + HOUR))
    for label in gpus.get_xticklabels():
        label.set_rotation(20)
    figure.suptitle(f"{report.run_id}: {report.target} ({report.verdict})", fontsize=10)
    out = io.BytesIO()
    figure.savefig(out, format="png", dpi=DPI)
    return out.getvalue()


def _events(axes: Axes, report: StabilityReport) -> None:
    axes.set_title("Events that matter per hour, by reason (UTC)", fontsize=9, loc="left")
    axes.set_ylabel("events")
    by_reason: dict[str, dict[dt.datetime, int]] = defaultdict(dict)
    for h in report.hourly:
        by_reason[h.reason][h.hour] = by_reason[h.reason].get(h.hour, 0) + h.count
    if not by_reason:
        axes.text(0.5, 0.5, "none" if report.collection.collected else "not collected", transform=axes.transAxes,
                  ha="center", va="center", color="grey")
        axes.set_yticks([])
        return
    hours = sorted({h for counts in by_reason.values() for h in counts})
    bottom = [0] * len(hours)
    for reason in sorted(by_reason, key=lambda r: -sum(by_reason[r].values())):
        counts = [by_reason[reason].get(h, 0) for h in hours]
        centers = [_x(h) + HOUR / 2 for h in hours]
        axes.bar(centers, counts, width=HOUR * 0.85, bottom=bottom, label=reason)
        bottom = [b + c for b, c in zip(bottom, counts, strict=True)]
    axes.legend(fontsize=7, loc="upper left", ncols=3)


def _gpus(axes: Axes, report: StabilityReport) -> None:
    axes.set_title("Allocatable GPUs per node", fontsize=9, loc="left")
    axes.set_ylabel("GPUs")
    series: dict[str, list[tuple[dt.datetime, int]]] = defaultdict(list)
    for sample in sorted(report.gpu_samples, key=lambda s: s.at):
        series[sample.node].append((sample.at, sample.allocatable))
    nodes = sorted(n for n in series if n)
    if len(nodes) > MAX_NODE_LINES:  # the lowest at their lowest, and the total on its own axis
        nodes = sorted(nodes, key=lambda n: (min(v for _, v in series[n]), n))[:MAX_NODE_LINES]
        total = series.get("", [])
        twin = axes.twinx()
        twin.plot([_x(t) for t, _ in total], [v for _, v in total], color="black", linestyle="--", label="total")
        twin.set_ylabel("total GPUs")
        axes.set_title(f"Allocatable GPUs: the {MAX_NODE_LINES} lowest nodes, and the total (dashed)",
                       fontsize=9, loc="left")
    for node in nodes:
        points = series[node]
        axes.step([_x(t) for t, _ in points], [v for _, v in points], where="post", marker="o", markersize=3,
                  label=node)
    if nodes:
        axes.legend(fontsize=7, loc="lower left", ncols=4)


def _metrics(axes: Axes, report: StabilityReport) -> None:
    """New XID + ECC errors per hour stacked by node (bars), each node's workload GPU
    utilisation before the run and now (a line from the window's start to its end, right axis)."""
    view = report.metrics
    assert view is not None
    axes.set_title("GPU metrics (Prometheus): new XID/ECC errors per hour by node; utilisation before -> now",
                   fontsize=9, loc="left")
    axes.set_ylabel("errors")
    by_node: dict[str, dict[dt.datetime, float]] = defaultdict(dict)
    for h in view.hours:
        by_node[h.node][h.hour] = by_node[h.node].get(h.hour, 0) + h.xid + h.ecc
    hours = sorted({h for counts in by_node.values() for h in counts})
    bottom = [0.0] * len(hours)
    for node in sorted(by_node):
        counts = [by_node[node].get(h, 0.0) for h in hours]
        axes.bar([_x(h) + HOUR / 2 for h in hours], counts, width=HOUR * 0.85, bottom=bottom, label=f"{node} errors")
        bottom = [b + c for b, c in zip(bottom, counts, strict=True)]
    util = [(n.node, n.util_before, n.util_now) for n in view.nodes
            if n.util_before is not None and n.util_now is not None][:MAX_NODE_LINES]
    if util:
        twin = axes.twinx()
        for node, before, now in util:
            twin.plot([_x(report.window_start), _x(report.window_end)], [before or 0.0, now or 0.0], marker="o",
                      markersize=3, linestyle=":", label=f"{node} util %")
        twin.set_ylim(0, 110)
        twin.set_ylabel("utilisation %")
        twin.legend(fontsize=7, loc="upper right", ncols=2)
    if by_node:
        axes.legend(fontsize=7, loc="upper left", ncols=3)
    elif not util:
        axes.text(0.5, 0.5, f"not read: {view.error}" if view.error else "no errors", transform=axes.transAxes,
                  ha="center", va="center", color="grey")
