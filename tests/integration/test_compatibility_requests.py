"""The compatibility matrix at request time on kubesim ``gpu-mixed`` (issue 36, items 2 and 6;
issue 58, item 5), with the real engine, the shell and kubectl.

gpu-node1/2 are A100 nodes on driver 535, gpu-node3/4 H100 nodes on driver 550, gpu-node5 a
GPU node without GFD labels. Relabelled as GFD labels a node on driver 375.66 (below the
README's "NVIDIA drivers ~= 384.81"), gpu-node1 and gpu-node2 make a real release (v0.17.0)
refused before any approver is asked, naming the matrix row and those nodes; on the
unchanged cluster the release is requested, its request showing the unknown stack of
gpu-node5 as a warning; the policy's per-target override moves the minimum or turns the
check off. A ``-driver550`` tag is no NVIDIA build (no Makefile makes one): it is requested
with a warning that v0.17.x publishes no such tag, as a release newer than the matrix
(v0.21.0) is, naming the newest row."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from handlers.run_views import gate_message
from kubesim import KubeSim
from runbooks.engine.approving import Actor
from runbooks.engine.refusals import Refused
from runbooks.engine.runs import RunState
from runbooks.policy import Policy
from tests.engine_support import kubesim_engine
from tests.support import TEST_BUILDS, relabel_driver, shell_identities

NS, DS = "kube-system", "nvidia-device-plugin-daemonset"
TARGET = f"{NS}/{DS}"
PLUGIN = "nvcr.io/nvidia/k8s-device-plugin"
RELEASE = f"{PLUGIN}:v0.17.0"
OLD_NODES = ("gpu-node1", "gpu-node2")
ALICE, BOB = Actor("U0ALICE"), Actor("U0BOB")
UPGRADEBOT = str(Path(sys.executable).parent / "upgradebot")


def policy(compatibility: dict[str, Any] | None = None) -> Policy:
    target: Any = {"namespace": NS, "name": DS, "compatibility": compatibility} if compatibility else TARGET
    return Policy.model_validate({"approvers": {"users": ["U0BOB"]}, "reports": {"after": []},
                                  "steps": {"observe_window": "1s", "poll_interval": "0.1s"}, "targets": [target]})


@pytest.fixture(scope="module")
def mixed() -> Iterator[KubeSim]:
    with KubeSim(pushed=TEST_BUILDS, scenario="gpu-mixed", k8s_version="1.32", speed=4) as sim:
        yield sim


@pytest.fixture(scope="module")
def aged() -> Iterator[KubeSim]:
    """gpu-mixed with gpu-node1 and gpu-node2 labelled by GFD as on driver 375.66."""
    with KubeSim(scenario="gpu-mixed", k8s_version="1.32", speed=4) as sim:
        relabel_driver(sim.kubeconfig, OLD_NODES, "375.66")
        yield sim


@pytest.mark.parametrize("k8s", ["1.27", "1.32", "1.34"])
def test_a_node_below_the_rows_driver_floor_is_refused_naming_the_row_and_the_nodes(k8s: str, redis_url: str) -> None:
    """issue 36, item 2; issue 58, item 5: a canary of the real v0.17.0 on gpu-node3 (driver 550)
    is refused before any approver is asked, since the plugin also runs on gpu-node1, gpu-node2
    (driver 375.66, below the README's ~= 384.81): the row (device plugin v0.17.x, its README),
    the class and gpu-node1, gpu-node2 are named with the host's fix; the H100 nodes are not;
    no run is stored (Kubernetes 1.27, 1.32 and 1.34)."""
    with KubeSim(scenario="gpu-mixed", k8s_version=k8s, speed=4) as sim:
        relabel_driver(sim.kubeconfig, OLD_NODES, "375.66")
        _refused_naming_the_old_nodes(sim, redis_url)


def _refused_naming_the_old_nodes(sim: KubeSim, redis_url: str) -> None:
    engine = kubesim_engine(sim, redis_url, policy())
    with pytest.raises(Refused) as refused:
        engine.request_canary(actor=ALICE, target=TARGET, image=RELEASE, node="gpu-node3")
    said = str(refused.value)
    assert said.startswith(f"canary of {RELEASE} on gpu-node3 refused before any approver was asked"), said
    assert "compatibility: " in said and "needs NVIDIA driver branch 384 or newer" in said
    assert "NVIDIA device plugin v0.17.x" in said and "v0.17.4/README.md#prerequisites" in said
    assert "NVIDIA-A100-SXM4-80GB / driver 375 / containerd 1.7 has gpu-node1, gpu-node2 on driver 375.66" in said
    assert "upgrade the NVIDIA driver on those nodes first" in said and "another image" not in said
    assert "gpu-node3," not in said and "gpu-node4" not in said and len(said.splitlines()) == 1
    assert engine.runs(limit=5) == []


DIGEST = "sha256:" + "ab" * 32
SPELLINGS = [
    "nvcr.io:443/nvidia/k8s-device-plugin:v0.17.0",  # the https default port
    "NVCR.IO/nvidia/k8s-device-plugin:v0.17.0",  # the host's case
    f"{PLUGIN}:v0.17.0-ubi9",  # v0.17's one published distribution suffix (its Makefile)
    f"{RELEASE}@{DIGEST}",  # tag and digest: judged by its tag
    f"nvcr.io:443/nvidia/k8s-device-plugin:v0.17.0-ubi9@{DIGEST}",
]


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_every_spelling_of_the_image_is_refused_as_the_canonical_one(aged: KubeSim, redis_url: str,
                                                                       spelling: str) -> None:
    """Attack finding 5: the registry's default port, the host's case, the release's distribution
    suffix and a digest beside the tag do not take v0.17.0 out of its row: each is refused on
    the nodes below its driver floor before any approver is asked, in the same words as the
    canonical spelling (but for the image as written), naming the row and gpu-node1, gpu-node2;
    no run is stored."""
    engine = kubesim_engine(aged, redis_url, policy())
    with pytest.raises(Refused) as canonical:
        engine.request_canary(actor=ALICE, target=TARGET, image=RELEASE, node="gpu-node3")
    with pytest.raises(Refused) as refused:
        engine.request_canary(actor=ALICE, target=TARGET, image=spelling, node="gpu-node3")
    said = str(refused.value)
    assert "NVIDIA device plugin v0.17.x" in said and "gpu-node1, gpu-node2" in said, said
    assert said.replace(spelling, RELEASE) == str(canonical.value)
    assert engine.runs(limit=5) == []


def test_the_release_is_requested_with_the_unknown_stack_as_a_warning(mixed: KubeSim, redis_url: str) -> None:
    """issue 36, item 2: v0.17.0 (driver 384 or newer per its README) is requested; the request
    the approvers see warns that gpu-node5's driver is unknown, and is not refused for it."""
    engine = kubesim_engine(mixed, redis_url, policy())
    run = engine.request_canary(actor=ALICE, target=TARGET, image=RELEASE, node="gpu-node3").run
    try:
        assert run.state is RunState.AWAITING_APPROVAL and run.gate is not None
        [warning] = run.progress["request_warnings"]
        assert warning.startswith("compatibility: the driver of gpu-node5 is unknown"), warning
        shown = gate_message(run, run.gate).text
        assert "Warnings (not refused" in shown and "gpu-node5" in shown, shown
    finally:
        engine.reject(run.id, actor=BOB)


def test_the_policy_override_moves_the_minimum_or_turns_the_check_off(aged: KubeSim, redis_url: str) -> None:
    """issue 36, item 2: compatibility.min_driver: "550" refuses the release on every node below
    550, naming the policy; "370" lets it past the row's 384 on driver 375; ignore: true lets
    it be requested with no check at all."""
    engine = kubesim_engine(aged, redis_url, policy({"min_driver": "550"}))
    with pytest.raises(Refused, match=r"compatibility\.min_driver of this target in the policy.*gpu-node1, gpu-node2"):
        engine.request_canary(actor=ALICE, target=TARGET, image=RELEASE, node="gpu-node3")
    engine = kubesim_engine(aged, redis_url, policy({"min_driver": "370"}))
    run = engine.request_canary(actor=ALICE, target=TARGET, image=RELEASE, node="gpu-node3").run
    assert run.gate is not None and run.gate.is_open
    engine.reject(run.id, actor=BOB)
    engine = kubesim_engine(aged, redis_url, policy({"ignore": True}))
    run = engine.request_canary(actor=ALICE, target=TARGET, image=RELEASE, node="gpu-node3").run
    assert run.gate is not None and run.gate.is_open and "request_warnings" not in run.progress
    engine.reject(run.id, actor=BOB)


@pytest.mark.parametrize(("image", "said"), [
    (f"{PLUGIN}:v0.17.0-driver550", "is not a release tag NVIDIA device plugin v0.17.x publishes (v0.17.N, "
                                    "v0.17.N-ubi9, per https://github.com/NVIDIA/k8s-device-plugin/blob/v0.17.4/"),
    (f"{PLUGIN}:v0.21.0", "is newer than the compatibility matrix's newest row, NVIDIA device plugin v0.20.x"),
])
def test_a_tag_the_matrix_cannot_judge_is_requested_with_a_warning_saying_why(
        mixed: KubeSim, redis_url: str, image: str, said: str) -> None:
    """issue 58, item 5: kubesim's old -driver550 tag is no build to pick (nor to refuse): the
    request opens, warning that v0.17.x publishes no such tag; v0.21.0, newer than the matrix,
    warns that it was not checked, naming the newest row (v0.20.x); neither is a pass."""
    engine = kubesim_engine(mixed, redis_url, policy())
    run = engine.request_canary(actor=ALICE, target=TARGET, image=image, node="gpu-node3").run
    try:
        assert run.state is RunState.AWAITING_APPROVAL and run.gate is not None
        [warning] = run.progress["request_warnings"]
        assert warning.startswith(f"compatibility: {image} {said}"), warning
        assert "550" not in warning.replace(image, "")
    finally:
        engine.reject(run.id, actor=BOB)


def test_the_shell_refuses_it_with_exit_2(aged: KubeSim, redis_url: str, tmp_path: Path) -> None:
    """issue 36, item 2: ``upgradebot canary … image=…:v0.17.0`` with gpu-node1, gpu-node2 below its
    driver floor exits 2 with the refusal naming them, no traceback, and no run."""
    identities, tokens = shell_identities("U0ALICE", "U0BOB")
    config = tmp_path / "policy.yaml"
    config.write_text(f"approvers: {{users: [U0BOB]}}\nshell: {{approvals: true}}\ntargets: [{TARGET}]\n{identities}")
    base = {k: v for k, v in os.environ.items() if not k.startswith(("KUBE", "UPGRADEBOT", "REDIS"))}
    env = {**base, "HOME": str(tmp_path), "KUBECONFIG": str(aged.kubeconfig), "REDIS_URL": redis_url,
           "UPGRADEBOT_CONFIG": str(config), "UPGRADEBOT_TOKEN": tokens["U0ALICE"]}
    proc = subprocess.run([UPGRADEBOT, "canary", TARGET, f"image={RELEASE}", "node=gpu-node4"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr and "gpu-node1, gpu-node2" in proc.stderr, proc.stderr
    assert "refused before any approver was asked" in proc.stderr
    runs = subprocess.run([UPGRADEBOT, "runs"], capture_output=True, text=True, env=env, timeout=120)
    assert runs.returncode == 0 and "r-" not in runs.stdout, runs.stdout
