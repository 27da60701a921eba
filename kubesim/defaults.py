"""The API server's defaulting of the kinds whose controllers rely on it (``SetDefaults_*``).

Applied by the store wherever it completes an object (create, replace, patches, controllers'
writes), as the API server defaults every object it decodes. Only the fields clients and
controllers read are set; a kind not listed here is stored as sent.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kubesim import installkinds


def statefulset(obj: dict[str, Any]) -> None:
    """``SetDefaults_StatefulSet``: replicas, podManagementPolicy, updateStrategy, revisionHistoryLimit."""
    spec = obj.setdefault("spec", {})
    spec.setdefault("replicas", 1)
    spec.setdefault("podManagementPolicy", "OrderedReady")
    spec.setdefault("revisionHistoryLimit", 10)
    strategy = spec.setdefault("updateStrategy", {"type": "RollingUpdate"})
    strategy.setdefault("type", "RollingUpdate")
    if strategy["type"] == "RollingUpdate":
        rolling = strategy.setdefault("rollingUpdate", {})
        if isinstance(rolling, dict):
            rolling.setdefault("partition", 0)


DEFAULTERS: dict[tuple[str, str], Callable[[dict[str, Any]], None]] = {("apps", "statefulsets"): statefulset}
DEFAULTERS.update({("", "secrets"): installkinds.secret, ("", "services"): installkinds.service})
