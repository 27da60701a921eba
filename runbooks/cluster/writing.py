"""Writes to the cluster: patch, create and delete, each one request through the adapter.

A mixin of :class:`runbooks.cluster.Cluster` that never imports the ``kubernetes``
client: every request goes through the adapter's ``write_json`` (its ``_send``), so
failures arrive as :mod:`runbooks.errors`. Writes are not retried here: a step re-reads
the cluster and decides again, so a repeated attempt never applies a change twice.
Preconditions make the writes safe against races: a ``resourceVersion`` on patches whose
result depends on what was read, a ``uid`` on deletes so a replacement pod with the same
name is never deleted.
"""

from __future__ import annotations

from typing import Any, Literal

from runbooks.cluster.resources import PODS, Resource
from runbooks.errors import Action

PatchType = Literal["strategic", "merge", "json"]
Query = list[tuple[str, str | int]]
"""Query parameters of a request, in order."""
CONTENT_TYPES: dict[str, str] = {
    "strategic": "application/strategic-merge-patch+json",
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
}


APPLY = "application/apply-patch+yaml"
FIELD_MANAGER = "upgradebot"


class Writes:
    """Patch, create and delete, on top of the adapter's single ``write_json``."""

    def write_json(
        self, method: str, path: str, *, action: Action, body: Any = None, content_type: str | None = None,
        query: Query | None = None,
    ) -> dict[str, Any]:
        raise NotImplementedError  # the adapter implements it

    def dry_run_apply(self, resource: Resource, body: dict[str, Any], *, namespace: str | None = None,
                      field_manager: str = FIELD_MANAGER) -> dict[str, Any]:
        """What the server would make of ``body`` applied server-side (``dryRun=All``): the
        object it would store, or its refusal as an error. Nothing is written, whether the
        object exists or not."""
        name = (body.get("metadata") or {}).get("name") or ""
        action = Action("dry-run apply", resource.qualified, namespace, name)
        query: Query = [("dryRun", "All"), ("fieldManager", field_manager), ("force", "true")]
        return self.write_json("PATCH", resource.path(namespace, name), action=action, body=body,
                               content_type=APPLY, query=query)

    def patch(
        self, resource: Resource, name: str, body: Any, *, namespace: str | None = None,
        patch_type: PatchType = "strategic", resource_version: str | None = None, dry_run: bool = False,
    ) -> dict[str, Any]:
        """Patch one object; with ``resource_version`` the server refuses (409 → ``Conflict``)
        if the object changed since it was read. Returns the patched object (with ``dry_run``,
        the object the server would store, nothing written)."""
        if resource_version is not None:
            if patch_type == "json":
                body = [{"op": "test", "path": "/metadata/resourceVersion", "value": resource_version}, *body]
            else:
                body = {**body, "metadata": {**(body.get("metadata") or {}), "resourceVersion": resource_version}}
        action = Action("patch", resource.qualified, namespace, name)
        return self.write_json(
            "PATCH", resource.path(namespace, name), action=action, body=body, content_type=CONTENT_TYPES[patch_type],
            query=_dry(dry_run),
        )

    def create(self, resource: Resource, body: dict[str, Any], *, namespace: str | None = None,
               dry_run: bool = False) -> dict[str, Any]:
        """Create one object; ``Conflict`` if one of that name exists. With ``dry_run`` the server
        admits and validates it as the create, and stores nothing."""
        name = (body.get("metadata") or {}).get("name") or (body.get("metadata") or {}).get("generateName")
        action = Action("create", resource.qualified, namespace, name)
        return self.write_json(
            "POST", resource.path(namespace), action=action,
            body={"apiVersion": resource.api_version, "kind": resource.kind, **body}, content_type="application/json",
            query=_dry(dry_run),
        )

    def delete(
        self, resource: Resource, name: str, *, namespace: str | None = None, uid: str | None = None,
        grace_seconds: int | None = None, propagation: str | None = "Background", resource_version: str | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Delete one object; with ``uid`` only that very object (``Conflict`` if the name now
        belongs to another one, ``NotFound`` if it is gone); with ``resource_version`` only as it
        was read (``Conflict`` if it changed since); with ``dry_run`` nothing is deleted (the
        server authorizes and checks it as the deletion)."""
        options: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if uid or resource_version:
            options["preconditions"] = {k: v for k, v in (("uid", uid), ("resourceVersion", resource_version)) if v}
        if grace_seconds is not None:
            options["gracePeriodSeconds"] = grace_seconds
        if propagation:
            options["propagationPolicy"] = propagation
        action = Action("delete", resource.qualified, namespace, name)
        return self.write_json(
            "DELETE", resource.path(namespace, name), action=action, body=options, content_type="application/json",
            query=_dry(dry_run),
        )

    def evict(self, name: str, *, namespace: str, uid: str | None = None, dry_run: bool = False) -> dict[str, Any]:
        """Evict one pod through the eviction API (``policy/v1``), which honours its
        PodDisruptionBudget: ``DisruptionRefused`` (429) while the budget allows no disruption;
        with ``uid`` only that very pod; with ``dry_run`` the budget is asked, nothing evicted."""
        body: dict[str, Any] = {"apiVersion": "policy/v1", "kind": "Eviction",
                                "metadata": {"name": name, "namespace": namespace}}
        if uid:
            body["deleteOptions"] = {"preconditions": {"uid": uid}}
        action = Action("create", "pods/eviction", namespace, name)
        return self.write_json("POST", PODS.path(namespace, name, "eviction"), action=action,
                               body=body, content_type="application/json", query=_dry(dry_run))


def _dry(dry_run: bool) -> Query | None:
    """The query of a server-side dry run (authorized and checked like the write, nothing stored)."""
    return [("dryRun", "All")] if dry_run else None
