"""Issue 58: a canary of a real release fails with that release's own lines, through the bot's
real canary path on kubesim: an unknown MIG strategy (v0.17.0's ``unable to validate flags:
unknown MIG strategy: bogus``, a configuration error), a node without the NVIDIA Container
Toolkit (``Incompatible strategy detected auto`` and the toolkit's fix) and a node whose driver
library and kernel module disagree (NVML's ``Driver/library version mismatch``: the host's fix,
reboot or reload the kernel module, never another plugin build)."""

from __future__ import annotations

from typing import Any

from handlers.runs import parse_canary
from kubesim import KubeSim
from runbooks.cluster import Cluster
from runbooks.engine.approving import Actor
from runbooks.engine.clocks import ClusterClock
from runbooks.engine.runs import Run, RunState
from runbooks.policy import Policy
from tests.engine_support import kubesim_engine
from tests.integration.test_canary_failure_evidence import _canary_thread

NS, DS = "kube-system", "nvidia-device-plugin-daemonset"
TARGET = f"{NS}/{DS}"
V017 = "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"
ALICE, BOB = Actor("U0ALICE"), Actor("U0BOB")
POLICY = Policy.model_validate({
    "approvers": {"users": ["U0BOB"]}, "reports": {"after": []},
    "steps": {"observe_window": "1s", "poll_interval": "0.2s", "ready_timeout": "60s"}, "targets": [TARGET]})


def canary(sim: KubeSim, redis_url: str, words: str, *, host_fault: bool = False
           ) -> tuple[Run, list[dict[str, Any]], dict[str, Any]]:
    """``canary <target> <words>`` as the chat parses it, approved and advanced to its end; the
    run, its audit and its failed ``no-crashloop`` check. On a node with a host fault the previous
    plugin fails there too once the rollback restarts it (as it would on a real node), so the run
    may halt with its rollback unfinished."""
    engine = kubesim_engine(sim, redis_url, POLICY, clock=ClusterClock(Cluster.from_kubeconfig(sim.kubeconfig).server_time))
    args = parse_canary([TARGET, *words.split()])
    run = engine.request_canary(actor=ALICE, target=args.target, image=args.image, node=args.node, edits=args.edits).run
    engine.approve(run.id, actor=BOB)
    run = engine.advance(run.id)
    audit = engine.audit(run.id)
    ends = (RunState.ROLLED_BACK, RunState.FAILED) + ((RunState.HALTED,) if host_fault else ())
    assert run.state in ends, (run.state, run.reason)
    crash = next(e for e in audit if e["name"] == "canary.no-crashloop")
    assert crash["status"] == "failed", crash
    return run, audit, crash


def test_an_unknown_mig_strategy_fails_with_v0_17s_own_line_as_a_configuration_error(redis_url: str) -> None:
    with KubeSim(scenario="gpu-small", k8s_version="1.32", speed=8) as sim:
        run, audit, crash = canary(sim, redis_url, f"image={V017} node=gpu-node1 env=MIG_STRATEGY=bogus")
    tail = crash["evidence"]["log_tail"]
    assert any(line.endswith("main.go:173] error starting plugins: unable to validate flags: unknown MIG strategy: bogus")
               for line in tail), tail
    assert [s["signature"] for s in crash["evidence"]["signatures"]] == ["mig-strategy"]
    assert "'bogus'" in crash["detail"] and "configuration error" in crash["detail"], crash["detail"]
    assert "invalid --mig-strategy option" not in "\n".join(tail)
    thread = _canary_thread(run, audit)
    assert "unknown MIG strategy: bogus" in thread and "configuration error" in thread, thread


def test_a_node_without_the_container_toolkit_fails_with_incompatible_strategy_and_the_toolkit_fix(redis_url: str) -> None:
    with KubeSim(scenario="gpu-small", k8s_version="1.32", speed=8) as sim:
        sim.fault(kind="no-container-toolkit", node="gpu-node1")
        run, audit, crash = canary(sim, redis_url, f"image={V017} node=gpu-node1", host_fault=True)
    tail = crash["evidence"]["log_tail"]
    assert any(line.endswith("factory.go:112] Incompatible strategy detected auto") for line in tail), tail
    assert any(line.endswith("factory.go:113] If this is a GPU node, did you configure the NVIDIA Container Toolkit?")
               for line in tail), tail
    assert any(line.endswith("main.go:173] error starting plugins: error getting plugins: unable to create plugins: "
                             "failed to construct resource managers: invalid device discovery strategy") for line in tail)
    assert [s["signature"] for s in crash["evidence"]["signatures"]] == ["toolkit-not-configured"]
    assert "install and configure the NVIDIA Container Toolkit" in crash["detail"], crash["detail"]
    thread = _canary_thread(run, audit)
    assert "Incompatible strategy detected auto" in thread and "NVIDIA Container Toolkit" in thread, thread


def test_a_node_whose_driver_library_and_module_disagree_fails_with_nvmls_message_and_the_host_fix(redis_url: str) -> None:
    with KubeSim(scenario="gpu-small", k8s_version="1.32", speed=8) as sim:
        sim.fault(kind="driver-mismatch", node="gpu-node2")
        run, audit, crash = canary(sim, redis_url, f"image={V017} node=gpu-node2", host_fault=True)
    tail = crash["evidence"]["log_tail"]
    assert any(line.endswith("factory.go:93] Failed to initialize NVML: Driver/library version mismatch.") for line in tail)
    assert any(line.endswith("main.go:173] error starting plugins: error getting plugins: unable to create plugins: "
                             "failed to construct resource managers: nvml init failed: Driver/library version mismatch")
               for line in tail), tail
    assert [s["signature"] for s in crash["evidence"]["signatures"]] == ["driver-mismatch"]
    assert "reboot it" in crash["detail"] and "reload the nvidia kernel modules" in crash["detail"], crash["detail"]
    assert "plugin build" not in crash["detail"] and "another" not in crash["detail"], crash["detail"]
    thread = _canary_thread(run, audit)
    assert "Driver/library version mismatch" in thread and "fix: drain the node, then reboot it" in thread, thread
