"""The stability reports' metric view from a real Prometheus (issue 37, item 4).

A run in monitoring on kubesim ``gpu-small`` with the values the canary and the promote step
record (``metrics_before``, ``metrics_promoted``, read from the Prometheus scraping kubesim's
dcgm-exporters); the report machinery of a bot (scheduler, collector, poster) on real Redis
with the cluster's clock, which kubesim moves 24 h and 48 h ahead.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import pytest

from handlers.replies import Reply
from kubesim import KubeSim
from runbooks.metrics.judging import record_baseline
from runbooks.metrics.prometheus import PrometheusClient
from runbooks.metrics.spec import DEFAULT_CHECKS, PrometheusPolicy
from tests.integration.test_dcgm_prometheus import control
from tests.prometheus_support import Prometheus
from tests.report_support import Posts, World, monitoring_run, policy, world

NODES = ["gpu-node1", "gpu-node2", "gpu-node3"]


@pytest.fixture
def sim() -> Iterator[KubeSim]:
    with KubeSim(scenario="gpu-small", k8s_version="1.31") as served:
        yield served


@pytest.fixture
def bot(sim: KubeSim, redis_url: str, prometheus: Prometheus) -> Iterator[tuple[World, Posts, str]]:
    job = prometheus.scrape(sim)
    prometheus.wait_scraped(job, instances=3)
    posts = Posts()
    w = world(redis_url, sim, policy("24h", "48h", prometheus={"url": prometheus.url}), posts, owner="bot-a")
    yield w, posts, job
    w.stop()


def recorded(prometheus: Prometheus) -> dict[str, Any]:
    """What the canary (``metrics_before``) and the promote step (``metrics_promoted``) store."""
    values = record_baseline(PrometheusClient(PrometheusPolicy(url=prometheus.url)), DEFAULT_CHECKS, NODES,
                             window=30, at=dt.datetime.now(dt.UTC))
    assert "error" not in values, values
    return {"metrics_before": values, "metrics_promoted": values}


def last_report(posts: Posts, run_id: str, due: str) -> Reply:
    return next(r for where, rid, r in reversed(posts.items) if where == "thread" and rid == run_id
                and (r.title or "").startswith(f"Stability report ({due})"))


def field(reply: Reply, label: str) -> str:
    return next(str(f.value) for f in reply.fields if f.label == label)


def test_a_48h_report_of_a_healthy_run_shows_utilisation_before_and_after(
    sim: KubeSim, bot: tuple[World, Posts, str], prometheus: Prometheus,
) -> None:
    """Issue 37 item 4 (done-when 3), issue 56 item 2: the 48 h report of a quiet run, its exporters
    exporting the ECC field (as a user's counters CSV enables it), is STABLE and shows, from
    Prometheus, each busy node's workload GPU utilisation before the run and now, no new XID or
    ECC error, the per-node metric table in the thread and a chart with the metric panel."""
    w, posts, job = bot
    sim.exporters(enable=["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"])
    prometheus.wait_scraped(job, instances=3)
    before = recorded(prometheus)
    busy = before["metrics_before"]["values"]["gpu-utilisation"]
    assert busy and all(v > 0 for v in busy.values()), busy
    run = monitoring_run(w.store, sim, metrics=before)
    assert w.scheduler.run_due() == []
    sim.advance("24h")
    assert w.scheduler.run_due() == [(run.id, "24h", "posted")]
    sim.advance("24h")
    prometheus.wait_scraped(job, instances=3)
    assert w.scheduler.run_due() == [(run.id, "48h", "posted")]

    reply = last_report(posts, run.id, "48h")
    assert reply.title == f"Stability report (48h) of {run.id}: STABLE", reply.text
    assert field(reply, "New XID / ECC errors") == "0 GPUs with a new XID / 0 double-bit ECC errors"
    util = field(reply, "GPU utilisation before -> now")
    for node, value in busy.items():
        assert f"{node} {value:g}% -> " in util, util
    assert "-> -" not in util, util
    table = next(m.table for m in reply.thread if m.title and m.title.startswith("GPU metrics per node"))
    assert table is not None and [r[0] for r in table.rows] == NODES
    assert [r[1:3] for r in table.rows] == [["none", "0 -> 0"]] * 3, table.rows
    assert reply.files and reply.files[0].data[:8] == b"\x89PNG\r\n\x1a\n"


def test_an_xid_after_the_promotion_makes_the_report_not_stable_naming_the_node(
    sim: KubeSim, bot: tuple[World, Posts, str], prometheus: Prometheus,
) -> None:
    """Issue 37 item 4 (done-when 3), issue 56 item 3: an XID injected on gpu-node3 an hour into
    monitoring (DCGM_FI_DEV_XID_ERRORS, the code of a GPU's last XID, as the default exporter
    has it) makes the 48 h report FAILING, its finding naming gpu-node3's GPU and the code, the
    thread listing the hour it happened in (from the collector's hourly sample), the other nodes
    clean."""
    w, posts, job = bot
    run = monitoring_run(w.store, sim, metrics=recorded(prometheus))
    assert w.scheduler.run_due() == []
    w.collectors.catch_up()
    sim.advance("1h")
    assert control(sim, "/sim/v1/faults", {"kind": "xid", "node": "gpu-node3", "code": 79})[0] == 200
    prometheus.wait_scraped(job, instances=3)
    w.collectors.catch_up()  # the hour's sample
    sim.advance("47h")
    prometheus.wait_scraped(job, instances=3)
    w.scheduler.run_due()

    reply = last_report(posts, run.id, "48h")
    assert reply.title == f"Stability report (48h) of {run.id}: FAILING", reply.text
    assert "- failing: new XID errors since the promotion: gpu-node3 GPU 0: XID 79" in reply.text, reply.text
    assert "gpu-node1" not in reply.text.split("XID errors", 1)[1].split("\n", 1)[0]
    assert field(reply, "New XID / ECC errors") == "1 GPU with a new XID / ECC errors not measured"
    # dcgm-exporter's default CSV exports no ECC field: said not measured, never "0", and no pass
    assert ("- degraded: GPU metrics not measured, so not judged: double-bit ECC errors not measured: no node's "
            "dcgm-exporter exported DCGM_FI_DEV_ECC_DBE_VOL_TOTAL at the promotion") in reply.text, reply.text
    hours = next(m.text for m in reply.thread if m.title == "New XID / ECC errors per node and hour")
    assert hours.count("\n") == 0 and "gpu-node3: 1 GPU(s) with a new XID, 0 ECC" in hours, hours
