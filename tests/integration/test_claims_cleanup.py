"""``cleanup-claims`` (issue 38 item 4): an approved run that deletes exactly the broken
ResourceClaims ``claims`` listed, each only as listed (a delete precondition on the uid and
resourceVersion read at request time), on kubesim's ``dra-broken-claims``; kubesim's log of
mutating requests referees what was written."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from bot.storage.redis_store import RedisRunStore
from kubesim import KubeSim
from runbooks.cluster import Cluster
from runbooks.daemonset.steps import DaemonSetSteps
from runbooks.dra.claim_cleanup import ClaimCleanupSteps
from runbooks.dra.claims import broken_claims
from runbooks.engine.commands import Engine
from runbooks.engine.refusals import Refused
from runbooks.engine.runs import GateKind, RunKind, RunState
from tests.engine_support import ALICE, BOB, policy
from tests.support import Kubectl

DELETABLE = {"orphaned-gpu", "stranded-gpu", "pending-gpu"}


@pytest.fixture(params=[32, 34], ids=lambda m: f"1.{m}")
def sim(request: pytest.FixtureRequest) -> Iterator[KubeSim]:
    with KubeSim(scenario="dra-broken-claims", k8s_version=f"1.{request.param}", speed=20.0) as running:
        yield running


def engine_on(sim: KubeSim, redis_url: str) -> Engine:
    return Engine(store=RedisRunStore.from_url(redis_url), steps=DaemonSetSteps(),
                  policy=policy(steps={"ready_timeout": "30s", "poll_interval": "1s"}),
                  connect=lambda context: Cluster.from_kubeconfig(sim.kubeconfig, context),
                  kinds={RunKind.CLEANUP: ClaimCleanupSteps()})


def _writes(sim: KubeSim, start: int) -> list[tuple[str, str, bool, int]]:
    """(verb, object name, dry run, answer) of each mutating request since ``start``."""
    return [(m["verb"], m["path"].rsplit("/", 1)[-1], m["dryRun"], m["code"]) for m in sim.mutations()[start:]]


def test_cleanup_deletes_exactly_the_listed_claims_once_a_second_person_approves(sim: KubeSim, redis_url: str) -> None:
    """Issue 38 item 4: the request lists the broken claims and writes nothing (but the server's
    dry runs); the requester cannot approve it; once another person approves, exactly the
    listed claims are deleted, each once, with its listed uid and resourceVersion as the
    preconditions; the terminating claim is listed only and the healthy one untouched."""
    kubectl = Kubectl(sim.kubeconfig)
    engine = engine_on(sim, redis_url)
    start = len(sim.mutations())
    run = engine.request_cleanup(actor=ALICE).run
    assert run.kind is RunKind.CLEANUP and run.state is RunState.AWAITING_APPROVAL
    assert run.gate is not None and run.gate.kind is GateKind.CLEANUP
    assert {c["name"] for c in run.change["delete"]} == DELETABLE
    assert [c["name"] for c in run.change["listed"]] == ["stuck-gpu"]
    assert sorted(_writes(sim, start)) == [("delete", n, True, 200) for n in sorted(DELETABLE)]  # dry runs only
    assert set(kubectl("get", "resourceclaims", "-n", "ml-team", "-o", "name").split()) >= {
        f"resourceclaim.resource.k8s.io/{n}" for n in DELETABLE}
    with pytest.raises(Refused):
        engine.decide(run.id, actor=ALICE, approve=True, kind=GateKind.CLEANUP)
    start = len(sim.mutations())
    engine.decide(run.id, actor=BOB, approve=True, kind=GateKind.CLEANUP)
    done = engine.advance(run.id)
    assert done.state is RunState.DONE, done.reason
    assert "3 broken ResourceClaims deleted as listed" in done.reason
    assert sorted(_writes(sim, start)) == [("delete", n, False, 200) for n in sorted(DELETABLE)]
    left = {c["metadata"]["name"]: c["metadata"] for c in kubectl.json("get", "resourceclaims", "-A")["items"]}
    assert "shared-gpu" in left and not left["shared-gpu"].get("deletionTimestamp")
    for name in DELETABLE:  # gone, or held by the allocation's finalizer until the controller releases it
        assert name not in left or left[name].get("deletionTimestamp"), name
    audit = engine.audit(run.id)
    deleted = [e for e in audit if e["name"] == "cleanup.delete-claim" and e["status"] == "ok"]
    listed = {c["name"]: c for c in run.change["delete"]}
    assert {(e["evidence"]["uid"], e["evidence"]["resource_version"]) for e in deleted} == {
        (c["uid"], c["resource_version"]) for c in listed.values()}


def test_a_claim_changed_after_approval_is_not_deleted_and_is_reported(sim: KubeSim, redis_url: str) -> None:
    """Issue 38 item 4: a listed claim that changed between the request and the deletion (here
    labelled by someone) has another resourceVersion: the API server refuses the delete on its
    precondition, the claim stays, and the run says so; the others are deleted."""
    kubectl = Kubectl(sim.kubeconfig)
    engine = engine_on(sim, redis_url)
    run = engine.request_cleanup(actor=ALICE).run
    kubectl("label", "resourceclaim", "pending-gpu", "-n", "ml-team", "team=keeps-it")
    start = len(sim.mutations())
    engine.decide(run.id, actor=BOB, approve=True, kind=GateKind.CLEANUP)
    done = engine.advance(run.id)
    assert done.state is RunState.DONE, done.reason
    assert "not deleted, changed since listed: ml-team/pending-gpu" in done.reason
    assert sorted(_writes(sim, start)) == [("delete", "orphaned-gpu", False, 200), ("delete", "pending-gpu", False, 409),
                                           ("delete", "stranded-gpu", False, 200)]
    kept = kubectl.json("get", "resourceclaim", "pending-gpu", "-n", "ml-team")
    assert kept["metadata"]["labels"]["team"] == "keeps-it" and not kept["metadata"].get("deletionTimestamp")
    audit = engine.audit(run.id)
    assert any(e["name"] == "cleanup.delete-claim" and e["status"] == "skipped" and "pending-gpu" in e["detail"]
               for e in audit)


def test_nothing_to_clean_is_refused_and_stores_nothing(redis_url: str) -> None:
    """On gpu-small only pending-gpu is broken; once it is gone a cleanup request is refused in
    one sentence, and no run is stored."""
    with KubeSim(scenario="gpu-small", k8s_version="1.32") as small:
        Kubectl(small.kubeconfig)("delete", "resourceclaim", "pending-gpu", "-n", "ml-team")
        engine = engine_on(small, redis_url)
        before = [r.id for r in engine.runs()]
        with pytest.raises(Refused, match="no broken ResourceClaim to delete"):
            engine.request_cleanup(actor=ALICE)
        assert [r.id for r in engine.runs()] == before


def test_the_cleanup_example_lets_the_bot_delete_the_claims_with_zero_403s(redis_url: str, tmp_path: Path) -> None:
    """As the install's ServiceAccount: alone, a cleanup request is refused before anyone
    approves, naming the missing rule (the dry-run deletion is authorized like the deletion);
    with ``deploy/examples/cleanup-claims.yaml`` beside it, the cleanup runs with no 403."""
    from tests.integration.test_install_rbac import ROOT, install, rendered_rbac

    with KubeSim(scenario="dra-broken-claims", k8s_version="1.34") as broken:
        (tmp_path / "bare").mkdir()
        (tmp_path / "with-example").mkdir()
        bare = install(broken, tmp_path / "bare", rendered_rbac())
        kinds = {RunKind.CLEANUP: ClaimCleanupSteps()}
        engine = Engine(store=RedisRunStore.from_url(redis_url), steps=DaemonSetSteps(), policy=policy(),
                        connect=bare.connect, kinds=kinds)
        with pytest.raises(Refused, match=re.escape("resources: [resourceclaims], verbs: [delete]")):
            engine.request_cleanup(actor=ALICE)
        example = list(yaml.safe_load_all((ROOT / "deploy" / "examples" / "cleanup-claims.yaml").read_text()))
        bot = install(broken, tmp_path / "with-example", [*rendered_rbac(), *example])
        before = bot.refusals()
        engine = Engine(store=RedisRunStore.from_url(redis_url), steps=DaemonSetSteps(),
                        policy=policy(steps={"ready_timeout": "30s", "poll_interval": "1s"}), connect=bot.connect,
                        kinds=kinds)
        run = engine.request_cleanup(actor=ALICE).run
        engine.decide(run.id, actor=BOB, approve=True, kind=GateKind.CLEANUP)
        assert engine.advance(run.id).state is RunState.DONE
        assert bot.refusals() == before


def test_shell_cleanup_claims_approved_by_another_person(redis_url: str, tmp_path: Path) -> None:
    """From the shell, as a pipeline runs it: ``claims`` lists, ``cleanup-claims`` opens the run
    (nothing deleted), the requester's own approval is refused, ``approve <run> cleanup`` by an
    approver deletes the listed claims and ``claims`` then lists only the terminating one."""
    import json
    import os
    import subprocess

    from tests.integration.test_run_cli import POLICY, TOKENS, UPGRADEBOT

    def bot(*args: str, who: str = "U0ALICE") -> subprocess.CompletedProcess[str]:
        return subprocess.run([UPGRADEBOT, *args], capture_output=True, text=True, timeout=120,
                              env={**env, "UPGRADEBOT_TOKEN": TOKENS[who]})

    with KubeSim(scenario="dra-broken-claims", k8s_version="1.32", speed=20.0) as broken:
        (tmp_path / "policy.yaml").write_text(POLICY)
        env = {**{k: v for k, v in os.environ.items() if not k.startswith(("KUBE", "UPGRADEBOT", "REDIS"))},
               "HOME": str(tmp_path), "KUBECONFIG": str(broken.kubeconfig), "REDIS_URL": redis_url,
               "UPGRADEBOT_CONFIG": str(tmp_path / "policy.yaml")}
        proc = bot("cleanup-claims", "--json")
        assert proc.returncode == 0, proc.stderr
        run = json.loads(proc.stdout)
        assert (run["kind"], run["state"], run["gate"]["kind"]) == ("cleanup", "awaiting_approval", "cleanup")
        start = len(broken.mutations())
        mine = bot("approve", run["id"], "cleanup")
        assert mine.returncode == 2 and "another approver must approve it" in mine.stderr, mine.stderr
        assert broken.mutations()[start:] == []
        proc = bot("approve", run["id"], "cleanup", who="U0BOB")
        assert proc.returncode == 0, proc.stderr
        assert f"{run['id']} done" in proc.stdout, proc.stdout
        left = json.loads(bot("claims", "--json").stdout)["broken"]
        assert [(b["name"], b["reason"]) for b in left] == [("stuck-gpu", "terminating-stuck")]


def _reserve(kubectl: Kubectl, claim: str, *holders: dict[str, str]) -> None:
    """Add ``holders`` to the claim's ``status.reservedFor`` (as a scheduler would, or one that left a stale entry)."""
    now = kubectl.json("get", "resourceclaim", claim, "-n", "ml-team")["status"].get("reservedFor") or []
    body = {"status": {"reservedFor": [*now, *({"resource": "pods", **h} for h in holders)]}}
    kubectl("patch", "resourceclaim", claim, "-n", "ml-team", "--subresource=status", "--type=merge",
            "-p", json.dumps(body))


def test_a_claim_with_a_live_holder_and_a_gone_one_is_shown_with_its_holder_and_kept(
        sim: KubeSim, redis_url: str) -> None:
    """Attack finding 2: shared-gpu, reserved for the running inference-0 AND for a pod that is
    gone, is listed (reserved for a missing pod) but kept: ``claims`` does not count it as one
    cleanup-claims deletes, names its live holder, and the request lists it only, naming
    inference-0 for the approver; after approval no delete of it is ever sent."""
    from handlers.claims import summarize
    from handlers.run_views import gate_message

    kubectl = Kubectl(sim.kubeconfig)
    _reserve(kubectl, "shared-gpu", {"name": "batch-9", "uid": str(uuid.uuid4())})
    report = broken_claims(Cluster.from_kubeconfig(sim.kubeconfig))
    shared = next(b for b in report.broken if b.name == "shared-gpu")
    assert (shared.reason, shared.deletable, shared.holders) == ("reserved-for-missing-pods", False, ["inference-0"])
    assert "inference-0" in shared.detail and "batch-9" in shared.detail
    assert "3 of them `cleanup-claims` would delete" in summarize(report).text
    engine = engine_on(sim, redis_url)
    run = engine.request_cleanup(actor=ALICE).run
    assert {c["name"] for c in run.change["delete"]} == DELETABLE
    assert {c["name"]: c["holders"] for c in run.change["listed"]} == {"stuck-gpu": [], "shared-gpu": ["inference-0"]}
    assert run.gate is not None
    shown = gate_message(run, run.gate).text + " ".join(f.value for f in gate_message(run, run.gate).fields)
    assert "ml-team/shared-gpu" in shown and "inference-0" in shown, shown
    start = len(sim.mutations())
    engine.decide(run.id, actor=BOB, approve=True, kind=GateKind.CLEANUP)
    assert engine.advance(run.id).state is RunState.DONE
    assert "shared-gpu" not in {name for _, name, _, _ in _writes(sim, start)}
    kept = kubectl.json("get", "resourceclaim", "shared-gpu", "-n", "ml-team")
    assert not kept["metadata"].get("deletionTimestamp")


def test_a_holder_that_appears_after_approval_keeps_the_claim_at_deletion_time(sim: KubeSim, redis_url: str) -> None:
    """Attack finding 2: orphaned-gpu is listed for deletion (its only holder is gone); before
    the deletion the running inference-0 is reserved on it too. The run re-reads the claim and
    its pods before each delete: it sends no delete for it and says which live pod holds it."""
    kubectl = Kubectl(sim.kubeconfig)
    engine = engine_on(sim, redis_url)
    run = engine.request_cleanup(actor=ALICE).run
    assert "orphaned-gpu" in {c["name"] for c in run.change["delete"]}
    pod = kubectl.json("get", "pod", "inference-0", "-n", "ml-team")
    _reserve(kubectl, "orphaned-gpu", {"name": "inference-0", "uid": pod["metadata"]["uid"]})
    start = len(sim.mutations())
    engine.decide(run.id, actor=BOB, approve=True, kind=GateKind.CLEANUP)
    done = engine.advance(run.id)
    assert done.state is RunState.DONE, done.reason
    assert sorted(_writes(sim, start)) == [("delete", "pending-gpu", False, 200), ("delete", "stranded-gpu", False, 200)]
    assert "kept, in use by a live pod: ml-team/orphaned-gpu (inference-0)" in done.reason, done.reason
    assert not kubectl.json("get", "resourceclaim", "orphaned-gpu", "-n", "ml-team")["metadata"].get("deletionTimestamp")
