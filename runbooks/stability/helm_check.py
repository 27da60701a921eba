"""Whether a Helm release still renders the image a run replaced (policy ``owner: helm``, issue 60 item 4).

A run of a Helm release's target changes the DaemonSet, not the release: the next ``helm upgrade`` puts
back whatever the release renders. Each stability report reads the release's newest deployed revision
(:mod:`runbooks.helm_release`) and the live DaemonSet's plugin container, and compares the two images:
they differ (a warning naming both and the ``helm upgrade`` that makes the release match), they agree
(nothing said), or the release cannot be read (``unknown``, with the reason: RBAC, no deployed revision,
a chart whose values the bot does not know) as a note of how the report was made.
"""

from __future__ import annotations

from dataclasses import dataclass

from runbooks import digests
from runbooks.cluster import Cluster
from runbooks.cluster.resources import DAEMONSETS
from runbooks.engine.runs import Run
from runbooks.errors import ClusterError, shorten
from runbooks.helm_release import ReleaseUnread, deployed
from runbooks.owners import helm_values
from runbooks.plugin_containers import plugin_container


@dataclass(frozen=True)
class HelmCheck:
    """The release against the live DaemonSet, as one report found them."""

    release: str
    namespace: str
    live: str | None = None
    rendered: str | None = None
    revision: int = 0
    chart: str = ""
    unknown: str = ""
    """Why the release could not be compared ("" when it was)."""


def live_image(cluster: Cluster, run: Run) -> str:
    """The image of the target's plugin container now (the container the run changed)."""
    namespace, _, name = run.target.ref.partition("/")
    containers = cluster.get(DAEMONSETS, name, namespace)["spec"]["template"]["spec"]["containers"]
    wanted = (run.progress.get("saved") or {}).get("container") or plugin_container(containers)
    return next((str(c.get("image", "")) for c in containers if c.get("name") == wanted), "")


def check(cluster: Cluster, run: Run) -> HelmCheck | None:
    """The comparison for a run of a Helm release's target; None for any other run."""
    helm = run.progress.get("helm") or {}
    if not helm:
        return None
    release, namespace = str(helm.get("release", "")), str(helm.get("namespace", ""))
    try:
        live = live_image(cluster, run)
    except (ClusterError, KeyError, TypeError) as exc:
        return HelmCheck(release, namespace, unknown=f"cannot read the DaemonSet ({shorten(str(exc))})")
    verified = digests.of(run.progress).get("verified") or ""
    if verified and live == digests.pinned(run.image, verified):  # the run's tag, pinned to what its canary verified:
        live = run.image  # a release rendering that tag renders what the run promoted (a chart's values name no digest)
    try:
        found = deployed(cluster, release=release, namespace=namespace)
    except (ClusterError, ReleaseUnread) as exc:
        return HelmCheck(release, namespace, live=live, unknown=f"cannot read the release ({shorten(str(exc))})")
    if found.image is None:
        return HelmCheck(release, namespace, live=live, revision=found.revision, chart=found.chart,
                         unknown=f"the bot does not know which values of chart {found.chart} set the image")
    return HelmCheck(release, namespace, live=live, rendered=found.image, revision=found.revision, chart=found.chart)


def warnings_of(found: HelmCheck | None, target: str) -> list[str]:
    """The report's warning while the release renders another image than the DaemonSet runs."""
    if found is None or found.unknown or found.rendered == found.live:
        return []
    values = helm_values(found.live or "", found.chart)
    change = (f"`helm upgrade {found.release} <chart> -n {found.namespace} --reuse-values {values}`" if values
              else f"the release's image values set to {found.live}")
    return [f"Helm release {found.namespace}/{found.release} (revision {found.revision}) renders {found.rendered}, "
            f"but {target} runs {found.live}: the next `helm upgrade` puts {found.rendered} back on every node; "
            f"make the release match with {change}"]


def notes_of(found: HelmCheck | None) -> list[str]:
    """The report's note when the release could not be compared."""
    if found is None or not found.unknown:
        return []
    live = f" renders the live image {found.live}" if found.live else " renders the live image"
    return [f"Helm release {found.namespace}/{found.release}: unknown whether it{live}: {found.unknown}"]
