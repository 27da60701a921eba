"""Verify's metric checks read from a real Prometheus scraping kubesim's dcgm-exporters (issue 37, item 3).

The engine runs the real DaemonSet steps on kubesim ``gpu-small``; the policy's ``prometheus``
points at a Prometheus on loopback that scrapes every second. The canary records each node's
values before the run (``metrics_before``); verify measures the built-in checks (XID, ECC,
workload GPU utilisation) every second of its window and at its end.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kubesim import KubeSim
from runbooks.engine.approving import Actor
from runbooks.engine.commands import Engine
from runbooks.engine.runs import Run, RunState
from runbooks.metrics.spec import DEFAULT_CHECKS, XID_CHECK, XID_COUNT_CHECK
from runbooks.policy import Policy
from tests.engine_support import kubesim_engine
from tests.prometheus_support import Prometheus
from tests.support import TEST_BUILDS, Kubectl

NS, DS = "kube-system", "nvidia-device-plugin-daemonset"
TARGET = f"{NS}/{DS}"
XID_IMAGE = "nvcr.io/nvidia/k8s-device-plugin:v0.17.0-xid"
NEW = "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"
ALICE, BOB = Actor("U0ALICE"), Actor("U0BOB")
EVERY_SECOND = [
    {**XID_CHECK.model_dump(), "interval": "1s"},
    {**DEFAULT_CHECKS[2].model_dump(), "interval": "1s"},
]
"""The built-in XID and utilisation checks, measured every second."""


@pytest.fixture
def fast_cluster() -> Iterator[KubeSim]:
    """A gpu-small kubesim of the test's own whose clock runs 20 times real time (pods start sooner)."""
    with KubeSim(pushed=TEST_BUILDS, scenario="gpu-small", k8s_version="1.31", speed=20) as sim:
        yield sim


def policy(url: str, *, window: str = "4s", unknown: str = "fail", token_file: str | None = None,
           built_in: bool = False) -> Policy:
    """``built_in``: no ``verify.metrics``, so the built-in checks, each every 10 s."""
    prometheus: dict[str, Any] = {"url": url}
    if token_file:
        prometheus["bearer_token_file"] = token_file
    return Policy.model_validate({
        "approvers": {"users": ["U0BOB"]}, "reports": {"after": []},
        "steps": {"observe_window": window, "poll_interval": "0.2s", "ready_timeout": "60s"},
        "verify": {"unknown": unknown, **({} if built_in else {"metrics": EVERY_SECOND})},
        "prometheus": prometheus,
    })


def entries(engine: Engine, run: Run, suffix: str) -> list[dict[str, Any]]:
    return [e for e in engine.audit(run.id) if e["name"].endswith(suffix)]


def plugin_image(sim: KubeSim, node: str) -> str:
    pods = Kubectl(sim.kubeconfig).json("get", "pods", "-n", NS, "--field-selector", f"spec.nodeName={node}")["items"]
    return str(next(p["spec"]["containers"][0]["image"] for p in pods if p["metadata"]["name"].startswith(DS)))


def test_an_xid_canary_passes_the_pod_checks_fails_its_metric_check_and_is_rolled_back(
    prometheus: Prometheus, fast_cluster: KubeSim, redis_url: str, tmp_path: Path,
) -> None:
    """Issue 37 item 3 (done-when 1), issue 56 (done-when 1): with kubesim's exporters as
    dcgm-exporter ships them (the default counters CSV: no XID count, no ECC field) and the
    built-in checks, a canary of a ``-xid`` plugin on gpu-node2 runs Ready and passes every
    pod-level check, but its XID check fails through the real Prometheus naming gpu-node2's GPU 0
    and the code (its last XID 79, 0 before the run); the ECC check is ``unknown`` saying the
    exporter exports no such field; the run is rolled back by itself and the reason (what the
    thread says) names the node and the code."""
    job = prometheus.scrape(fast_cluster)
    prometheus.wait_scraped(job, instances=3)
    token = tmp_path / "token"
    token.write_text("s3cret-prometheus-token\n")
    engine = kubesim_engine(fast_cluster, redis_url, policy(prometheus.url, token_file=str(token), built_in=True))
    run = engine.request_canary(actor=ALICE, target=TARGET, image=XID_IMAGE, node="gpu-node2").run
    engine.approve(run.id, actor=BOB)
    run = engine.advance(run.id)

    assert run.state in (RunState.ROLLED_BACK, RunState.FAILED), (run.state, run.reason)
    before = run.progress["metrics_before"]
    assert before["values"]["xid-errors"] == {f"gpu-node{n}/{g}": 0.0 for n in (1, 2, 3) for g in range(8)}
    assert before["queries"]["xid-errors"] == XID_CHECK.query and before["labels"]["node"] == "Hostname"
    verdicts = {e["name"].split(".", 1)[1]: e["status"] for e in engine.audit(run.id)
                if e["name"].startswith("verify_canary.")}
    assert verdicts["metric:xid-errors"] == "failed", verdicts
    assert verdicts["metric:ecc-errors"] == "unknown", verdicts
    pod_level = {k: v for k, v in verdicts.items() if not k.startswith("metric:")}
    assert pod_level and set(pod_level.values()) == {"ok"}, pod_level
    xid = entries(engine, run, "verify_canary.metric:xid-errors")[0]
    said = "gpu-node2 GPU 0: last XID 79 (before the run last XID 0)"
    assert xid["detail"].startswith(said), xid
    assert {k.split("/")[0] for k in xid["evidence"]["values"]} == {"gpu-node2"}  # the canary scope only
    assert said in run.reason, run.reason
    ecc = entries(engine, run, "verify_canary.metric:ecc-errors")[0]
    assert ("dcgm-exporter on gpu-node2 exports no DCGM_FI_DEV_ECC_DBE_VOL_TOTAL: add it to the exporter's "
            "counters") in ecc["detail"], ecc
    assert plugin_image(fast_cluster, "gpu-node2") != XID_IMAGE
    assert "s3cret-prometheus-token" not in str(engine.audit(run.id)) + str(run.progress) + run.reason


def test_where_the_exporter_counts_xids_the_xid_count_is_judged_too(
    prometheus: Prometheus, fast_cluster: KubeSim, redis_url: str,
) -> None:
    """Issue 56 item 3: with DCGM_EXP_XID_ERRORS_COUNT enabled (as a user's counters CSV can), the
    built-in checks read the exporter's count of the last 5 minutes per GPU beside the last-XID
    gauge (the count sees the same code raised again, the gauge an XID that arrives as an older
    one leaves the count's window), through the real Prometheus: the ``-xid`` canary fails both,
    naming gpu-node2's GPU 0, the values before the run measured with the same queries."""
    fast_cluster.exporters(enable=["DCGM_EXP_XID_ERRORS_COUNT"])
    job = prometheus.scrape(fast_cluster)
    prometheus.wait_scraped(job, instances=3)
    engine = kubesim_engine(fast_cluster, redis_url, policy(prometheus.url, built_in=True))
    run = engine.request_canary(actor=ALICE, target=TARGET, image=XID_IMAGE, node="gpu-node2").run
    engine.approve(run.id, actor=BOB)
    run = engine.advance(run.id)
    assert run.state in (RunState.ROLLED_BACK, RunState.FAILED), (run.state, run.reason)
    queries = run.progress["metrics_before"]["queries"]
    assert (queries["xid-errors"], queries["xid-count"]) == (XID_CHECK.query, XID_COUNT_CHECK.query), queries
    count = entries(engine, run, "verify_canary.metric:xid-count")[0]
    assert count["status"] == "failed", count
    assert count["detail"].startswith("gpu-node2 GPU 0: 1 XID(s) in the exporter's window (before the run 0 XID(s) "
                                      "in the exporter's window)"), count
    assert entries(engine, run, "verify_canary.metric:xid-errors")[0]["status"] == "failed"


def _stop_when_verifying(engine: Engine, run_id: str, prom: Prometheus, *,
                         then: str = "stop") -> threading.Thread:
    """As soon as the run enters canary_verifying: stops ``prom`` (Prometheus going away
    mid-verify), or with ``then="clear"`` drops every series and scrape job (the series vanish)."""

    def watch() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            current = engine.store.get(run_id, whole=False)
            if current is not None and current.state is RunState.CANARY_VERIFYING:
                prom.stop() if then == "stop" else prom.clear()
                return
            time.sleep(0.05)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("unknown", ["fail", "warn"])
def test_prometheus_stopped_mid_verify_makes_the_metric_checks_unknown(
    unknown: str, fast_cluster: KubeSim, redis_url: str,
) -> None:
    """Issue 37 item 3 (done-when 2): Prometheus answers at the canary's start (the values
    before the run are recorded) and is stopped once the canary is being verified: the metric
    checks are ``unknown`` with the reason (the server did not answer); with ``verify.unknown:
    fail`` that blocks the canary (rolled back), with ``warn`` the run waits for promotion."""
    with Prometheus(scrape_interval="1s") as prom:
        job = prom.scrape(fast_cluster)
        prom.wait_scraped(job, instances=3)
        engine = kubesim_engine(fast_cluster, redis_url, policy(prom.url, window="5s", unknown=unknown))
        run = engine.request_canary(actor=ALICE, target=TARGET, image=NEW, node="gpu-node1").run
        engine.approve(run.id, actor=BOB)
        watcher = _stop_when_verifying(engine, run.id, prom)
        run = engine.advance(run.id)
        watcher.join(timeout=30)

    assert "error" not in run.progress["metrics_before"], run.progress["metrics_before"]
    xid = entries(engine, run, "verify_canary.metric:xid-errors")[0]
    assert xid["status"] == "unknown", xid
    assert "Prometheus did not answer, so xid-errors was not measured: http://127.0.0.1:" in xid["detail"], xid
    assert "did not answer: Connection refused" in xid["detail"], xid
    if unknown == "fail":
        assert run.state in (RunState.ROLLED_BACK, RunState.FAILED), (run.state, run.reason)
        assert "metric:xid-errors" in run.reason and "could not be checked" in run.reason, run.reason
    else:
        assert run.state is RunState.AWAITING_PROMOTION, (run.state, run.reason)


def test_a_check_the_exporter_cannot_feed_is_said_blind_at_request_and_unknown_blocks_the_promotion(
    prometheus: Prometheus, fast_cluster: KubeSim, redis_url: str,
) -> None:
    """Issue 56 (done-when 2): dcgm-exporter's default CSV exports no DCGM_FI_DEV_ECC_DBE_VOL_TOTAL,
    so before anyone approves, the request says the ECC check will be blind on the canary node and
    why; verify finds it ``unknown`` with the same reason, and with ``verify.unknown: fail`` the
    canary is not offered for promotion (rolled back). Once the exporters export the field (as a
    user's own counters CSV does), the same canary is offered for promotion."""
    job = prometheus.scrape(fast_cluster)
    prometheus.wait_scraped(job, instances=3)
    engine = kubesim_engine(fast_cluster, redis_url, policy(prometheus.url, built_in=True))
    reason = "dcgm-exporter on gpu-node1 exports no DCGM_FI_DEV_ECC_DBE_VOL_TOTAL: add it to the exporter's counters"
    run = engine.request_canary(actor=ALICE, target=TARGET, image=NEW, node="gpu-node1").run
    warned = run.progress["request_warnings"]
    assert any(w.startswith("metric:ecc-errors: ecc-errors will be blind on 1 node") and reason in w
               for w in warned), warned
    assert not any(w.startswith(("metric:xid-errors", "metric:gpu-utilisation")) for w in warned), warned
    engine.approve(run.id, actor=BOB)
    run = engine.advance(run.id)
    assert run.state in (RunState.ROLLED_BACK, RunState.FAILED), (run.state, run.reason)
    ecc = entries(engine, run, "verify_canary.metric:ecc-errors")[0]
    assert ecc["status"] == "unknown" and reason in ecc["detail"], ecc
    assert {e["status"] for e in entries(engine, run, "verify_canary.metric:xid-errors")} == {"ok"}

    fast_cluster.exporters(enable=["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"])
    prometheus.wait_scraped(job, instances=3)
    again = engine.request_canary(actor=ALICE, target=TARGET, image=NEW, node="gpu-node1").run
    assert not any(w.startswith("metric:") for w in again.progress.get("request_warnings") or []), again.progress
    engine.approve(again.id, actor=BOB)
    again = engine.advance(again.id)
    assert again.state is RunState.AWAITING_PROMOTION, (again.state, again.reason)
    assert {e["status"] for e in entries(engine, again, "verify_canary.metric:ecc-errors")} == {"ok"}


def test_series_that_vanish_mid_verify_make_every_metric_check_unknown_not_a_pass(
    prometheus: Prometheus, fast_cluster: KubeSim, redis_url: str,
) -> None:
    """Issue 57 finding 1: Prometheus answers at the canary's start (the values before the run are
    recorded), then holds no series for the canary node (its exporter gone from the scrape): each
    metric check is ``unknown`` naming the node whose series vanished, never "holds vacuously",
    and ``verify.unknown: fail`` rolls the canary back instead of offering its promotion."""
    job = prometheus.scrape(fast_cluster)
    prometheus.wait_scraped(job, instances=3)
    engine = kubesim_engine(fast_cluster, redis_url, policy(prometheus.url, window="5s"))
    run = engine.request_canary(actor=ALICE, target=TARGET, image=NEW, node="gpu-node1").run
    engine.approve(run.id, actor=BOB)
    watcher = _stop_when_verifying(engine, run.id, prometheus, then="clear")
    run = engine.advance(run.id)
    watcher.join(timeout=30)
    assert "error" not in run.progress["metrics_before"], run.progress["metrics_before"]
    assert run.state in (RunState.ROLLED_BACK, RunState.FAILED), (run.state, run.reason)
    for check in ("xid-errors", "gpu-utilisation"):
        entry = entries(engine, run, f"verify_canary.metric:{check}")[0]
        assert entry["status"] == "unknown", entry
        assert "gpu-node1 had series before the run and has none now" in entry["detail"], entry



def test_the_inventory_says_which_metric_checks_prometheus_can_feed(
    prometheus: Prometheus, cluster: KubeSim,
) -> None:
    """Issue 56 item 4: with a Prometheus in the policy, the inventory asks it what the metric
    checks would read on the GPU nodes: its Metrics section names the node label found, the
    series each check reads, and the checks that would be blind, with the reason (the ECC field
    that dcgm-exporter's default CSV comments out); ``--json`` carries the same."""
    from handlers.inventory import InventoryRequest, handle, summarize
    from runbooks.cluster import Cluster

    job = prometheus.scrape(cluster)
    prometheus.wait_scraped(job, instances=3)
    inv = handle(InventoryRequest(), connect=lambda context: Cluster.from_kubeconfig(cluster.kubeconfig, context),
                 policy=policy(prometheus.url, built_in=True))
    assert inv.metrics is not None and inv.metrics.node_label == "Hostname" and not inv.metrics.error
    by_check = {c.check: c for c in inv.metrics.checks}
    assert by_check["xid-errors"].reads == ["DCGM_FI_DEV_XID_ERRORS"] and by_check["xid-errors"].nodes == 3
    assert not by_check["xid-errors"].blind and not by_check["gpu-utilisation"].blind
    assert sorted(by_check["ecc-errors"].blind) == ["gpu-node1", "gpu-node2", "gpu-node3"]
    section = next(m for m in summarize(inv).thread if m.title == "Metrics")
    assert section.tone == "warn" and ("ecc-errors: reads DCGM_FI_DEV_ECC_DBE_VOL_TOTAL on 0 GPU node(s); blind on 3: "
                                       "dcgm-exporter on gpu-node1 exports no DCGM_FI_DEV_ECC_DBE_VOL_TOTAL") in section.text
