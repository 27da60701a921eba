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
from runbooks.policy import Policy
from tests.engine_support import kubesim_engine
from tests.prometheus_support import Prometheus
from tests.support import Kubectl

NS, DS = "kube-system", "nvidia-device-plugin-daemonset"
TARGET = f"{NS}/{DS}"
XID_IMAGE = "nvcr.io/nvidia/k8s-device-plugin:v0.17.0-xid"
NEW = "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"
ALICE, BOB = Actor("U0ALICE"), Actor("U0BOB")
EVERY_SECOND = [
    {"name": "xid-errors", "interval": "1s", "unit": "XIDs", "condition": "result <= baseline",
     "query": 'sum by (Hostname) (DCGM_EXP_XID_ERRORS_TOTAL{Hostname=~"$nodes"})'
              ' or sum by (Hostname) (DCGM_FI_DEV_XID_ERRORS{Hostname=~"$nodes"}) * 0'},
    {"name": "gpu-utilisation", "interval": "1s", "condition": "result >= baseline * 0.5",
     "query": 'avg by (Hostname) (DCGM_FI_DEV_GPU_UTIL{Hostname=~"$nodes", pod!=""})'},
]


@pytest.fixture
def fast_cluster() -> Iterator[KubeSim]:
    """A gpu-small kubesim of the test's own whose clock runs 20 times real time (pods start sooner)."""
    with KubeSim(scenario="gpu-small", k8s_version="1.31", speed=20) as sim:
        yield sim


def policy(url: str, *, window: str = "4s", unknown: str = "fail", token_file: str | None = None) -> Policy:
    prometheus: dict[str, Any] = {"url": url}
    if token_file:
        prometheus["bearer_token_file"] = token_file
    return Policy.model_validate({
        "approvers": {"users": ["U0BOB"]}, "reports": {"after": []},
        "steps": {"observe_window": window, "poll_interval": "0.2s", "ready_timeout": "60s"},
        "verify": {"unknown": unknown, "metrics": EVERY_SECOND},
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
    """Issue 37 item 3 (done-when 1): a canary of a ``-xid`` plugin on gpu-node2 runs Ready and
    passes every pod-level check, but its XID check fails naming gpu-node2 and the XID count read
    from the real Prometheus (1 XID, 0 before the run); the run is rolled back by itself and the
    reason (what the thread says) names the node and the count."""
    job = prometheus.scrape(fast_cluster)
    prometheus.wait_scraped(job, instances=3)
    token = tmp_path / "token"
    token.write_text("s3cret-prometheus-token\n")
    engine = kubesim_engine(fast_cluster, redis_url, policy(prometheus.url, token_file=str(token)))
    run = engine.request_canary(actor=ALICE, target=TARGET, image=XID_IMAGE, node="gpu-node2").run
    engine.approve(run.id, actor=BOB)
    run = engine.advance(run.id)

    assert run.state in (RunState.ROLLED_BACK, RunState.FAILED), (run.state, run.reason)
    assert run.progress["metrics_before"]["values"]["xid-errors"] == {"gpu-node1": 0.0, "gpu-node2": 0.0,
                                                                       "gpu-node3": 0.0}
    verdicts = {e["name"].split(".", 1)[1]: e["status"] for e in engine.audit(run.id)
                if e["name"].startswith("verify_canary.")}
    assert verdicts["metric:xid-errors"] == "failed", verdicts
    pod_level = {k: v for k, v in verdicts.items() if not k.startswith("metric:")}
    assert pod_level and set(pod_level.values()) == {"ok"}, pod_level
    xid = entries(engine, run, "verify_canary.metric:xid-errors")[0]
    assert xid["detail"].startswith("gpu-node2: "), xid
    count = xid["evidence"]["values"]["gpu-node2"]
    said = f"gpu-node2: {count:g} XID{'' if count == 1 else 's'} (before the run 0 XIDs)"
    assert count >= 1 and said in xid["detail"], xid
    assert set(xid["evidence"]["values"]) == {"gpu-node2"}  # the canary scope only
    assert said in run.reason, run.reason
    assert plugin_image(fast_cluster, "gpu-node2") != XID_IMAGE
    assert "s3cret-prometheus-token" not in str(engine.audit(run.id)) + str(run.progress) + run.reason


def _stop_when_verifying(engine: Engine, run_id: str, prom: Prometheus) -> threading.Thread:
    """Stops ``prom`` as soon as the run enters canary_verifying (Prometheus going away mid-verify)."""

    def watch() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            current = engine.store.get(run_id, whole=False)
            if current is not None and current.state is RunState.CANARY_VERIFYING:
                prom.stop()
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
