"""A canary request on a DaemonSet someone else owns (:mod:`runbooks.owners`), judged before any approver is asked.

The GPU operator's ClusterPolicy, any other controller, Argo CD and Flux put a direct patch back
(the operator on its next reconcile, fleet-wide; GitOps on its next sync): such a request is refused in
one sentence naming the owner and what works instead, nothing stored. A Helm release's target
proceeds only when its policy entry says ``owner: helm``: the request then says that the next
``helm upgrade`` puts the change back, and the run keeps the values change that makes the release
match (``helm`` in its progress), which the finished run prints.
"""

from __future__ import annotations

from typing import Any

from runbooks.cluster.resources import DAEMONSETS
from runbooks.engine import refusals
from runbooks.engine.refusals import Refused
from runbooks.owners import helm_values, owner_way, owners_of, puts_back

OWNER, HELM = "owner", "helm"
"""Keys of a run's progress: who owns its target (``Helm release nvidia-device-plugin/nvdp``), and a
Helm release's values change (release, namespace, chart, ``--set`` flags)."""


def judge_owner(cluster: Any, *, namespace: str, name: str, image: str, allowed: str | None) -> dict[str, Any]:
    """What the run keeps of its target's owner (nothing for a DaemonSet nobody owns); :class:`Refused`
    when the owner would put the change back and the policy does not allow it (``allowed``: the target's
    ``owner``)."""
    ref = f"{namespace}/{name}"
    owners = owners_of(cluster.get(DAEMONSETS, name, namespace))
    if not owners:
        return {}
    owner = owners[0]
    if owner.manager != "helm" or allowed != "helm":
        raise Refused(refusals.owned_target(puts_back(ref, owner), owner_way(owner, image)))
    values = helm_values(image, owner.chart)
    return {OWNER: owner.ref,
            HELM: {"release": owner.name, "namespace": owner.namespace, "chart": owner.chart, "set": values or ""},
            "request_warnings": [refusals.helm_reverts(owner.ref, values)]}
