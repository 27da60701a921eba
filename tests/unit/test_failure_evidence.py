"""The failure evidence of a crashed plugin container (issue 36, item 4): its log tail is
bounded and scrubbed of secrets, and its lines are matched against the known signatures
(device plugins' real messages), each with a meaning and a fix."""

from __future__ import annotations

import pytest

from runbooks.daemonset import evidence


def test_the_log_tail_is_bounded_to_40_lines_and_4_kib() -> None:
    """Issue 36 item 4: at most 40 lines and 4 KiB of the previous log are kept, the newest."""
    text = "\n".join(f"line {i} " + "x" * 200 for i in range(100))
    kept = evidence.tail(text)
    assert kept[-1].startswith("line 99 ") and len(kept) <= 40
    assert len("\n".join(kept).encode()) <= 4096
    one = evidence.tail("y" * 10_000)
    assert len(one) == 1 and len(one[0].encode()) <= 4096


@pytest.mark.parametrize("line", [
    "E1203 10:00:00.000000       1 main.go:123] connecting with Authorization: Bearer abcdefghijklmnopqrstuvwxyz",
    "I1203 10:00:00.000000       1 main.go:99] token: s3cr3t-value-1234567890",
    "I1203 10:00:00.000000       1 main.go:99] pulling from https://robot:hunter2hunter2@registry.example.com/v2/",
    "I1203 10:00:00.000000       1 main.go:99] eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW0ifQ.c2lnbmF0dXJl",
])
def test_secrets_in_the_log_tail_are_scrubbed(line: str) -> None:
    """Issue 36 item 4 (secrets never in messages): a bearer token, a token value, a URL's
    password and a JWT the plugin logged are redacted before the tail is kept or matched."""
    kept = "\n".join(evidence.tail(f"starting\n{line}\nfailed to open device"))
    for secret in ("abcdefghijklmnopqrstuvwxyz", "s3cr3t-value-1234567890", "hunter2hunter2", "c2lnbmF0dXJl"):
        assert secret not in kept
    assert "<redacted>" in kept or "***" in kept, kept


def test_a_tail_starting_inside_a_pem_block_drops_the_key_lines() -> None:
    """Issue 36 item 4: a tail cut inside a logged PEM block (its BEGIN line left out) keeps
    none of the key's lines."""
    body = [f"MIIB{i:02d}QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo" for i in range(50)]
    text = "\n".join(["-----BEGIN PRIVATE KEY-----", *body, "-----END PRIVATE KEY-----", "E main.go:1] bye"])
    kept = evidence.tail(text)
    assert not any("QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo" in ln for ln in kept), kept
    assert kept[-1] == "E main.go:1] bye"


@pytest.mark.parametrize(("line", "name"), [
    ("E1203 factory.go:93] Failed to initialize NVML: Driver/library version mismatch.", "driver-mismatch"),
    ("I1203 factory.go:107] Detected non-NVML platform: could not load NVML library: libnvidia-ml.so.1: "
     "cannot open shared object file: No such file or directory", "nvml-missing"),
    ("E1203 main.go:123] failed to create device plugin socket: mkdir /var/lib/kubelet/device-plugins: "
     "permission denied", "socket-permission"),
    ("E1203 server.go:61] Could not register device plugin: rpc error: code = Unavailable desc = connection error: "
     "desc = \"transport: Error while dialing: dial unix /var/lib/kubelet/device-plugins/kubelet.sock: connect: "
     "permission denied\"", "socket-permission"),
    ("E1203 nvidia.go:70] failed to open device /dev/nvidia0: no such file or directory", "device-open"),
    ("E1203 main.go:123] unable to load config: unable to finalize config: invalid --mig-strategy option: \"x\"",
     "config"),
])
def test_known_signatures_are_matched_with_meaning_and_fix(line: str, name: str) -> None:
    """Issue 36 item 4: each known failure line is matched to its signature, with a meaning and a fix."""
    found = evidence.matches(["I1203 main.go:1] Starting Plugins.", line])
    assert found and found[0]["signature"] == name, found
    assert found[0]["line"] == line and found[0]["meaning"] and found[0]["fix"]
    assert evidence.matches(["I1203 server.go:125] Registered device plugin for 'nvidia.com/gpu' with Kubelet"]) == []


def test_a_driver_mismatch_is_not_also_called_a_missing_nvml() -> None:
    """Issue 36 item 4: NVML's ``Failed to initialize NVML: Driver/library version mismatch.``
    is the driver-mismatch signature only; its fix is not the toolkit's."""
    lines = ["E1203 factory.go:93] Failed to initialize NVML: Driver/library version mismatch.",
             "E1203 main.go:173] error starting plugins: … nvml init failed: Driver/library version mismatch"]
    assert [m["signature"] for m in evidence.matches(lines)] == ["driver-mismatch"]
