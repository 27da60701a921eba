"""The RBAC in ``deploy/`` is exactly what ``upgradebot rbac`` prints for the example policy, so
every rule there comes from the one table the runbooks name a missing rule from (issue 34,
items 2 and 3): nothing hand-written beside it, nothing missing from it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from runbooks.cluster.permissions import RULES, rule_for, run_actions
from runbooks.cluster.wrapping import missing_rule
from runbooks.errors import Action
from runbooks.policy import Policy
from runbooks.rbac_manifests import manifests
from tests.support import kustomize

ROOT = Path(__file__).resolve().parents[2]
ROLES = ("Role", "ClusterRole")


def _rules(objects: list[dict[str, Any]]) -> set[tuple[Any, ...]]:
    return {(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"], tuple(r.get("apiGroups", ())),
             tuple(r.get("resources") or r.get("nonResourceURLs")), tuple(r["verbs"]), tuple(r.get("resourceNames", ())))
            for o in objects if o and o["kind"] in ROLES for r in o["rules"]}


def _bindings(objects: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {(o["kind"], o["metadata"].get("namespace", ""), o["roleRef"]["name"])
            for o in objects if o and o["kind"].endswith("Binding")}


def test_deploy_holds_exactly_the_rules_upgradebot_rbac_prints_for_its_policy() -> None:
    """Issue 34 item 3: the socket-mode overlay's RBAC and the drain, quarantine, migration and repair
    examples are, rule for rule and binding for binding, ``upgradebot rbac`` for deploy/base/policy.yaml
    with its target draining, ml-team under migrations.namespaces and ``repair=ml-team``."""
    doc = yaml.safe_load((ROOT / "deploy" / "base" / "policy.yaml").read_text())
    doc["targets"] = [{**Policy.model_validate(doc).targets[0].model_dump(exclude_defaults=True), "drain": {}}]
    doc["migrations"] = {"namespaces": ["ml-team"]}
    generated = manifests(Policy.model_validate(doc), repair_namespaces=["ml-team"])
    deployed = list(yaml.safe_load_all(kustomize(ROOT / "deploy" / "overlays" / "socket-mode")))
    for example in ("drain", "quarantine", "migrations", "repair"):
        deployed += list(yaml.safe_load_all((ROOT / "deploy" / "examples" / f"{example}.yaml").read_text()))
    assert _rules(deployed) - _rules(generated) == set(), "rules in deploy/ that the table does not give"
    assert _rules(generated) - _rules(deployed) == set(), "rules the table gives that deploy/ lacks"
    assert _bindings(deployed) == _bindings(generated)


def test_a_refusal_names_the_rule_and_the_role_the_table_puts_it_in() -> None:
    """Issue 34 item 2: a 403 names the table's rule, in a namespace's Role where the table grants
    it per namespace (a target's DaemonSet patch with its name), in the ClusterRole otherwise."""
    assert missing_rule(Action("watch", "resourceslices.resource.k8s.io")) == (
        '{apiGroups: ["resource.k8s.io"], resources: [resourceslices], verbs: [watch]}', "its ClusterRole")
    assert missing_rule(Action("get", "daemonsets.apps", "gpu", "plugin")) == (
        '{apiGroups: ["apps"], resources: [daemonsets], verbs: [get]}', "a Role of namespace gpu")
    assert missing_rule(Action("patch", "daemonsets.apps", "gpu", "plugin")) == (
        '{apiGroups: ["apps"], resources: [daemonsets], verbs: [patch], resourceNames: [plugin]}',
        "a Role of namespace gpu")
    assert missing_rule(Action("create", "pods/eviction", "ml-team", "p")) == (
        '{apiGroups: [""], resources: [pods/eviction], verbs: [create]}', "its ClusterRole")
    assert all("*" not in str(rule) for rule in RULES)


def test_every_rule_a_request_checks_is_one_the_table_grants() -> None:
    """Issue 34 item 2: the access reviews asked before approval (a draining DRA driver with a
    companion and a smoke test: every rule a canary can ask) are each granted by a rule of the
    table, so ``upgradebot rbac``'s output answers every one of them."""
    asked = run_actions(namespace="gpu", name="plugin", dra=True, drain=True, smoke_namespace="upgradebot-smoke",
                        workloads=["controller"])
    assert [a for a in asked if rule_for(a) is None] == []


def test_a_repair_role_only_where_repair_names_a_namespace() -> None:
    """Attack finding 6: migrations.namespaces grants the migration Role there, no pod deletion (a
    migration run deletes no pods); the repair Role is in the namespaces ``repair=`` names only."""
    policy = Policy.model_validate({"approvers": {"users": ["U0BOB"]}, "targets": ["kube-system/plugin"],
                                    "migrations": {"namespaces": ["ml-team", "research"]}})
    roles = {(o["metadata"].get("namespace", ""), o["metadata"]["name"]) for o in manifests(policy) if o["kind"] == "Role"}
    assert roles == {("kube-system", "upgradebot-upgrade"), ("ml-team", "upgradebot-migration"),
                     ("research", "upgradebot-migration")}
    repaired = manifests(policy, repair_namespaces=["batch"])
    assert {o["metadata"]["namespace"] for o in repaired if o["metadata"]["name"] == "upgradebot-repair"} == {"batch"}


def test_a_clusterpolicy_owner_gets_get_and_patch_on_that_clusterpolicy_by_name_and_nothing_more() -> None:
    """Issue 60 item 5: a target the GPU operator renders (owner: clusterpolicy/<name>) adds one
    ClusterRole with one rule: get and patch on that ClusterPolicy by name; without one, no such role."""
    policy = Policy.model_validate({"approvers": {"users": ["U0BOB"]}, "targets": [
        {"namespace": "gpu-operator", "name": "nvidia-device-plugin-daemonset", "owner": "clusterpolicy/cluster-policy"},
        "kube-system/plugin"]})
    objects = manifests(policy)
    operator = [o for o in objects if o["metadata"]["name"] == "upgradebot-clusterpolicy"]
    assert [o["kind"] for o in operator] == ["ClusterRole", "ClusterRoleBinding"]
    assert operator[0]["rules"] == [{"apiGroups": ["nvidia.com"], "resources": ["clusterpolicies"],
                                     "verbs": ["get", "patch"], "resourceNames": ["cluster-policy"]}]
    assert not [r for o in objects if o["kind"] in ROLES and o is not operator[0] for r in o["rules"]
                if "nvidia.com" in r.get("apiGroups", ())]
    plain = Policy.model_validate({"approvers": {"users": ["U0BOB"]}, "targets": ["kube-system/plugin"]})
    assert "upgradebot-clusterpolicy" not in {o["metadata"]["name"] for o in manifests(plain)}
    assert missing_rule(Action("patch", "clusterpolicies.nvidia.com", "", "cluster-policy")) == (
        '{apiGroups: ["nvidia.com"], resources: [clusterpolicies], verbs: [patch], resourceNames: [cluster-policy]}',
        "its ClusterRole")


def test_an_operator_native_run_asks_for_its_clusterpolicy_not_the_daemonsets_patch() -> None:
    """Issue 60: the request's access reviews of a run through ClusterPolicy/cluster-policy ask get and patch on
    it (granted by the table's operator rule) instead of a patch of the DaemonSet."""
    asked = run_actions(namespace="gpu-operator", name="plugin", dra=False, drain=False, smoke_namespace=None,
                        workloads=[], clusterpolicy="cluster-policy")
    assert [a for a in asked if rule_for(a) is None] == []
    assert Action("patch", "clusterpolicies.nvidia.com", None, "cluster-policy") in asked
    assert Action("patch", "daemonsets.apps", "gpu-operator", "plugin") not in asked


def test_an_owner_helm_target_gets_get_and_list_on_secrets_in_its_namespace_only() -> None:
    """Issue 60 item 4: a target with owner: helm adds one Role in its namespace: get and list on Secrets
    (Helm's release Secrets carry the revision in their names, so resourceNames cannot pin them); without
    such a target, no rule on Secrets anywhere."""
    policy = Policy.model_validate({"approvers": {"users": ["U0BOB"]}, "targets": [
        {"namespace": "nvidia-device-plugin", "name": "nvdp-nvidia-device-plugin", "owner": "helm"},
        "kube-system/plugin"]})
    objects = manifests(policy)
    helm = [o for o in objects if o["metadata"]["name"] == "upgradebot-helm-release"]
    assert [(o["kind"], o["metadata"]["namespace"]) for o in helm] == [
        ("Role", "nvidia-device-plugin"), ("RoleBinding", "nvidia-device-plugin")]
    assert helm[0]["rules"] == [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list"]}]
    assert not [r for o in objects if o["kind"] in ROLES and o is not helm[0] for r in o["rules"]
                if "secrets" in r.get("resources", ())]
    plain = Policy.model_validate({"approvers": {"users": ["U0BOB"]}, "targets": ["kube-system/plugin"]})
    assert not [r for o in manifests(plain) if o["kind"] in ROLES for r in o["rules"]
                if "secrets" in r.get("resources", ())]
    assert missing_rule(Action("list", "secrets", "nvidia-device-plugin")) == (
        '{apiGroups: [""], resources: [secrets], verbs: [list]}', "a Role of namespace nvidia-device-plugin")


def test_quarantine_and_release_get_a_clusterrole_patching_nodes_and_their_writes_are_in_the_table() -> None:
    """Issue 61 item 5: ``rbac`` prints the ClusterRole ``quarantine`` and ``release`` need (nodes
    patch: one node's label, annotation and cordon); the DaemonSet patch is the target Role's."""
    policy = Policy.model_validate({"approvers": {"users": ["U0BOB"]}, "targets": ["kube-system/plugin"]})
    objects = manifests(policy)
    [role] = [o for o in objects if o["kind"] == "ClusterRole" and o["metadata"]["name"] == "upgradebot-quarantine"]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["patch"]}]
    assert ("ClusterRoleBinding", "", "upgradebot-quarantine") in _bindings(objects)
    assert rule_for(Action("patch", "nodes", None, "gpu-node2")) is not None
    assert rule_for(Action("patch", "daemonsets.apps", "kube-system", "plugin")) is not None
