"""Query parameters parsed as the real API server parses them."""

from __future__ import annotations

from aiohttp import web

from kubesim import errors


def query_bool(request: web.Request, name: str) -> bool:
    """A boolean query parameter parsed as Go's strconv.ParseBool does (true, True, 1, t...)."""
    value = request.query.get(name, "")
    if value in ("1", "t", "T", "true", "TRUE", "True"):
        return True
    if value in ("", "0", "f", "F", "false", "FALSE", "False"):
        return False
    raise errors.bad_request(f"invalid boolean value {value!r} for {name}")


def include_object(request: web.Request) -> str:
    """The ``includeObject`` of a Table request: None, Object or Metadata (the default)."""
    value = request.query.get("includeObject", "Metadata")
    if value not in ("None", "Object", "Metadata"):
        raise errors.bad_request(f"includeObject must be None, Object or Metadata, not {value!r}")
    return value
