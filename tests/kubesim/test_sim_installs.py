"""Scenarios installed from NVIDIA's published objects (kubesim.installs): the Helm chart's and the GPU
operator's DaemonSets as the files in kubesim/manifests/ hold them, settled, only the plugin registering;
the real kubectl reads them back."""

from __future__ import annotations

import pytest
from _simkit import DAEMONSETS, PODS

from kubesim import KubeSim
from kubesim.devices import kind_of
from kubesim.installs import HELM_FILES, OPERATOR_FILE, manifest
from kubesim.scenarios import build
from tests.support import Kubectl

HELM = ("nvdp-nvidia-device-plugin", "nvdp-nvidia-device-plugin-gpu-feature-discovery",
        "nvdp-nvidia-device-plugin-mps-control-daemon")


def _registered(sim, ns: str) -> dict[str, list[str]]:
    """pod name -> containers whose log shows the plugin's registration."""
    out = {}
    for pod in sim.store.list(PODS, ns):
        name = pod["metadata"]["name"]
        out[name] = [c["name"] for c in pod["spec"]["containers"]
                     if "Registered device plugin" in (sim.logs.read(ns, name, c["name"]) or "")]
    return out


@pytest.mark.parametrize("scenario", ["gpu-helm", "gpu-helm-mig"])
def test_helm_scenarios_run_the_charts_three_daemonsets(scenario):
    """The plugin and GFD on the three GPU nodes, the MPS control daemon on gpu-node3 (the only node GFD
    labels mps.capable=true) only; every pod Ready; only the plugin's pods register."""
    sim = build(scenario=scenario)
    daemonsets = {d["metadata"]["name"]: d for d in sim.store.list(DAEMONSETS, "nvidia-device-plugin")}
    assert sorted(daemonsets) == sorted(HELM)
    assert {n: d["status"]["numberReady"] for n, d in daemonsets.items()} == dict(zip(HELM, (3, 3, 1), strict=True))
    assert len({str(d["spec"]["selector"]) for d in daemonsets.values()}) == 1  # the chart's one selector
    pods = sim.store.list(PODS, "nvidia-device-plugin")
    mps = [p["spec"]["nodeName"] for p in pods if p["metadata"]["name"].startswith(HELM[2])]
    assert mps == ["gpu-node3"]
    assert all(c["type"] != "Ready" or c["status"] == "True" for p in pods for c in p["status"]["conditions"])
    registered = _registered(sim, "nvidia-device-plugin")
    assert {n: r for n, r in registered.items() if r} == {
        p["metadata"]["name"]: ["nvidia-device-plugin-ctr"] for p in pods
        if p["metadata"]["ownerReferences"][0]["name"] == HELM[0]}
    plugin = daemonsets[HELM[0]]["spec"]["template"]["spec"]["containers"][0]
    added = (plugin["securityContext"].get("capabilities") or {}).get("add")
    assert added == (["SYS_ADMIN"] if scenario == "gpu-helm-mig" else None)


def test_operator_scenario_runs_the_two_container_plugin_and_gfd():
    """The operator's plugin pod runs nvidia-device-plugin and config-manager (both on the plugin's image),
    registered by the first only; GFD registers nothing; both DaemonSets carry runtimeClassName nvidia."""
    sim = build(scenario="gpu-operator")
    daemonsets = {d["metadata"]["name"]: d for d in sim.store.list(DAEMONSETS, "gpu-operator")}
    assert sorted(daemonsets) == ["gpu-feature-discovery", "nvidia-device-plugin-daemonset"]
    spec = daemonsets["nvidia-device-plugin-daemonset"]["spec"]["template"]["spec"]
    assert [c["name"] for c in spec["containers"]] == ["nvidia-device-plugin", "config-manager"]
    assert [c["name"] for c in spec["initContainers"]] == ["toolkit-validation", "config-manager-init"]
    assert {d["spec"]["template"]["spec"]["runtimeClassName"] for d in daemonsets.values()} == {"nvidia"}
    registered = _registered(sim, "gpu-operator")
    assert sorted(r for rs in registered.values() for r in rs) == ["nvidia-device-plugin"] * 3
    assert all(d["status"]["numberReady"] == 3 for d in daemonsets.values())


def test_containers_are_told_apart_by_what_they_run():
    """Of the plugin's image, only the container running the plugin is a device plugin."""
    kinds = {}
    for name in (*HELM_FILES.values(), OPERATOR_FILE):
        for obj in manifest(name):
            if obj["kind"] == "DaemonSet":
                for c in obj["spec"]["template"]["spec"]["containers"]:
                    kinds[(obj["metadata"]["name"], c["name"])] = kind_of(c)
    assert {k for k, v in kinds.items() if v == "device-plugin"} == {
        ("nvdp-nvidia-device-plugin", "nvidia-device-plugin-ctr"),
        ("nvidia-device-plugin-daemonset", "nvidia-device-plugin")}


@pytest.mark.conformance
@pytest.mark.parametrize("scenario", ["gpu-helm", "gpu-operator"])
def test_kubectl_reads_back_the_published_objects(scenario):
    """``kubectl get ds -A -o yaml`` returns each file's DaemonSets, their containers as published."""
    files = list(HELM_FILES.values())[:1] if scenario == "gpu-helm" else [OPERATOR_FILE]
    wanted = {o["metadata"]["name"]: o for f in files for o in manifest(f) if o["kind"] == "DaemonSet"}
    with KubeSim(scenario=scenario, k8s_version="1.31") as sim:
        items = Kubectl(sim.kubeconfig).json("get", "ds", "-A")["items"]
    got = {d["metadata"]["name"]: d for d in items if d["metadata"]["name"] in wanted}
    assert sorted(got) == sorted(wanted)
    for name, obj in wanted.items():
        spec, want = got[name]["spec"]["template"]["spec"], obj["spec"]["template"]["spec"]
        for kind in ("containers", "initContainers"):
            assert [(c["name"], c["image"], c.get("command"), c.get("args")) for c in spec.get(kind, [])] == [
                (c["name"], c["image"], c.get("command"), c.get("args")) for c in want.get(kind, [])]
        assert spec.get("nodeSelector") == want.get("nodeSelector")
        assert got[name]["spec"]["selector"] == obj["spec"]["selector"]


@pytest.mark.conformance
def test_kubectl_applies_every_file_as_published():
    """The real kubectl sends each file of kubesim/manifests/ as it stands (a server-side dry run into its
    namespace): kubesim's API validation accepts every object. The DRA drivers' charts are applied on their own
    scenarios (test_kubectl_dra_installs.py)."""
    from kubesim.dra_installs import FILES as DRA_FILES
    from kubesim.installs import MANIFESTS

    with KubeSim(scenario="gpu-small", k8s_version="1.31") as sim:
        kubectl = Kubectl(sim.kubeconfig)
        kubectl("create", "namespace", "nvidia-device-plugin")
        kubectl("create", "namespace", "gpu-operator")
        for path in sorted(MANIFESTS.glob("*.yaml")):
            if path.name in DRA_FILES.values():
                continue
            out = kubectl("apply", "--dry-run=server", "-f", str(path))
            assert "(server dry run)" in out and "error" not in out.lower(), (path.name, out)


@pytest.mark.parametrize(("scenario", "config"), [
    ("gpu-helm", {"gfd": {"enabled": True}, "nfd": {"enabled": False}}),
    ("gpu-helm-mig", {"gfd": {"enabled": True}, "nfd": {"enabled": False}, "migStrategy": "mixed"})])
def test_helm_scenarios_carry_what_helm_3_writes(scenario, config):
    """setMetadataVisitor's label and annotations on every object of the release, and the release Secret
    as Helm 3's Secret driver stores it (helm/helm v3.16.4; see kubesim/helmrelease.py)."""
    import base64
    import gzip
    import json

    with KubeSim(scenario=scenario, k8s_version="1.31") as sim:
        kubectl = Kubectl(sim.kubeconfig)
        for name in HELM:
            meta = kubectl.json("-n", "nvidia-device-plugin", "get", "daemonset", name)["metadata"]
            assert meta["labels"]["app.kubernetes.io/managed-by"] == "Helm"
            assert {k: meta["annotations"][k] for k in ("meta.helm.sh/release-name", "meta.helm.sh/release-namespace")
                    } == {"meta.helm.sh/release-name": "nvdp", "meta.helm.sh/release-namespace": "nvidia-device-plugin"}
        found = kubectl.json("-n", "nvidia-device-plugin", "get", "secrets", "-l", "owner=helm,name=nvdp,status=deployed")
        [secret] = found["items"]
        assert secret["metadata"]["name"] == "sh.helm.release.v1.nvdp.v1" and secret["type"] == "helm.sh/release.v1"
        assert {k: secret["metadata"]["labels"][k] for k in ("name", "owner", "status", "version")} == {
            "name": "nvdp", "owner": "helm", "status": "deployed", "version": "1"}
        stored = base64.b64decode(base64.b64decode(secret["data"]["release"]))
        assert stored[:3] == b"\x1f\x8b\x08"
        release = json.loads(gzip.decompress(stored))
        assert (release["name"], release["namespace"], release["version"], release["info"]["status"]) == (
            "nvdp", "nvidia-device-plugin", 1, "deployed")
        assert release["config"] == config
        assert release["chart"]["metadata"]["appVersion"] == "0.17.0"
        assert release["chart"]["values"]["image"] == {"repository": "nvcr.io/nvidia/k8s-device-plugin",
                                                       "pullPolicy": "IfNotPresent", "tag": ""}
        assert "name: nvdp-nvidia-device-plugin" in release["manifest"]
