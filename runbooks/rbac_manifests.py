"""The Roles, ClusterRoles and their bindings a policy needs, from the bot's RBAC table
(:data:`runbooks.cluster.permissions.RULES`): what ``upgradebot rbac`` prints, ready for
``kubectl apply -f -`` (issue 34, item 2).

One ClusterRole of reads; a Role per namespace holding a target (its DaemonSets and companion
Deployments by name in ``resourceNames``), one for the smoke test's namespace, one per
``migrations.namespaces`` entry and one per namespace ``repair=`` names (a repair deletes pods;
a migration run deletes none, so ``migrations.namespaces`` alone grants no pod deletion); the
drain ClusterRole only when a target drains, the quarantine ClusterRole (nodes patch: ``quarantine``
and ``release``) when a target is a DaemonSet the bot patches itself, the ClusterPolicy ClusterRole only when a target's
``owner`` names one (get and patch on it by name), a Secrets reader in the namespace of each target
with ``owner: helm`` (get and list: its Helm release's Secrets): what the policy's verbs need, nothing more. The verbs and code needing each rule are in the table (docs/security.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import yaml

from runbooks.cluster.permissions import RULES, Scope
from runbooks.policy import Policy

RBAC = "rbac.authorization.k8s.io"
PART_OF = {"app.kubernetes.io/part-of": "upgradebot"}
ROLE_NAMES: dict[Scope, str] = {"cluster": "upgradebot-read", "target": "upgradebot-upgrade",
                                "smoke": "upgradebot-smoke-test", "drain": "upgradebot-drain",
                                "quarantine": "upgradebot-quarantine",
                                "migration": "upgradebot-migration", "repair": "upgradebot-repair",
                                "operator": "upgradebot-clusterpolicy", "helm": "upgradebot-helm-release"}


def _rules(scope: Scope, names: dict[str, list[str]]) -> list[dict[str, Any]]:
    out = []
    for rule in RULES:
        if rule.scope != scope:
            continue
        wanted = names.get(rule.names, []) if rule.names else None
        if rule.names and not wanted:
            continue  # nothing of that kind to name: the rule is not needed
        out.append(rule.as_yaml(wanted))
    return out


def _pair(scope: Scope, namespace: str | None, rules: list[dict[str, Any]], *, account: tuple[str, str]
          ) -> list[dict[str, Any]]:
    kind = "Role" if namespace else "ClusterRole"
    meta: dict[str, Any] = {"name": ROLE_NAMES[scope], "labels": dict(PART_OF)}
    if namespace:
        meta["namespace"] = namespace
    role = {"apiVersion": f"{RBAC}/v1", "kind": kind, "metadata": meta, "rules": rules}
    binding = {"apiVersion": f"{RBAC}/v1", "kind": f"{kind}Binding", "metadata": dict(meta),
               "roleRef": {"apiGroup": RBAC, "kind": kind, "name": ROLE_NAMES[scope]},
               "subjects": [{"kind": "ServiceAccount", "namespace": account[0], "name": account[1]}]}
    return [role, binding]


def manifests(policy: Policy, *, repair_namespaces: Sequence[str] = (),
              account: tuple[str, str] = ("upgradebot", "upgradebot")) -> list[dict[str, Any]]:
    """The RBAC objects ``policy`` needs for the ServiceAccount ``account`` (namespace, name);
    ``repair_namespaces``: where the GPU workloads a repair may delete run (the policy does not
    list them; none by default, so no repair Role)."""
    out = _pair("cluster", None, _rules("cluster", {}), account=account)
    for namespace in sorted({t.namespace for t in policy.targets}):
        targets = [t for t in policy.targets if t.namespace == namespace]
        names = {"targets": [t.name for t in targets],
                 "workloads": [name for t in targets for kind, name, _, _ in t.parts() if kind == "Deployment"]}
        out += _pair("target", namespace, _rules("target", names), account=account)
    smoke = (policy.steps.smoke_test.namespace if policy.steps.smoke_test else None)
    if smoke:
        out += _pair("smoke", smoke, _rules("smoke", {}), account=account)
    if any(t.drain is not None for t in policy.targets):
        out += _pair("drain", None, _rules("drain", {}), account=account)
    if any(not t.clusterpolicy for t in policy.targets):  # `quarantine` and `release` patch one node
        out += _pair("quarantine", None, _rules("quarantine", {}), account=account)
    clusterpolicies = sorted({t.clusterpolicy for t in policy.targets if t.clusterpolicy})
    if clusterpolicies:
        out += _pair("operator", None, _rules("operator", {"clusterpolicies": clusterpolicies}), account=account)
    for namespace in sorted({t.namespace for t in policy.targets if t.owner == "helm"}):
        out += _pair("helm", namespace, _rules("helm", {}), account=account)
    for namespace in policy.migrations.namespaces:
        out += _pair("migration", namespace, _rules("migration", {}), account=account)
    for namespace in repair_namespaces:
        out += _pair("repair", namespace, _rules("repair", {}), account=account)
    return out


def render(objects: list[dict[str, Any]]) -> str:
    """The objects as one YAML stream, ``kubectl apply -f -`` ready."""
    return yaml.safe_dump_all(objects, sort_keys=False)

