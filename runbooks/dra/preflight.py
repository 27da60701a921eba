"""``preflight``: what a Kubernetes upgrade would break in the cluster's DRA objects and in manifests.

Read-only. The cluster's DRA objects (every kind it serves, in its preferred version),
its pods and the pod templates of its DaemonSets and Deployments, and any manifests
given, are checked against what the target release serves (:mod:`runbooks.dra.releases`):
a ``resource.k8s.io`` version or kind it does not serve, a version it serves only when
enabled or warns about, a pod field it removed, and what each upgrade step on the way
requires of objects already stored. Each finding names the object, the problem, the fix
and its source. Manifests the cluster serves today also go through a server-side dry run
(``dryRun=All``: nothing is written), whose answer is reported as the server gave it. A
cluster already at the target (a staging cluster upgraded first) is no refusal: there is no
step to check, and its manifests are checked against it and dry-run there.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, Field

from runbooks.cluster import Cluster
from runbooks.cluster.resources import DAEMONSETS, DRA_GROUP, PODS, Resource
from runbooks.dra import releases
from runbooks.dra.driver_check import check_drivers, deployed
from runbooks.engine.refusals import Refused
from runbooks.errors import ClusterError, NotFound

DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment", True)
POD_TEMPLATE_PATHS: dict[str, tuple[str, ...]] = {
    "Pod": ("spec",),
    "PodTemplate": ("template", "spec"),
    "DaemonSet": ("spec", "template", "spec"),
    "Deployment": ("spec", "template", "spec"),
    "ReplicaSet": ("spec", "template", "spec"),
    "StatefulSet": ("spec", "template", "spec"),
    "Job": ("spec", "template", "spec"),
    "CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
}
"""Where each workload kind keeps the pod spec that may name ResourceClaims."""


class PreflightFinding(BaseModel):
    severity: Literal["fail", "warn"]
    subject: str = Field(description="the object: kind, namespace/name")
    origin: str = Field(description='"cluster", or the manifest file (and document number)')
    code: str
    problem: str
    fix: str
    source: str = Field(description="where the fact comes from (release notes, API source, KEP)")


class DryRun(BaseModel):
    subject: str
    origin: str
    accepted: bool
    answer: str = Field(description="the server's answer as it gave it")


class PreflightNote(BaseModel):
    release: str
    text: str
    source: str


class Preflight(BaseModel):
    context: str
    server: str
    current: str = Field(description="the cluster's version, e.g. v1.31.13")
    current_minor: int
    target_minor: int
    steps: list[int]
    checked: int = Field(description="objects checked (cluster objects and manifest documents)")
    drivers: int = Field(default=0, description="DRA driver images the DaemonSets run, each judged on the way")
    findings: list[PreflightFinding]
    dry_runs: list[DryRun]
    notes: list[PreflightNote]
    taken_at: dt.datetime

    @property
    def failed(self) -> bool:
        return any(f.severity == "fail" for f in self.findings) or any(not d.accepted for d in self.dry_runs)

    @property
    def target(self) -> str:
        return f"1.{self.target_minor}"


@dataclass(frozen=True)
class Manifest:
    """One document of a manifest file: where it came from and the object."""

    origin: str
    obj: dict[str, Any]


class PreflightError(Refused):
    """The request cannot be checked (a target older than the cluster: Kubernetes is not downgraded)."""


# ------------------------------------------------------------------- checks
def _subject(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    name = meta.get("name") or meta.get("generateName") or "?"
    where = f"{meta['namespace']}/{name}" if meta.get("namespace") else name
    return f"{obj.get('kind', '?')} {where}"


def _dig(obj: Any, path: Sequence[str]) -> Any:
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def _finding(rule: releases.StepRule, obj: dict[str, Any], origin: str) -> PreflightFinding:
    return PreflightFinding(severity="fail", subject=_subject(obj), origin=origin, code=rule.code,
                            problem=rule.problem, fix=rule.fix, source=rule.source)


def _rules(steps: Sequence[int], target: int, code: str, *, manifest: bool) -> Iterator[releases.StepRule]:
    """The rules on the way (a cluster object), or every one up to the target (a manifest: it is
    applied after the upgrade, so a field removed before the cluster's release breaks it too)."""
    return (r for r in releases.STEPS if r.code == code and (r.minor <= target if manifest else r.minor in steps))


def check_object(obj: dict[str, Any], origin: str, *, target: int, steps: Sequence[int],
                 manifest: bool) -> list[PreflightFinding]:
    """The findings about one object (a manifest document, or an object read from the cluster)."""
    out: list[PreflightFinding] = []
    kind = str(obj.get("kind") or "")
    group, _, version = str(obj.get("apiVersion") or "").rpartition("/")
    goal = releases.release(min(target, releases.LAST))
    if group == DRA_GROUP and goal is not None:
        out += _served(obj, origin, version, kind, goal, manifest=manifest)
    spec_path = POD_TEMPLATE_PATHS.get(kind)
    if spec_path is not None:
        pod_spec = _dig(obj, spec_path)
        claims = (pod_spec or {}).get("resourceClaims") if isinstance(pod_spec, dict) else None
        if any(isinstance(c, dict) and "source" in c for c in claims or ()):
            out += [_finding(rule, obj, origin) for rule in _rules(steps, target, "pod-claim-source",
                                                                   manifest=manifest)]
    if group == DRA_GROUP and kind in ("ResourceClaim", "ResourceClaimTemplate"):
        spec = obj.get("spec") or {}
        if kind == "ResourceClaimTemplate":
            spec = spec.get("spec") or {}
        if isinstance(spec, dict) and spec.get("controller"):
            out += [_finding(rule, obj, origin) for rule in _rules(steps, target, "claim-controller",
                                                                   manifest=manifest)]
    return out


def _served(obj: dict[str, Any], origin: str, version: str, kind: str, goal: releases.Release, *,
            manifest: bool) -> list[PreflightFinding]:
    """Does the target serve this object's kind (and, for a manifest, its version)?"""
    def found(severity: Literal["fail", "warn"], code: str, problem: str, fix: str, source: str) -> PreflightFinding:
        return PreflightFinding(severity=severity, subject=_subject(obj), origin=origin, code=code,
                                problem=problem, fix=fix, source=source)

    preferred = goal.preferred
    everywhere = {k for kinds in goal.kinds.values() for k in kinds}
    if kind not in everywhere:
        instead = "a DeviceClass" if kind == "ResourceClass" else f"what resource.k8s.io/{preferred} offers"
        gone = releases.removed_in(kind, goal.minor)
        since = f" (removed in 1.{gone.minor})" if gone else ""
        return [found("fail", "kind-removed", f"1.{goal.minor} serves no {kind} in any resource.k8s.io version{since}",
                      f"replace it with {instead} before upgrading", gone.source if gone else goal.source)]
    if not manifest:
        return []  # a stored object is served in every version of its kind: the steps say what breaks
    if version not in goal.kinds:
        return [found("fail", "version-removed", f"1.{goal.minor} does not serve resource.k8s.io/{version}",
                      f"write it as resource.k8s.io/{preferred} {kind} (the request shape of that version)",
                      goal.source)]
    if kind not in goal.kinds[version]:
        return [found("fail", "kind-removed", f"1.{goal.minor} serves no {kind} in resource.k8s.io/{version}",
                      f"write it as resource.k8s.io/{preferred} {kind}", goal.source)]
    out = []
    if goal.default_served and version not in goal.default_served:
        out.append(found("warn", "version-not-default",
                         f"1.{goal.minor} serves resource.k8s.io/{version} only when the API server enables it",
                         f"write it as resource.k8s.io/{preferred} {kind}, or add resource.k8s.io/{version}=true "
                         "to the API server's --runtime-config", goal.source))
    deprecation = goal.deprecations.get(version)
    if deprecation is not None and deprecation.concerns(kind):
        out.append(found("warn", "version-deprecated", deprecation.warning(version, kind),
                         f"write it as resource.k8s.io/{preferred} {kind}", deprecation.source))
    return out


def check_stored(objs: Iterable[dict[str, Any]], *, current: int, steps: Sequence[int]) -> list[PreflightFinding]:
    """What each upgrade step requires of DRA objects already stored in the cluster."""
    out: list[PreflightFinding] = []
    for obj in objs:
        kind = str(obj.get("kind") or "")
        for rule in releases.STEPS:
            if rule.minor not in steps or not rule.kinds or (rule.stored_before and current >= rule.stored_before):
                continue
            if "*" in rule.kinds or kind in rule.kinds:
                out.append(_finding(rule, obj, "cluster"))
    return out


# ------------------------------------------------------------------ reading
def _dra_objects(cluster: Cluster) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for kind, resource in sorted(cluster.dra_apis().chosen.items()):
        for obj in cluster.list_objects(resource):
            out.append({**obj, "apiVersion": resource.api_version, "kind": kind})
    return out


def _workloads(cluster: Cluster) -> list[dict[str, Any]]:
    """Pods, DaemonSets and Deployments: what may name ResourceClaims the old way."""
    out: list[dict[str, Any]] = []
    for resource in (PODS, DAEMONSETS, DEPLOYMENTS):
        kind = resource.kind

        def keep(obj: dict[str, Any], kind: str = kind) -> dict[str, Any] | None:
            return obj if _uses_claims(obj, kind) else None  # page by page: 50,000 pods are never all held
        try:
            items = cluster.list_objects(resource, project=keep)
        except NotFound:
            continue  # a cluster that does not serve the kind
        out += [{**obj, "apiVersion": resource.api_version, "kind": kind} for obj in items if obj is not None]
    return out


def _daemonsets(cluster: Cluster) -> list[dict[str, Any]]:
    """Every DaemonSet's name, labels and containers: where the DRA drivers run."""
    def keep(obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj.get("metadata") or {}
        template = (obj.get("spec") or {}).get("template") or {}
        return {"metadata": {k: meta.get(k) for k in ("name", "namespace", "labels")},
                "spec": {"template": {"metadata": {"labels": (template.get("metadata") or {}).get("labels")},
                                      "spec": {"containers": (template.get("spec") or {}).get("containers")}}}}
    try:
        return cluster.list_objects(DAEMONSETS, project=keep)
    except NotFound:
        return []


def _uses_claims(obj: dict[str, Any], kind: str) -> bool:
    spec = _dig(obj, POD_TEMPLATE_PATHS[kind])
    return isinstance(spec, dict) and bool(spec.get("resourceClaims"))


class Discovered:
    """What the cluster serves, group-version by group-version, asked once each."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self._cache: dict[str, dict[str, Resource]] = {}

    def resource(self, api_version: str, kind: str) -> Resource | None:
        if api_version not in self._cache:
            self._cache[api_version] = self.cluster.api_resources(api_version)
        return self._cache[api_version].get(kind)


def dry_run(cluster: Cluster, discovered: Discovered, manifest: Manifest) -> DryRun | None:
    """The server's answer to applying one manifest with ``dryRun=All``; None when it does not serve it."""
    obj = manifest.obj
    resource = discovered.resource(str(obj.get("apiVersion") or ""), str(obj.get("kind") or ""))
    if resource is None:
        return None
    namespace = (obj.get("metadata") or {}).get("namespace") or ("default" if resource.namespaced else None)
    subject = _subject(obj)
    try:
        cluster.dry_run_apply(resource, obj, namespace=namespace)
    except ClusterError as exc:
        if exc.status is None:
            raise  # no answer at all: the cluster is unreachable, not the manifest wrong
        return DryRun(subject=subject, origin=manifest.origin, accepted=False, answer=exc.detail or str(exc))
    return DryRun(subject=subject, origin=manifest.origin, accepted=True, answer="accepted (dry run: nothing written)")


# -------------------------------------------------------------------- entry
def preflight(cluster: Cluster, target: int, manifests: Sequence[Manifest] = (), *,
              now: dt.datetime | None = None) -> Preflight:
    """Check the cluster's DRA objects and ``manifests`` against Kubernetes 1.``target``."""
    version = cluster.version()
    current = version.minor
    if target < current:
        raise PreflightError(f"the cluster already runs {version.git_version}, newer than 1.{target}: Kubernetes "
                             "is not downgraded (with DRA objects stored, a downgrade is not supported); give "
                             f"target=1.{current} to check manifests against this cluster, or a newer release")
    steps = releases.steps_between(current, target)
    stored = _dra_objects(cluster)
    workloads = _workloads(cluster)
    findings = check_stored(stored, current=current, steps=steps)
    daemonsets = _daemonsets(cluster)
    findings += [PreflightFinding(severity=d.severity, subject=d.subject, origin="cluster", code=d.code,
                                  problem=d.problem, fix=d.fix, source=d.source)
                 for d in check_drivers(daemonsets, current=current, target=target, steps=steps)]
    for obj in [*stored, *workloads]:
        findings += check_object(obj, "cluster", target=target, steps=steps, manifest=False)
    discovered = Discovered(cluster)
    runs: list[DryRun] = []
    for manifest in manifests:
        findings += check_object(manifest.obj, manifest.origin, target=target, steps=steps, manifest=True)
        answer = dry_run(cluster, discovered, manifest)
        if answer is not None:
            runs.append(answer)
    notes = [PreflightNote(release=f"1.{n.minor}", text=n.text, source=n.source)
             for n in releases.NOTES if n.minor in steps]
    if len(steps) > 1:
        path = " -> ".join(f"1.{m}" for m in [current, *steps])
        notes.insert(0, PreflightNote(release=f"1.{target}", text=f"the control plane is upgraded one minor release "
                                      f"at a time: {path}; every step was checked",
                                      source="https://kubernetes.io/releases/version-skew-policy/"))
    if not steps:
        notes.insert(0, PreflightNote(release=f"1.{target}", text=f"the cluster already runs 1.{target}: nothing to "
                                      f"upgrade; the manifests were checked against 1.{target} and dry-run on this "
                                      "cluster (a staging cluster upgraded first)", source=""))
    if target > releases.LAST:
        notes.append(PreflightNote(release=f"1.{target}", text=f"upgradebot knows DRA changes up to "
                                   f"1.{releases.LAST}; what later releases change was not checked", source=""))
    findings.sort(key=lambda f: (f.severity != "fail", f.origin != "cluster", f.origin, f.subject, f.code))
    return Preflight(
        context=cluster.context, server=cluster.server, current=version.git_version, current_minor=current,
        target_minor=target, steps=steps, checked=len(stored) + len(workloads) + len(manifests),
        drivers=len(deployed(daemonsets)),
        findings=findings, dry_runs=runs, notes=notes,
        taken_at=now or version.server_time or dt.datetime.now(dt.UTC),
    )

