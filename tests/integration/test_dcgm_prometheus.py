"""A real Prometheus scrapes kubesim's dcgm-exporters (issue 37, items 1 and 2).

Prometheus finds one target per GPU node through kubesim's HTTP service discovery and scrapes
them every second; the cluster is changed as an operator would (kubectl, the control API over
HTTPS) and the answers are read back with PromQL.
"""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from typing import Any

import pytest

from kubesim import KubeSim
from kubesim.certs import serving_cert
from tests.prometheus_support import Prometheus, free_port
from tests.support import Kubectl

NS, DS = "kube-system", "nvidia-device-plugin-daemonset"
CTR = "nvidia-device-plugin-ctr"
XID_IMAGE = "nvcr.io/nvidia/k8s-device-plugin:v0.15.0-xid"
GPU_NODES = ("gpu-node1", "gpu-node2", "gpu-node3")


ECC = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"


def last_xids(prom: Prometheus, job: str) -> dict[str, float]:
    """The largest last-XID code among each node's GPUs (DCGM_FI_DEV_XID_ERRORS, 0 before any)."""
    query = f'max by (Hostname) (DCGM_FI_DEV_XID_ERRORS{{job="{job}"}})'
    return {r["metric"]["Hostname"]: float(r["value"][1]) for r in prom.query(query)}


def control(sim: KubeSim, path: str, body: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
    """kubesim's control API over HTTPS with the kubeconfig's token, the CA verified."""
    context = ssl.create_default_context(cadata=serving_cert().ca_pem.decode())
    request = urllib.request.Request(
        f"{sim.url}{path}", data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {sim.token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, context=context, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_prometheus_reads_the_xid_count_of_the_node_an_xid_plugin_runs_on(
    prometheus: Prometheus, fresh_cluster: KubeSim
) -> None:
    """Issue 37 items 1-2, issue 56: a ``-xid`` plugin image rolled onto gpu-node2 (its pod Running
    as any healthy plugin's) shows there as its GPU 0's last XID, 79, on the real Prometheus; the
    healthy nodes read 0; with DCGM_EXP_XID_ERRORS_COUNT enabled, the XIDs of the exporter's
    5-minute window are counted per code; a GPU workload pod's utilisation is nonzero."""
    kubectl = Kubectl(fresh_cluster.kubeconfig)
    job = prometheus.scrape(fresh_cluster)
    targets = prometheus.wait_scraped(job, instances=3)
    assert sorted(t["labels"]["instance"] for t in targets) == list(GPU_NODES)
    assert last_xids(prometheus, job) == dict.fromkeys(GPU_NODES, 0.0)

    patch = {"spec": {"updateStrategy": {"type": "OnDelete", "rollingUpdate": None},
                      "template": {"spec": {"containers": [{"name": CTR, "image": XID_IMAGE}]}}}}
    kubectl("-n", NS, "patch", "ds", DS, "-p", json.dumps(patch))
    pod = kubectl("-n", NS, "get", "pods", "-l", "name=nvidia-device-plugin-ds",
                  "--field-selector", "spec.nodeName=gpu-node2", "-o", "jsonpath={.items[0].metadata.name}")
    kubectl("-n", NS, "delete", "pod", pod, "--wait=false")
    fresh_cluster.advance("2m")  # the canary pod is replaced and starts: its first XID
    fresh_cluster.advance("30m")  # three more, one every 10 simulated minutes
    canary = kubectl.json("-n", NS, "get", "pods", "-l", "name=nvidia-device-plugin-ds",
                          "--field-selector", "spec.nodeName=gpu-node2")["items"]
    assert [(p["spec"]["containers"][0]["image"], p["status"]["phase"]) for p in canary] == [(XID_IMAGE, "Running")]
    assert all(s["ready"] for s in canary[0]["status"]["containerStatuses"])

    prometheus.wait_scraped(job, instances=3)
    assert last_xids(prometheus, job) == {"gpu-node1": 0.0, "gpu-node2": 79.0, "gpu-node3": 0.0}
    last = prometheus.query(f'DCGM_FI_DEV_XID_ERRORS{{job="{job}", Hostname="gpu-node2"}} > 0')
    assert [(r["metric"]["gpu"], r["value"][1]) for r in last] == [("0", "79")]
    assert prometheus.query(f'DCGM_EXP_XID_ERRORS_COUNT{{job="{job}"}}') == []  # commented out in the CSV

    assert control(fresh_cluster, "/sim/v1/dcgm/config", {"enable": ["DCGM_EXP_XID_ERRORS_COUNT"]})[0] == 200
    fresh_cluster.advance("10m")  # the plugin's next XID, inside the 5-minute window
    prometheus.wait_scraped(job, instances=3)
    counted = prometheus.query(f'DCGM_EXP_XID_ERRORS_COUNT{{job="{job}", Hostname="gpu-node2", gpu="0"}}')
    assert [(r["metric"].get("xid"), r["metric"]["window_size_in_ms"], r["value"][1]) for r in counted] == [
        ("79", "300000", "1")]
    util = prometheus.query(f'DCGM_FI_DEV_GPU_UTIL{{job="{job}", namespace="ml-team", pod="trainer-0"}}')
    assert len(util) == 4 and all(float(r["value"][1]) > 0 for r in util), util
    assert {r["metric"]["Hostname"] for r in util} == {"gpu-node1"}


def test_prometheus_sees_an_injected_ecc_fault_and_workloads_losing_their_gpus(
    prometheus: Prometheus, fresh_cluster: KubeSim
) -> None:
    """Issue 37 items 1-2, issue 56: ``POST /sim/v1/faults`` ``ecc`` and ``xid`` on gpu-node3 show
    on that node only (the ECC field once the exporters are told to export it, as a user's own
    counters CSV does); a bad fault or configuration is a 400 with its reason; once the device
    plugin is deleted, the running workloads keep their GPUs busy (the kubelet takes no device
    back from a running container)."""
    assert control(fresh_cluster, "/sim/v1/dcgm/config", {"enable": ["DCGM_EXP_XID_ERRORS_TOTAL"]}) == (
        400, {"error": "DCGM_EXP_XID_ERRORS_TOTAL is not a field of dcgm-exporter's default-counters.csv"})
    status, config = control(fresh_cluster, "/sim/v1/dcgm/config", {"enable": [ECC]})
    assert status == 200 and config["node_label"] == "Hostname" and ECC in config["fields"]
    job = prometheus.scrape(fresh_cluster)
    prometheus.wait_scraped(job, instances=3)
    busy = f'sum(DCGM_FI_DEV_GPU_UTIL{{job="{job}", pod=~"trainer-.*"}})'
    assert (prometheus.value(busy) or 0) > 0

    assert control(fresh_cluster, "/sim/v1/faults", {"kind": "ecc", "node": "gpu-node3", "gpu": 2, "count": 2})[0] == 200
    assert control(fresh_cluster, "/sim/v1/faults", {"kind": "xid", "node": "gpu-node3", "code": 48})[0] == 200
    assert control(fresh_cluster, "/sim/v1/faults", {"kind": "xid", "node": "cpu-node1"}) == (
        400, {"error": "node 'cpu-node1' has no GPUs"})
    status, where = control(fresh_cluster, "/sim/v1/dcgm")
    assert status == 200 and where["targets"] == f"{fresh_cluster.dcgm_url}/sim/v1/dcgm/targets"
    prometheus.wait_scraped(job, instances=3)
    ecc = prometheus.query(f'sum by (Hostname) (DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{{job="{job}"}})')
    assert {r["metric"]["Hostname"]: r["value"][1] for r in ecc} == {"gpu-node1": "0", "gpu-node2": "0", "gpu-node3": "2"}
    assert last_xids(prometheus, job) == {"gpu-node1": 0.0, "gpu-node2": 0.0, "gpu-node3": 48.0}

    Kubectl(fresh_cluster.kubeconfig)("-n", NS, "delete", "ds", DS, "--wait=false")
    fresh_cluster.advance("2m")
    prometheus.wait_scraped(job, instances=3)
    assert (prometheus.value(busy) or 0) > 0
    assert len(prometheus.query(f'DCGM_FI_DEV_GPU_UTIL{{job="{job}", pod=~"trainer-.*"}}')) == 8


def test_a_servicemonitor_scrape_renames_the_exporters_pod_labels(prometheus: Prometheus, cluster: KubeSim) -> None:
    """Issue 56 item 1: scraped as the Prometheus Operator scrapes the GPU operator's ServiceMonitor
    (``honorLabels: false``), a series keeps the exporter pod's ``pod``/``namespace`` and the
    workload's become ``exported_pod``/``exported_namespace``; ``instance`` is the pod's IP:9400."""
    job = prometheus.scrape(cluster, job="servicemonitor", servicemonitor=True)
    prometheus.wait_scraped(job, instances=3)
    util = prometheus.query(f'DCGM_FI_DEV_GPU_UTIL{{job="{job}", exported_pod="trainer-0"}}')
    assert len(util) == 4, util
    labels = util[0]["metric"]
    assert labels["exported_namespace"] == "ml-team" and labels["namespace"] == "gpu-operator"
    assert labels["pod"].startswith("nvidia-dcgm-exporter-") and labels["container"] == "nvidia-dcgm-exporter"
    assert labels["instance"].endswith(":9400") and labels["Hostname"] == "gpu-node1"
    assert prometheus.query(f'DCGM_FI_DEV_GPU_UTIL{{job="{job}", pod="trainer-0"}}') == []


def test_the_generated_configuration_scrapes_every_second(prometheus: Prometheus) -> None:
    """Issue 37 item 1: the fixture's Prometheus runs the generated configuration (1 s scrape and
    evaluation intervals, no job left from another test) and answers PromQL."""
    config = prometheus.api("/api/v1/status/config")["yaml"]
    assert "scrape_interval: 1s" in config and "evaluation_interval: 1s" in config
    assert "job_name" not in config
    assert prometheus.value("vector(1) + 1") == 2.0
    build = prometheus.api("/api/v1/status/buildinfo")
    assert tuple(int(p) for p in build["version"].split("+")[0].split(".")[:2]) >= (2, 42)


def test_kubesim_serve_prints_where_prometheus_finds_the_exporters(tmp_path) -> None:
    """Issue 37 item 2: ``python -m kubesim serve --dcgm-port P`` says, after the URL and the
    kubeconfig, the HTTP SD URL on that port; it lists the GPU nodes and serves their pages."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "kubesim", "serve", "--kubeconfig", str(tmp_path / "kubeconfig"),
         "--dcgm-port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline().strip() for _ in range(3)]
        url = f"http://127.0.0.1:{port}/sim/v1/dcgm/targets"
        assert lines[2] == f"dcgm-exporter targets (Prometheus http_sd): {url}", lines
        with urllib.request.urlopen(url, timeout=30) as resp:
            targets = json.loads(resp.read())
        assert [t["labels"]["instance"] for t in targets] == list(GPU_NODES)
        page = f"http://127.0.0.1:{port}{targets[0]['labels']['__metrics_path__']}"
        with urllib.request.urlopen(page, timeout=30) as resp:
            assert 'Hostname="gpu-node1"' in resp.read().decode()
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/sim/v1/dcgm/cpu-node1/metrics", timeout=30)
        assert missing.value.code == 404
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0
