"""A failed canary carries the failure's own words (issue 36, item 4), with the real engine on
kubesim (Kubernetes 1.27, 1.32 and 1.34): a mistyped tag ends the canary at once with the
registry's message; a crash-looping plugin's thread shows its ``--previous`` log lines, last
state and the known signature's meaning and fix; ``:latest`` is refused at request time unless
the policy allows it; a canary that runs shows the digest the registry resolved."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from handlers.run_views import phase_message, phase_of
from kubesim import KubeSim
from runbooks.cluster import Cluster
from runbooks.engine.approving import Actor
from runbooks.engine.clocks import ClusterClock
from runbooks.engine.requesting import InvalidRequest
from runbooks.engine.runs import Run, RunState, Step
from runbooks.policy import Policy
from tests.engine_support import kubesim_engine
from tests.support import TEST_BUILDS

NS, DS = "kube-system", "nvidia-device-plugin-daemonset"
TARGET = f"{NS}/{DS}"
PLUGIN = "nvcr.io/nvidia/k8s-device-plugin"
ALICE, BOB = Actor("U0ALICE"), Actor("U0BOB")


def policy(**extra: Any) -> Policy:
    target = {"namespace": NS, "name": DS, "compatibility": {"ignore": True}}
    return Policy.model_validate({"approvers": {"users": ["U0BOB"]}, "reports": {"after": []},
                                  "steps": {"observe_window": "1s", "poll_interval": "0.2s", "ready_timeout": "300s"},
                                  "targets": [target], **extra})


def _canary_thread(run: Run, entries: list[dict[str, Any]]) -> str:
    steps = [Step.model_validate(e) for e in entries]
    message = phase_message(run, "canary", [s for s in steps if phase_of(run, s) == "canary"])
    return f"{message.title}\n{message.text}"


def _run(sim: KubeSim, redis_url: str, image: str, node: str, pol: Policy | None = None
         ) -> tuple[Run, list[dict[str, Any]]]:
    clock = ClusterClock(Cluster.from_kubeconfig(sim.kubeconfig).server_time)
    engine = kubesim_engine(sim, redis_url, pol or policy(), clock=clock)
    run = engine.request_canary(actor=ALICE, target=TARGET, image=image, node=node).run
    engine.approve(run.id, actor=BOB)
    run = engine.advance(run.id)
    return run, engine.audit(run.id)


def _at(entry: dict[str, Any]) -> dt.datetime:
    return dt.datetime.fromisoformat(str(entry["at"]))


@pytest.mark.parametrize("k8s", ["1.27", "1.32", "1.34"])
def test_a_mistyped_tag_ends_the_canary_at_once_with_the_pull_error(k8s: str, redis_url: str) -> None:
    """Issue 36 item 4: a canary of a tag the registry does not have (v0.17.5: no release) ends
    in under 30 simulated seconds after its pod is deleted (not after ready_timeout, 300 s
    here), failing ``image-pull`` with the reason and containerd's message, shown in the
    canary's thread message; the run is rolled back."""
    image = f"{PLUGIN}:v0.17.5"
    with KubeSim(pushed=TEST_BUILDS, scenario="gpu-small", k8s_version=k8s, speed=4) as sim:
        run, audit = _run(sim, redis_url, image, "gpu-node1")
    assert run.state in (RunState.ROLLED_BACK, RunState.FAILED), (run.state, run.reason)
    deleted = next(e for e in audit if e["name"] == "canary.delete-pod")
    pull = next(e for e in audit if e["name"] == "canary.image-pull")
    assert pull["status"] == "failed" and (_at(pull) - _at(deleted)).total_seconds() < 30, (deleted, pull)
    said = f'failed to pull and unpack image "{image}": failed to resolve reference "{image}": {image}: not found'
    assert pull["evidence"]["reason"] in ("ErrImagePull", "ImagePullBackOff") and said in pull["evidence"]["message"]
    thread = _canary_thread(run, audit)
    assert "the registry said: rpc error: code = NotFound" in thread and said in thread, thread


@pytest.mark.parametrize(("k8s", "image"), [
    ("1.27", "nvcr.io/nvidia/k8s-device-plugn:v0.17.0"),
    ("1.34", f"{PLUGIN}:v0.17.9"),
])
def test_a_mistyped_repository_or_tag_fails_the_canary_in_seconds_with_the_registrys_words(
        k8s: str, image: str, redis_url: str) -> None:
    """Issue 58 Done-when 4: a repository that does not exist (``k8s-device-plugn``) or a tag no
    release has (``v0.17.9``) is not in kubesim's registry: the canary fails ``image-pull`` within
    30 simulated seconds of its pod's deletion (ready_timeout is 300 s), with ErrImagePull (or the
    back-off after it) and containerd's ``not found``, and its thread quotes them."""
    with KubeSim(pushed=TEST_BUILDS, scenario="gpu-small", k8s_version=k8s, speed=4) as sim:
        run, audit = _run(sim, redis_url, image, "gpu-node1")
    assert run.state in (RunState.ROLLED_BACK, RunState.FAILED), (run.state, run.reason)
    deleted = next(e for e in audit if e["name"] == "canary.delete-pod")
    pull = next(e for e in audit if e["name"] == "canary.image-pull")
    assert pull["status"] == "failed" and (_at(pull) - _at(deleted)).total_seconds() < 30, (deleted, pull)
    said = (f'rpc error: code = NotFound desc = failed to pull and unpack image "{image}": failed to resolve '
            f'reference "{image}": {image}: not found')
    assert pull["evidence"]["reason"] in ("ErrImagePull", "ImagePullBackOff") and said in pull["evidence"]["message"]
    thread = _canary_thread(run, audit)
    assert "ErrImagePull" in thread and f"the registry said: {said}" in thread, thread


@pytest.mark.parametrize("k8s", ["1.27", "1.32", "1.34"])
def test_a_crash_looping_canary_shows_its_previous_log_and_the_signatures_fix(k8s: str, redis_url: str) -> None:
    """Issue 36 item 4: v0.17.0 on gpu-node1, whose driver library and kernel module disagree
    (kubesim's host fault ``driver-mismatch``, issue 58), crash-loops; its ``no-crashloop``
    check carries the container's last state (Error, exit code 1), the bounded ``--previous``
    log tail with NVIDIA's lines, and the driver-mismatch signature with its fix; the canary's
    thread message shows the log lines and the fix. Issue 58: the fix is the host's (reboot or
    reload the kernel module), never another plugin build. The old plugin fails on that node
    too once the rollback restarts it, so the run may halt with its rollback unfinished."""
    with KubeSim(scenario="gpu-mixed", k8s_version=k8s, speed=4) as sim:
        sim.fault(kind="driver-mismatch", node="gpu-node1")
        run, audit = _run(sim, redis_url, f"{PLUGIN}:v0.17.0", "gpu-node1",
                          policy(steps={"observe_window": "1s", "poll_interval": "0.2s", "ready_timeout": "60s"}))
    assert run.state in (RunState.ROLLED_BACK, RunState.FAILED, RunState.HALTED), (run.state, run.reason)
    crash = next(e for e in audit if e["name"] == "canary.no-crashloop")
    evidence = crash["evidence"]
    assert evidence["last_state"] == {"reason": "Error", "exit_code": 1}, evidence
    assert any("nvml init failed: Driver/library version mismatch" in line for line in evidence["log_tail"])
    assert len(evidence["log_tail"]) <= 40 and len("\n".join(evidence["log_tail"]).encode()) <= 4096
    names = [s["signature"] for s in evidence["signatures"]]
    assert names == ["driver-mismatch"], names
    assert "the driver was upgraded on the host and the kernel module was not reloaded" in crash["detail"]
    assert "reboot it" in crash["detail"] and "plugin build" not in crash["detail"], crash["detail"]
    thread = _canary_thread(run, audit)
    assert "Last log lines of" in thread and "previous run, exit code 1, Error" in thread, thread
    assert "Failed to initialize NVML: Driver/library version mismatch." in thread
    assert "Known failure (driver-mismatch)" in thread and "fix: drain the node, then reboot it" in thread, thread


def test_a_crash_tag_canary_names_the_fs_watcher_fix(redis_url: str) -> None:
    """Issue 36 item 4, issue 58: kubesim's ``-crash`` build of v0.17.0 exits as that release
    does when it cannot watch the device-plugin directory (inotify's ``too many open files``):
    the thread shows its line and the fs-watcher fix."""
    with KubeSim(pushed=TEST_BUILDS, scenario="gpu-small", k8s_version="1.32", speed=4) as sim:
        run, audit = _run(sim, redis_url, f"{PLUGIN}:v0.17.0-crash", "gpu-node1")
    crash = next(e for e in audit if e["name"] == "canary.no-crashloop")
    assert [s["signature"] for s in crash["evidence"]["signatures"]] == ["fs-watcher"]
    thread = _canary_thread(run, audit)
    assert "main.go:173] failed to create FS watcher for /var/lib/kubelet/device-plugins/: too many open files" in thread
    assert "fix: raise fs.inotify.max_user_instances on the node" in thread, thread


def test_latest_is_refused_unless_the_policy_allows_it_and_the_digest_is_shown(redis_url: str) -> None:
    """Issue 36 item 4: an explicit ``:latest`` is refused at request time, nothing stored;
    with ``images.allow_latest: true`` it is requested, and the canary that runs shows the
    digest the runtime resolved (the pod's ``imageID``) in its thread."""
    image = f"{PLUGIN}:latest"  # NVIDIA's Makefile pushes no :latest: the test pushes its own
    with KubeSim(pushed=[*TEST_BUILDS, image], scenario="gpu-small", k8s_version="1.32", speed=4) as sim:
        engine = kubesim_engine(sim, redis_url, policy())
        with pytest.raises(InvalidRequest, match=r"is tagged latest.*images\.allow_latest: true accepts it"):
            engine.request_canary(actor=ALICE, target=TARGET, image=image, node="gpu-node1")
        assert engine.runs(limit=5) == []
        run, audit = _run(sim, redis_url, image, "gpu-node1", policy(images={"allow_latest": True}))
        ready = next(e for e in audit if e["name"] == "canary.canary-pod-ready")
        digest = ready["evidence"]["image_id"]
        assert ready["status"] == "ok" and digest.startswith(f"{PLUGIN}@sha256:") and len(digest.split(":")[-1]) == 64
        assert digest in _canary_thread(run, audit)
