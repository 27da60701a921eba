"""``upgradebot rbac`` piped to the real ``kubectl apply -f -`` against kubesim is all the bot's
ServiceAccount needs, and without it a request is refused before approval naming the rule
(issue 34, items 2 and 3, first done-when line).

One cluster for the module; the bot acts with a token ``kubectl create token`` minted for its
ServiceAccount; the 403s are counted from kubesim's ``apiserver_request_total{code="403"}``.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from bot.shell.cli import main
from bot.storage.redis_store import RedisRunStore
from handlers import inventory, verify
from kubesim import KubeSim
from runbooks.daemonset.steps import DaemonSetSteps
from runbooks.engine.commands import Engine
from runbooks.engine.refusals import Refused
from runbooks.engine.runs import RunState
from runbooks.policy import Policy
from tests.integration.test_install_rbac import ALICE, BOB, NEW, TARGET, Installed
from tests.support import Kubectl

DRA_TARGET = "dra-example-driver/dra-example-driver-kubeletplugin"
DRA_NEW = "registry.k8s.io/dra-example-driver/dra-example-driver:v0.2.0"
POLICY_DOC = {
    "approvers": {"users": ["U0BOB"]},
    "targets": [TARGET, DRA_TARGET],
    "reports": {"after": ["24h"]},
    "steps": {"observe_window": "1s", "poll_interval": "0.2s", "ready_timeout": "120s", "settle_window": "1s",
              "smoke_test": {"image": "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0", "timeout": 120,
                             "namespace": "upgradebot-smoke"}},
}
POLICY = Policy.model_validate(POLICY_DOC)


@pytest.fixture(scope="module")
def sim() -> Iterator[KubeSim]:
    with KubeSim(scenario="gpu-small", k8s_version="1.32", speed=20) as served:
        admin = Kubectl(served.kubeconfig)
        admin("create", "namespace", "upgradebot")
        admin("create", "namespace", "upgradebot-smoke")
        admin("create", "serviceaccount", "upgradebot", "-n", "upgradebot")
        yield served


def rbac_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """What ``upgradebot rbac`` prints for the policy (the shell's own entry point)."""
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump(POLICY_DOC))
    monkeypatch.setenv("UPGRADEBOT_CONFIG", str(policy))
    out, err = io.StringIO(), io.StringIO()
    assert main(["rbac"], out=out, err=err) == 0, err.getvalue()
    return out.getvalue()


def as_bot(sim: KubeSim, tmp_path: Path) -> Installed:
    admin = Kubectl(sim.kubeconfig)
    token = admin("create", "token", "upgradebot", "-n", "upgradebot").strip()
    config = yaml.safe_load(Path(sim.kubeconfig).read_text())
    config["users"][0]["user"] = {"token": token}
    path = tmp_path / "bot.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return Installed(sim, admin, path)


def engine_as(bot: Installed, redis_url: str) -> Engine:
    return Engine(store=RedisRunStore.from_url(redis_url), steps=DaemonSetSteps(), policy=POLICY, connect=bot.connect)


def test_without_the_dra_watches_a_dra_canary_is_refused_before_approval_naming_the_rule(
        sim: KubeSim, redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 34 item 2: ``upgradebot rbac``'s output applied but for the watch of ResourceSlices and
    ResourceClaims (what the example ClusterRole lacked): a DRA driver's canary is refused when
    requested, before any approver is asked, naming the missing rule and where it belongs. The
    question is a SelfSubjectAccessReview, so the refusal itself costs no 403."""
    objects = list(yaml.safe_load_all(rbac_output(tmp_path, monkeypatch)))
    read = next(o for o in objects if o["kind"] == "ClusterRole" and o["metadata"]["name"] == "upgradebot-read")
    for rule in read["rules"]:
        if "resourceslices" in rule.get("resources", []):
            rule["verbs"] = ["list"]
    Kubectl(sim.kubeconfig)("apply", "-f", "-", input=yaml.safe_dump_all(objects))
    bot = as_bot(sim, tmp_path)
    before = bot.refusals()
    engine = engine_as(bot, redis_url)
    with pytest.raises(Refused) as refused:
        engine.request_canary(actor=ALICE, target=DRA_TARGET, image=DRA_NEW, node="gpu-node1")
    said = str(refused.value)
    assert re.search(r'lacks the rule \{apiGroups: \["resource.k8s.io"\], resources: \[resourceslices\], '
                     r"verbs: \[watch\]\} in its ClusterRole", said), said
    assert engine.request_canary(actor=ALICE, target=TARGET, image=NEW, node="gpu-node1").run.gate is not None
    assert bot.refusals() == before


def test_the_rbac_output_applied_lets_every_verb_run_with_zero_403s(
        sim: KubeSim, redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 34 items 2 and 3: ``upgradebot rbac | kubectl apply -f -`` (the real kubectl) and, as
    the bot's ServiceAccount, inventory, verify of both targets, a device plugin's canary,
    promotion and rollback, and a DRA driver's canary (its watches of claims and slices) run
    without one 403 from the API server."""
    text = rbac_output(tmp_path, monkeypatch)
    applied = Kubectl(sim.kubeconfig)("apply", "-f", "-", input=text)
    assert "role.rbac.authorization.k8s.io/upgradebot-upgrade created" in applied or "configured" in applied, applied
    roles = [o for o in yaml.safe_load_all(text) if o["kind"] == "Role" and o["metadata"]["name"] == "upgradebot-upgrade"]
    assert {r["metadata"]["namespace"] for r in roles} == {"kube-system", "dra-example-driver"}
    bot = as_bot(sim, tmp_path)
    before = bot.refusals()

    found = inventory.handle(inventory.InventoryRequest(), connect=bot.connect, policy=POLICY)
    assert not [f for f in found.findings if "may not" in f.model_dump_json()], found.findings
    for target in (TARGET, DRA_TARGET):
        checked = verify.handle(verify.VerifyRequest(target=target), connect=bot.connect, policy=POLICY)
        assert checked.ok, [(c.name, c.status, c.detail) for c in checked.checks if c.status != "pass"]

    engine = engine_as(bot, redis_url)
    run = engine.request_canary(actor=ALICE, target=TARGET, image=NEW, node="gpu-node1").run
    engine.decide(run.id, actor=BOB, approve=True)
    run = engine.advance(run.id)
    assert run.state is RunState.AWAITING_PROMOTION, run.reason
    engine.decide(run.id, actor=BOB, approve=True)
    run = engine.advance(run.id)
    assert run.state is RunState.MONITORING, run.reason
    engine.rollback(run.id, actor=ALICE, reason="the install walk rolls back")
    engine.decide(run.id, actor=BOB, approve=True)
    assert engine.advance(run.id).state is RunState.ROLLED_BACK

    dra = engine.request_canary(actor=ALICE, target=DRA_TARGET, image=DRA_NEW, node="gpu-node1").run
    engine.decide(dra.id, actor=BOB, approve=True)
    dra = engine.advance(dra.id)
    assert dra.state is RunState.AWAITING_PROMOTION, dra.reason
    assert bot.refusals() == before
