"""The bot's RBAC as one table: each rule, where it is granted, the verbs that use it and the code
that calls it (issue 34, items 2 and 3).

Three readers, so they cannot drift apart:

- a 403 names the missing rule and where it belongs (:func:`runbooks.cluster.wrapping.missing_rule`
  looks the refused call up here);
- a request is checked before anyone approves it: each rule its run will use is asked of the API
  server as a SelfSubjectAccessReview (:func:`refused_rule`, what ``kubectl auth can-i`` sends);
- ``upgradebot rbac`` prints the Roles and bindings a policy needs (:mod:`runbooks.rbac_manifests`).

Scopes: ``cluster`` (the ClusterRole ``upgradebot-read``: reads the bot makes across namespaces),
``target`` (a Role in each namespace holding a policy target), ``smoke`` (the smoke test's
namespace), ``drain`` (a ClusterRole only for policies that drain: nodes and evictions are
cluster-wide), ``quarantine`` (a ClusterRole for policies with DaemonSet targets: ``quarantine`` and
``release`` patch one node's label, annotation and cordon; the DaemonSet patch is the ``target`` Role's), ``migration`` (each of ``migrations.namespaces``), ``repair`` (each namespace
whose GPU pods a repair may delete) and ``operator`` (a ClusterRole only for policies with a target
``owner: clusterpolicy/<name>``: get and patch on those ClusterPolicies by name, cluster-scoped objects)
and ``helm`` (a Role in the namespace of each target with ``owner: helm``: get and list on Secrets, to read
its Helm release; release Secrets are named by revision, so no ``resourceNames`` can pin them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from runbooks.errors import Action, ClusterError

Scope = Literal["cluster", "target", "smoke", "drain", "quarantine", "migration", "repair", "operator", "helm"]
AUTHORIZATION = "authorization.k8s.io"


@dataclass(frozen=True)
class Rule:
    """One RBAC rule: ``names`` ``targets``, ``workloads`` or ``clusterpolicies`` puts the policy's target
    DaemonSets, their companion Deployments or the ClusterPolicies its targets' ``owner`` names in
    ``resourceNames`` (the verb names one object: get, patch)."""

    scope: Scope
    group: str
    resources: tuple[str, ...]
    verbs: tuple[str, ...]
    used_by: str
    code: str
    names: Literal["", "targets", "workloads", "clusterpolicies"] = ""

    def as_yaml(self, names: list[str] | None = None) -> dict[str, Any]:
        if self.resources[0].startswith("/"):
            return {"nonResourceURLs": list(self.resources), "verbs": list(self.verbs)}
        rule: dict[str, Any] = {"apiGroups": [self.group], "resources": list(self.resources), "verbs": list(self.verbs)}
        if names:
            rule["resourceNames"] = sorted(set(names))
        return rule


R = "resource.k8s.io"
RULES: tuple[Rule, ...] = (
    # ------------------------------------------------------------ cluster-wide reads
    Rule("cluster", "", ("nodes",), ("get", "list", "watch"), "inventory, preflight, verify, canary, promote, drain",
         "inventory/taking.py, inventory/watch_cache.py, daemonset/verifying.py, cluster/informing.py, "
         "engine/requesting.py"),
    Rule("cluster", "", ("pods",), ("list", "watch"), "inventory, verify, canary, promote, repair",
         "inventory/taking.py (Pending pods on claims), inventory/watch_cache.py, daemonset/observing.py, "
         "daemonset/repairing.py"),
    Rule("cluster", "apps", ("daemonsets",), ("list",), "inventory, preflight",
         "inventory/taking.py (the plugins, wherever they run), dra/preflight.py (the DRA drivers, judged at the "
         "target)"),
    Rule("cluster", "apps", ("controllerrevisions",), ("list",), "inventory, canary, promote, rollback",
         "inventory/taking.py (each plugin's current revision, wherever it runs), daemonset/observing.py"),
    Rule("cluster", "", ("pods/log",), ("get",), "inventory, verify, canary, promote",
         "inventory/taking.py (each plugin's registration line, wherever it runs), daemonset/smoke_testing.py, "
         "daemonset/evidence.py (a failed container's previous log)"),
    Rule("cluster", "apps", ("deployments",), ("list",), "preflight", "dra/preflight.py (the DRA drivers' controllers)"),
    Rule("cluster", "", ("events",), ("list", "watch"), "verify, canary, promote, stability reports",
         "daemonset/events.py, stability/collecting.py"),
    Rule("cluster", R, ("deviceclasses", "resourceclasses", "resourceclaimtemplates", "podschedulingcontexts"),
         ("list",), "inventory, preflight, verify", "inventory/taking.py, dra/preflight.py, daemonset/verifying.py"),
    Rule("cluster", R, ("resourceslices", "resourceclaims"), ("list", "watch"),
         "inventory, preflight, verify, a DRA driver's canary and promotion",
         "inventory/taking.py, daemonset/watched.py (verify's window watches them)"),
    Rule("cluster", "", ("/metrics",), ("get",), "inventory, preflight", "cluster/adapter.py metric_samples"),
    # ------------------------------------------------------------ each target's namespace
    Rule("target", "apps", ("daemonsets",), ("patch",), "canary, promote, rollback, restart, quarantine, release",
         "daemonset/patching.py, daemonset/quarantining.py", names="targets"),
    Rule("target", "apps", ("daemonsets",), ("get", "watch"), "inventory, verify, canary, promote, rollback",
         "daemonset/observing.py, engine/requesting.py"),
    Rule("target", "apps", ("controllerrevisions",), ("watch",), "canary, promote, rollback",
         "daemonset/observing.py (followed while the target rolls)"),
    Rule("target", "", ("pods",), ("create", "delete"), "canary (create only as a dry run), promote, rollback",
         "engine/requesting.py refused_by_server, daemonset/patching.py"),
    Rule("target", "apps", ("deployments",), ("get", "patch"), "canary, promote, rollback of a target with workloads",
         "daemonset/companions.py", names="workloads"),
    # ------------------------------------------------------------ the smoke test's namespace
    Rule("smoke", "", ("pods",), ("create", "get", "delete"), "verify, canary, promote",
         "daemonset/smoke_testing.py"),
    Rule("smoke", R, ("resourceclaimtemplates",), ("create", "delete"), "verify, canary of a DRA driver",
         "daemonset/dra_smoke.py"),
    Rule("smoke", R, ("resourceclaims",), ("get", "delete"), "verify, canary of a DRA driver", "daemonset/dra_smoke.py"),
    # ------------------------------------------------------------ drain (cluster-wide by nature)
    Rule("drain", "", ("nodes",), ("patch",), "canary, promote, rollback of a target that drains",
         "daemonset/draining.py (spec.unschedulable only: engine/scoping.py)"),
    Rule("drain", "", ("pods/eviction",), ("create",), "canary, promote of a target that drains",
         "daemonset/draining.py"),
    # ------------------------------------------------------------ quarantine (nodes are cluster-wide)
    Rule("quarantine", "", ("nodes",), ("patch",), "quarantine, release",
         "daemonset/quarantining.py (the target's label and annotation and spec.unschedulable only: engine/scoping.py)"),
    # ------------------------------------------------------------ migrations.namespaces
    Rule("migration", "apps", ("deployments", "statefulsets"), ("get", "patch"), "migrate, apply-migration",
         "dra/migrating.py, dra/migration_run.py, dra/preflight.py dry_run"),
    Rule("migration", "apps", ("deployments", "statefulsets"), ("create", "delete"), "apply-migration canary=",
         "dra/migration_canary.py (the duplicate, created and deleted by name)"),
    Rule("migration", "batch", ("jobs",), ("get",), "migrate", "dra/migrating.py"),
    Rule("migration", "", ("pods",), ("get",), "migrate, apply-migration", "dra/migrating.py"),
    Rule("migration", "apps", ("replicasets",), ("list",), "apply-migration", "dra/migration_run.py verify"),
    Rule("migration", R, ("resourceclaimtemplates",), ("get", "create", "patch", "delete"),
         "migrate (dry run), apply-migration", "dra/migration_run.py, dra/preflight.py"),
    Rule("migration", R, ("resourceclaims",), ("get",), "apply-migration", "dra/migration_run.py verify"),
    # ------------------------------------------------------------ repair's namespaces
    Rule("repair", "", ("pods",), ("delete",), "repair", "daemonset/repairing.py"),
    # ------------------------------------------------------------ targets the GPU operator renders
    Rule("operator", "nvidia.com", ("clusterpolicies",), ("get", "patch"),
         "canary, promote, rollback of a target with owner: clusterpolicy/<name>",
         "engine/owned.py, daemonset/through_operator.py",
         names="clusterpolicies"),
    # ------------------------------------------------------------ targets a Helm release owns
    Rule("helm", "", ("secrets",), ("get", "list"),
         "stability reports of a target with owner: helm (is the release still rendering the old image?)",
         "helm_release.py, stability/helm_check.py"),
)
"""Every rule the bot may need; nothing is granted that is not here (docs/security.md lists it)."""


def split(resource: str) -> tuple[str, str]:
    """``daemonsets.apps`` -> (``apps``, ``daemonsets``); ``pods/eviction`` -> (``""``, ``pods/eviction``);
    ``resourceclaims.resource.k8s.io/status`` -> (``resource.k8s.io``, ``resourceclaims/status``)."""
    base, _, sub = resource.partition("/")
    plural, _, group = base.partition(".")
    return group, f"{plural}/{sub}" if sub else plural


def rule_for(action: Action) -> Rule | None:
    """The table's rule that grants ``action`` (a namespaced grant first when it names a namespace)."""
    if action.resource.startswith("/"):
        return next((r for r in RULES if action.resource in r.resources and action.verb in r.verbs), None)
    group, resource = split(action.resource)
    found = [r for r in RULES if r.group == group and resource in r.resources and action.verb in r.verbs]
    if action.namespace:
        found.sort(key=lambda r: r.scope == "cluster")
    return found[0] if found else None


def access_review(action: Action) -> dict[str, Any]:
    """The SelfSubjectAccessReview asking whether the bot may do ``action`` (``kubectl auth can-i``)."""
    if action.resource.startswith("/"):
        spec: dict[str, Any] = {"nonResourceAttributes": {"path": action.resource, "verb": action.verb}}
    else:
        group, resource = split(action.resource)
        plural, _, sub = resource.partition("/")
        attributes = {"group": group, "resource": plural, "verb": action.verb}
        attributes |= {k: v for k, v in (("subresource", sub), ("namespace", action.namespace),
                                         ("name", action.name)) if v}
        spec = {"resourceAttributes": attributes}
    return {"apiVersion": f"{AUTHORIZATION}/v1", "kind": "SelfSubjectAccessReview", "spec": spec}


def refused_rule(cluster: Any, actions: list[Action]) -> Action | None:
    """The first of ``actions`` the API server says the bot may not do, asked as
    SelfSubjectAccessReviews (every authenticated user may ask); None when all are allowed.
    A server that cannot answer (an error other than a refusal) is not a refusal: the run's own
    calls will say what is wrong."""
    asked: set[Action] = set()
    for action in actions:
        if action in asked:
            continue
        asked.add(action)
        try:
            answer = cluster.write_json("POST", f"/apis/{AUTHORIZATION}/v1/selfsubjectaccessreviews",
                                        action=Action("create", f"selfsubjectaccessreviews.{AUTHORIZATION}"),
                                        body=access_review(action), content_type="application/json")
        except ClusterError:
            return None
        if not (answer.get("status") or {}).get("allowed"):
            return action
    return None


def run_actions(*, namespace: str, name: str, dra: bool, drain: bool, smoke_namespace: str | None,
                workloads: list[str], clusterpolicy: str | None = None) -> list[Action]:
    """What a canary, promotion and rollback of DaemonSet ``namespace/name`` call, one per rule: the
    request checks each before an approver is asked (``clusterpolicy``: the ClusterPolicy an
    operator-native run patches instead of the DaemonSet)."""
    ds = "daemonsets.apps"
    changes = ([Action(verb, "clusterpolicies.nvidia.com", None, clusterpolicy) for verb in ("get", "patch")]
               if clusterpolicy else [Action("patch", ds, namespace, name)])
    out = [*changes, Action("get", ds, namespace, name), Action("watch", ds, namespace),
           Action("list", "controllerrevisions.apps", namespace), Action("watch", "controllerrevisions.apps", namespace),
           Action("create", "pods", namespace), Action("delete", "pods", namespace), Action("get", "pods/log", namespace),
           Action("list", "pods"), Action("watch", "pods"), Action("list", "nodes"), Action("watch", "nodes"),
           Action("list", "events"), Action("watch", "events")]
    out += [Action(verb, "deployments.apps", namespace, workload) for workload in workloads for verb in ("get", "patch")]
    if dra:
        out += [Action(verb, f"{plural}.{R}") for plural in ("resourceslices", "resourceclaims")
                for verb in ("list", "watch")]
    if drain:
        out += [Action("patch", "nodes"), Action("create", "pods/eviction")]
    if smoke_namespace:
        out += [Action(verb, "pods", smoke_namespace) for verb in ("create", "get", "delete")]
        out.append(Action("get", "pods/log", smoke_namespace))
        if dra:
            out += [Action(verb, f"resourceclaimtemplates.{R}", smoke_namespace) for verb in ("create", "delete")]
            out += [Action(verb, f"resourceclaims.{R}", smoke_namespace) for verb in ("get", "delete")]
    return out
