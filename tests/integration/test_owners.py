"""Who owns a plugin (issue 60): the GPU operator's ClusterPolicy, a Helm release, Argo CD, Flux.

Read from the DaemonSet's ownerReferences, labels and annotations as the API serves them (set here
through the API, as the operator, Helm and the GitOps controllers set them); shown in the inventory
(an OWNER column, a finding, ``--json``) and in the canary request; a canary on a target its owner
would put back is refused before any approver is asked, nothing stored and nothing changed."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import pytest

from handlers.inventory import summarize
from kubesim import KubeSim
from runbooks.engine.approving import Actor
from runbooks.engine.refusals import Refused
from runbooks.engine.runs import RunState
from runbooks.inventory import Inventory
from runbooks.policy import Policy
from tests.engine_support import kubesim_engine
from tests.support import Kubectl

OPERATOR_NS, OPERATOR_DS = "gpu-operator", "nvidia-device-plugin-daemonset"
OPERATOR_TARGET = f"{OPERATOR_NS}/{OPERATOR_DS}"
HELM_NS, HELM_DS = "nvidia-device-plugin", "nvdp-nvidia-device-plugin"
HELM_TARGET = f"{HELM_NS}/{HELM_DS}"
PLAIN_NS, PLAIN_DS = "kube-system", "nvidia-device-plugin-daemonset"
PLAIN_TARGET = f"{PLAIN_NS}/{PLAIN_DS}"
NEW = "nvcr.io/nvidia/k8s-device-plugin:v0.19.3"
POLICY_UID = "6f0d2c55-3f8e-4a5e-9d43-0c4b1f5e2a71"
ALICE, BOB = Actor("U0ALICE"), Actor("U0BOB")


def policy(*targets: object) -> Policy:
    return Policy.model_validate({"approvers": {"users": ["U0BOB"]}, "reports": {"after": []},
                                  "steps": {"observe_window": "1s", "poll_interval": "0.1s"},
                                  "targets": list(targets)})


def patch(sim: KubeSim, namespace: str, name: str, metadata: dict[str, object]) -> None:
    Kubectl(sim.kubeconfig)("-n", namespace, "patch", "daemonset", name, "--type", "merge",
                            "-p", json.dumps({"metadata": metadata}))


def template_images(sim: KubeSim, namespace: str, name: str) -> dict[str, str]:
    ds = Kubectl(sim.kubeconfig).json("-n", namespace, "get", "daemonset", name)
    return {c["name"]: c["image"] for c in ds["spec"]["template"]["spec"]["containers"]}


@pytest.fixture(scope="module")
def operator() -> Iterator[KubeSim]:
    """The gpu-operator scenario with the ownerReference the operator sets on what it renders
    (controllerutil.SetControllerReference: apiVersion nvidia.com/v1, kind ClusterPolicy, controller)."""
    with KubeSim(scenario="gpu-operator", k8s_version="1.31") as sim:
        patch(sim, OPERATOR_NS, OPERATOR_DS, {"ownerReferences": [{
            "apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "name": "cluster-policy", "uid": POLICY_UID,
            "controller": True, "blockOwnerDeletion": True}]})
        yield sim


@pytest.fixture(scope="module")
def helm() -> Iterator[KubeSim]:
    with KubeSim(scenario="gpu-helm", k8s_version="1.31") as sim:
        yield sim


@pytest.fixture(scope="module")
def plain() -> Iterator[KubeSim]:
    with KubeSim(k8s_version="1.31") as sim:
        yield sim


def test_inventory_names_the_clusterpolicy_in_an_owner_column_a_finding_and_json(
        operator: KubeSim, inventory_of: Callable[..., Inventory]) -> None:
    inv = inventory_of(operator)
    ds = inv.daemonset(OPERATOR_TARGET)
    assert ds is not None and ds.owner is not None
    assert (ds.owner.ref, ds.owner.manager, ds.owner.api_version, ds.owner.uid) == (
        "ClusterPolicy/cluster-policy", "operator", "nvidia.com/v1", POLICY_UID)
    found = [f for f in inv.findings if f.code == "plugin-owned"]
    assert [(f.object, f.severity) for f in found] == [(f"daemonset/{OPERATOR_TARGET}", "info")]
    assert "ClusterPolicy/cluster-policy" in found[0].message and "spec.devicePlugin" in found[0].next_step
    reply = summarize(inv)
    table = next(m.table for m in reply.thread if m.table is not None and "OWNER" in m.table.header)
    owner_at = table.header.index("OWNER")
    assert [row[owner_at] for row in table.rows] == ["ClusterPolicy/cluster-policy"]
    kept = json.loads(inv.model_dump_json())
    assert kept["daemonsets"][0]["owners"][0]["kind"] == "ClusterPolicy"
    assert Inventory.model_validate_json(inv.model_dump_json()) == inv


def test_canary_on_the_operators_daemonset_is_refused_naming_the_clusterpolicy(
        operator: KubeSim, redis_url: str) -> None:
    engine = kubesim_engine(operator, redis_url, policy(OPERATOR_TARGET))
    before = template_images(operator, OPERATOR_NS, OPERATOR_DS)
    with pytest.raises(Refused) as refused:
        engine.request_canary(actor=ALICE, target=OPERATOR_TARGET, image=NEW, node="gpu-node1")
    text = str(refused.value)
    assert "\n" not in text
    assert "ClusterPolicy/cluster-policy" in text and "before any approver was asked, nothing was changed" in text
    assert "set owner: clusterpolicy/cluster-policy on the target in the policy" in text
    assert ('kubectl patch clusterpolicy cluster-policy --type merge -p \'{"spec":{"devicePlugin":'
            '{"repository":"nvcr.io/nvidia","image":"k8s-device-plugin","version":"v0.19.3"}}}\'') in text
    assert engine.runs() == []
    assert template_images(operator, OPERATOR_NS, OPERATOR_DS) == before


def test_an_owner_the_policy_names_wrongly_is_refused(operator: KubeSim, redis_url: str) -> None:
    """owner: clusterpolicy/<name> must name the ClusterPolicy that controls the DaemonSet, and one the
    bot can read: else refused before any approver is asked, nothing stored."""
    wrong = kubesim_engine(operator, redis_url, policy({"namespace": OPERATOR_NS, "name": OPERATOR_DS,
                                                        "owner": "clusterpolicy/other-policy"}))
    with pytest.raises(Refused, match=r"the policy says ClusterPolicy/other-policy renders .* but its controller is "
                                      r"ClusterPolicy/cluster-policy"):
        wrong.request_canary(actor=ALICE, target=OPERATOR_TARGET, image=NEW, node="gpu-node1")
    assert wrong.runs() == []


def test_helm_release_read_from_helms_annotations_else_the_charts_labels(
        helm: KubeSim, inventory_of: Callable[..., Inventory]) -> None:
    """kubesim's gpu-helm carries what Helm 3 writes at install (meta.helm.sh annotations, managed-by: Helm):
    the release is read from the annotation; without the annotations (a `helm template` render) it is read
    from the chart's instance label, and said so."""
    ds = inventory_of(helm).daemonset(HELM_TARGET)
    assert ds is not None and ds.owner is not None
    assert ds.owner.ref == f"Helm release {HELM_NS}/nvdp"
    assert ds.owner.chart == "nvidia-device-plugin-0.17.0"
    assert ds.owner.read_from == "meta.helm.sh/release-name"
    annotations = {"meta.helm.sh/release-name": "nvdp", "meta.helm.sh/release-namespace": HELM_NS}
    patch(helm, HELM_NS, HELM_DS, {"annotations": dict.fromkeys(annotations)})
    try:
        ds = inventory_of(helm).daemonset(HELM_TARGET)
        assert ds is not None and ds.owner is not None and ds.owner.ref == f"Helm release {HELM_NS}/nvdp"
        assert "app.kubernetes.io/instance" in ds.owner.read_from
    finally:
        patch(helm, HELM_NS, HELM_DS, {"annotations": annotations})


def test_helm_target_without_owner_helm_is_refused_naming_the_release(helm: KubeSim, redis_url: str) -> None:
    engine = kubesim_engine(helm, redis_url, policy(HELM_TARGET))
    before = template_images(helm, HELM_NS, HELM_DS)
    with pytest.raises(Refused) as refused:
        engine.request_canary(actor=ALICE, target=HELM_TARGET, image=NEW, node="gpu-node1")
    text = str(refused.value)
    assert f"Helm release {HELM_NS}/nvdp" in text and "owner: helm" in text
    assert "--set image.repository=nvcr.io/nvidia/k8s-device-plugin --set image.tag=v0.19.3" in text
    assert engine.runs() == []
    assert template_images(helm, HELM_NS, HELM_DS) == before


def test_helm_target_with_owner_helm_warns_and_the_promoted_run_prints_the_values(
        helm: KubeSim, redis_url: str) -> None:
    """With owner: helm (and the release annotations Helm writes) the request names the owner and warns
    that the next `helm upgrade` reverts it; once promoted, the run's root message carries the values change."""
    from handlers.run_views import gate_message, root_message

    engine = kubesim_engine(helm, redis_url, policy({"namespace": HELM_NS, "name": HELM_DS, "owner": "helm"}))
    run = engine.request_canary(actor=ALICE, target=HELM_TARGET, image=NEW, node="gpu-node1").run
    assert run.progress["owner"] == f"Helm release {HELM_NS}/nvdp"
    assert run.gate is not None
    asked = gate_message(run, run.gate).text
    assert f"Owner: Helm release {HELM_NS}/nvdp" in asked
    assert "the next `helm upgrade` puts this change back" in asked
    values = "--reuse-values --set image.repository=nvcr.io/nvidia/k8s-device-plugin --set image.tag=v0.19.3"
    assert values in asked
    assert values not in root_message(run).text  # not promoted yet
    engine.approve(run.id, actor=BOB)
    run = engine.advance(run.id)
    assert run.state is RunState.AWAITING_PROMOTION, (run.state, run.reason)
    engine.approve(run.id, actor=BOB)
    run = engine.advance(run.id)
    assert run.state is RunState.DONE, (run.state, run.reason)
    assert f"`helm upgrade nvdp <chart> -n {HELM_NS} {values}`" in root_message(run).text
    from handlers.report import present as present_report
    from runbooks.cluster import Cluster
    from runbooks.stability.reporting import report_of

    with Cluster.from_kubeconfig(helm.kubeconfig) as cluster:
        report = report_of(run, cluster=cluster, tally=None, info={}, policy=engine.policy)
    assert report.warnings == [  # the release (revision 1, as installed) still renders v0.17.0
        f"Helm release {HELM_NS}/nvdp (revision 1) renders nvcr.io/nvidia/k8s-device-plugin:v0.17.0, but {HELM_TARGET} "
        f"runs {NEW}: the next `helm upgrade` puts nvcr.io/nvidia/k8s-device-plugin:v0.17.0 back on every node; make "
        f"the release match with `helm upgrade nvdp <chart> -n {HELM_NS} {values}`"]
    shown = present_report(report)
    assert any(m.title == "Warnings" and "Helm release" in (m.text or "") for m in shown.thread)


@pytest.mark.parametrize(("labels", "annotations", "named"), [
    ({}, {"argocd.argoproj.io/tracking-id": f"gpu-plugins:apps/DaemonSet:{PLAIN_NS}/{PLAIN_DS}"},
     "Argo CD Application gpu-plugins"),
    ({"app.kubernetes.io/instance": "gpu-plugins"}, {"argocd.argoproj.io/sync-options": "ServerSideApply=true"},
     "Argo CD Application gpu-plugins"),
    ({"kustomize.toolkit.fluxcd.io/name": "apps", "kustomize.toolkit.fluxcd.io/namespace": "flux-system"}, {},
     "Flux Kustomization flux-system/apps"),
    ({"helm.toolkit.fluxcd.io/name": "nvdp", "helm.toolkit.fluxcd.io/namespace": "flux-system",
      "app.kubernetes.io/managed-by": "Helm"}, {"meta.helm.sh/release-name": "nvdp"},
     "Flux HelmRelease flux-system/nvdp"),
])
def test_gitops_tracked_target_is_refused_naming_the_application(
        plain: KubeSim, redis_url: str, inventory_of: Callable[..., Inventory],
        labels: dict[str, str], annotations: dict[str, str], named: str) -> None:
    """Argo CD (tracking-id annotation, or the instance label beside Argo CD's annotations) and Flux
    (a Kustomization's or a HelmRelease's labels, the latter over Helm's own): refused even with
    owner: helm, the change belongs in git."""
    kubectl = Kubectl(plain.kubeconfig)
    original = kubectl.json("-n", PLAIN_NS, "get", "daemonset", PLAIN_DS)["metadata"]
    patch(plain, PLAIN_NS, PLAIN_DS, {"labels": labels, "annotations": annotations})
    try:
        ds = inventory_of(plain).daemonset(PLAIN_TARGET)
        assert ds is not None and ds.owner is not None and ds.owner.ref == named
        engine = kubesim_engine(plain, redis_url, policy({"namespace": PLAIN_NS, "name": PLAIN_DS, "owner": "helm"}))
        with pytest.raises(Refused) as refused:
            engine.request_canary(actor=ALICE, target=PLAIN_TARGET, image=NEW, node="gpu-node1")
        assert named in str(refused.value) and "the change belongs in git" in str(refused.value)
        assert engine.runs() == []
    finally:
        kept = original.get("labels") or {}
        patch(plain, PLAIN_NS, PLAIN_DS, {"labels": {k: kept.get(k) for k in labels},
                                          "annotations": {k: None for k in annotations}})


def test_plugin_nobody_owns_has_no_owner(plain: KubeSim, inventory_of: Callable[..., Inventory]) -> None:
    ds = inventory_of(plain).daemonset(PLAIN_TARGET)
    assert ds is not None and ds.owners == []
    assert "plugin-owned" not in [f.code for f in inventory_of(plain).findings]


CRD = """apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: clusterpolicies.nvidia.com}
spec:
  group: nvidia.com
  names: {kind: ClusterPolicy, listKind: ClusterPolicyList, plural: clusterpolicies, singular: clusterpolicy}
  scope: Cluster
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
"""
"""Test scaffolding, not the operator's CRD (op-kubesim serves that one): a ClusterPolicy to read and patch."""


def test_an_operator_native_canary_without_an_operator_writes_only_the_clusterpolicy_and_puts_it_back(
        plain: KubeSim, redis_url: str) -> None:
    """owner: clusterpolicy/<name>, on a cluster where nothing renders the ClusterPolicy: the request shows the
    ClusterPolicy's diff; the approved canary patches the ClusterPolicy (never the DaemonSet), waits for a
    render that does not come, fails saying so, and the automatic rollback puts the ClusterPolicy's fields
    back exactly, someone else's edit made meanwhile kept."""
    from handlers.run_views import gate_message

    kubectl = Kubectl(plain.kubeconfig)
    kubectl("apply", "-f", "-", input=CRD)
    kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "cluster-policy"},
        "spec": {"daemonsets": {"updateStrategy": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "1"}},
                 "devicePlugin": {"enabled": True, "repository": "nvcr.io/nvidia", "image": "k8s-device-plugin",
                                  "version": "v0.14.2"}}}))
    uid = kubectl.json("get", "clusterpolicies.nvidia.com", "cluster-policy")["metadata"]["uid"]
    ds_before = kubectl.json("-n", PLAIN_NS, "get", "daemonset", PLAIN_DS)
    patch(plain, PLAIN_NS, PLAIN_DS, {"ownerReferences": [{"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy",
                                                           "name": "cluster-policy", "uid": uid, "controller": True}]})
    try:
        pol = Policy.model_validate({**policy().model_dump(mode="json", exclude_defaults=True),
                                     "steps": {"observe_window": "1s", "poll_interval": "0.1s", "ready_timeout": "2s"},
                                     "targets": [{"namespace": PLAIN_NS, "name": PLAIN_DS,
                                                  "owner": "clusterpolicy/cluster-policy"}]})
        engine = kubesim_engine(plain, redis_url, pol)
        run = engine.request_canary(actor=ALICE, target=PLAIN_TARGET, image=NEW, node="gpu-node1").run
        assert run.target.owner == "clusterpolicy/cluster-policy"
        assert run.gate is not None
        asked = gate_message(run, run.gate).text
        assert "The run changes ClusterPolicy/cluster-policy, never the DaemonSet" in asked
        assert ("- spec.devicePlugin.version: v0.14.2\n+ spec.devicePlugin.version: v0.19.3\n"
                "- spec.daemonsets.updateStrategy: RollingUpdate\n+ spec.daemonsets.updateStrategy: OnDelete") in asked
        before = kubectl.json("get", "clusterpolicies.nvidia.com", "cluster-policy")["spec"]
        engine.approve(run.id, actor=BOB)
        kubectl("patch", "clusterpolicies.nvidia.com", "cluster-policy", "--type", "merge",
                "-p", '{"spec":{"devicePlugin":{"imagePullPolicy":"Always"}}}')  # someone else's edit
        run = engine.advance(run.id)
        assert run.state is RunState.ROLLED_BACK, (run.state, run.reason)
        audit = engine.audit(run.id)
        assert any("did not render ClusterPolicy/cluster-policy" in str(e.get("detail")) for e in audit), audit
        assert [e["name"] for e in audit if e.get("kind") == "mutation"] == ["canary.clusterpolicy",
                                                                            "rollback.clusterpolicy"]
        after = kubectl.json("get", "clusterpolicies.nvidia.com", "cluster-policy")["spec"]
        assert after == {**before, "devicePlugin": {**before["devicePlugin"], "imagePullPolicy": "Always"}}
        ds = kubectl.json("-n", PLAIN_NS, "get", "daemonset", PLAIN_DS)
        assert ds["spec"]["template"] == ds_before["spec"]["template"]
        assert ds["spec"]["updateStrategy"] == ds_before["spec"]["updateStrategy"]
    finally:
        patch(plain, PLAIN_NS, PLAIN_DS, {"ownerReferences": None})
