"""The OpenAPI v3 documents kubesim serves: one per group-version, as a real API server does.

Each document holds the release's published schemas (:mod:`kubesim.schemas`) of the kinds
the group-version serves and of every type they refer to, written as the API server writes
them: references as ``#/components/schemas/<name>``, wrapped in ``allOf`` where the
property has a description of its own. kubectl reads them before ``apply``, ``create``,
``diff`` and ``explain``: whether the server validates fields itself (the
``fieldValidation`` parameter on a kind's PATCH operation), each kind's schema by its
``x-kubernetes-group-version-kind``, and the list types and merge keys it patches by.
"""

from __future__ import annotations

import functools
import hashlib
import json
from typing import Any

from kubesim import schemas
from kubesim.resources import ApiSurface, ResourceType

_QUERY = ("dryRun", "fieldManager", "fieldValidation", "pretty")
_PATCH_QUERY = (*_QUERY, "force")
_COMPONENTS = "#/components/schemas/"


def _gv_path(group: str, version: str) -> str:
    return f"api/{version}" if not group else f"apis/{group}/{version}"


def _gvk(res: ResourceType) -> dict[str, str]:
    return {"group": res.group, "version": res.version, "kind": res.kind}


def _op(res: ResourceType, action: str, schema: str) -> dict[str, Any]:
    names = _PATCH_QUERY if action == "patch" else _QUERY
    params = [{"name": n, "in": "query", "schema": {"type": "string"}, "uniqueItems": True} for n in names]
    return {
        "operationId": f"{action}{res.kind}",
        "parameters": params,
        "responses": {"200": {"description": "OK", "content": {"application/json": {
            "schema": {"$ref": _COMPONENTS + schema}}}}},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": _gvk(res),
    }


def _rewrite(schema: Any, top: bool = False) -> Any:
    """A published schema as the server's v3 document writes it (refs, single types)."""
    if isinstance(schema, list):
        return [_rewrite(v) for v in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "$ref" and isinstance(value, str):
            out[key] = _COMPONENTS + value.removeprefix("#/$defs/")
        elif key == "type" and isinstance(value, list):
            out[key] = next((t for t in value if t != "null"), "object")
        elif key == "properties" and isinstance(value, dict):
            out[key] = {name: _rewrite(prop) for name, prop in value.items()}
            if top:  # the package pins apiVersion and kind with an enum; the server does not
                for name in ("apiVersion", "kind"):
                    if isinstance(out[key].get(name), dict):
                        out[key][name].pop("enum", None)
        else:
            out[key] = _rewrite(value)
    if "$ref" in out and len(out) > 1:
        ref = out.pop("$ref")
        out["allOf"] = [{"$ref": ref}]
    return out


def _permissive(res: ResourceType) -> dict[str, Any]:
    """A kind the release publishes no schema for: top-level fields, anything below."""
    loose = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    return {
        "type": "object",
        "description": f"{res.kind} ({res.api_version}), served by kubesim.",
        "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                       "metadata": loose, "spec": loose, "status": loose},
        "x-kubernetes-preserve-unknown-fields": True,
        "x-kubernetes-group-version-kind": [_gvk(res)],
    }


def gv_document(surface: ApiSurface, group: str, version: str) -> dict[str, Any] | None:
    resources = surface.in_group_version(group, version)
    if not resources:
        return None
    return _document(surface.minor, group, version, tuple(resources))


@functools.cache
def _document(minor: int, group: str, version: str, resources: tuple[ResourceType, ...]) -> dict[str, Any]:
    defs = schemas.for_release(minor)
    paths: dict[str, Any] = {}
    names: dict[ResourceType, str] = {}
    own: dict[str, Any] = {}
    extra: list[str] = []
    base = "/" + _gv_path(group, version)
    for res in resources:
        name = defs.kind(res.group, res.version, res.kind)
        if name is None:
            name = f"io.k8s.api.{res.group or 'core'}.{res.version}.{res.kind}"
            own[name] = _permissive(res)
        names[res] = name
        scope = f"{base}/namespaces/{{namespace}}/{res.plural}" if res.namespaced else f"{base}/{res.plural}"
        paths[scope] = {"get": _op(res, "list", name), "post": _op(res, "post", name)}
        paths[f"{scope}/{{name}}"] = {
            "get": _op(res, "get", name), "put": _op(res, "put", name), "patch": _op(res, "patch", name),
            "delete": _op(res, "delete", name),
        }
        if "status" in res.subresources:
            paths[f"{scope}/{{name}}/status"] = {"get": _op(res, "get", name), "patch": _op(res, "patch", name),
                                                "put": _op(res, "put", name)}
        evicting = defs.kind("policy", "v1", "Eviction")
        if "eviction" in res.subresources and evicting is not None:
            post = _op(res, "post", evicting)
            post["operationId"] = f"create{res.kind}Eviction"
            post["x-kubernetes-group-version-kind"] = {"group": "policy", "version": "v1", "kind": "Eviction"}
            paths[f"{scope}/{{name}}/eviction"] = {"post": post}
            extra.append(evicting)
    components = {n: _rewrite(defs.defs[n], top=True) for n in defs.closure([*names.values(), *extra])}
    components.update(own)
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "kubesim"},
        "paths": paths,
        "components": {"schemas": components},
    }


@functools.cache
def _digest(minor: int, group: str, version: str, resources: tuple[ResourceType, ...]) -> str:
    doc = _document(minor, group, version, resources)
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:32].upper()


def root_document(surface: ApiSurface) -> dict[str, Any]:
    paths = {}
    for group, versions in surface.group_versions().items():
        for version in versions:
            digest = _digest(surface.minor, group, version, tuple(surface.in_group_version(group, version)))
            path = _gv_path(group, version)
            paths[path] = {"serverRelativeURL": f"/openapi/v3/{path}?hash={digest}"}
    return {"paths": paths}


def _pb_bytes(field: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field (tag, varint length, bytes)."""
    out = bytearray([(field << 3) | 2])
    length = len(payload)
    while True:
        byte = length & 0x7F
        length >>= 7
        out.append(byte | (0x80 if length else 0))
        if not length:
            break
    return bytes(out) + payload


def v2_document_protobuf(git_version: str) -> bytes:
    """``/openapi/v2`` as kubectl asks for it (gnostic protobuf): swagger, info, empty paths.

    kubectl only falls back to this document for kinds the v3 documents do not name, such
    as a kind in a version the release does not serve; an empty document lets it go on to
    report the real problem (``no matches for kind ... in version ...``).
    """
    info = _pb_bytes(1, b"Kubernetes") + _pb_bytes(2, git_version.encode())
    return _pb_bytes(1, b"2.0") + _pb_bytes(2, info) + _pb_bytes(8, b"")


def v2_document_json(git_version: str) -> dict[str, Any]:
    return {"swagger": "2.0", "info": {"title": "Kubernetes", "version": git_version}, "paths": {}}
