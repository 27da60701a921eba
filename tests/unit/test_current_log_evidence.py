"""Issue 61 items 3 and 4: a plugin that runs without registering leaves evidence too: the error
and warning lines of its current log (klog's ``E``/``W``/``F`` records, as the plugins print them
in kubesim, which follows their sources), bounded and scrubbed, with the known signatures matched
against them; and one renderer words any kind of evidence for every surface."""

from __future__ import annotations

import datetime as dt

from handlers import evidence_messages as evmsg
from kubesim import dradrivers, dralogs, pluginreleases
from runbooks import log_lines
from runbooks.daemonset import evidence
from runbooks.evidence_items import items
from runbooks.inventory.plugins import LogRead, read_registrations

START = dt.datetime(2026, 12, 7, 10, 0, tzinfo=dt.UTC)
V015 = "nvcr.io/nvidia/k8s-device-plugin:v0.15.0"
TOOLKIT_OFF = {"name": "nvidia-device-plugin-ctr", "image": V015, "env": [{"name": "FAIL_ON_INIT_ERROR", "value": "false"}]}


def _text(lines: list[tuple[dt.datetime, str]]) -> str:
    return "\n".join(line for _, line in lines)


def test_the_error_and_warning_lines_are_klogs_e_w_and_f_records() -> None:
    """v0.15.0 on a node without the container toolkit, FAIL_ON_INIT_ERROR false (kubesim serves
    the release's lines): it keeps running unregistered; its W (null CDI handler) and E
    (Incompatible platform, with its hints) records are the errors and warnings, in order; no I
    record (the multi-line config, ``No devices found``) is."""
    text = _text(pluginreleases.started(V015, TOOLKIT_OFF, START, why="no-container-toolkit", registered=False))
    found = log_lines.errors(text)
    assert [line[0] for line in found] == ["W", "E", "E", "E", "E", "E"], found
    assert found[0].endswith("factory.go:31] No valid resources detected, creating a null CDI handler")
    assert found[1].endswith("factory.go:112] Incompatible platform detected")
    assert not any("No devices found" in line or "Running with config" in line for line in found)
    assert log_lines.severity(found[1]) == "E" and log_lines.severity("I1207 10:00:00.000000       1 main.go:1] x") == "I"
    assert log_lines.severity('{"level":"error"}') is None  # not a klog line


def test_a_dra_drivers_error_lines_are_recognised_as_it_prints_them() -> None:
    """NVIDIA's compute-domain kubelet plugin on a driver older than its IMEX DNS names need
    (dralogs, from device_state.go v25.8.1) prints two E records: both are errors."""
    container = {"name": "compute-domains", "image": "nvcr.io/nvidia/k8s-dra-driver-gpu:v25.8.1"}
    lines = dralogs.started(container, dradrivers.NVIDIA_COMPUTE_DOMAIN, node="gpu-node1",
                            labels={"nvidia.com/cuda.driver-version.full": "550.54.15"}, gpus=1, start=START, first=True)
    found = log_lines.errors(_text(lines))
    assert len(found) == 2 and "IMEXDaemonsWithDNSNames feature requires GPU driver version >= 570.158.1" in found[0]


def test_errors_above_the_tail_are_kept_bounded_and_scrubbed_and_matched() -> None:
    """An error printed long before the log's end (30 lines of info after it) is outside the kept
    tail but among the errors, and the signature is matched against it; a token in an error
    line is redacted; at most 20 error lines and 4 KiB are kept, the newest."""
    stamp = "1207 10:00:00.000000       1"
    text = "\n".join([
        f"E{stamp} main.go:409] Failed to start plugin: error waiting for MPS daemon: Authorization: Bearer abcdefghijklmnop1234",
        *(f"I{stamp} main.go:400] waiting {i}" for i in range(30)),
    ])
    read = LogRead("kube-system/p", "kube-system", "p-1", ["ctr"], "device-plugin")
    result = read_registrations([read], lambda ns, pod, ctr: text)[("kube-system", "p-1")]
    assert result.registered is False and not any("Failed to start plugin" in ln for ln in result.tail)
    assert len(result.errors) == 1 and "abcdefghijklmnop1234" not in result.errors[0], result.errors
    found = evidence.current_log("p-1", ["ctr"], result)
    assert found["log"] == "current" and found["log_errors"] == list(result.errors)
    assert [s["signature"] for s in found["signatures"]] == ["kubelet-unreachable"]
    many = "\n".join(f"E{stamp} main.go:1] failure {i} " + "x" * 300 for i in range(100))
    kept = log_lines.errors(many)
    assert len(kept) <= 20 and len("\n".join(kept).encode()) <= 4096 and "failure 99 " in kept[-1]


def test_one_renderer_words_every_kind_of_evidence() -> None:
    """A current log's evidence reads as the thread shows it: its last lines fenced, the errors
    and warnings above them, each known signature with its meaning and fix; a kind the renderer
    has no wording of (a scheduler's message) is still shown with the cluster's words."""
    text = _text(pluginreleases.started(V015, TOOLKIT_OFF, START, why="no-container-toolkit", registered=False))
    read = LogRead("kube-system/p", "kube-system", "p-1", ["nvidia-device-plugin-ctr"], "device-plugin")
    result = read_registrations([read], lambda ns, pod, ctr: text)[("kube-system", "p-1")]
    found = items({"pod": "p-1", **evidence.current_log("p-1", ["nvidia-device-plugin-ctr"], result)})
    assert [i["kind"] for i in found] == ["log", "signature", "signature", "signature"]
    assert [i["signature"] for i in found[1:]] == ["nvml-missing", "toolkit-not-configured", "no-devices"]
    lines = evmsg.evidence_lines(found)
    assert lines[0] == "Last log lines of p-1 (nvidia-device-plugin-ctr, current run):"
    assert lines[1] == "```" and lines[2:2 + evmsg.SHOWN_LINES] == list(result.tail)[-evmsg.SHOWN_LINES:]
    assert any(line.endswith("factory.go:31] No valid resources detected, creating a null CDI handler")
               for line in lines[lines.index(evmsg.errors_above(1)):]), lines
    assert any(line.startswith("Known failure (toolkit-not-configured)") for line in lines), lines
    other = evmsg.evidence_lines([{"kind": "scheduler", "pod": "p-2", "reason": "FailedScheduling",
                                   "message": "0/3 nodes are available: 1 Insufficient cpu."}])
    assert other == ["p-2: FailedScheduling: 0/3 nodes are available: 1 Insufficient cpu."]
    empty = evmsg.evidence_lines(items({"pod": "p-3", "container": "plugin", "log": "current", "log_tail": []}))
    assert empty == ["The current log of p-3 (plugin) is empty."]
