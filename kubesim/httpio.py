"""What every handler of kubesim's HTTP front shares, as the API server does it.

A request's target parsed from its path, the options of a write read from its query and
body, and answers written as the API server writes them (JSON with a final newline,
``metav1.Status`` for errors, ``Warning`` headers).
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from kubesim import errors
from kubesim.resources import ResourceType
from kubesim.simulation import Simulation


def dumps(body: Any) -> str:
    return json.dumps(body, separators=(",", ":"))


def json_response(body: Any, status: int = 200) -> web.Response:
    """A JSON body as the API server writes it: its serializer is a Go ``json.Encoder``, whose
    ``Encode`` ends the document with a newline (clients print it, e.g. in ``FailToCreateError``)."""
    return web.Response(text=dumps(body) + "\n", status=status, content_type="application/json")


def error_response(exc: errors.ApiError, headers: dict[str, str] | None = None) -> web.Response:
    resp = json_response(exc.status(), exc.code)
    retry = (exc.details or {}).get("retryAfterSeconds")
    if retry:  # ErrorNegotiated: a Status that suggests a retry says so in Retry-After
        resp.headers["Retry-After"] = str(retry)
    for k, v in (headers or {}).items():
        resp.headers[k] = v
    return resp


class Target:
    """A parsed resource path: resource, namespace, name, subresource."""

    def __init__(self, res: ResourceType, namespace: str | None, name: str | None, sub: str | None):
        self.res, self.namespace, self.name, self.sub = res, namespace, name, sub


def parse_target(sim: Simulation, path: str) -> Target | None:
    parts = [p for p in path.split("/") if p]
    if parts[:2] == ["api", "v1"]:
        group, version, rest = "", "v1", parts[2:]
    elif parts and parts[0] == "apis" and len(parts) >= 3:
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        candidate = sim.surface.lookup(group, version, rest[2])
        if candidate is not None and candidate.namespaced:
            namespace, rest = rest[1], rest[2:]
    if not rest or len(rest) > 3:
        return None
    res = sim.surface.lookup(group, version, rest[0])
    if res is None:
        return None
    name = rest[1] if len(rest) >= 2 else None
    sub = rest[2] if len(rest) == 3 else None
    if sub is not None and sub not in res.subresources:
        return None
    return Target(res, namespace, name, sub)


FIELD_VALIDATION = ("Ignore", "Warn", "Strict")


def field_validation(request: web.Request) -> str:
    """The ``fieldValidation`` a write asks for; ``Warn`` when it asks for none, as the API server defaults."""
    value = request.query.get("fieldValidation") or "Warn"
    if value not in FIELD_VALIDATION:
        raise errors.bad_request(f"fieldValidation must be one of Ignore, Warn, Strict, not {value!r}")
    return value


def warned(response: web.Response, warnings: list[str]) -> web.Response:
    """The API server's ``Warning`` headers (RFC 7234 code 299), one per warning."""
    for text in warnings:
        escaped = text.replace("\\", "\\\\").replace('"', '\\"')
        response.headers.add("Warning", f'299 - "{escaped}"')
    return response


def patch_options_invalid(field: str, kind: str, why: str) -> errors.ApiError:
    """422 for a bad PATCH option, as the API server words it."""
    return errors.ApiError(
        422, "Invalid", f'PatchOptions.meta.k8s.io "" is invalid: {field}: {kind}: {why}',
        {"group": "meta.k8s.io", "kind": "PatchOptions",
         "causes": [{"reason": f"Field{kind.replace(' ', '')}", "message": f"{kind}: {why}", "field": field}]})


def body_options(raw: bytes, query: Any) -> dict[str, Any]:
    """DeleteOptions from the body and the query string (the query wins, as in the server)."""
    options: dict[str, Any] = {}
    if raw:
        try:
            options = json.loads(raw) or {}
        except ValueError:
            raise errors.bad_request("the DeleteOptions body is not valid JSON") from None
    if query.get("gracePeriodSeconds"):
        options["gracePeriodSeconds"] = int(query["gracePeriodSeconds"])
    if query.get("propagationPolicy"):
        options["propagationPolicy"] = query["propagationPolicy"]
    return options
