"""A step may change only its run's target: the engine's guard, checked before anything is sent."""

from __future__ import annotations

from typing import Any

import pytest

from runbooks.cluster.resources import DAEMONSETS, NAMESPACES, NODES, PODS
from runbooks.engine.runs import Target
from runbooks.engine.scoping import OutOfScope, ScopedCluster
from runbooks.errors import Action

TARGET = Target(cluster="prod", namespace="kube-system", name="nvidia-device-plugin-daemonset")


class Recorder:
    """A cluster that only records the writes that reach it."""

    context = "prod"

    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []

    def write_json(self, method: str, path: str, *, action: Action, body: Any = None,
                   content_type: str | None = None, query: Any = None) -> dict[str, Any]:
        self.sent.append((method, path))
        return {}


def test_the_target_and_its_pods_may_change() -> None:
    inner = Recorder()
    scoped = ScopedCluster(inner, TARGET)
    scoped.patch(DAEMONSETS, TARGET.name, {"spec": {}}, namespace=TARGET.namespace)
    scoped.delete(PODS, f"{TARGET.name}-x7k2p", namespace=TARGET.namespace, uid="u1")
    assert [m for m, _ in inner.sent] == ["PATCH", "DELETE"] and scoped.context == "prod"


@pytest.mark.parametrize("write", [
    lambda s: s.patch(DAEMONSETS, "another-daemonset", {}, namespace="kube-system"),
    lambda s: s.patch(DAEMONSETS, TARGET.name, {}, namespace="other-namespace"),
    lambda s: s.delete(PODS, "training-job-0", namespace="kube-system"),
    lambda s: s.delete(DAEMONSETS, TARGET.name, namespace=TARGET.namespace),
    lambda s: s.patch(NODES, "gpu-node1", {"spec": {"unschedulable": True}}),
    lambda s: s.create(NAMESPACES, {"metadata": {"name": "upgradebot-smoke-a1b2c3"}}),
    lambda s: s.create(PODS, {"metadata": {"name": "gpu-smoke-test-a1b2c3"}}, namespace="upgradebot-smoke"),
])
def test_anything_else_is_refused_before_it_is_sent(write: Any) -> None:
    inner = Recorder()
    with pytest.raises(OutOfScope, match="nothing was sent"):
        write(ScopedCluster(inner, TARGET))
    assert inner.sent == []


def test_the_smoke_tests_pods_may_change_in_its_namespace_when_it_has_one() -> None:
    inner = Recorder()
    scoped = ScopedCluster(inner, TARGET, scratch="upgradebot-smoke")
    scoped.create(PODS, {"metadata": {"name": "gpu-smoke-test-a1b2c3"}}, namespace="upgradebot-smoke")
    scoped.delete(PODS, "gpu-smoke-test-a1b2c3", namespace="upgradebot-smoke")
    assert len(inner.sent) == 2
    for refused in (lambda: scoped.create(NAMESPACES, {"metadata": {"name": "upgradebot-smoke-a1b2c3"}}),
                    lambda: scoped.delete(NAMESPACES, "upgradebot-smoke"),
                    lambda: scoped.create(PODS, {"metadata": {"name": "miner"}}, namespace="upgradebot-smoke"),
                    lambda: scoped.delete(PODS, "training-job-0", namespace="upgradebot-smoke"),
                    lambda: scoped.create(PODS, {"metadata": {"name": "gpu-smoke-test-x"}}, namespace="default")):
        with pytest.raises(OutOfScope):
            refused()
    assert len(inner.sent) == 2


def test_a_dra_smoke_test_may_make_its_claim_template_and_claim_there_only() -> None:
    from runbooks.cluster.resources import dra_resource

    inner = Recorder()
    scoped = ScopedCluster(inner, TARGET, scratch="upgradebot-smoke")
    templates, claims = dra_resource("ResourceClaimTemplate", "v1"), dra_resource("ResourceClaim", "v1")
    scoped.create(templates, {"metadata": {"name": "gpu-smoke-test-a1b2c3"}}, namespace="upgradebot-smoke")
    scoped.delete(claims, "gpu-smoke-test-a1b2c3-gpu-x7k2p", namespace="upgradebot-smoke")
    scoped.delete(templates, "gpu-smoke-test-a1b2c3", namespace="upgradebot-smoke")
    assert len(inner.sent) == 3
    for refused in (lambda: scoped.create(templates, {"metadata": {"name": "gpu-smoke-test-a"}}, namespace="ml-team"),
                    lambda: scoped.delete(claims, "shared-gpu", namespace="upgradebot-smoke"),
                    lambda: scoped.delete(claims, "gpu-smoke-test-a-gpu", namespace="ml-team"),
                    lambda: scoped.create(dra_resource("DeviceClass", "v1"), {"metadata": {"name": "gpu-smoke-test-a"}}),
                    lambda: scoped.create(claims, {"metadata": {"name": "other"}}, namespace="upgradebot-smoke")):
        with pytest.raises(OutOfScope):
            refused()
    assert len(inner.sent) == 3


def test_a_migration_canary_may_create_and_delete_only_its_duplicate() -> None:
    """Issue 38 item 1: a migration run with a canary may create its one duplicate (by name) and
    delete it; patching it, or creating or deleting another Deployment, is refused unsent."""
    from runbooks.cluster.resources import DEPLOYMENTS

    target = Target(cluster="prod", namespace="ml-team", name="trainer", kind="Deployment")
    inner = Recorder()
    scoped = ScopedCluster(inner, target, own=("trainer-upgradebot-canary",))
    scoped.create(DEPLOYMENTS, {"metadata": {"name": "trainer-upgradebot-canary"}}, namespace="ml-team")
    scoped.delete(DEPLOYMENTS, "trainer-upgradebot-canary", namespace="ml-team", uid="u1")
    assert [m for m, _ in inner.sent] == ["POST", "DELETE"]
    for write in (lambda: scoped.create(DEPLOYMENTS, {"metadata": {"name": "other"}}, namespace="ml-team"),
                  lambda: scoped.patch(DEPLOYMENTS, "trainer-upgradebot-canary", {}, namespace="ml-team"),
                  lambda: scoped.delete(DEPLOYMENTS, "trainer", namespace="ml-team"),
                  lambda: scoped.delete(DEPLOYMENTS, "other", namespace="ml-team")):
        with pytest.raises(OutOfScope, match="nothing was sent"):
            write()
    assert len(inner.sent) == 2


def test_a_cleanup_may_delete_only_the_claims_it_listed() -> None:
    """Issue 38 item 4: a cleanup run deletes the claims of its approved list and nothing else."""
    import datetime as dt

    from runbooks.cluster.resources import Resource
    from runbooks.engine.runs import Run, RunKind
    from runbooks.engine.scoping import cleanup_deletions

    claims = Resource("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", True)
    target = Target(cluster="prod", namespace="cluster-wide", name="resourceclaims", kind="ResourceClaim")
    now = dt.datetime.now(dt.UTC)
    run = Run(id="r-cleanup1", kind=RunKind.CLEANUP, requester="U0ALICE", created_at=now, updated_at=now,
              target=target, image="", container="", node="",
              change={"version": "v1", "delete": [{"namespace": "ml-team", "name": "stale"}]})
    inner = Recorder()
    scoped = ScopedCluster(inner, target, deletions=cleanup_deletions(run))
    scoped.delete(claims, "stale", namespace="ml-team", uid="u1", resource_version="7")
    for write in (lambda: scoped.delete(claims, "shared-gpu", namespace="ml-team"),
                  lambda: scoped.delete(claims, "stale", namespace="other"),
                  lambda: scoped.patch(claims, "stale", {}, namespace="ml-team")):
        with pytest.raises(OutOfScope, match="nothing was sent"):
            write()
    assert inner.sent == [("DELETE", "/apis/resource.k8s.io/v1/namespaces/ml-team/resourceclaims/stale")]


def test_a_target_the_operator_renders_changes_its_clusterpolicy_never_the_daemonset() -> None:
    """Issue 60: with owner clusterpolicy/<name> the run may patch that ClusterPolicy (and delete the
    plugin's pods), not the DaemonSet the operator would put back, nor another ClusterPolicy."""
    from runbooks.cluster.resources import CLUSTER_POLICIES

    target = Target(cluster="prod", namespace="gpu-operator", name="nvidia-device-plugin-daemonset",
                    owner="clusterpolicy/cluster-policy")
    inner = Recorder()
    scoped = ScopedCluster(inner, target)
    scoped.patch(CLUSTER_POLICIES, "cluster-policy", {"spec": {}}, patch_type="merge")
    scoped.delete(PODS, f"{target.name}-x7k2p", namespace=target.namespace, uid="u1")
    for write in (lambda: scoped.patch(DAEMONSETS, target.name, {}, namespace=target.namespace),
                  lambda: scoped.patch(CLUSTER_POLICIES, "other-policy", {}, patch_type="merge"),
                  lambda: scoped.delete(CLUSTER_POLICIES, "cluster-policy")):
        with pytest.raises(OutOfScope, match="nothing was sent"):
            write()
    assert inner.sent == [("PATCH", "/apis/nvidia.com/v1/clusterpolicies/cluster-policy"),
                          ("DELETE", f"/api/v1/namespaces/gpu-operator/pods/{target.name}-x7k2p")]


KEY = "kube-system.quarantine.upgradebot.io/nvidia-device-plugin-daemonset"
MARKS = ("gpu-node2", KEY)


def test_a_quarantine_may_patch_its_daemonset_and_only_its_nodes_marks_and_cordon() -> None:
    """Issue 61 item 5: a quarantine or release run writes its DaemonSet and, on its one node, the
    target's label and annotation and ``spec.unschedulable``: nothing else is sent."""
    inner = Recorder()
    scoped = ScopedCluster(inner, TARGET, marks=MARKS)
    scoped.patch(DAEMONSETS, TARGET.name, [{"op": "add", "path": "/spec/updateStrategy", "value": {}}],
                 namespace=TARGET.namespace, patch_type="json")
    scoped.patch(NODES, "gpu-node2", {"metadata": {"labels": {KEY: "r-00000000"}, "annotations": {KEY: "{}"}},
                                      "spec": {"unschedulable": True}}, patch_type="merge")
    scoped.patch(NODES, "gpu-node2", {"metadata": {"labels": {KEY: None}}, "spec": {"unschedulable": None}},
                 patch_type="merge")
    assert [m for m, _ in inner.sent] == ["PATCH", "PATCH", "PATCH"]


@pytest.mark.parametrize("write", [
    lambda s: s.patch(NODES, "gpu-node1", {"metadata": {"labels": {KEY: "r-00000000"}}}, patch_type="merge"),
    lambda s: s.patch(NODES, "gpu-node2", {"metadata": {"labels": {"team": "ml"}}}, patch_type="merge"),
    lambda s: s.patch(NODES, "gpu-node2", {"metadata": {"labels": {KEY: "r", "team": "ml"}}}, patch_type="merge"),
    lambda s: s.patch(NODES, "gpu-node2", {"spec": {"taints": []}}, patch_type="merge"),
    lambda s: s.patch(NODES, "gpu-node2", {"spec": {"unschedulable": False, "podCIDR": "10.0.0.0/24"}},
                      patch_type="merge"),
    lambda s: s.patch(NODES, "gpu-node2", [{"op": "remove", "path": "/metadata/labels"}], patch_type="json"),
    lambda s: s.delete(PODS, f"{TARGET.name}-x7k2p", namespace=TARGET.namespace, uid="u1"),
    lambda s: s.patch(DAEMONSETS, "another-daemonset", {}, namespace="kube-system"),
])
def test_a_quarantine_is_refused_any_other_write(write: Any) -> None:
    inner = Recorder()
    with pytest.raises(OutOfScope, match="quarantine marks and cordon of gpu-node2"):
        write(ScopedCluster(inner, TARGET, marks=MARKS))
    assert inner.sent == []
