"""The device-plugin DaemonSets of gpu-small and gpu-unsafe are NVIDIA's v0.14.2 static manifest
(kept verbatim in kubesim/manifests/) with named deltas, and nothing invented: every field of
their pod template is the manifest's, an API server default, or a documented delta."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from _simkit import DAEMONSETS, PODS, get

from kubesim.scenarios import DEVICE_PLUGIN_IMAGE, build

MANIFEST = Path(__file__).resolve().parents[2] / "kubesim" / "manifests" / "k8s-device-plugin-v0.14.2-static.yml"
API_DEFAULTS = {"dnsPolicy": "ClusterFirst", "restartPolicy": "Always", "schedulerName": "default-scheduler",
                "securityContext": {}, "terminationGracePeriodSeconds": 30}
CONTAINER_DEFAULTS = {"imagePullPolicy": "IfNotPresent", "resources": {}, "terminationMessagePath": "/dev/termination-log",
                      "terminationMessagePolicy": "File"}
NFD = {"feature.node.kubernetes.io/pci-10de.present": "true"}


def shipped() -> dict[str, Any]:
    """The manifest as NVIDIA ships it, read from the data file (not through kubesim's loader)."""
    doc: dict[str, Any] = yaml.safe_load(MANIFEST.read_text(encoding="utf-8"))
    return doc


def as_stored(doc: dict[str, Any]) -> dict[str, Any]:
    """The pod template spec the API server stores for ``doc``."""
    spec = copy.deepcopy(doc["spec"]["template"]["spec"])
    spec = {**API_DEFAULTS, **spec}
    spec["containers"] = [{**CONTAINER_DEFAULTS, **c} for c in spec["containers"]]
    for volume in spec["volumes"]:
        volume["hostPath"].setdefault("type", "")
    return spec


def test_the_data_file_is_the_release_manifest_with_its_source() -> None:
    text = MANIFEST.read_text(encoding="utf-8")
    assert text.startswith("# Source: github.com/NVIDIA/k8s-device-plugin, path nvidia-device-plugin.yml at tag v0.14.2")
    doc = shipped()
    spec = doc["spec"]["template"]["spec"]
    assert spec["priorityClassName"] == "system-node-critical" and "nodeSelector" not in spec
    assert spec["containers"][0]["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    assert spec["containers"][0]["env"] == [{"name": "FAIL_ON_INIT_ERROR", "value": "false"}]
    assert spec["containers"][0]["image"] == DEVICE_PLUGIN_IMAGE  # kubesim's default image is the manifest's


@pytest.mark.parametrize("scenario", ["gpu-small", "gpu-mixed"])
def test_the_plugin_is_the_manifest_with_the_admins_two_edits(scenario: str) -> None:
    """Deltas: nodeSelector on NFD's GPU label, FAIL_ON_INIT_ERROR=true; nothing else."""
    sim = build(scenario=scenario, minor=31)
    ds = get(sim, DAEMONSETS, "kube-system", "nvidia-device-plugin-daemonset")
    assert ds is not None
    want = as_stored(shipped())
    want["nodeSelector"] = NFD
    want["containers"][0]["env"] = [{"name": "FAIL_ON_INIT_ERROR", "value": "true"}]
    assert ds["spec"]["template"]["spec"] == want
    assert ds["spec"]["selector"] == shipped()["spec"]["selector"]
    assert ds["spec"]["template"]["metadata"]["labels"] == {"name": "nvidia-device-plugin-ds"}
    assert "labels" not in ds["metadata"]
    assert ds["spec"]["updateStrategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}


def test_gpu_unsafe_plants_named_deltas_on_the_manifest() -> None:
    sim = build(scenario="gpu-unsafe", minor=31)
    main = get(sim, DAEMONSETS, "kube-system", "nvidia-device-plugin-daemonset")
    legacy = get(sim, DAEMONSETS, "kube-system", "nvidia-device-plugin-legacy")
    assert main is not None and legacy is not None
    want = as_stored(shipped())
    want["nodeSelector"] = NFD  # the admin's edit, as in gpu-small; FAIL_ON_INIT_ERROR stays as shipped (false)
    del want["priorityClassName"], want["containers"][0]["securityContext"]  # removed by someone
    assert main["spec"]["template"]["spec"] == want
    assert main["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"] == 2
    want = as_stored(shipped())  # as shipped: no nodeSelector, FAIL_ON_INIT_ERROR false, hardened
    want["volumes"][0]["hostPath"]["path"] = "/var/lib/kubelet/plugins"
    assert legacy["spec"]["template"]["spec"] == want
    assert legacy["spec"]["selector"] == {"matchLabels": {"name": "nvidia-device-plugin-legacy-ds"}}
    assert legacy["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"] == 1
    on = sorted(p["spec"]["nodeName"] for p in sim.store.list(PODS, "kube-system")
                if p["metadata"]["labels"].get("name") == "nvidia-device-plugin-legacy-ds")
    assert on == ["cpu-node1", "gpu-node1", "gpu-node2"]  # gpu-node3's taint is tolerated by neither
