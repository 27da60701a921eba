"""``preflight``'s judgement of each deployed DRA driver against the releases on the way.

A DRA driver is a DaemonSet container whose image is a release of a driver the matrix knows
(:data:`runbooks.dra.drivers.DRIVERS`), or the kubelet plugin of a DaemonSet the inventory
recognises as one (:func:`runbooks.inventory.plugins.classify`). For a known release, at
each release on the way (the first one that breaks it is named): does that release's kubelet
register it and call a gRPC API it serves (:func:`runbooks.dra.drivers.with_kubelet`), does
the API server serve the ``resource.k8s.io`` version it uses (by default, or only when
enabled), and is the release inside its Helm chart's ``kubeVersion``. A driver the matrix
does not know is said to be unchecked (naming the newest known release of its repository);
what its kubelet gRPC API must be is still told from the cluster's own kubelet: a driver
working with the 1.31 kubelet serves ``v1alpha4`` registered as version ``1.0.0``, which the
1.34 kubelet refuses whatever its image.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from runbooks.dra import releases
from runbooks.dra.drivers import (
    DRIVERS,
    KUBELETS,
    LIBRARIES,
    REPOSITORIES,
    DriverRelease,
    Library,
    image_name,
    newest,
    release_of,
    resource_api_at,
    with_kubelet,
    working_libraries,
)
from runbooks.inventory.plugins import classify
from runbooks.plugin_containers import plugin_container


@dataclass(frozen=True)
class DriverFinding:
    severity: Literal["fail", "warn"]
    subject: str
    code: str
    problem: str
    fix: str
    source: str


@dataclass(frozen=True)
class Deployed:
    """One DRA driver image a DaemonSet runs."""

    subject: str
    image: str


def deployed(daemonsets: Iterable[dict[str, Any]]) -> list[Deployed]:
    """Each DaemonSet's DRA driver images: known releases' repositories, or the plugin container
    of a DaemonSet recognised as a DRA kubelet plugin."""
    out: list[Deployed] = []
    for ds in daemonsets:
        meta = ds.get("metadata") or {}
        subject = f"DaemonSet {meta.get('namespace', '')}/{meta.get('name', '')}"
        containers = [c for c in (((ds.get("spec") or {}).get("template") or {}).get("spec") or {}).get(
            "containers") or [] if isinstance(c, dict)]
        images: list[str] = []
        for container in containers:
            name = image_name(str(container.get("image") or ""))
            if name is not None and name.repository in REPOSITORIES and container["image"] not in images:
                images.append(str(container["image"]))
        if not images and classify(ds) == "dra-kubelet-plugin":
            chosen = plugin_container(containers) if len(containers) > 1 else (containers[0]["name"] if containers
                                                                                else None)
            found = next((c for c in containers if c.get("name") == chosen), None)
            if found is not None and found.get("image"):
                images.append(str(found["image"]))
        out += [Deployed(subject, image) for image in images]
    return out


def _fits(release: DriverRelease, minor: int) -> bool:
    library = release.built_on
    return (with_kubelet(library, minor).works and resource_api_at(library, minor)[0] is not None
            and (release.kube_min is None or minor >= release.kube_min)
            and (release.kube_max is None or minor <= release.kube_max))


def _fix(release: DriverRelease, current: int, minors: Sequence[int]) -> str:
    """The newest release of the same driver that works before and after every step, else the way round."""
    span = [current, *minors]
    same = [d for d in reversed(DRIVERS) if d.repository == release.repository]
    both = next((d for d in same if all(_fits(d, m) for m in span)), None)
    if both is not None:
        return (f"upgrade the driver to {both.image} (it works on 1.{current} to 1.{minors[-1]}; {both.source}) "
                "before upgrading Kubernetes")
    later = next((d for d in same if _fits(d, minors[-1])), None)
    if later is None:
        return f"no release of the {release.component} in the matrix works on 1.{minors[-1]}: replace the driver"
    first = next(m for m in span if _fits(later, m))
    return (f"no release of the {release.component} in the matrix works on both 1.{current} and 1.{minors[-1]}: "
            f"upgrade Kubernetes to 1.{first} (DRA claims on the driver's nodes stop being prepared meanwhile), "
            f"then the driver to {later.image} ({later.source}), then go on")


def judge_release(item: Deployed, release: DriverRelease, *, current: int,
                  minors: Sequence[int]) -> list[DriverFinding]:
    """A known release at each release on the way: the first that breaks it, per kind of break."""
    library = release.built_on
    label = f"{item.image} ({release.name}, built on {library.name})"
    out: list[DriverFinding] = []
    grpc = next(((m, o) for m in minors if not (o := with_kubelet(library, m)).works), None)
    if grpc is not None:
        minor, outcome = grpc
        out.append(DriverFinding("fail", item.subject, "driver-kubelet-grpc", f"{label}: {outcome.why}",
                                 _fix(release, current, minors), f"{KUBELETS[minor].source} ; {release.source}"))
    for minor in minors:
        used, by_default = resource_api_at(library, minor)
        if used is None:
            out.append(DriverFinding(
                "fail", item.subject, "driver-resource-api",
                f"{label} uses resource.k8s.io/{' or '.join(library.resource_api)}, and 1.{minor} serves none of them",
                _fix(release, current, minors), releases.RELEASES[minor].source))
            break
        if not by_default:
            out.append(DriverFinding(
                "warn", item.subject, "driver-resource-api",
                f"{label} uses resource.k8s.io/{used}, which 1.{minor} serves only when the API server enables it",
                f"keep resource.k8s.io/{used}=true in the API server's --runtime-config, or "
                + _fix(release, current, minors), releases.RELEASES[minor].default_source))
            break
    below = next((m for m in minors if release.kube_min is not None and m < release.kube_min), None)
    above = next((m for m in minors if release.kube_max is not None and m > release.kube_max), None)
    edge = below if below is not None else above
    if edge is not None:
        side = "below" if below is not None else "above"
        out.append(DriverFinding(
            "fail" if below is not None else "warn", item.subject, "driver-kube-version",
            f"1.{edge} is {side} the Kubernetes range of {release.name}'s Helm chart (kubeVersion: "
            f"\"{release.kube_version}\"): helm refuses to install or upgrade it there",
            _fix(release, current, minors), release.chart_source))
    return out


def judge_unknown(item: Deployed, *, current: int, minors: Sequence[int]) -> list[DriverFinding]:
    """A driver the matrix does not know: unchecked, but its kubelet gRPC API is told by the cluster's kubelet."""
    name = image_name(item.image)
    known = newest(name.repository) if name is not None and name.repository in REPOSITORIES else None
    unchecked = (f"{item.image} is not a release in the DRA driver matrix (newest known: {known.name}, {known.source})"
                 if known is not None else f"{item.image} is a DRA driver the matrix does not know")
    candidates = working_libraries(current) if current in KUBELETS else []
    broken: dict[int, tuple[int, str]] = {}
    for library in candidates:
        hit = next(((m, o.why) for m in minors if not (o := with_kubelet(library, m)).works), None)
        if hit is not None:
            broken[library.minor] = hit
    source = f"{KUBELETS[current].source}" if current in KUBELETS else ""
    if candidates and len(broken) == len(candidates):
        last = candidates[-1]
        minor, why = broken[last.minor]
        built = candidates[0].name + (f" to 0.{last.minor}" if len(candidates) > 1 else "")
        return [DriverFinding(
            "fail", item.subject, "driver-kubelet-grpc",
            f"{unchecked}, but a driver working with the 1.{current} kubelet serves what {built} serves "
            f"({', '.join(_union(candidates))}): {why}",
            _rebuild(minor), f"{KUBELETS[minor].source} ; {source}")]
    maybe = "; ".join(f"if it is built on {LIBRARIES[m].name}: {why}" for m, (_, why) in sorted(broken.items()))
    what = (f"; its kubelet gRPC API was judged from the 1.{current} kubelet: {maybe}" if maybe else
            f"; whatever it is built on, a driver working with the 1.{current} kubelet keeps registering up to "
            f"1.{minors[-1]}" if candidates else "")
    return [DriverFinding(
        "warn", item.subject, "driver-unchecked",
        f"{unchecked}: its resource.k8s.io version and Helm chart range were not checked against 1.{minors[-1]}{what}",
        "check the driver's release notes for 1." + str(minors[-1]) + (
            f", or move to a release the matrix knows ({known.image})" if known is not None else ""),
        known.source if known is not None else source)]


def _rebuild(minor: int) -> str:
    """How to move a driver the matrix does not know past the kubelet of 1.<minor>."""
    both = [lib for lib in working_libraries(minor) if with_kubelet(lib, minor - 1).works]
    if both:
        return (f"move the driver to a build on {both[0].name} or newer (the 1.{minor - 1} and 1.{minor} kubelets "
                f"both take it) before the kubelets go to 1.{minor}")
    first = working_libraries(minor)[0]
    return (f"no k8s.io/dynamic-resource-allocation release works with both the 1.{minor - 1} and 1.{minor} "
            f"kubelets: move the driver to a build on {first.name} as the kubelets go to 1.{minor} (claims on its "
            "nodes are not prepared meanwhile)")


def _union(libraries: Sequence[Library]) -> list[str]:
    out: list[str] = []
    for library in libraries:
        out += [v for v in library.grpc if v not in out]
    return out


def check_drivers(daemonsets: Iterable[dict[str, Any]], *, current: int, target: int,
                  steps: Sequence[int]) -> list[DriverFinding]:
    """Every deployed DRA driver at every release on the way (the target itself when there is no step)."""
    minors = [m for m in (steps or [target]) if m in releases.RELEASES]
    if not minors:
        return []
    out: list[DriverFinding] = []
    for item in deployed(daemonsets):
        release = release_of(item.image)
        if release is not None:
            out += judge_release(item, release, current=current, minors=minors)
        else:
            out += judge_unknown(item, current=current, minors=minors)
    return out
