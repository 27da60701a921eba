"""The canary step on kubesim, with kubectl as the referee: one node changes, nothing else."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from kubesim import KubeSim
from runbooks.daemonset.steps import DaemonSetSteps
from tests.integration.stepkit import (
    BASELINE_GPUS,
    CTR,
    DS,
    NEW,
    NS,
    OLD,
    SPEED,
    Killed,
    again,
    ds_field,
    gpus_by_node,
    harness,
    images_by_node,
    kill_after,
    writes,
)
from tests.support import TEST_BUILDS, Kubectl, pinned

STEPS = DaemonSetSteps()
DS_PATH = f"/apis/apps/v1/namespaces/{NS}/daemonsets/{DS}"


@pytest.fixture
def sim() -> Iterator[KubeSim]:
    with KubeSim(pushed=TEST_BUILDS, scenario="gpu-small", speed=SPEED) as s:
        yield s


def test_canary_changes_the_image_on_exactly_one_node(sim: KubeSim) -> None:
    """After the canary only gpu-node1 runs the new image; the nodeSelector, the other pods and all GPUs are as before."""
    kubectl = Kubectl(sim.kubeconfig)
    selector_before = ds_field(kubectl, "{.spec.template.spec.nodeSelector}")
    others_before = {n: p for n, p in _pod_names(kubectl).items() if n != "gpu-node1"}
    h = harness(sim)
    result = STEPS.canary(h.ctx)
    assert result.ok, result.reason
    assert images_by_node(kubectl) == {"gpu-node1": NEW, "gpu-node2": OLD, "gpu-node3": OLD}
    assert {n: p for n, p in _pod_names(kubectl).items() if n != "gpu-node1"} == others_before
    assert ds_field(kubectl, "{.spec.template.spec.nodeSelector}") == selector_before
    assert "affinity" not in json.loads(ds_field(kubectl, "{.spec.template.spec}"))
    assert ds_field(kubectl, "{.spec.updateStrategy.type}") == "OnDelete"
    assert gpus_by_node(kubectl) == BASELINE_GPUS
    assert [verb for verb, _ in writes(sim)] == ["patch", "patch", "delete"]
    saved = h.run.progress["saved"]
    assert saved["update_strategy"]["type"] == "RollingUpdate" and saved["revision"]["number"] == 1
    assert saved["image"] == OLD and saved["template"]["spec"]["containers"][0]["image"] == OLD
    baseline = h.run.progress["baseline"]["nodes"]
    assert {n: (b["capacity"], b["allocatable"], b["registered"]) for n, b in baseline.items()} == {
        n: ({"nvidia.com/gpu": 8}, {"nvidia.com/gpu": 8}, True) for n in ("gpu-node1", "gpu-node2", "gpu-node3")}
    assert h.names()[-7:] == ["canary.saved", "canary.strategy", "canary.image", "canary.delete-pod",
                              "canary.canary-pod-ready", "canary.other-nodes-unchanged", "canary.canary-digest"]
    assert h.run.progress["digests"] == {"tag": NEW, "verified": pinned(NEW).split("@")[1],
                                         "now": pinned(NEW).split("@")[1], "unknown": "",
                                         "checked_at": h.run.progress["digests"]["checked_at"]}
    assert h.run.progress["pre_run_digests"] == {n: {CTR: pinned(OLD)} for n in ("gpu-node1", "gpu-node2", "gpu-node3")}


def test_canary_called_again_repeats_no_mutation(sim: KubeSim) -> None:
    """A second canary call on a finished canary reads, finds everything done, and writes nothing."""
    h = harness(sim)
    assert STEPS.canary(h.ctx).ok
    done = len(sim.mutations())
    second = again(h)
    result = STEPS.canary(second.ctx)
    assert result.ok, result.reason
    assert writes(sim, done) == []
    assert [s.status for s in second.steps if s.name in ("canary.strategy", "canary.image", "canary.delete-pod")] == [
        "info", "info", "info"]


@pytest.mark.parametrize("kill_at", ["canary.saved", "canary.strategy", "canary.image", "canary.delete-pod"])
def test_canary_killed_and_resumed_applies_each_mutation_once(sim: KubeSim, kill_at: str) -> None:
    """Killed right after any of its entries and called again, the canary completes with each write made once."""
    h = kill_after(harness(sim), kill_at)
    with pytest.raises(Killed):
        STEPS.canary(h.ctx)
    result = STEPS.canary(again(h).ctx)
    assert result.ok, result.reason
    assert writes(sim) == [("patch", DS_PATH), ("patch", DS_PATH), ("delete", writes(sim)[2][1])]
    assert images_by_node(Kubectl(sim.kubeconfig)) == {"gpu-node1": NEW, "gpu-node2": OLD, "gpu-node3": OLD}


def test_canary_from_a_partial_state_does_only_what_is_missing(sim: KubeSim) -> None:
    """Killed after saving, with OnDelete and the new image then in place, the canary only deletes one pod."""
    kubectl = Kubectl(sim.kubeconfig)
    h = kill_after(harness(sim), "canary.saved")
    with pytest.raises(Killed):
        STEPS.canary(h.ctx)
    kubectl("patch", "daemonset", DS, "-n", NS, "--type=merge", "-p",
            '{"spec": {"updateStrategy": {"type": "OnDelete", "rollingUpdate": null}}}')
    kubectl("set", "image", f"daemonset/{DS}", "-n", NS, f"{CTR}={NEW}")
    done = len(sim.mutations())
    result = STEPS.canary(again(h).ctx)
    assert result.ok, result.reason
    assert [verb for verb, _ in writes(sim, done)] == ["delete"]
    assert images_by_node(kubectl) == {"gpu-node1": NEW, "gpu-node2": OLD, "gpu-node3": OLD}


@pytest.mark.parametrize(
    ("change", "args", "failing"),
    [("cordoned node", ["cordon", "gpu-node1"], "node-ready"),
     ("node without GPUs", None, "node-has-gpu"),
     ("unknown container", None, "container-exists"),
     ("image already running", None, "container-exists"),
     ("invalid image", None, "image-valid")],
)
def test_prechecks_refuse_without_changing_anything(sim: KubeSim, change: str, args: list[str] | None, failing: str) -> None:
    """A failed pre-check names itself, and the DaemonSet is left exactly as it was (no write at all)."""
    if args:
        Kubectl(sim.kubeconfig)(*args)
    done = len(sim.mutations())
    options = {"node without GPUs": {"node": "cpu-node1"}, "unknown container": {"container": "sidecar"},
               "image already running": {"image": OLD}, "invalid image": {"image": "nvcr.io/NVIDIA/plugin"}}
    h = harness(sim, **options.get(change, {}))  # type: ignore[arg-type]
    result = STEPS.canary(h.ctx)
    assert not result.ok
    assert failing in [c.name for c in result.failed], result.reason
    assert failing in result.reason
    assert writes(sim, done) == [] and "saved" not in h.run.progress


def test_crashing_image_fails_the_canary_early(sim: KubeSim) -> None:
    """A -crash image: the canary stops when its pod crash-loops (not after the timeout), naming no-crashloop."""
    h = harness(sim, image=NEW + "-crash")
    result = STEPS.canary(h.ctx)
    assert not result.ok
    assert {"no-crashloop", "canary-pod-ready"} <= {c.name for c in result.failed}
    assert "crash-looping" in result.reason
    assert images_by_node(Kubectl(sim.kubeconfig)) == {"gpu-node1": NEW + "-crash", "gpu-node2": OLD, "gpu-node3": OLD}


def _pod_names(kubectl: Kubectl) -> dict[str, str]:
    out = kubectl("get", "pods", "-n", NS, "-l", "name=nvidia-device-plugin-ds", "--no-headers",
                  "-o", "custom-columns=NODE:.spec.nodeName,NAME:.metadata.name")
    return dict(line.split() for line in out.splitlines() if line.strip())
