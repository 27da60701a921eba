"""Issue 61 items 3 and 4: a failure's evidence says the same in the thread, in the shell's
``approve`` and ``status`` and in their ``--json``.

A device plugin that runs and never registers (kubesim's ``-silent`` build: NVML found, no
device, ``No devices found. Waiting indefinitely.`` as its release prints it) fails
``plugin-registered`` with the last lines of its *current* log; a crash-looping one (``-crash``)
fails ``no-crashloop`` with its previous log; a DRA driver that never registers fails with its
current log (empty: kubesim's silent DRA build prints nothing). Each run goes through the shell
as a pipeline drives it (canary, ``approve --as`` a second person, ``status``), and the thread's
step message is rendered from the run's audit trail as the bot posts it. The block of evidence
lines the JSON carries for the check is found, line for line, in all three.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from handlers.run_views import phase_message, phase_of
from kubesim import KubeSim
from runbooks.engine.runs import Run, Step
from tests.shell_support import in_process
from tests.support import TEST_BUILDS, shell_identities

TARGET = "kube-system/nvidia-device-plugin-daemonset"
DRA_TARGET = "dra-example-driver/dra-example-driver-kubeletplugin"
PLUGIN = "nvcr.io/nvidia/k8s-device-plugin"
DRA = "registry.k8s.io/dra-example-driver/dra-example-driver"
IDENTITIES, TOKENS = shell_identities("U0ALICE", "U0BOB")
POLICY = f"""
approvers: {{users: [U0BOB]}}
shell: {{approvals: true}}
reports: {{after: []}}
steps: {{observe_window: 1s, poll_interval: 0.1s, ready_timeout: 60s}}
targets: [{TARGET}, {DRA_TARGET}]
""" + IDENTITIES


@pytest.fixture
def sim() -> Iterator[KubeSim]:
    with KubeSim(pushed=TEST_BUILDS, scenario="gpu-small", k8s_version="1.32", speed=8) as served:
        yield served


@pytest.fixture
def env(sim: KubeSim, redis_url: str, tmp_path: Path) -> dict[str, str]:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("KUBE", "UPGRADEBOT", "REDIS"))}
    return {**base, "HOME": str(tmp_path), "KUBECONFIG": str(sim.kubeconfig), "REDIS_URL": redis_url,
            "UPGRADEBOT_CONFIG": str(policy), "UPGRADEBOT_TOKEN": TOKENS["U0ALICE"]}


def _bot(env: dict[str, str], *args: str, who: str = "U0ALICE") -> Any:
    return in_process({**env, "UPGRADEBOT_TOKEN": TOKENS[who]}, *args)


def _failed_canary(env: dict[str, str], target: str, image: str, node: str) -> tuple[str, str, str, dict[str, Any]]:
    """The run id, what ``approve`` printed, what ``status`` printed, and ``status --json``."""
    asked = _bot(env, "canary", target, f"image={image}", f"node={node}", "--json")
    assert asked.returncode == 0, asked.stderr
    run_id = json.loads(asked.stdout)["id"]
    approved = _bot(env, "approve", run_id, "canary", who="U0BOB")
    assert approved.returncode == 1, (approved.stdout, approved.stderr)  # the canary failed: rolled back
    status = _bot(env, "status", run_id)
    assert status.returncode == 1, status.stderr
    data = json.loads(_bot(env, "status", run_id, "--json").stdout)
    assert data["state"] in ("rolled_back", "halted"), data["reason"]
    return run_id, approved.stdout, status.stdout, data


def _thread(env: dict[str, str], data: dict[str, Any], phase: str) -> str:
    """The step's message in the thread, rendered from the run's audit trail as the bot posts it."""
    run = Run.model_validate(data)
    entries = json.loads(_bot(env, "audit", run.id, "--json").stdout)["entries"]
    steps = [Step.model_validate(e) for e in entries]
    message = phase_message(run, phase, [s for s in steps if phase_of(run, s) == phase])
    return f"{message.title}\n{message.text}"


def _same_everywhere(block: list[str], *surfaces: str) -> None:
    joined = "\n".join(block)
    for text in surfaces:
        assert joined in text, (joined, text)


def test_a_silent_canary_fails_with_the_last_lines_of_its_current_log_on_every_surface(env: dict[str, str]) -> None:
    """Issue 61 Done-when 3: v0.17.0-silent runs on gpu-node1 and never registers; ``plugin-registered``
    fails, its evidence is the pod's current log (the last lines, ending with the release's
    ``main.go:381] No devices found. Waiting indefinitely.``) and the no-devices signature with
    its fix; ``approve``, ``status``, ``status --json`` and the thread carry the same lines."""
    _, approved, status, data = _failed_canary(env, TARGET, f"{PLUGIN}:v0.17.0-silent", "gpu-node1")
    found = data["evidence"]["verify_canary.plugin-registered"]
    assert (found["step"], found["check"], found["status"], found["scope"]) == (
        "verify_canary", "plugin-registered", "failed", "gpu-node1")
    log = next(i for i in found["items"] if i["kind"] == "log")
    assert log["log"] == "current" and log["container"] == "nvidia-device-plugin-ctr"
    assert log["lines"][-1].endswith("main.go:381] No devices found. Waiting indefinitely."), log
    assert [i["signature"] for i in found["items"] if i["kind"] == "signature"] == ["no-devices"]
    block = found["text"]
    assert block[0] == f"Last log lines of {log['pod']} (nvidia-device-plugin-ctr, current run):", block
    assert any(line.startswith("Known failure (no-devices)") for line in block), block
    _same_everywhere(block, approved, status, _thread(env, data, "verify_canary"))


def test_a_crash_looping_canarys_line_and_signature_read_the_same_on_every_surface(env: dict[str, str]) -> None:
    """Issue 61 item 4: v0.17.0-crash exits as the release does when it cannot watch the
    device-plugin directory; the ``canary.no-crashloop`` evidence (previous log, exit code,
    the fs-watcher signature and its fix) is one block of lines, the same in ``approve``,
    ``status``, ``--json`` and the thread."""
    _, approved, status, data = _failed_canary(env, TARGET, f"{PLUGIN}:v0.17.0-crash", "gpu-node1")
    found = data["evidence"]["canary.no-crashloop"]
    block = found["text"]
    line = "main.go:173] failed to create FS watcher for /var/lib/kubelet/device-plugins/: too many open files"
    assert any(text.endswith(line) for text in block), block
    assert any(text.startswith("Known failure (fs-watcher)") for text in block), block
    assert any("fix: raise fs.inotify.max_user_instances on the node" in text for text in block), block
    log = next(i for i in found["items"] if i["kind"] == "log")
    assert log["log"] == "previous" and log["exit_code"] == 1, log
    _same_everywhere(block, approved, status, _thread(env, data, "canary"))


def test_a_dra_driver_that_never_registers_shows_its_current_log_on_every_surface(env: dict[str, str]) -> None:
    """Issue 61 item 3 for DRA: the example driver's -silent build runs on gpu-node3 and never
    registers (its slices go); ``plugin-registered`` fails with its pod's current log, which is
    empty (it is stuck before its first line), said so in ``approve``, ``status``, ``--json``
    and the thread alike."""
    _, approved, status, data = _failed_canary(env, DRA_TARGET, f"{DRA}:v0.2.0-silent", "gpu-node3")
    found = data["evidence"]["verify_canary.plugin-registered"]
    log = next(i for i in found["items"] if i["kind"] == "log")
    assert (log["log"], log["container"], log["lines"]) == ("current", "plugin", []), log
    assert found["text"] == [f"The current log of {log['pod']} (plugin) is empty."], found
    _same_everywhere(found["text"], approved, status, _thread(env, data, "verify_canary"))
