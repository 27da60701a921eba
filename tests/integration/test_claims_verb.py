"""``claims`` (issue 38 item 4): the broken ResourceClaims of a cluster, each with why and the
fix, read-only; on kubesim's ``dra-broken-claims`` scenario, where they are planted beside
healthy ones, through the runbook and through the shell as a pipeline runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubesim import KubeSim
from runbooks.cluster import Cluster
from runbooks.dra.claims import broken_claims
from tests.support import Kubectl

UPGRADEBOT = str(Path(sys.executable).parent / "upgradebot")
PLANTED = {
    ("ml-team", "orphaned-gpu"): ("reserved-for-missing-pods", True),
    ("ml-team", "stranded-gpu"): ("driver-gone", True),
    ("ml-team", "pending-gpu"): ("pending-without-pod", True),
    ("ml-team", "stuck-gpu"): ("terminating-stuck", False),
}


@pytest.fixture(scope="module", params=[32, 34], ids=lambda m: f"1.{m}")
def sim(request: pytest.FixtureRequest) -> Iterator[KubeSim]:
    with KubeSim(scenario="dra-broken-claims", k8s_version=f"1.{request.param}") as running:
        yield running


def _claims(kubectl: Kubectl) -> dict[str, str]:
    return {c["metadata"]["name"]: c["metadata"]["resourceVersion"]
            for c in kubectl.json("get", "resourceclaims", "-A")["items"]}


def test_claims_lists_exactly_the_planted_broken_claims(sim: KubeSim) -> None:
    """Issue 38 item 4: each planted broken claim is listed once with its reason, its fix and the
    uid and resourceVersion it was read at; the healthy claim (shared-gpu, reserved by its
    running pod) is not; nothing on the cluster changes."""
    kubectl = Kubectl(sim.kubeconfig)
    before = _claims(kubectl)
    report = broken_claims(Cluster.from_kubeconfig(sim.kubeconfig))
    assert {(b.namespace, b.name): (b.reason, b.deletable) for b in report.broken} == PLANTED
    assert report.checked == len(before) == 5 and "shared-gpu" in before
    live = {c["metadata"]["name"]: c["metadata"] for c in kubectl.json("get", "resourceclaims", "-A")["items"]}
    for broken in report.broken:
        assert (broken.uid, broken.resource_version) == (live[broken.name]["uid"], live[broken.name]["resourceVersion"])
        assert broken.fix
    by_name = {b.name: b for b in report.broken}
    assert "batch-7" in by_name["orphaned-gpu"].detail
    assert "cpu-node1" in by_name["stranded-gpu"].detail
    assert "kubectl patch resourceclaim stuck-gpu -n ml-team" in by_name["stuck-gpu"].fix
    assert _claims(kubectl) == before


def test_a_claim_whose_pod_is_deleted_properly_is_not_broken(sim: KubeSim) -> None:
    """A pod deleted the normal way releases its claim (the resourceclaim controller drops the
    reservation): the claim is not listed as reserved for a missing pod."""
    kubectl = Kubectl(sim.kubeconfig)
    report = broken_claims(Cluster.from_kubeconfig(sim.kubeconfig))
    assert "shared-gpu" not in {b.name for b in report.broken}
    assert kubectl.json("get", "resourceclaim", "shared-gpu", "-n", "ml-team")["status"]["reservedFor"]


def test_shell_claims_prints_reasons_and_exits_1(sim: KubeSim, tmp_path: Path) -> None:
    """``upgradebot claims`` from a shell: a table naming each broken claim and its reason, exit 1
    (something is broken); ``--json`` the same list for pipelines."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBE", "UPGRADEBOT"))}
    env.update(HOME=str(tmp_path), KUBECONFIG=str(sim.kubeconfig))
    text = subprocess.run([UPGRADEBOT, "claims"], capture_output=True, text=True, env=env, timeout=60)
    assert text.returncode == 1, text.stderr
    for (_, name), (reason, _) in PLANTED.items():
        assert f"ml-team/{name}" in text.stdout and reason in text.stdout
    assert "shared-gpu" not in text.stdout
    data = subprocess.run([UPGRADEBOT, "claims", "--json"], capture_output=True, text=True, env=env, timeout=60)
    assert data.returncode == 1, data.stderr
    assert {(b["namespace"], b["name"]) for b in json.loads(data.stdout)["broken"]} == set(PLANTED)
    bad = subprocess.run([UPGRADEBOT, "claims", "everything"], capture_output=True, text=True, env=env, timeout=60)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


def test_console_claims_and_a_cleanup_request(sim: KubeSim, redis_url: str, tmp_path: Path) -> None:
    """In the console as a person types it: ``claims`` lists the broken claims with their fixes,
    ``cleanup-claims`` opens a request showing what it would delete, and nothing is deleted."""
    import pwd
    import sys

    import yaml

    policy = tmp_path / "policy.yaml"
    me = pwd.getpwuid(os.geteuid()).pw_name
    policy.write_text(yaml.safe_dump({"approvers": {"users": ["U0ALICE", "U0BOB"]}, "reports": {"after": []},
                                      "identities": {"accounts": {me: "U0ALICE"}}}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBE", "UPGRADEBOT", "SLACK", "REDIS"))}
    env.update(HOME=str(tmp_path), KUBECONFIG=str(sim.kubeconfig), REDIS_URL=redis_url, UPGRADEBOT_CONFIG=str(policy))
    before = _claims(Kubectl(sim.kubeconfig))
    proc = subprocess.run([sys.executable, "-m", "bot", "console"], input="claims\ncleanup-claims\n/quit\n",
                          text=True, capture_output=True, timeout=90, env=env)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "4 broken ResourceClaim(s); 3 of them `cleanup-claims` would delete" in out, out
    assert "ml-team/orphaned-gpu" in out and "kubectl patch resourceclaim stuck-gpu" in out
    assert "clean up the broken ResourceClaims of kubesim: delete 3 broken ResourceClaims as listed" in out, out
    assert "[1] Approve  [2] Reject" in out
    assert _claims(Kubectl(sim.kubeconfig)) == before
