"""The install's RBAC, applied to kubesim with the real kubectl, is exactly what the bot needs.

The rendered overlay (``kubectl kustomize deploy/overlays/socket-mode``) gives the bot's
ServiceAccount, its read-only ClusterRole, the Role of the target's namespace and the
smoke test's namespace and Role. Applied with ``kubectl apply -k`` (kubesim serves RBAC, not
the Deployment's neighbours: StatefulSet, Service, NetworkPolicy…), a token minted for the
ServiceAccount (``kubectl create token``) runs every runbook: inventory, canary (with the
smoke test), verify, promote, the stability report with its event collector, and
rollback, with zero 403s. Then each rule is taken away in turn: the runbook that needs it
stops, and what it says names the missing rule (never a silent pass).
"""

from __future__ import annotations

import datetime as dt
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from bot.storage.redis_store import RedisRunStore
from handlers import inventory, verify
from kubesim import KubeSim
from runbooks.cluster import Cluster
from runbooks.daemonset.steps import DaemonSetSteps
from runbooks.engine.approving import Actor
from runbooks.engine.commands import Engine
from runbooks.engine.runs import RunState
from runbooks.errors import ClusterError
from runbooks.policy import Policy
from runbooks.stability.collecting import Collector
from runbooks.stability.reporting import report_of, scope_of
from tests.support import TEST_BUILDS, Kubectl, kustomize

ROOT = Path(__file__).resolve().parents[2]
TARGET = "kube-system/nvidia-device-plugin-daemonset"
DRA_TARGET = "dra-example-driver/dra-example-driver-kubeletplugin"
NEW = "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"
RBAC_KINDS = {"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
ALICE, BOB = Actor("U0ALICE"), Actor("U0BOB")
POLICY = Policy.model_validate({
    "approvers": {"users": ["U0BOB"]},
    "targets": [TARGET],
    "reports": {"after": ["24h"]},
    "steps": {"observe_window": "1s", "poll_interval": "0.2s", "ready_timeout": "120s", "settle_window": "1s",
              "smoke_test": {"image": "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0", "timeout": 120,
                             "namespace": "upgradebot-smoke"}},
})


def rendered_rbac(overlay: str = "socket-mode") -> list[dict[str, Any]]:
    """The RBAC objects of the rendered overlay, as ``kubectl kustomize`` renders them."""
    text = kustomize(ROOT / "deploy" / "overlays" / overlay)
    return [doc for doc in yaml.safe_load_all(text) if doc and doc["kind"] in RBAC_KINDS]


def with_dra_target(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The objects and the Role (with its binding) ``upgradebot rbac`` prints for the DRA driver's
    namespace, as an install whose policy also names the DRA driver adds (issue 34: a target's
    DaemonSet is read in its own namespace only)."""
    from runbooks.rbac_manifests import manifests

    policy = Policy.model_validate({"approvers": {"users": ["U0BOB"]}, "targets": [DRA_TARGET]})
    return [*objects, *(o for o in manifests(policy) if o["metadata"].get("namespace") == "dra-example-driver")]


@dataclass
class Installed:
    sim: KubeSim
    admin: Kubectl
    kubeconfig: Path

    def connect(self, context: str | None = None) -> Cluster:
        return Cluster.from_kubeconfig(self.kubeconfig, context)

    def refusals(self) -> list[str]:
        """kubesim's 403s so far (``apiserver_request_total{code="403"}``)."""
        metrics = self.admin("get", "--raw", "/metrics")
        return [line for line in metrics.splitlines() if line.startswith("apiserver_request_total{code=\"403\"")]


def install(sim: KubeSim, tmp_path: Path, objects: list[dict[str, Any]]) -> Installed:
    """``kubectl apply -k`` the objects (a kustomization of them) as the admin, then a kubeconfig
    with the bot's own token, minted by ``kubectl create token``."""
    admin = Kubectl(sim.kubeconfig)
    rbac = tmp_path / "rbac"
    rbac.mkdir()
    (rbac / "rbac.yaml").write_text(yaml.safe_dump_all(objects))
    (rbac / "kustomization.yaml").write_text("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
                                             "resources: [rbac.yaml]\n")
    admin("apply", "-k", str(rbac))
    token = admin("create", "token", "upgradebot", "-n", "upgradebot").strip()
    config = yaml.safe_load(Path(sim.kubeconfig).read_text())
    config["users"][0]["user"] = {"token": token}
    path = tmp_path / "bot.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return Installed(sim, admin, path)


@pytest.fixture
def sim() -> Iterator[KubeSim]:
    with KubeSim(pushed=TEST_BUILDS, scenario="gpu-small", k8s_version="1.31", speed=20) as served:
        yield served


def engine_as(bot: Installed, redis_url: str) -> Engine:
    return Engine(store=RedisRunStore.from_url(redis_url), steps=DaemonSetSteps(), policy=POLICY, connect=bot.connect)


def test_the_rendered_rbac_runs_every_runbook_with_zero_403s(sim: KubeSim, redis_url: str, tmp_path: Path) -> None:
    objects = rendered_rbac()
    assert {o["kind"] for o in objects} == RBAC_KINDS
    for role in (o for o in objects if o["kind"] in ("Role", "ClusterRole")):
        for rule in role["rules"]:
            assert "*" not in str(rule), (role["metadata"]["name"], rule)
    bot = install(sim, tmp_path, with_dra_target(objects))

    found = inventory.handle(inventory.InventoryRequest(), connect=bot.connect, policy=POLICY)
    assert not [f for f in found.findings if "may not" in f.model_dump_json()], found.findings

    engine = engine_as(bot, redis_url)
    run = engine.request_canary(actor=ALICE, target=TARGET, image=NEW, node="gpu-node1").run
    engine.decide(run.id, actor=BOB, approve=True)
    run = engine.advance(run.id)
    assert run.state is RunState.AWAITING_PROMOTION, run.reason
    smoke = [e for e in engine.audit(run.id) if "smoke-test" in e.get("name", "")]
    assert smoke and all(e["status"] == "ok" and "Test PASSED" in e["detail"] for e in smoke), smoke
    engine.decide(run.id, actor=BOB, approve=True)
    run = engine.advance(run.id)
    assert run.state is RunState.MONITORING, run.reason

    checked = verify.handle(verify.VerifyRequest(target=TARGET), connect=bot.connect, policy=POLICY)
    assert checked.ok, [(c.name, c.status, c.detail) for c in checked.checks if c.status != "pass"]
    dra = verify.handle(verify.VerifyRequest(target=DRA_TARGET), connect=bot.connect, policy=POLICY)
    assert dra.ok, [(c.name, c.status, c.detail) for c in dra.checks if c.status != "pass"]
    assert "through a claim" in next(c.detail for c in dra.checks if c.name == "smoke-test")

    store = RedisRunStore.from_url(redis_url)
    assert store.acquire_leader("install-test", dt.timedelta(seconds=60))
    with bot.connect() as cluster:
        Collector(run_id=run.id, scope=scope_of(run), cluster=cluster, store=store, owner="install-test").catch_up()
        tally, info = store.read_tally(run.id)
        report = report_of(run, cluster=cluster, tally=tally, info=info, policy=POLICY)
    assert report.stable, report

    engine.rollback(run.id, actor=ALICE, reason="the install test rolls back")
    engine.decide(run.id, actor=BOB, approve=True)
    assert engine.advance(run.id).state is RunState.ROLLED_BACK
    assert bot.refusals() == []


# ---------------------------------------------------------------------- each rule is needed
def _stops_inventory(bot: Installed, redis_url: str) -> str:
    try:
        found = inventory.handle(inventory.InventoryRequest(), connect=bot.connect, policy=POLICY)
    except ClusterError as exc:
        return str(exc)
    said = found.model_dump_json()
    assert "lacks the rule" in said, "the inventory went on as if nothing was missing"
    return said


def _stops_verify(bot: Installed, redis_url: str) -> str:
    result = verify.handle(verify.VerifyRequest(target=TARGET), connect=bot.connect, policy=POLICY)
    assert not result.ok, "verify passed without the rule"
    return " ".join(f"{c.name}: {c.detail}" for c in result.checks if c.status != "pass")


def _stops_dra_verify(bot: Installed, redis_url: str) -> str:
    result = verify.handle(verify.VerifyRequest(target=DRA_TARGET), connect=bot.connect, policy=POLICY)
    assert not result.ok, "the DRA driver's verify passed without the rule"
    return " ".join(f"{c.name}: {c.detail}" for c in result.checks if c.status != "pass")


def _stops_preflight(bot: Installed, redis_url: str) -> str:
    from runbooks.dra.preflight import preflight

    try:
        with bot.connect() as cluster:
            return preflight(cluster, 33).model_dump_json()
    except ClusterError as exc:
        return str(exc)


def _stops_canary(bot: Installed, redis_url: str) -> str:
    """Refused when requested (issue 34: the rules a run uses are asked before approval), or failed."""
    from runbooks.engine.refusals import Refused

    engine = engine_as(bot, redis_url)
    try:
        run = engine.request_canary(actor=ALICE, target=TARGET, image=NEW, node="gpu-node1").run
    except (Refused, ClusterError) as exc:
        return str(exc)
    engine.decide(run.id, actor=BOB, approve=True)
    run = engine.advance(run.id)
    assert run.state is not RunState.AWAITING_PROMOTION, "the canary went on without the rule"
    return run.reason + " " + " ".join(str(e.get("detail", "")) for e in engine.audit(run.id))


NEEDED_BY: dict[tuple[str, str], Callable[[Installed, str], str]] = {
    ("upgradebot-read", "nodes"): _stops_inventory,
    ("upgradebot-read", "pods"): _stops_inventory,
    ("upgradebot-read", "pods/log"): _stops_verify,
    ("upgradebot-read", "daemonsets"): _stops_inventory,
    ("upgradebot-read", "controllerrevisions"): _stops_inventory,
    ("upgradebot-read", "deployments"): _stops_preflight,
    ("upgradebot-read", "events"): _stops_verify,
    ("upgradebot-read", "deviceclasses"): _stops_inventory,
    ("upgradebot-read", "resourceslices"): _stops_inventory,
    ("upgradebot-read", "/metrics"): _stops_inventory,
    ("upgradebot-upgrade", "daemonsets"): _stops_canary,
    ("upgradebot-upgrade", "pods"): _stops_canary,
    ("upgradebot-upgrade", "controllerrevisions"): _stops_canary,
    ("upgradebot-smoke-test", "pods"): _stops_verify,
    ("upgradebot-smoke-test", "resourceclaimtemplates"): _stops_dra_verify,
    ("upgradebot-smoke-test", "resourceclaims"): _stops_dra_verify,
}
"""Which runbook stops without each rule of the rendered RBAC (a rule not listed here fails the test)."""


def stuck_after_a_reboot(sim: KubeSim) -> None:
    """A trainer pod on gpu-node1 left stuck by a node reboot (what a repair deletes), once the
    node's GPUs are back."""
    from tests.integration.test_drain_kubesim import apply, trainer

    admin = Kubectl(sim.kubeconfig)
    apply(admin, trainer("trainer-a", "gpu-node1"))
    admin("rollout", "status", "deployment/trainer-a", "-n", "ml-team", "--timeout=60s", timeout=90)
    sim.fault(kind="node-reboot", node="gpu-node1")
    admin("rollout", "status", "deployment/trainer-a", "-n", "ml-team", "--timeout=60s", timeout=90)
    for _ in range(200):
        if admin.json("get", "node", "gpu-node1")["status"]["allocatable"].get("nvidia.com/gpu") == "8":
            break
        time.sleep(0.05)


def _rules() -> list[tuple[str, int, dict[str, Any]]]:
    return [(o["metadata"]["name"], i, rule) for o in rendered_rbac() if o["kind"] in ("Role", "ClusterRole")
            for i, rule in enumerate(o["rules"])]


def _key(role: str, rule: dict[str, Any]) -> tuple[str, str]:
    return role, (rule.get("resources") or rule.get("nonResourceURLs"))[0]


@pytest.mark.parametrize(("role", "index", "rule"), _rules(), ids=lambda v: v if isinstance(v, str) else "")
def test_without_any_one_rule_its_runbook_stops_naming_it(sim: KubeSim, redis_url: str, tmp_path: Path, role: str,
                                                          index: int, rule: dict[str, Any]) -> None:
    runbook = NEEDED_BY.get(_key(role, rule))
    assert runbook is not None, f"no runbook is known to need {role} {rule}: a rule nobody needs, or a test to add"
    objects = rendered_rbac()
    for obj in objects:
        if obj["kind"] in ("Role", "ClusterRole") and obj["metadata"]["name"] == role:
            del obj["rules"][index]
    said = runbook(install(sim, tmp_path, with_dra_target(objects)), redis_url)
    if "nonResourceURLs" in rule:
        wanted = re.escape(f"{{nonResourceURLs: [{rule['nonResourceURLs'][0]}], verbs: [") + r"(\w+)\]"
    else:
        wanted = (r"its RBAC lacks the rule \{apiGroups: \[\"" + re.escape(rule["apiGroups"][0]) + r"\"\], resources: \["
                  + "(" + "|".join(re.escape(r) for r in rule["resources"]) + r")\], verbs: \[(\w+)\]")
    found = re.search(wanted, said)
    assert found is not None, f"nothing names the missing rule {rule}: {said[:1500]}"
    assert found.groups()[-1] in rule["verbs"], found.group(0)


# ---------------------------------------------------------------------- migration runs
def test_the_migration_role_example_runs_a_migration_with_zero_403s(
        sim: KubeSim, redis_url: str, tmp_path: Path) -> None:
    """``deploy/examples/migrations.yaml`` beside the install: a migration run in ml-team is planned
    (with its dry run), applied, verified and rolled back as the bot's ServiceAccount, and
    nothing is refused; without it, the request is refused and says which rule is missing."""
    from runbooks.dra.migration_run import MigrationSteps
    from runbooks.engine.refusals import Refused
    from runbooks.engine.runs import RunKind
    from tests.integration.test_migration_run import deployment

    admin = Kubectl(sim.kubeconfig)
    admin("apply", "-f", "-", input=yaml.safe_dump(deployment("trainer", 1)))
    admin("rollout", "status", "deployment/trainer", "-n", "ml-team", "--timeout=60s", timeout=90)
    policy = Policy.model_validate({**POLICY.model_dump(exclude_unset=True), "migrations": {"namespaces": ["ml-team"]}})
    (tmp_path / "bare").mkdir()
    (tmp_path / "with-example").mkdir()
    bare = install(sim, tmp_path / "bare", rendered_rbac())
    engine = Engine(store=RedisRunStore.from_url(redis_url), steps=DaemonSetSteps(), policy=policy,
                    connect=bare.connect, kinds={RunKind.MIGRATION: MigrationSteps()})
    with pytest.raises((Refused, ClusterError), match="lacks the rule"):
        engine.request_migration(actor=ALICE, namespace="ml-team", name="trainer")

    example = list(yaml.safe_load_all((ROOT / "deploy" / "examples" / "migrations.yaml").read_text()))
    bot = install(sim, tmp_path / "with-example", [*rendered_rbac(), *example])
    before = bot.refusals()
    engine = Engine(store=RedisRunStore.from_url(redis_url), steps=DaemonSetSteps(), policy=policy,
                    connect=bot.connect, kinds={RunKind.MIGRATION: MigrationSteps()})
    run = engine.request_migration(actor=ALICE, namespace="ml-team", name="trainer").run
    engine.decide(run.id, actor=BOB, approve=True)
    run = engine.advance(run.id)
    assert run.state is RunState.DONE, run.reason
    assert bot.refusals() == before  # the same 403 counters as before: none since


# ---------------------------------------------------------------------- drain
def test_the_drain_example_lets_a_draining_canary_cordon_and_evict_with_zero_403s(
        sim: KubeSim, redis_url: str, tmp_path: Path) -> None:
    """A target with ``drain``: with the install alone the canary request is refused before anyone
    approves, naming the missing rule (the cordon's server-side dry run is authorized like the
    cordon); with ``deploy/examples/drain.yaml`` beside it a canary cordons, evicts the trainer
    using the node's GPUs and is uncordoned once verified, and a crashing canary's rollback
    uncordons its node, as the bot's ServiceAccount, with no 403."""
    from handlers.run_views import gate_message
    from runbooks.engine.refusals import Refused
    from tests.integration.test_drain_kubesim import apply, cordoned, trainer

    admin = Kubectl(sim.kubeconfig)
    apply(admin, trainer("trainer-3", "gpu-node3"))
    admin("rollout", "status", "deployment/trainer-3", "-n", "ml-team", "--timeout=60s", timeout=90)
    policy = Policy.model_validate({**POLICY.model_dump(exclude_unset=True),
                                    "targets": [{"namespace": "kube-system", "name": "nvidia-device-plugin-daemonset",
                                                 "drain": {"timeout": "60s"}}]})
    (tmp_path / "bare").mkdir()
    (tmp_path / "with-example").mkdir()
    bare = install(sim, tmp_path / "bare", rendered_rbac())
    engine = Engine(store=RedisRunStore.from_url(redis_url), steps=DaemonSetSteps(), policy=policy, connect=bare.connect)
    with pytest.raises(Refused, match=re.escape('lacks the rule {apiGroups: [""], resources: [nodes], verbs: [patch]}')):
        engine.request_canary(actor=ALICE, target=TARGET, image=NEW, node="gpu-node3")

    example = list(yaml.safe_load_all((ROOT / "deploy" / "examples" / "drain.yaml").read_text()))
    bot = install(sim, tmp_path / "with-example", [*rendered_rbac(), *example])
    before = bot.refusals()
    engine = Engine(store=RedisRunStore.from_url(redis_url), steps=DaemonSetSteps(), policy=policy, connect=bot.connect)
    run = engine.request_canary(actor=ALICE, target=TARGET, image=NEW, node="gpu-node3").run
    assert run.gate is not None and "cordoning and draining gpu-node3 first" in gate_message(run, run.gate).text
    engine.decide(run.id, actor=BOB, approve=True)
    run = engine.advance(run.id)
    assert run.state is RunState.AWAITING_PROMOTION, run.reason
    evicted = [e for e in engine.audit(run.id) if e["name"] == "canary.drain.evict" and e["status"] == "ok"]
    assert [e["evidence"]["pod"].split("/")[0] for e in evicted] == ["ml-team"]
    assert [m["code"] for m in sim.mutations() if m["path"].endswith("/eviction") and not m["dryRun"]] == [201]
    assert cordoned(admin) == set()
    engine.rollback(run.id, actor=ALICE, reason="the install test rolls back")
    engine.decide(run.id, actor=BOB, approve=True)
    assert engine.advance(run.id).state is RunState.ROLLED_BACK

    crashing = engine.request_canary(actor=ALICE, target=TARGET, image=NEW + "-crash", node="gpu-node3").run
    engine.decide(crashing.id, actor=BOB, approve=True)
    crashing = engine.advance(crashing.id)
    assert crashing.state is RunState.ROLLED_BACK, crashing.reason
    uncordoned = [e for e in engine.audit(crashing.id) if e["name"] == "rollback.uncordon" and e["status"] == "ok"]
    assert [e["detail"] for e in uncordoned] == ["uncordoned gpu-node3"]
    assert cordoned(admin) == set()
    assert bot.refusals() == before


# ---------------------------------------------------------------------- repair
def test_the_repair_example_lets_a_repair_delete_the_stuck_pods_with_zero_403s(
        sim: KubeSim, redis_url: str, tmp_path: Path) -> None:
    """After a node reboot: with the install alone a repair request is refused before anyone
    approves, naming the missing rule (its dry-run deletion is authorized like the deletion);
    with ``deploy/examples/repair.yaml`` beside it the repair deletes the stuck pod and verifies
    its controller's pods run, as the bot's ServiceAccount, with no 403."""

    from runbooks.daemonset.repairing import RepairSteps
    from runbooks.engine.refusals import Refused
    from runbooks.engine.runs import RunKind

    stuck_after_a_reboot(sim)
    (tmp_path / "bare").mkdir()
    (tmp_path / "with-example").mkdir()
    bare = install(sim, tmp_path / "bare", rendered_rbac())
    kinds = {RunKind.REPAIR: RepairSteps()}
    engine = Engine(store=RedisRunStore.from_url(redis_url), steps=DaemonSetSteps(), policy=POLICY,
                    connect=bare.connect, kinds=kinds)
    with pytest.raises(Refused, match=re.escape('lacks the rule {apiGroups: [""], resources: [pods], verbs: [delete]} '
                                                "in a Role of namespace ml-team")):
        engine.request_repair(actor=ALICE, target=TARGET)

    example = list(yaml.safe_load_all((ROOT / "deploy" / "examples" / "repair.yaml").read_text()))
    bot = install(sim, tmp_path / "with-example", [*rendered_rbac(), *example])
    before = bot.refusals()
    engine = Engine(store=RedisRunStore.from_url(redis_url), steps=DaemonSetSteps(), policy=POLICY,
                    connect=bot.connect, kinds=kinds)
    run = engine.request_repair(actor=ALICE, target=TARGET).run
    engine.decide(run.id, actor=BOB, approve=True)
    run = engine.advance(run.id)
    assert run.state is RunState.DONE, run.reason
    assert bot.refusals() == before


def _in_ml_team(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objects if o["metadata"].get("namespace") == "ml-team"]


def test_rbac_grants_a_repair_only_in_the_namespaces_repair_names(sim: KubeSim, redis_url: str, tmp_path: Path) -> None:
    """Attack finding 6: ``upgradebot rbac`` for a policy with ml-team under migrations.namespaces
    (its objects in ml-team beside the install), without ``repair=``, grants no pod deletion in ml-team (a migration deletes no pods): applied
    beside the install, a repair there is still refused before anyone approves, naming the rule,
    and the bot may not delete pods in ml-team. ``rbac repair=ml-team`` grants it: the repair runs,
    with no 403."""
    from runbooks.daemonset.repairing import RepairSteps
    from runbooks.engine.refusals import Refused
    from runbooks.engine.runs import RunKind
    from runbooks.rbac_manifests import manifests

    policy = Policy.model_validate({**POLICY.model_dump(exclude_unset=True), "migrations": {"namespaces": ["ml-team"]}})
    stuck_after_a_reboot(sim)
    (tmp_path / "plain").mkdir()
    (tmp_path / "with-repair").mkdir()
    plain = manifests(policy)
    assert {o["metadata"]["name"] for o in plain if o["metadata"].get("namespace") == "ml-team"} == {"upgradebot-migration"}
    assert not [r for o in plain if o["kind"] == "Role" for r in o["rules"]
                if r["resources"] == ["pods"] and "delete" in r["verbs"] and o["metadata"]["namespace"] == "ml-team"]
    bot = install(sim, tmp_path / "plain", [*rendered_rbac(), *_in_ml_team(plain)])
    can_i = ("auth", "can-i", "delete", "pods", "-n", "ml-team")
    assert Kubectl(bot.kubeconfig).run(*can_i, check=False).stdout.strip() == "no"  # as the bot's ServiceAccount
    kinds = {RunKind.REPAIR: RepairSteps()}
    engine = Engine(store=RedisRunStore.from_url(redis_url), steps=DaemonSetSteps(), policy=policy,
                    connect=bot.connect, kinds=kinds)
    with pytest.raises(Refused, match=re.escape('lacks the rule {apiGroups: [""], resources: [pods], verbs: [delete]} '
                                                "in a Role of namespace ml-team")):
        engine.request_repair(actor=ALICE, target=TARGET)

    bot = install(sim, tmp_path / "with-repair",
                  [*rendered_rbac(), *_in_ml_team(manifests(policy, repair_namespaces=["ml-team"]))])
    assert Kubectl(bot.kubeconfig).run(*can_i, check=False).stdout.strip() == "yes"
    before = bot.refusals()
    engine = Engine(store=RedisRunStore.from_url(redis_url), steps=DaemonSetSteps(), policy=policy,
                    connect=bot.connect, kinds=kinds)
    run = engine.request_repair(actor=ALICE, target=TARGET).run
    engine.decide(run.id, actor=BOB, approve=True)
    assert engine.advance(run.id).state is RunState.DONE
    assert bot.refusals() == before


def test_the_clusterpolicy_role_allows_get_and_patch_on_that_one_clusterpolicy_only(
        sim: KubeSim, tmp_path: Path) -> None:
    """Issue 60 item 5: ``upgradebot rbac`` for a target owned by ClusterPolicy/cluster-policy, applied
    and asked as the bot's ServiceAccount (SelfSubjectAccessReviews, as the request checks ask): get and
    patch on cluster-policy are allowed; another ClusterPolicy, a list, a delete are not."""
    from runbooks.cluster.permissions import refused_rule
    from runbooks.errors import Action
    from runbooks.rbac_manifests import manifests

    policy = Policy.model_validate({**POLICY.model_dump(mode="json", exclude_defaults=True), "targets": [
        {"namespace": "kube-system", "name": "nvidia-device-plugin-daemonset", "owner": "clusterpolicy/cluster-policy"}]})
    bot = install(sim, tmp_path, [*rendered_rbac(), *(o for o in manifests(policy)
                                                       if o["metadata"]["name"] == "upgradebot-clusterpolicy")])
    policies = "clusterpolicies.nvidia.com"
    with bot.connect() as cluster:
        assert refused_rule(cluster, [Action(verb, policies, "", "cluster-policy") for verb in ("get", "patch")]) is None
        for action in (Action("get", policies, "", "other-policy"), Action("patch", policies, "", "other-policy"),
                       Action("list", policies), Action("delete", policies, "", "cluster-policy"),
                       Action("update", policies, "", "cluster-policy")):
            assert refused_rule(cluster, [action]) == action


def test_the_helm_release_role_allows_reading_secrets_in_that_namespace_only(sim: KubeSim, tmp_path: Path) -> None:
    """Issue 60 item 4: ``upgradebot rbac`` for a target with owner: helm, applied and asked as the bot's
    ServiceAccount: get and list on Secrets in the target's namespace are allowed (the release's Secrets,
    named by revision, cannot be pinned by name); Secrets elsewhere, and any write on them, are not."""
    from runbooks.cluster.permissions import refused_rule
    from runbooks.errors import Action
    from runbooks.rbac_manifests import manifests

    policy = Policy.model_validate({**POLICY.model_dump(mode="json", exclude_defaults=True), "targets": [
        {"namespace": "kube-system", "name": "nvidia-device-plugin-daemonset", "owner": "helm"}]})
    bot = install(sim, tmp_path, [*rendered_rbac(), *(o for o in manifests(policy)
                                                       if o["metadata"]["name"] == "upgradebot-helm-release")])
    with bot.connect() as cluster:
        assert refused_rule(cluster, [Action("list", "secrets", "kube-system"),
                                      Action("get", "secrets", "kube-system", "sh.helm.release.v1.nvdp.v2")]) is None
        for action in (Action("list", "secrets", "default"), Action("list", "secrets"),
                       Action("watch", "secrets", "kube-system"), Action("create", "secrets", "kube-system"),
                       Action("update", "secrets", "kube-system", "sh.helm.release.v1.nvdp.v2")):
            assert refused_rule(cluster, [action]) == action
