"""Digests pinned (issue 61, deliverable 1), whole runs on kubesim with the real steps, kubectl as
the referee: the promotion writes ``repository@sha256:…`` as the canary's pod pulled it; a tag
pushed again after the canary is shown in the promotion request beside the verified digest and
refuses the promotion; a new canary pins the new digest on every node; a rollback writes back the
digests the pods ran before the run; ``images.pin_digest: false`` keeps the tag."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from handlers.run_views import gate_message
from kubesim import KubeSim
from kubesim.certs import serving_cert
from runbooks.engine.commands import Engine
from runbooks.engine.refusals import Refused
from runbooks.engine.runs import RunState
from runbooks.policy import Policy
from tests.engine_support import ALICE, BOB, CAROL, kubesim_engine
from tests.support import Kubectl

S = RunState
TARGET = "kube-system/nvidia-device-plugin-daemonset"
PLUGIN = "nvcr.io/nvidia/k8s-device-plugin"
OLD, NEW = f"{PLUGIN}:v0.14.2", f"{PLUGIN}:v0.17.0"
NODES = ("gpu-node1", "gpu-node2", "gpu-node3")


def policy_for(sim: KubeSim, tmp_path: Path, **images: Any) -> Policy:
    """The policy with kubesim's registry as the mirror of nvcr.io (its CA written beside)."""
    ca = tmp_path / "kubesim-ca.pem"
    ca.write_bytes(serving_cert().ca_pem)
    return Policy.model_validate({
        "approvers": {"users": ["U0BOB", "U0CAROL"]},
        "reports": {"after": ["24h"]},
        "steps": {"observe_window": "1s", "poll_interval": "0.1s", "ready_timeout": "60s"},
        "images": {"mirrors": {"nvcr.io": {"url": sim.url, "ca_file": str(ca)}}, **images},
    })


def digest(sim: KubeSim, image: str) -> str:
    """What ``image``'s tag resolves to in kubesim's registry now."""
    found = sim.call(lambda s: s.registry.resolve(image))
    assert found
    return str(found)


def plugin_pods(sim: KubeSim) -> dict[str, tuple[str, str]]:
    """node -> (the image its plugin pod's spec names, the imageID it reports), as kubectl sees them."""
    pods = Kubectl(sim.kubeconfig).json("get", "pods", "-n", "kube-system")["items"]
    return {p["spec"]["nodeName"]: (p["spec"]["containers"][0]["image"],
                                    (p["status"].get("containerStatuses") or [{}])[0].get("imageID", ""))
            for p in pods if p["metadata"]["name"].startswith("nvidia-device-plugin-daemonset-")
            and not p["metadata"].get("deletionTimestamp")}


def canary_passed(engine: Engine) -> str:
    run = engine.request_canary(actor=ALICE, target=TARGET, image=NEW, node="gpu-node1").run
    engine.approve(run.id, actor=BOB)
    run = engine.advance(run.id)
    assert run.state is S.AWAITING_PROMOTION, run.reason
    return run.id


def test_a_tag_pushed_again_refuses_the_promotion_and_a_new_canary_pins_the_new_digest(
        sim: KubeSim, redis_url: str, tmp_path: Path) -> None:
    """A canary approved and passed; the tag pushed again with other content: the promotion request
    shows the tag, the verified digest and the tag's digest now, and its approval is refused (nothing
    promoted); rejected, the canary is rolled back to the saved template. Requested
    again, the canary verifies the new digest and the promotion pins it: every node's pod spec names
    ``repository@sha256:<new>``, not the tag, and runs it."""
    engine = kubesim_engine(sim, redis_url, policy_for(sim, tmp_path))
    old_digest, verified = digest(sim, OLD), digest(sim, NEW)
    assert {n: image for n, (image, _) in plugin_pods(sim).items()} == dict.fromkeys(NODES, OLD)
    run_id = canary_passed(engine)
    shown = engine.get(run_id).progress["digests"]
    assert (shown["tag"], shown["verified"], shown["now"]) == (NEW, verified, verified)

    sim.push(NEW)  # the tag rebuilt: another digest
    rebuilt = digest(sim, NEW)
    assert rebuilt != verified
    engine.promote(run_id, actor=ALICE)  # the request posted again reads the tag's digest now
    run = engine.get(run_id)
    assert run.gate is not None
    text = gate_message(run, run.gate).text
    assert NEW in text and verified in text and rebuilt in text, text
    with pytest.raises(Refused, match=f"now resolves to {rebuilt}, not to {verified}"):
        engine.approve(run_id, actor=CAROL)
    assert engine.get(run_id).state is S.AWAITING_PROMOTION
    assert plugin_pods(sim)["gpu-node2"] == (OLD, f"{PLUGIN}@{old_digest}")  # nothing promoted

    engine.reject(run_id, actor=CAROL)
    run = engine.advance(run_id)
    assert run.state is S.ROLLED_BACK, run.reason  # a canary's rollback: the exact saved template
    assert {n: image for n, (image, _) in plugin_pods(sim).items()} == dict.fromkeys(NODES, OLD)

    again = canary_passed(engine)
    assert engine.get(again).progress["digests"]["verified"] == rebuilt
    engine.approve(again, actor=CAROL)
    run = engine.advance(again)
    assert run.state is S.MONITORING, run.reason
    assert plugin_pods(sim) == dict.fromkeys(NODES, (f"{PLUGIN}@{rebuilt}",) * 2)


def test_a_rollback_writes_back_the_digests_the_pods_ran_before_the_run(
        sim: KubeSim, redis_url: str, tmp_path: Path) -> None:
    """The old tag pushed again before the run: the pods still run its first digest. A promoted run
    rolled back writes that digest back (saved from the pods' imageIDs before the canary), not the
    tag, which would pull the rebuilt one."""
    engine = kubesim_engine(sim, redis_url, policy_for(sim, tmp_path))
    ran = digest(sim, OLD)
    sim.push(OLD)
    assert digest(sim, OLD) != ran
    run_id = canary_passed(engine)
    assert engine.get(run_id).progress["pre_run_digests"] == {n: {"nvidia-device-plugin-ctr": f"{PLUGIN}@{ran}"}
                                                            for n in NODES}
    engine.approve(run_id, actor=CAROL)
    assert engine.advance(run_id).state is S.MONITORING
    assert plugin_pods(sim) == dict.fromkeys(NODES, (f"{PLUGIN}@{digest(sim, NEW)}",) * 2)
    engine.rollback(run_id, actor=ALICE, reason="back to what ran")
    engine.approve(run_id, actor=BOB)
    run = engine.advance(run_id)
    assert run.state is S.ROLLED_BACK, run.reason
    assert plugin_pods(sim) == dict.fromkeys(NODES, (f"{PLUGIN}@{ran}",) * 2)


def test_without_pin_digest_the_tag_is_promoted_and_restored(sim: KubeSim, redis_url: str, tmp_path: Path) -> None:
    """``images.pin_digest: false``: the promotion writes the tag, a tag pushed again refuses nothing,
    and the rollback writes the tag back, as before."""
    engine = kubesim_engine(sim, redis_url, policy_for(sim, tmp_path, pin_digest=False))
    run_id = canary_passed(engine)
    assert "digests" not in engine.get(run_id).progress
    sim.push(NEW)
    engine.approve(run_id, actor=CAROL)
    assert engine.advance(run_id).state is S.MONITORING
    assert {n: image for n, (image, _) in plugin_pods(sim).items()} == dict.fromkeys(NODES, NEW)
    engine.rollback(run_id, actor=ALICE, reason="back")
    engine.approve(run_id, actor=BOB)
    assert engine.advance(run_id).state is S.ROLLED_BACK
    assert {n: image for n, (image, _) in plugin_pods(sim).items()} == dict.fromkeys(NODES, OLD)
