"""The chart of a stability report: drawn from the report's tally and baseline (no cluster),
a valid PNG of a small, fixed size, noted rather than fatal when it cannot be drawn."""

from __future__ import annotations

import datetime as dt
import struct
import zlib

import pytest

from handlers import charts
from handlers import messages as msg
from handlers import report as report_handler
from runbooks.stability.reporting import build_report
from runbooks.stability.tallying import MAX_HOURS, TOTAL, Seen, Tally
from tests.unit.test_stability_judging import NODES, POLICY, T0, node, now, run

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
MAX_BYTES = 150 * 1024


def png_size(data: bytes) -> tuple[int, int]:
    """(width, height) of a PNG whose every chunk's CRC is right and that ends with IEND;
    AssertionError otherwise (what an image viewer would refuse)."""
    assert data[:8] == PNG_SIGNATURE, "not a PNG signature"
    at, kinds, size, pixels = 8, [], (0, 0), b""
    while at < len(data):
        (length,) = struct.unpack(">I", data[at:at + 4])
        kind, body = data[at + 4:at + 8], data[at + 8:at + 8 + length]
        (crc,) = struct.unpack(">I", data[at + 8 + length:at + 12 + length])
        assert zlib.crc32(kind + body) == crc, f"bad CRC in {kind!r}"
        if kind == b"IHDR":
            size = struct.unpack(">II", body[:8])
        if kind == b"IDAT":
            pixels += body
        kinds.append(kind)
        at += 12 + length
    assert kinds[0] == b"IHDR" and kinds[-1] == b"IEND" and at == len(data)
    assert zlib.decompress(pixels), "the image data does not inflate"
    return size


def seen(reason: str, at: dt.datetime, where: str = "gpu-node2") -> Seen:
    stamp = at.strftime("%Y-%m-%dT%H:%M:%S")
    return Seen(reason=reason, node=where, object=f"pod/kube-system/plugin-{where}", message="m", first=stamp, last=stamp)


def a_tally() -> Tally:
    """BackOff in hours 2 and 5 after the promotion, a FailedMount in hour 5; the collector's
    hourly samples see gpu-node2 drop to 4 GPUs in hour 3."""
    tally = Tally()
    tally.add(seen("BackOff", T0 + dt.timedelta(hours=2, minutes=10)), 3, new=True)
    tally.add(seen("BackOff", T0 + dt.timedelta(hours=5, minutes=1)), 2, new=False)
    tally.add(seen("FailedMount", T0 + dt.timedelta(hours=5, minutes=30)), 1, new=True)
    for hour in range(0, 24, 3):
        at = (T0 + dt.timedelta(hours=hour)).strftime("%Y-%m-%dT%H:%M:%S")
        tally.sample(at, {"gpu-node1": 8, "gpu-node2": 4 if hour >= 3 else 8})
    return tally


def test_the_report_carries_the_tally_per_hour_and_the_gpus_over_the_window() -> None:
    tally = Tally.from_dict(a_tally().to_dict())  # as stored in Redis and read back
    report = build_report(run(), now=now(nodes={"gpu-node1": node("gpu-node1"), "gpu-node2": node("gpu-node2", 4)}),
                          tally=tally, info={}, policy=POLICY, due="24h")
    assert [(h.hour - T0, h.reason, h.count) for h in report.hourly] == [
        (dt.timedelta(hours=2), "BackOff", 3), (dt.timedelta(hours=5), "BackOff", 2),
        (dt.timedelta(hours=5), "FailedMount", 1)]
    node2 = [(s.at - T0, s.allocatable) for s in report.gpu_samples if s.node == "gpu-node2"]
    assert node2[0] == (dt.timedelta(0), 8), "the baseline opens the window"
    assert (dt.timedelta(hours=3), 4) in node2 and node2[-1] == (dt.timedelta(hours=24), 4), "then the samples, then now"
    totals = [s.allocatable for s in report.gpu_samples if s.node == ""]
    assert totals[0] == 16 and totals[-1] == 12


def test_the_chart_is_a_small_valid_png_drawn_from_the_report_alone() -> None:
    report = build_report(run(), now=now(), tally=a_tally(), info={}, policy=POLICY, due="24h")
    data = charts.report_chart(report)
    assert data is not None and len(data) < MAX_BYTES, len(data or b"")
    assert png_size(data) == (800, 500)
    reply = report_handler.present(report)  # what the poster uploads with files.uploadV2
    (attached,) = reply.files
    assert attached.binary and attached.filename == "stability-r-judge001-24h.png" and png_size(attached.data)
    assert "stability-r-judge001-24h.png" in reply.files_inline().thread[-1].text, "an ephemeral answer names it"


def test_a_quiet_report_still_draws_its_gpus_and_says_no_events() -> None:
    report = build_report(run(), now=now(), tally=Tally(), info={}, policy=POLICY)
    assert report.hourly == [] and {s.node for s in report.gpu_samples} == {"", *NODES}
    assert png_size(charts.report_chart(report) or b"") == (800, 500)


def test_many_nodes_draw_the_lowest_and_the_total() -> None:
    tally = Tally()
    tally.sample(T0.strftime("%Y-%m-%dT%H:%M:%S"), {f"n{i:03}": 8 - (i == 7) * 8 for i in range(400)})
    assert len(tally.gpus[T0.strftime("%Y-%m-%dT%H")]) == 51 and tally.gpus[T0.strftime("%Y-%m-%dT%H")][TOTAL] == 3192
    assert tally.gpus[T0.strftime("%Y-%m-%dT%H")]["n007"] == 0, "the lowest nodes are the ones kept"
    report = build_report(run(), now=now(), tally=tally, info={}, policy=POLICY)
    assert png_size(charts.report_chart(report) or b"") == (800, 500)


def test_the_tally_keeps_a_bounded_number_of_hours() -> None:
    tally = Tally()
    for hour in range(MAX_HOURS + 30):
        at = T0 + dt.timedelta(hours=hour)
        tally.add(seen("BackOff", at), 1, new=True)
        tally.sample(at.strftime("%Y-%m-%dT%H:%M:%S"), {"gpu-node1": 8})
    assert len(tally.reasons["BackOff"].hours) == MAX_HOURS and len(tally.gpus) == MAX_HOURS
    assert min(tally.gpus) == (T0 + dt.timedelta(hours=30)).strftime("%Y-%m-%dT%H"), "the oldest hours go first"


def test_a_chart_that_cannot_be_drawn_is_noted_and_the_report_stays_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(report: object) -> bytes:
        raise RuntimeError("no fonts")

    monkeypatch.setattr(report_handler, "report_chart", broken)
    report = build_report(run(), now=now(), tally=a_tally(), info={}, policy=POLICY)
    reply = report_handler.present(report)
    assert reply.files == [] and "could not be drawn" in (reply.thread[-1].title or "")
    assert reply.title == "Stability report of r-judge001: DEGRADED" and reply.fields and "BackOff" in str(reply.table)


def test_without_matplotlib_the_report_is_its_text_and_a_note(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 34 item 4: charts are the optional ``[charts]`` extra (the image ships without
    matplotlib); where it is not installed the report is whole, with no file and a note saying
    why, and nothing is logged as a failure."""
    import sys

    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")] + ["matplotlib"]:
        monkeypatch.setitem(sys.modules, name, None)  # an import of it raises ModuleNotFoundError, as when absent
    report = build_report(run(), now=now(), tally=a_tally(), info={}, policy=POLICY)
    reply = report_handler.present(report)
    assert reply.files == [] and reply.thread[-1].title == msg.CHART_NOT_INSTALLED
    assert reply.title == "Stability report of r-judge001: DEGRADED" and reply.fields and "BackOff" in str(reply.table)
