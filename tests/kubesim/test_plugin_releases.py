"""Issue 58: NVIDIA's device plugin prints the lines of its release (v0.14, v0.15, v0.17, v0.20
families, read at their tags), for start-up, registration and each failure kubesim causes: a bad
flag, the host faults ``driver-mismatch`` and ``no-container-toolkit`` (set through the control
API), a ``-crash`` image; no line that no release prints."""

from __future__ import annotations

from typing import Any

import pytest
from _simkit import PODS, create, get, small

from kubesim import pluginreleases as pr
from kubesim.control import apply_fault
from kubesim.simulation import Simulation

REPO = "nvcr.io/nvidia/k8s-device-plugin"
NEVER = ("failed to create device plugin socket", "invalid --mig-strategy option", 'option: "',
         "failed to construct resource managers: nvml init failed: Driver/library version mismatch\n")


def plugin(sim: Simulation, tag: str, node: str = "gpu-node1", name: str = "dp", **env: str) -> dict[str, Any]:
    ctr = {"name": "main", "image": f"{REPO}:{tag}", "env": [{"name": k, "value": v} for k, v in env.items()]}
    return create(sim, PODS, {"metadata": {"name": name, "namespace": "default"},
                              "spec": {"nodeName": node, "containers": [ctr]}})


def log(sim: Simulation, name: str = "dp", *, previous: bool = False) -> str:
    text = sim.logs.read("default", name, "main", previous=previous) or ""
    assert not any(bad in text for bad in NEVER[:3]), text
    return text


def status(sim: Simulation, name: str = "dp") -> dict[str, Any]:
    return get(sim, PODS, "default", name)["status"]["containerStatuses"][0]


def last(text: str) -> str:
    return text.rstrip("\n").splitlines()[-1]


@pytest.mark.parametrize(("tag", "family"), [
    ("v0.9.0", "v0.14"), ("v0.14.2", "v0.14"), ("v0.15.0", "v0.15"), ("v0.16.2", "v0.15"), ("v0.17.0-ubi9", "v0.17"),
    ("v0.18.2", "v0.17"), ("v0.19.3", "v0.17"), ("v0.20.0", "v0.20"), ("v0.21.0", "v0.20"), ("latest", "v0.20"),
])
def test_the_family_is_the_nearest_older_one_read(tag: str, family: str) -> None:
    assert pr.family(f"{REPO}:{tag}").name == family


@pytest.mark.parametrize(("tag", "lines"), [
    ("v0.14.5", ["main.go:154] Starting FS watcher.", "main.go:256] Retreiving plugins.",
                 "factory.go:107] Detected NVML platform: found NVML library", "server.go:165] Starting GRPC server for 'nvidia.com/gpu'",
                 "server.go:125] Registered device plugin for 'nvidia.com/gpu' with Kubelet"]),
    ("v0.15.1", ["main.go:178] Starting FS watcher.", "main.go:279] Retrieving plugins.",
                 "factory.go:104] Detected NVML platform: found NVML library",
                 "server.go:154] Registered device plugin for 'nvidia.com/gpu' with Kubelet"]),
    ("v0.17.0", ['main.go:235] "Starting NVIDIA Device Plugin" version=<\n\tv0.17.0\n\tcommit: d475b2cfcf12b983a4975d4fc59d91af432cf28e\n >',
                 "main.go:238] Starting FS watcher for /var/lib/kubelet/device-plugins", "main.go:356] Retrieving plugins.",
                 "server.go:146] Registered device plugin for 'nvidia.com/gpu' with Kubelet"]),
    ("v0.20.0", ["main.go:272] Starting FS watcher for /var/lib/kubelet/device-plugins",
                 "plugin-manager.go:101] Detected platform: nvml", "plugin-manager.go:50] Using device discovery strategy: nvml",
                 "server.go:149] Registered device plugin for 'nvidia.com/gpu' with Kubelet",
                 "health.go:64] Ignoring the following XIDs for health checks: map[13:true 31:true 43:true 45:true 68:true 109:true]"]),
])
def test_a_healthy_plugin_prints_its_releases_start_up_and_registration(tag: str, lines: list[str]) -> None:
    sim = small()
    plugin(sim, tag)
    sim.advance(5)
    text = log(sim)
    assert all(f" {line}" in text for line in lines), text
    assert status(sim)["ready"]


@pytest.mark.parametrize(("tag", "fatal", "block"), [
    ("v0.14.5", "main.go:123] error starting plugins: error creating plugin manager: unable to create plugin manager: "
                "nvml init failed: ERROR_LIB_RM_VERSION_MISMATCH", "factory.go:77] Failed to initialize NVML: ERROR_LIB_RM_VERSION_MISMATCH."),
    ("v0.15.0", "main.go:132] error starting plugins: error creating plugin manager: unable to create plugin manager: "
                "nvml init failed: ERROR_LIB_RM_VERSION_MISMATCH", "factory.go:72] Failed to initialize NVML: ERROR_LIB_RM_VERSION_MISMATCH."),
    ("v0.17.4", "main.go:173] error starting plugins: error getting plugins: unable to create plugins: failed to construct "
                "resource managers: nvml init failed: Driver/library version mismatch",
     "factory.go:93] Failed to initialize NVML: Driver/library version mismatch."),
    ("v0.20.0", "main.go:198] error starting plugins: error getting plugins: unable to create plugins: failed to construct "
                "resource managers: nvml init failed: Driver/library version mismatch",
     "factory.go:99] Failed to initialize NVML: Driver/library version mismatch."),
])
def test_on_a_driver_mismatch_every_release_exits_with_nvmls_code_in_its_rendering(tag: str, fatal: str, block: str) -> None:
    sim = small()
    assert apply_fault(sim, {"kind": "driver-mismatch", "node": "gpu-node1"}) is None
    plugin(sim, tag)
    sim.advance(40)
    text = log(sim, previous=True)
    assert last(text).startswith("E") and last(text).endswith(fatal), text
    assert f" {block}" in text
    cs = status(sim)
    assert cs["restartCount"] >= 1 and not cs["ready"] and cs["lastState"]["terminated"]["exitCode"] == 1


def test_with_fail_on_init_error_false_the_plugin_waits_unregistered() -> None:
    sim = small()
    assert apply_fault(sim, {"kind": "driver-mismatch", "node": "gpu-node1"}) is None
    plugin(sim, "v0.17.0", FAIL_ON_INIT_ERROR="false")
    sim.advance(40)
    text = log(sim)
    assert " factory.go:101] nvml init failed: Driver/library version mismatch" in text
    assert last(text).endswith("main.go:381] No devices found. Waiting indefinitely.")
    assert "Registered device plugin" not in text and status(sim)["ready"] and status(sim)["restartCount"] == 0


@pytest.mark.parametrize(("tag", "first", "fatal"), [
    ("v0.14.2", "factory.go:115] Incompatible platform detected",
     "main.go:123] error starting plugins: error creating plugin manager: unable to create plugin manager: platform detection failed"),
    ("v0.17.0", "factory.go:112] Incompatible strategy detected auto",
     "main.go:173] error starting plugins: error getting plugins: unable to create plugins: failed to construct resource "
     "managers: invalid device discovery strategy"),
    ("v0.20.0", "plugin-manager.go:108] Unsupported platform detected; defaulting to nvml",
     "main.go:198] error starting plugins: error getting plugins: unable to create plugins: failed to construct resource "
     "managers: nvml init failed: ERROR_LIBRARY_NOT_FOUND"),
])
def test_without_the_container_toolkit_each_release_prints_its_lines(tag: str, first: str, fatal: str) -> None:
    sim = small()
    assert apply_fault(sim, {"kind": "no-container-toolkit", "node": "gpu-node2"}) is None
    plugin(sim, tag, node="gpu-node2")
    sim.advance(40)
    text = log(sim, previous=True)
    assert f" {first}" in text and last(text).endswith(fatal), text
    if tag != "v0.20.0":
        assert "did you configure the NVIDIA Container Toolkit?" in text
    if tag == "v0.14.2":  # internal/cdi/factory.go:31, called before the plugin manager
        assert any(line.startswith("W") and line.endswith(
            " factory.go:31] No valid resources detected, creating a null CDI handler") for line in text.splitlines()), text
    plugin(sim, tag, node="gpu-node2", name="waits", FAIL_ON_INIT_ERROR="false")
    sim.advance(5)
    assert last(log(sim, "waits")).endswith("No devices found. Waiting indefinitely.")


@pytest.mark.parametrize(("tag", "env", "fatal"), [
    ("v0.14.2", {"MIG_STRATEGY": "bogus"}, "main.go:123] error starting plugins: error creating plugin manager: unknown strategy: bogus"),
    ("v0.15.0", {"MIG_STRATEGY": "bogus"}, "main.go:132] error starting plugins: error creating plugin manager: unknown strategy: bogus"),
    ("v0.17.0", {"MIG_STRATEGY": "bogus"}, "main.go:173] error starting plugins: unable to validate flags: unknown MIG strategy: bogus"),
    ("v0.20.0", {"MIG_STRATEGY": "bogus"}, "main.go:198] error starting plugins: unable to validate flags: unknown MIG strategy: bogus"),
    ("v0.14.2", {"DEVICE_LIST_STRATEGY": "envvar,cdi-cri"}, "main.go:123] error starting plugins: unable to load config: "
     "unable to validate flags: invalid --device-list-strategy option: invalid strategy: cdi-cri"),
    ("v0.17.0", {"DEVICE_LIST_STRATEGY": "smoke"}, "main.go:173] error starting plugins: unable to validate flags: "
     "invalid --device-list-strategy option: invalid strategy: smoke"),
])
def test_a_bad_flag_ends_the_plugin_with_its_releases_error(tag: str, env: dict[str, str], fatal: str) -> None:
    sim = small()
    plugin(sim, tag, FAIL_ON_INIT_ERROR="false", **env)
    sim.advance(40)
    assert last(log(sim, previous=True)).endswith(fatal)


def test_cdi_cri_is_a_strategy_from_v0_15() -> None:
    sim = small()
    plugin(sim, "v0.15.0", DEVICE_LIST_STRATEGY="envvar,cdi-cri")
    sim.advance(5)
    assert status(sim)["ready"] and "Registered device plugin" in log(sim)


@pytest.mark.parametrize(("tag", "fatal"), [
    ("v0.14.2", "main.go:123] failed to create FS watcher: too many open files"),
    ("v0.17.0-crash", "main.go:173] failed to create FS watcher for /var/lib/kubelet/device-plugins/: too many open files"),
])
def test_a_crash_image_exits_on_the_fs_watcher(tag: str, fatal: str) -> None:
    sim = small()
    plugin(sim, tag if tag.endswith("-crash") else f"{tag}-crash")
    sim.advance(40)
    assert last(log(sim, previous=True)).endswith(fatal)


def test_a_reboot_or_repair_ends_the_host_faults_and_bad_requests_are_refused() -> None:
    sim = small()
    assert apply_fault(sim, {"kind": "driver-mismatch", "node": "gpu-node1"}) is None
    assert apply_fault(sim, {"kind": "no-container-toolkit", "node": "gpu-node2"}) is None
    assert sim.faults.hosts == {"gpu-node1": "driver-mismatch", "gpu-node2": "no-container-toolkit"}
    assert apply_fault(sim, {"kind": "node-reboot", "node": "gpu-node1"}) is None
    assert apply_fault(sim, {"kind": "no-container-toolkit", "node": "gpu-node2", "repaired": True}) is None
    assert sim.faults.hosts == {}
    assert apply_fault(sim, {"kind": "driver-mismatch", "node": "nope"}) == "unknown node 'nope'"
    assert apply_fault(sim, {"kind": "driver-mismatch"}) == "unknown node None"
