"""The simulated registry over HTTP, as a pull-through mirror answers the OCI distribution API.

Served on kubesim's own address (no token: a public registry's manifests are pulled
anonymously), so a client resolves a tag to its digest as containerd does before a pull
(remotes/docker/resolver.go, v1.7.27): ``HEAD /v2/<name>/manifests/<tag|digest>``, the digest
in the ``Docker-Content-Digest`` header. A mirror learns which registry a request is for from
the ``ns`` query parameter containerd adds for a mirror (``addNamespace``, same file): ``ns=nvcr.io``
(none: ``docker.io``). An unknown manifest is 404 with the spec's ``MANIFEST_UNKNOWN`` error
(opencontainers/distribution-spec spec.md v1.1.0, "Error Codes"; a HEAD answers no body).

- ``GET /v2/``: 200, ``{}`` (the API version check; ``Docker-Distribution-API-Version: registry/2.0``).
- ``HEAD`` / ``GET /v2/<name>/manifests/<reference>``: 200 with ``Docker-Content-Digest`` and the
  index media type, or 404. kubesim holds no manifest bodies: a GET answers the headers and an
  empty index, which is not the digest's content (a client must not verify it against the digest).
"""

from __future__ import annotations

import json

from aiohttp import web

from kubesim.registry import Registry

INDEX = "application/vnd.oci.image.index.v1+json"
_HEADERS = {"Docker-Distribution-API-Version": "registry/2.0"}


def _unknown(method: str, name: str, reference: str) -> web.Response:
    body = {"errors": [{"code": "MANIFEST_UNKNOWN", "message": "manifest unknown",
                        "detail": {"name": name, "reference": reference}}]}
    return web.Response(text="" if method == "HEAD" else json.dumps(body), status=404,
                        content_type="application/json", headers=_HEADERS)


def answer(registry: Registry, request: web.Request) -> web.Response:
    """The registry's answer to a ``/v2/`` request."""
    path = request.path
    if path.rstrip("/") == "/v2":
        return web.Response(text="{}", content_type="application/json", headers=_HEADERS)
    name, sep, reference = path[len("/v2/"):].rpartition("/manifests/")
    if not sep or not name or not reference or request.method not in ("HEAD", "GET"):
        return web.Response(text=json.dumps({"errors": [{"code": "UNSUPPORTED", "message": "the operation is unsupported"}]}),
                            status=405 if sep else 404, content_type="application/json", headers=_HEADERS)
    host = request.query.get("ns") or "docker.io"
    image = f"{host}/{name}" + (f"@{reference}" if reference.startswith("sha256:") else f":{reference}")
    try:
        digest = registry.resolve(image)
    except ValueError:
        digest = None
    if digest is None:
        return _unknown(request.method, name, reference)
    body = json.dumps({"schemaVersion": 2, "mediaType": INDEX, "manifests": []})
    return web.Response(text="" if request.method == "HEAD" else body, content_type=INDEX,
                        headers={**_HEADERS, "Docker-Content-Digest": digest})
