"""Who owns a plugin DaemonSet: whoever puts a direct patch of it back. Pure; no I/O.

Read from the object's metadata only, in the order that governs:

- ``ownerReferences``: the controlling one (``controller: true``). The GPU operator sets its
  ClusterPolicy (``nvidia.com/v1``) as the controller of the DaemonSets it renders
  (``controllerutil.SetControllerReference`` in NVIDIA/gpu-operator ``controllers/object_controls.go``,
  v26.7.0) and rewrites them from ``spec.devicePlugin`` and ``spec.daemonsets`` on its next reconcile;
  any other controller does the same from its own object.
- Argo CD: the ``argocd.argoproj.io/tracking-id`` annotation (``<app>:<group>/<kind>:<namespace>/<name>``,
  the default tracking method since Argo CD 3.0), the custom tracking label
  ``argocd.argoproj.io/instance``, or the label method's ``app.kubernetes.io/instance`` when the object
  also carries an ``argocd.argoproj.io/…`` annotation (alone, that label is Helm's too, and proves nothing;
  Argo CD's "Resource Tracking" documentation says as much).
- Flux: ``helm.toolkit.fluxcd.io/name``/``namespace`` (a HelmRelease's objects) and
  ``kustomize.toolkit.fluxcd.io/name``/``namespace`` (a Kustomization's).
- Helm: ``app.kubernetes.io/managed-by: Helm`` with the release in ``meta.helm.sh/release-name`` and
  ``meta.helm.sh/release-namespace`` (Helm 3 writes both on what it installs); a release rendered
  without them (``helm template``, a hand-rendered chart) is named by the chart's own
  ``app.kubernetes.io/instance`` label (``.Release.Name`` in NVIDIA's chart), and said so in ``read_from``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from runbooks.characters import shown

Shown = Annotated[str, AfterValidator(shown)]

CLUSTER_POLICY = ("nvidia.com", "ClusterPolicy")
"""The GPU operator's ClusterPolicy: group and kind (``api/nvidia/v1/clusterpolicy_types.go``)."""
HELM_MANAGED_BY = "app.kubernetes.io/managed-by"
HELM_RELEASE, HELM_NAMESPACE = "meta.helm.sh/release-name", "meta.helm.sh/release-namespace"
INSTANCE = "app.kubernetes.io/instance"
HELM_CHART = "helm.sh/chart"
ARGO_TRACKING_ID, ARGO_LABEL, ARGO_PREFIX = "argocd.argoproj.io/tracking-id", "argocd.argoproj.io/instance", "argocd.argoproj.io/"
FLUX = (("HelmRelease", "helm.toolkit.fluxcd.io/name", "helm.toolkit.fluxcd.io/namespace"),
        ("Kustomization", "kustomize.toolkit.fluxcd.io/name", "kustomize.toolkit.fluxcd.io/namespace"))


OwnerManager = Literal["operator", "controller", "helm", "argocd", "flux"]


class Owner(BaseModel):
    """Who puts a plugin DaemonSet back when the bot patches it (:mod:`runbooks.owners`): the GPU
    operator's ClusterPolicy or any other controller (its ``ownerReferences``), a Helm release, an
    Argo CD Application, a Flux Kustomization or HelmRelease (their labels and annotations)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    manager: OwnerManager
    kind: Shown = Field(description="ClusterPolicy (or the controller's kind), Release, Application, Kustomization, "
                        "HelmRelease")
    name: Shown
    namespace: Shown = Field("", description="'' for a cluster-scoped owner (a ClusterPolicy)")
    api_version: Shown = Field("", description="an ownerReference's apiVersion, e.g. nvidia.com/v1")
    uid: Shown = Field("", description="an ownerReference's uid")
    chart: Shown = Field("", description="a Helm release's chart, from helm.sh/chart (e.g. nvidia-device-plugin-0.17.0)")
    read_from: Shown = Field(description="the field, label or annotation it was read from")

    @property
    def ref(self) -> str:
        """``ClusterPolicy/cluster-policy``, ``Helm release nvidia-device-plugin/nvdp``, ``Argo CD Application
        gpu-plugins``, ``Flux Kustomization flux-system/apps``."""
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        if self.manager == "helm":
            return f"Helm release {where}"
        if self.manager == "argocd":
            return f"Argo CD Application {where}"
        if self.manager == "flux":
            return f"Flux {self.kind} {where}"
        return f"{self.kind}/{where}"


def _controller(meta: Mapping[str, Any]) -> Owner | None:
    ref = next((r for r in meta.get("ownerReferences") or [] if r.get("controller")), None)
    if ref is None:
        return None
    api_version, kind = str(ref.get("apiVersion", "")), str(ref.get("kind", ""))
    operator = (api_version.split("/", 1)[0], kind) == CLUSTER_POLICY
    return Owner(manager="operator" if operator else "controller", kind=kind, name=str(ref.get("name", "")),
                 api_version=api_version, uid=str(ref.get("uid", "")), read_from="metadata.ownerReferences")


def _argocd(labels: Mapping[str, str], annotations: Mapping[str, str]) -> Owner | None:
    tracking = annotations.get(ARGO_TRACKING_ID)
    if tracking:
        return Owner(manager="argocd", kind="Application", name=tracking.split(":", 1)[0], read_from=ARGO_TRACKING_ID)
    if labels.get(ARGO_LABEL):
        return Owner(manager="argocd", kind="Application", name=labels[ARGO_LABEL], read_from=ARGO_LABEL)
    if labels.get(INSTANCE) and any(k.startswith(ARGO_PREFIX) for k in annotations):
        return Owner(manager="argocd", kind="Application", name=labels[INSTANCE],
                     read_from=f"{INSTANCE} (with argocd.argoproj.io annotations)")
    return None


def _flux(labels: Mapping[str, str], namespace: str) -> list[Owner]:
    return [Owner(manager="flux", kind=kind, name=labels[name], namespace=labels.get(ns) or namespace, read_from=name)
            for kind, name, ns in FLUX if labels.get(name)]


def _helm(labels: Mapping[str, str], annotations: Mapping[str, str], namespace: str) -> Owner | None:
    chart = labels.get(HELM_CHART, "")
    if annotations.get(HELM_RELEASE):
        return Owner(manager="helm", kind="Release", name=annotations[HELM_RELEASE],
                     namespace=annotations.get(HELM_NAMESPACE) or namespace, chart=chart, read_from=HELM_RELEASE)
    if labels.get(HELM_MANAGED_BY) == "Helm" and labels.get(INSTANCE):
        return Owner(manager="helm", kind="Release", name=labels[INSTANCE], namespace=namespace, chart=chart,
                     read_from=f"labels {HELM_MANAGED_BY}: Helm and {INSTANCE}, without {HELM_RELEASE}")
    return None


def owners_of(obj: Mapping[str, Any]) -> list[Owner]:
    """Who puts a direct change of ``obj`` back, the one that governs first: its controller, then
    Argo CD or Flux (they sync from git, a Helm chart's objects included), then Helm."""
    meta = obj.get("metadata") or {}
    labels: Mapping[str, str] = meta.get("labels") or {}
    annotations: Mapping[str, str] = meta.get("annotations") or {}
    namespace = str(meta.get("namespace", ""))
    found = [_controller(meta), _argocd(labels, annotations), *_flux(labels, namespace),
             _helm(labels, annotations, namespace)]
    return [owner for owner in found if owner is not None]


def device_plugin_image(image: str) -> dict[str, str]:
    """The ClusterPolicy's ``spec.devicePlugin`` fields that render ``image``: ``repository``, ``image``
    and ``version`` as the operator joins them (``imagePath``: ``<repository>/<image>:<version>``, or
    ``@<version>`` for a ``sha256:`` digest, api/nvidia/v1/clusterpolicy_types.go v26.7.0)."""
    name, _, digest = image.partition("@")
    path, tag = name, ""
    if not digest and ":" in name.rsplit("/", 1)[-1]:
        path, tag = name.rsplit(":", 1)
    repository, _, last = path.rpartition("/")
    return {"repository": repository, "image": last, "version": digest or tag}


def helm_values(image: str, chart: str) -> str | None:
    """The ``--set`` flags that make a release of NVIDIA's device-plugin chart render ``image``
    (``image.repository`` and ``image.tag`` in its values.yaml; the ``fullimage`` helper joins them), or
    None for a chart whose values the bot does not know."""
    if not chart.startswith("nvidia-device-plugin-"):
        return None
    name, _, digest = image.partition("@")
    if digest or ":" not in name.rsplit("/", 1)[-1]:
        return None
    repository, tag = name.rsplit(":", 1)
    return f"--set image.repository={repository} --set image.tag={tag}"


def puts_back(ref: str, owner: Owner) -> str:
    """One clause: who owns ``ref`` and how a direct change of it is undone."""
    if owner.manager == "operator":
        return (f"{ref} is rendered by {owner.ref} ({owner.api_version}, its controller): the GPU operator puts a "
                "direct change back on its next reconcile, on every node at once")
    if owner.manager == "controller":
        return f"{ref} is controlled by {owner.ref} ({owner.api_version}): its controller puts a direct change back"
    if owner.manager == "helm":
        chart = f", chart {owner.chart}" if owner.chart else ""
        return (f"{ref} belongs to {owner.ref} ({owner.read_from}{chart}): the next `helm upgrade` puts a direct "
                "change back")
    return f"{ref} is tracked by {owner.ref} ({owner.read_from}): its next sync puts a direct change back"


def owner_way(owner: Owner, image: str = "") -> str:
    """What works instead of a direct change, for ``owner`` (``image``: the one asked for, if any)."""
    if owner.manager == "operator":
        fields = device_plugin_image(image) if image else {}
        patch = (" (`kubectl patch clusterpolicy " + owner.name + " --type merge -p '{\"spec\":{\"devicePlugin\":"
                 + "{" + ",".join(f'"{k}":"{v}"' for k, v in fields.items()) + "}}}'`)") if fields else ""
        return (f"set owner: clusterpolicy/{owner.name} on the target in the policy, and the canary changes "
                f"{owner.ref}'s spec.devicePlugin instead (`upgradebot rbac` grants get and patch on it), or change it "
                f"yourself{patch}")
    if owner.manager == "controller":
        return f"change the plugin through {owner.ref}"
    if owner.manager == "helm":
        values = helm_values(image, owner.chart) if image else None
        upgrade = (f"`helm upgrade {owner.name} <chart> -n {owner.namespace} --reuse-values {values}`" if values
                   else "`helm upgrade` with the new image in its values")
        return f"upgrade the release ({upgrade}), or set owner: helm on the target in the policy to canary it here"
    return "the change belongs in git, in the source that application syncs from"
