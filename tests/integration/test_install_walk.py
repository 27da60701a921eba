"""``upgradebot rbac`` piped to the real ``kubectl apply -f -`` against kubesim is all the bot's
ServiceAccount needs, and without it a request is refused before approval naming the rule
(issue 34, items 2 and 3, first done-when line).

One cluster for the module, installed as docs/install.md says; the bot acts with a token ``kubectl create token`` minted for its
ServiceAccount; the 403s are counted from kubesim's ``apiserver_request_total{code="403"}``.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from bot.shell.cli import main
from bot.storage.redis_store import RedisRunStore
from handlers import inventory, verify
from kubesim import KubeSim
from runbooks.daemonset.repairing import RepairSteps
from runbooks.daemonset.steps import DaemonSetSteps
from runbooks.dra.migration_run import MigrationSteps
from runbooks.dra.preflight import preflight
from runbooks.engine.commands import Engine
from runbooks.engine.refusals import Refused
from runbooks.engine.runs import RunKind, RunState
from runbooks.errors import ClusterError
from runbooks.policy import Policy
from tests.integration.test_drain_kubesim import apply, cordoned, trainer
from tests.integration.test_install_rbac import (
    ALICE,
    BOB,
    NEW,
    TARGET,
    Installed,
    stuck_after_a_reboot,
)
from tests.integration.test_migration_run import deployment
from tests.support import TEST_BUILDS, Kubectl

DRA_TARGET = "dra-example-driver/dra-example-driver-kubeletplugin"
DRA_NEW = "registry.k8s.io/dra-example-driver/dra-example-driver:v0.2.0"
POLICY_DOC = {
    "approvers": {"users": ["U0BOB"]},
    "targets": [{"namespace": "kube-system", "name": "nvidia-device-plugin-daemonset", "drain": {"timeout": "60s"}},
                DRA_TARGET],
    "migrations": {"namespaces": ["ml-team"]},
    "reports": {"after": ["24h"]},
    "steps": {"observe_window": "1s", "poll_interval": "0.2s", "ready_timeout": "120s", "settle_window": "1s",
              "smoke_test": {"image": "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0", "timeout": 120,
                             "namespace": "upgradebot-smoke"}},
}
POLICY = Policy.model_validate(POLICY_DOC)
OVERLAYS = sorted(p for p in (Path(__file__).resolve().parents[2] / "deploy" / "overlays").iterdir()
                  if (p / "kustomization.yaml").exists())


@pytest.fixture(scope="module")
def sim() -> Iterator[KubeSim]:
    """kubesim with docs/install.md's "Install in your cluster" done, with the real kubectl: the
    namespaces, both Secrets, ``apply -k`` of each overlay (zero errors), the rollouts (the page's
    own commands, verbatim, one mode a cluster: tests/integration/test_install_doc.py)."""
    with KubeSim(pushed=TEST_BUILDS, scenario="gpu-small", k8s_version="1.32", speed=20) as served:
        admin = Kubectl(served.kubeconfig)
        admin("apply", "-f", str(OVERLAYS[0].parents[1] / "base" / "namespaces.yaml"))
        admin("-n", "upgradebot", "create", "secret", "generic", "upgradebot-slack",
              "--from-literal=bot-token=xoxb-walk", "--from-literal=app-token=xapp-walk")
        admin("-n", "upgradebot", "create", "secret", "generic", "upgradebot-redis", "--from-literal=password=walk")
        for overlay in OVERLAYS:
            proc = admin.run("apply", "-k", str(overlay))
            assert proc.returncode == 0 and "error" not in proc.stderr.lower(), proc.stderr
        admin("-n", "upgradebot", "rollout", "status", "deployment/upgradebot", "--timeout=60s", timeout=90)
        admin("-n", "upgradebot", "rollout", "status", "statefulset/upgradebot-redis", "--timeout=60s", timeout=90)
        yield served


def rbac_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """What ``upgradebot rbac repair=ml-team`` prints for the policy (the shell's own entry point):
    the walk's repair deletes a stuck pod in ml-team."""
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump(POLICY_DOC))
    monkeypatch.setenv("UPGRADEBOT_CONFIG", str(policy))
    out, err = io.StringIO(), io.StringIO()
    assert main(["rbac", "repair=ml-team"], out=out, err=err) == 0, err.getvalue()
    return out.getvalue()


def _pod_deletions(text: str) -> set[str]:
    return {o["metadata"]["namespace"] for o in yaml.safe_load_all(text) if o["kind"] == "Role"
            for r in o["rules"] if r.get("resources") == ["pods"] and "delete" in r["verbs"]}


def test_rbac_grants_pod_deletion_for_a_repair_only_where_repair_names(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Attack finding 6: ``upgradebot rbac`` grants what the policy's verbs need: pods delete in
    the targets' namespaces (canary, promote) and the smoke test's, and in ml-team
    (migrations.namespaces) only with ``repair=ml-team`` (docs/operations.md: repair's
    namespaces come from ``repair=``)."""
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump(POLICY_DOC))
    monkeypatch.setenv("UPGRADEBOT_CONFIG", str(policy))
    out, err = io.StringIO(), io.StringIO()
    assert main(["rbac"], out=out, err=err) == 0, err.getvalue()
    assert _pod_deletions(out.getvalue()) == {"kube-system", "dra-example-driver", "upgradebot-smoke"}
    assert _pod_deletions(rbac_output(tmp_path, monkeypatch)) == {"kube-system", "dra-example-driver",
                                                                   "upgradebot-smoke", "ml-team"}


@pytest.mark.parametrize("argument", [f"repair={'a' * 70}", "repair=ml-team,ML-Team", "repair=ml.team",
                                      f"account={'u' * 64}/upgradebot", "account=upgrade.bot/upgradebot"])
def test_rbac_refuses_a_namespace_that_is_no_dns_label(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       argument: str) -> None:
    """Attack finding 6: a namespace is a DNS-1123 label (at most 63 characters, no '.'):
    ``repair=`` and ``account=``'s namespace otherwise exit 2 with one line naming the argument,
    and print no manifest."""
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump(POLICY_DOC))
    monkeypatch.setenv("UPGRADEBOT_CONFIG", str(policy))
    out, err = io.StringIO(), io.StringIO()
    assert main(["rbac", argument], out=out, err=err) == 2
    said = err.getvalue()
    assert out.getvalue() == "" and "Traceback" not in said and "is not a valid Kubernetes name" in said, said
    assert f"{argument.split('=')[0]} namespace" in said.splitlines()[0], said


def as_bot(sim: KubeSim, tmp_path: Path) -> Installed:
    admin = Kubectl(sim.kubeconfig)
    token = admin("create", "token", "upgradebot", "-n", "upgradebot").strip()
    config = yaml.safe_load(Path(sim.kubeconfig).read_text())
    config["users"][0]["user"] = {"token": token}
    path = tmp_path / "bot.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return Installed(sim, admin, path)


def engine_as(bot: Installed, redis_url: str) -> Engine:
    return Engine(store=RedisRunStore.from_url(redis_url), steps=DaemonSetSteps(), policy=POLICY, connect=bot.connect,
                  kinds={RunKind.MIGRATION: MigrationSteps(), RunKind.REPAIR: RepairSteps()})


def approved(engine: Engine, run_id: str) -> RunState:
    engine.decide(run_id, actor=BOB, approve=True)
    return engine.advance(run_id).state


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
    assert bot.refusals() == before
    Kubectl(sim.kubeconfig)("apply", "-f", "-", input=rbac_output(tmp_path, monkeypatch))
    run = engine.request_canary(actor=ALICE, target=DRA_TARGET, image=DRA_NEW, node="gpu-node1").run
    assert run.gate is not None and run.gate.is_open
    engine.decide(run.id, actor=ALICE, approve=False)


def test_the_rbac_output_applied_lets_every_verb_run_with_zero_403s(
        sim: KubeSim, redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 34 items 2 and 3: ``upgradebot rbac | kubectl apply -f -`` (the real kubectl) and, as
    the bot's ServiceAccount, inventory, verify of both targets, a device plugin's canary,
    promotion and rollback, and a DRA driver's canary (its watches of claims and slices) run
    without one 403 from the API server."""
    admin = Kubectl(sim.kubeconfig)
    bare = [p["metadata"]["name"] for p in admin.json("get", "pods", "-n", "ml-team")["items"]
            if not p["metadata"].get("ownerReferences")]  # a drain would refuse them (they would be lost)
    if bare:
        admin("delete", "pods", *bare, "-n", "ml-team", "--wait=false")
    apply(admin, trainer("trainer-3", "gpu-node3"), deployment("trainer", 1))
    for name in ("trainer-3", "trainer"):
        admin("rollout", "status", f"deployment/{name}", "-n", "ml-team", "--timeout=60s", timeout=90)
    text = rbac_output(tmp_path, monkeypatch)
    applied = admin("apply", "-f", "-", input=text)
    assert "upgradebot-upgrade" in applied and "upgradebot-drain" in applied, applied
    roles = [o for o in yaml.safe_load_all(text) if o["kind"] == "Role" and o["metadata"]["name"] == "upgradebot-upgrade"]
    assert {r["metadata"]["namespace"] for r in roles} == {"kube-system", "dra-example-driver"}
    bot = as_bot(sim, tmp_path)
    before = bot.refusals()

    found = inventory.handle(inventory.InventoryRequest(), connect=bot.connect, policy=POLICY)
    assert not [f for f in found.findings if "may not" in f.model_dump_json()], found.findings
    with bot.connect() as cluster:
        checked_upgrade = preflight(cluster, 33)
    assert "may not" not in checked_upgrade.model_dump_json(), checked_upgrade
    for target in (TARGET, DRA_TARGET):
        checked = verify.handle(verify.VerifyRequest(target=target), connect=bot.connect, policy=POLICY)
        assert checked.ok, [(c.name, c.status, c.detail) for c in checked.checks if c.status != "pass"]

    engine = engine_as(bot, redis_url)
    run = engine.request_canary(actor=ALICE, target=TARGET, image=NEW, node="gpu-node3").run
    assert approved(engine, run.id) is RunState.AWAITING_PROMOTION, engine.get(run.id).reason
    assert {e["evidence"]["pod"].split("/")[0] for e in engine.audit(run.id)
            if e["name"] == "canary.drain.evict" and e["status"] == "ok"} == {"ml-team"}
    assert approved(engine, run.id) is RunState.MONITORING, engine.get(run.id).reason
    engine.rollback(run.id, actor=ALICE, reason="the install walk rolls back")
    assert approved(engine, run.id) is RunState.ROLLED_BACK, engine.get(run.id).reason
    assert cordoned(admin) == set()

    dra = engine.request_canary(actor=ALICE, target=DRA_TARGET, image=DRA_NEW, node="gpu-node1").run
    assert approved(engine, dra.id) is RunState.AWAITING_PROMOTION, engine.get(dra.id).reason
    assert approved(engine, dra.id) is RunState.MONITORING, engine.get(dra.id).reason
    engine.rollback(dra.id, actor=ALICE, reason="the install walk rolls the DRA driver back")
    assert approved(engine, dra.id) is RunState.ROLLED_BACK, engine.get(dra.id).reason

    migration = engine.request_migration(actor=ALICE, namespace="ml-team", name="trainer").run
    assert approved(engine, migration.id) is RunState.DONE, engine.get(migration.id).reason

    stuck_after_a_reboot(sim)  # after a node reboot its pod is stuck: a repair deletes it
    repair = engine.request_repair(actor=ALICE, target=TARGET).run
    assert approved(engine, repair.id) is RunState.DONE, engine.get(repair.id).reason
    assert bot.refusals() == before


def _said(call: Callable[[], Any]) -> str:
    try:
        result = call()
    except (ClusterError, Refused) as exc:
        return str(exc)
    return result.model_dump_json() if hasattr(result, "model_dump_json") else str(result)


def test_without_the_rbac_output_each_verb_is_refused_at_request_time_naming_the_rule(
        sim: KubeSim, redis_url: str, tmp_path: Path) -> None:
    """Issue 34 done-when: a ServiceAccount none of ``upgradebot rbac``'s output is bound to gets, for
    inventory, preflight, verify, a device plugin's and a DRA driver's canary, apply-migration and
    repair, an answer naming a missing rule (``its RBAC lacks the rule {...} in ...``), and no run
    is stored: nothing waits for an approver."""
    admin = Kubectl(sim.kubeconfig)
    admin("create", "serviceaccount", "nobody", "-n", "upgradebot")
    token = admin("create", "token", "nobody", "-n", "upgradebot").strip()
    config = yaml.safe_load(Path(sim.kubeconfig).read_text())
    config["users"][0]["user"] = {"token": token}
    path = tmp_path / "nobody.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    bot = Installed(sim, admin, path)
    engine = engine_as(bot, redis_url)
    stored = len(engine.store.list_runs(limit=1000))

    def upgrade_check() -> Any:
        with bot.connect() as cluster:
            return preflight(cluster, 33)

    verbs: dict[str, Callable[[], Any]] = {
        "inventory": lambda: inventory.handle(inventory.InventoryRequest(), connect=bot.connect, policy=POLICY),
        "preflight": upgrade_check,
        "verify": lambda: verify.handle(verify.VerifyRequest(target=TARGET), connect=bot.connect, policy=POLICY),
        "canary": lambda: engine.request_canary(actor=ALICE, target=TARGET, image=NEW, node="gpu-node3"),
        "dra canary": lambda: engine.request_canary(actor=ALICE, target=DRA_TARGET, image=DRA_NEW, node="gpu-node1"),
        "apply-migration": lambda: engine.request_migration(actor=ALICE, namespace="ml-team", name="trainer"),
        "repair": lambda: engine.request_repair(actor=ALICE, target=TARGET),
    }
    rule = re.compile(r"may not \w+ .*its RBAC lacks the rule \{(apiGroups|nonResourceURLs): .*\} in "
                      r"(its ClusterRole|a Role of namespace [a-z0-9-]+)")
    unnamed = {verb: said[:300] for verb, call in verbs.items() if not rule.search(said := _said(call))}
    assert unnamed == {}, unnamed
    assert len(engine.store.list_runs(limit=1000)) == stored
