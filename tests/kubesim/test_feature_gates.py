"""The feature gates each simulated release reports in ``/metrics`` (issue 35 item 5): every gate
its kube-apiserver registers (pkg/features, apiserver, apiextensions-apiserver, component-base,
and client-go from 1.30), with the stage and default of that patch release, including the gates
Kubernetes removed before 1.34. The expected values are read off the releases' Go sources."""

from __future__ import annotations

import re

import pytest

from kubesim import featuregates
from kubesim.discovery import metrics_text

RELEASES = range(27, 35)

COUNTS = {27: 149, 28: 154, 29: 162, 30: 168, 31: 169, 32: 181, 33: 191, 34: 208}
"""How many gates each release registers, AllAlpha and AllBeta included."""

KNOWN: dict[str, dict[int, tuple[str, bool] | None]] = {
    # gate: {release: (stage, default), or None where the release does not register it}
    "DynamicResourceAllocation": {27: ("ALPHA", False), 31: ("ALPHA", False), 32: ("BETA", False),
                                  34: ("", True)},
    "CSIMigrationAzureFile": {27: ("", True), 29: ("", True), 30: None, 34: None},  # GA, removed in 1.30
    "CSIMigrationvSphere": {27: ("", True), 28: ("", True), 29: None},
    "UserNamespacesStatelessPodsSupport": {27: ("ALPHA", False), 28: None},  # renamed in 1.28
    "UserNamespacesSupport": {27: None, 28: ("ALPHA", False)},
    "CustomCPUCFSQuotaPeriod": {27: ("ALPHA", False), 34: ("ALPHA", False)},  # the string, not the Go name
    "CPUCFSQuotaPeriod": {27: None, 34: None},
    "RuntimeClassInImageCriApi": {29: ("ALPHA", False), 28: None},
    "WindowsHostNetwork": {27: ("ALPHA", True), 33: ("DEPRECATED", False)},
    "APIServingWithRoutine": {30: ("ALPHA", False)},  # beta in 1.30.0, back to alpha in a 1.30 patch
    "DRAControlPlaneController": {27: None, 30: None, 31: ("ALPHA", False), 32: None},
    "KubeletPodResources": {27: ("BETA", True), 28: ("", True), 29: ("", True), 30: None},
    "DevicePluginCDIDevices": {28: ("ALPHA", False), 29: ("BETA", True), 31: ("", True), 33: ("", True), 34: None},
    "KubeletPodResourcesGet": {27: ("ALPHA", False), 33: ("ALPHA", False), 34: ("BETA", True)},
    "SchedulerAsyncAPICalls": {33: None, 34: ("BETA", False)},  # on in 1.34.0/1.34.1, off from 1.34.2
    "WatchList": {27: ("ALPHA", False), 32: ("BETA", True), 33: ("BETA", False), 34: ("BETA", True)},
    "JobSuccessPolicy": {27: None, 30: ("ALPHA", False)},
    "WatchListClient": {29: None, 30: ("BETA", False)},  # client-go's gates join kube's in 1.30
    "ComponentFlagz": {31: None, 32: ("ALPHA", False)},
    "AllAlpha": {r: ("ALPHA", False) for r in RELEASES},
    "AllBeta": {r: ("BETA", False) for r in RELEASES},
}


def reported(minor: int) -> dict[str, tuple[str, bool]]:
    """The ``kubernetes_feature_enabled`` samples of a release with every gate at its default."""
    out: dict[str, tuple[str, bool]] = {}
    for line in metrics_text(minor, {}, {}, {}).splitlines():
        found = re.fullmatch(r'kubernetes_feature_enabled\{name="(\w+)",stage="([A-Z]*)"\} ([01])', line)
        if line.startswith("kubernetes_feature_enabled{"):
            assert found and found[1] not in out, line
            out[found[1]] = (found[2], found[3] == "1")
    return out


@pytest.mark.parametrize("minor", RELEASES)
def test_each_release_reports_every_gate_its_apiserver_registers(minor: int) -> None:
    """Issue 35 item 5: /metrics of 1.<minor> lists as many gates as that release's kube-apiserver
    registers, the removed ones included, and the known gates with that release's stage and default."""
    gates = reported(minor)
    assert len(gates) == COUNTS[minor]
    for name, by_release in KNOWN.items():
        if minor in by_release:
            assert gates.get(name) == by_release[minor], (name, gates.get(name))


def test_a_removed_gate_is_reported_up_to_its_last_release() -> None:
    """Issue 35 item 5: a gate Kubernetes removed goes from /metrics in the release that removed
    it and stays gone; 1.27 reports far more gates than the 69 that the 1.34 list alone gave."""
    seen = {minor: set(featuregates.gates(minor)) for minor in RELEASES}
    gone_by_1_34 = seen[27] - seen[34]
    assert len(gone_by_1_34) >= 60, sorted(gone_by_1_34)
    for name in gone_by_1_34:
        present = [minor for minor in RELEASES if name in seen[minor]]
        assert present == list(range(27, present[-1] + 1)), (name, present)
