"""Discovery: which API groups, versions and kinds a cluster serves (DRA's above all).

A mixin of :class:`runbooks.cluster.Cluster` that never imports the ``kubernetes``
client: it reads through the adapter's ``get_json`` (retried, errors already ours).
"""

from __future__ import annotations

from typing import Any

from runbooks.cluster.resources import (
    DRA_GROUP,
    DraApis,
    Resource,
    choose_dra_versions,
    sort_dra_versions,
)
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

    def api_resources(self, api_version: str) -> dict[str, Resource]:
        """``{kind: Resource}`` served in ``api_version`` (``v1``, ``apps/v1``); {} when it is not served."""
        group, _, version = api_version.rpartition("/")
        if not version:
            return {}
        path = f"/apis/{group}/{version}" if group else f"/api/{version}"
        try:
            body = self.get_json(path, action=Action("get", path))
        except NotFound:
            return {}
        out: dict[str, Resource] = {}
        for entry in body.get("resources") or []:
            name = str(entry.get("name", ""))
            if "/" not in name and entry.get("kind"):
                out.setdefault(str(entry["kind"]), Resource(group, version, name, str(entry["kind"]),
                                                            bool(entry.get("namespaced"))))
        return out

    def dra_apis(self) -> DraApis:
        """Served ``resource.k8s.io`` versions and kinds, and the version to read each kind in."""
        versions = sort_dra_versions(self.api_versions(DRA_GROUP))
        kinds = {v: self.api_kinds(DRA_GROUP, v) for v in versions}
        return DraApis(served_versions=versions, kinds=kinds, chosen=choose_dra_versions(kinds))
