"""Discovery: which API groups, versions and kinds a cluster serves (DRA's above all).

A mixin of :class:`runbooks.cluster.Cluster` that never imports the ``kubernetes``
client: it reads through the adapter's ``get_json`` (retried, errors already ours).
"""

from __future__ import annotations

from typing import Any

from runbooks.cluster.resources import DRA_GROUP, DraApis, choose_dra_versions, sort_dra_versions
from runbooks.errors import Action, NotFound


class Discovery:
    """``/apis/<group>`` and ``/apis/<group>/<version>``, on top of the adapter's ``get_json``."""

    def get_json(self, path: str, *, action: Action, query: Any = None) -> dict[str, Any]:
        raise NotImplementedError  # the adapter implements it

    def api_versions(self, group: str) -> list[str]:
        """The versions of ``group`` the cluster serves (its preferred first); [] if none."""
        try:
            body = self.get_json(f"/apis/{group}", action=Action("get", f"/apis/{group}"))
        except NotFound:
            return []
        return [str(v.get("version")) for v in body.get("versions") or []]

    def api_kinds(self, group: str, version: str) -> list[str]:
        """Kinds served in ``group/version`` (subresources left out)."""
        path = f"/apis/{group}/{version}"
        try:
            body = self.get_json(path, action=Action("get", path))
        except NotFound:
            return []
        return [str(r["kind"]) for r in body.get("resources") or [] if "/" not in str(r.get("name", ""))]

    def dra_apis(self) -> DraApis:
        """Served ``resource.k8s.io`` versions and kinds, and the version to read each kind in."""
        versions = sort_dra_versions(self.api_versions(DRA_GROUP))
        kinds = {v: self.api_kinds(DRA_GROUP, v) for v in versions}
        return DraApis(served_versions=versions, kinds=kinds, chosen=choose_dra_versions(kinds))
