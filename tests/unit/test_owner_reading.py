"""Who owns a plugin DaemonSet, read from its metadata alone (runbooks.owners): the precedence and the
labels that prove nothing by themselves."""

from __future__ import annotations

from typing import Any

from runbooks.owners import device_plugin_image, helm_values, owners_of


def ds(labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
       refs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "plugin", "namespace": "gpu", "labels": labels or {},
                         "annotations": annotations or {}, "ownerReferences": refs or []}}


def test_the_controller_governs_and_a_reference_that_does_not_control_is_no_owner() -> None:
    policy = {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "name": "cluster-policy", "uid": "u1",
              "controller": True}
    found = owners_of(ds({"app.kubernetes.io/managed-by": "Helm", "app.kubernetes.io/instance": "x"}, refs=[policy]))
    assert [(o.manager, o.ref) for o in found] == [("operator", "ClusterPolicy/cluster-policy"),
                                                  ("helm", "Helm release gpu/x")]
    other = {"apiVersion": "example.com/v2", "kind": "PluginSet", "name": "p", "uid": "u2", "controller": True}
    assert [(o.manager, o.ref) for o in owners_of(ds(refs=[other]))] == [("controller", "PluginSet/p")]
    assert owners_of(ds(refs=[{**other, "controller": False}])) == []


def test_the_instance_label_alone_is_nobodys_and_beside_argo_cds_annotations_is_argo_cds() -> None:
    assert owners_of(ds({"app.kubernetes.io/instance": "gpu-plugins"})) == []
    found = owners_of(ds({"app.kubernetes.io/instance": "gpu-plugins"}, {"argocd.argoproj.io/sync-wave": "1"}))
    assert [o.ref for o in found] == ["Argo CD Application gpu-plugins"]
    tracked = owners_of(ds(annotations={"argocd.argoproj.io/tracking-id": "apps:apps/DaemonSet:gpu/plugin"}))
    assert [(o.ref, o.read_from) for o in tracked] == [("Argo CD Application apps", "argocd.argoproj.io/tracking-id")]


def test_flux_comes_before_the_helm_release_it_installs() -> None:
    found = owners_of(ds({"helm.toolkit.fluxcd.io/name": "nvdp", "helm.toolkit.fluxcd.io/namespace": "flux-system",
                          "app.kubernetes.io/managed-by": "Helm"},
                         {"meta.helm.sh/release-name": "nvdp", "meta.helm.sh/release-namespace": "gpu"}))
    assert [o.ref for o in found] == ["Flux HelmRelease flux-system/nvdp", "Helm release gpu/nvdp"]


def test_the_image_as_the_clusterpolicy_and_the_chart_name_it() -> None:
    assert device_plugin_image("nvcr.io/nvidia/k8s-device-plugin:v0.17.1") == {
        "repository": "nvcr.io/nvidia", "image": "k8s-device-plugin", "version": "v0.17.1"}
    assert device_plugin_image("localhost:5000/k8s-device-plugin@sha256:" + "a" * 64)["version"] == "sha256:" + "a" * 64
    assert helm_values("nvcr.io/nvidia/k8s-device-plugin:v0.17.1", "nvidia-device-plugin-0.17.0") == (
        "--set image.repository=nvcr.io/nvidia/k8s-device-plugin --set image.tag=v0.17.1")
    assert helm_values("nvcr.io/nvidia/k8s-device-plugin:v0.17.1", "other-chart-1.0.0") is None
