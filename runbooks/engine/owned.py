"""A canary request on a DaemonSet someone else owns (:mod:`runbooks.owners`), judged before any approver is asked.

The GPU operator's ClusterPolicy, any other controller, Argo CD and Flux put a direct patch back
(the operator on its next reconcile, fleet-wide; GitOps on its next sync): such a request is refused in
one sentence naming the owner and what works instead, nothing stored. Two owners the policy may accept
for a target:

- ``owner: helm`` (a Helm release's target): the request says that the next ``helm upgrade`` puts
  the change back, and the run keeps the values change that makes the release match (``helm`` in its
  progress), which the finished run prints;
- ``owner: clusterpolicy/<name>`` (the operator renders the target from that ClusterPolicy): the run
  changes the ClusterPolicy, never the DaemonSet (:mod:`runbooks.clusterpolicy`); the fields it will
  write and their values now are planned here, read-only, kept with the run (``clusterpolicy``) and
  shown in the request as a diff: what a rollback puts back.
"""

from __future__ import annotations

from typing import Any

from runbooks import clusterpolicy
from runbooks.cluster.resources import CLUSTER_POLICIES, DAEMONSETS
from runbooks.engine import refusals
from runbooks.engine.refusals import Refused
from runbooks.engine.runs import Run
from runbooks.errors import ClusterError
from runbooks.owners import Owner, helm_values, owner_way, owners_of, puts_back
from runbooks.templates import Edits

OWNER, HELM, CLUSTERPOLICY = "owner", "helm", "clusterpolicy"
"""Keys of a run's progress: who owns its target (``Helm release nvidia-device-plugin/nvdp``), a Helm
release's values change (release, namespace, chart, ``--set`` flags), and the ClusterPolicy change of
an operator-native run (name, the fields' values before, the values written, the diff shown)."""


def judge_owner(cluster: Any, *, namespace: str, name: str, image: str, allowed: str | None,
                edits: Edits | None = None) -> dict[str, Any]:
    """What the run keeps of its target's owner (nothing for a DaemonSet nobody owns); :class:`Refused`
    when the owner would put the change back and the policy does not allow it (``allowed``: the target's
    ``owner``)."""
    ref = f"{namespace}/{name}"
    owners = owners_of(cluster.get(DAEMONSETS, name, namespace))
    owner = owners[0] if owners else None
    if allowed and allowed.startswith("clusterpolicy/"):
        return _through_clusterpolicy(cluster, ref, owner, allowed.partition("/")[2], image=image, edits=edits or Edits())
    if owner is None:
        return {}
    if owner.manager != "helm" or allowed != "helm":
        raise Refused(refusals.owned_target(puts_back(ref, owner), owner_way(owner, image)))
    values = helm_values(image, owner.chart)
    return {OWNER: owner.ref,
            HELM: {"release": owner.name, "namespace": owner.namespace, "chart": owner.chart, "set": values or ""},
            "request_warnings": [refusals.helm_reverts(owner.ref, values)]}


def _through_clusterpolicy(cluster: Any, ref: str, owner: Owner | None, name: str, *, image: str,
                           edits: Edits) -> dict[str, Any]:
    if owner is None or owner.manager != "operator" or owner.name != name:
        raise Refused(refusals.not_rendered_by(ref, name, owner.ref if owner else None))
    try:
        policy = cluster.get(CLUSTER_POLICIES, name)
        wanted = clusterpolicy.wanted(policy, image=image, edits=edits)
    except ClusterError as exc:  # absent, or the bot may not read it (the sentence names the missing rule)
        raise Refused(refusals.clusterpolicy_unread(ref, name, str(exc))) from exc
    except clusterpolicy.NotThroughClusterPolicy as exc:
        raise Refused(refusals.owned_change_refused(ref, owner.ref, str(exc))) from exc
    saved = clusterpolicy.saved(policy, list(wanted))
    return {OWNER: owner.ref, CLUSTERPOLICY: {"name": name, "saved": saved, "wanted": wanted,
                                              "diff": clusterpolicy.diff(saved, wanted)}}


def through_owner(run: Run, owned: dict[str, Any], template_diff: str) -> tuple[Run, str]:
    """The run as :func:`judge_owner` found its target: an operator-native one names its ClusterPolicy in its
    target (the engine's scope then lets it patch that, never the DaemonSet) and shows the ClusterPolicy's diff
    instead of the template's (the operator renders the template)."""
    if CLUSTERPOLICY not in owned:
        return run, template_diff
    owner = f"clusterpolicy/{owned[CLUSTERPOLICY]['name']}"
    return run.model_copy(update={"target": run.target.model_copy(update={"owner": owner})}), ""
