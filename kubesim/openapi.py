"""A small OpenAPI v3 document per group-version, enough for kubectl's needs.

kubectl reads ``/openapi/v3`` before ``apply`` and ``create`` to learn whether the server
validates fields itself (the ``fieldValidation`` parameter on a kind's PATCH operation)
and to find each kind's schema by its ``x-kubernetes-group-version-kind``. The schemas
here name the top-level fields only and let the rest through, as a permissive server
schema would; what the objects may contain is not checked against them.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from kubesim.resources import ApiSurface, ResourceType

_QUERY = ("dryRun", "fieldManager", "fieldValidation", "pretty")


def _gv_path(group: str, version: str) -> str:
    return f"api/{version}" if not group else f"apis/{group}/{version}"


def _schema_name(res: ResourceType) -> str:
    group = res.group or "core"
    return f"io.k8s.api.{group}.{res.version}.{res.kind}"


def _gvk(res: ResourceType) -> list[dict[str, str]]:
    return [{"group": res.group, "version": res.version, "kind": res.kind}]


def _op(res: ResourceType, action: str) -> dict[str, Any]:
    params = [{"name": n, "in": "query", "schema": {"type": "string"}, "uniqueItems": True} for n in _QUERY]
    return {
        "operationId": f"{action}{res.kind}",
        "parameters": params,
        "responses": {"200": {"description": "OK", "content": {"application/json": {
            "schema": {"$ref": f"#/components/schemas/{_schema_name(res)}"}}}}},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": _gvk(res)[0],
    }


def gv_document(surface: ApiSurface, group: str, version: str) -> dict[str, Any] | None:
    resources = surface.in_group_version(group, version)
    if not resources:
        return None
    paths: dict[str, Any] = {}
    schemas: dict[str, Any] = {}
    base = "/" + _gv_path(group, version)
    for res in resources:
        scope = f"{base}/namespaces/{{namespace}}/{res.plural}" if res.namespaced else f"{base}/{res.plural}"
        paths[scope] = {"get": _op(res, "list"), "post": _op(res, "post")}
        paths[f"{scope}/{{name}}"] = {
            "get": _op(res, "get"), "put": _op(res, "put"), "patch": _op(res, "patch"),
            "delete": _op(res, "delete"),
        }
        if "status" in res.subresources:
            paths[f"{scope}/{{name}}/status"] = {"get": _op(res, "get"), "patch": _op(res, "patch"),
                                                "put": _op(res, "put")}
        schemas[_schema_name(res)] = {
            "type": "object",
            "description": f"{res.kind} ({res.api_version}), served by kubesim.",
            "properties": {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "metadata": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            },
            "x-kubernetes-preserve-unknown-fields": True,
            "x-kubernetes-group-version-kind": _gvk(res),
        }
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "kubesim"},
        "paths": paths,
        "components": {"schemas": schemas},
    }


def root_document(surface: ApiSurface) -> dict[str, Any]:
    paths = {}
    for group, versions in surface.group_versions().items():
        for version in versions:
            doc = gv_document(surface, group, version)
            digest = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:32].upper()
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
