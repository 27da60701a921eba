"""The API server's answers that are not stored objects: discovery, OpenAPI, ``/metrics`` and container logs."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

from aiohttp import web

from kubesim import discovery, errors, openapi
from kubesim.clock import parse_time
from kubesim.httpio import Target, json_response
from kubesim.params import query_bool
from kubesim.simulation import Simulation

if TYPE_CHECKING:
    from kubesim.server import ApiServer


def discovery_answer(server: ApiServer, path: str, accept: str = "") -> web.Response | None:
    """Discovery, OpenAPI and ``/metrics`` for a GET of ``path``; None when it is not one of them."""
    surface = server.sim.surface
    if path == "/api":
        return json_response(discovery.api_versions(server.address))
    if path == "/apis":
        return json_response(discovery.api_group_list(surface))
    if path == "/metrics":
        counts = {
            (f"{p}.{g}" if g else p): server.sim.store.count((g, p))
            for (g, p) in {r.group_resource for r in surface.resources}
        }
        text = discovery.metrics_text(
            server.sim.minor, server.sim.feature_gates, counts, dict(server.request_counts), dict(server.response_sizes)
        )
        return web.Response(text=text, content_type="text/plain")
    parts = [p for p in path.split("/") if p]
    if parts == ["api", "v1"]:
        return json_response(discovery.api_resource_list(surface, "", "v1"))
    if len(parts) == 2 and parts[0] == "apis":
        group = discovery.api_group(surface, parts[1])
        if group is None:
            raise errors.ApiError(404, "NotFound", "the server could not find the requested resource")
        return json_response(group)
    if len(parts) == 3 and parts[0] == "apis":
        listing = discovery.api_resource_list(surface, parts[1], parts[2])
        if listing is None:
            raise errors.ApiError(404, "NotFound", "the server could not find the requested resource")
        return json_response(listing)
    if parts == ["openapi", "v2"]:
        git_version = discovery.version_info(server.sim.minor)["gitVersion"]
        if "protobuf" in accept:
            return web.Response(
                body=openapi.v2_document_protobuf(git_version),
                content_type="application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
            )
        return json_response(openapi.v2_document_json(git_version))
    if parts[:2] == ["openapi", "v3"]:
        if len(parts) == 2:
            return json_response(openapi.root_document(surface))
        rest = parts[2:]
        gv: tuple[str, str] = ("", "")
        if rest[0] == "api" and len(rest) == 2:
            gv = ("", rest[1])
        elif rest[0] == "apis" and len(rest) == 3:
            gv = (rest[1], rest[2])
        doc = openapi.gv_document(surface, *gv) if gv[1] else None
        if doc is None:
            raise errors.ApiError(404, "NotFound", "the server could not find the requested resource")
        return json_response(doc)
    if parts and parts[0] in ("openapi", "logs"):
        raise errors.ApiError(404, "NotFound", "the server could not find the requested resource")
    return None


def log_answer(sim: Simulation, request: web.Request, target: Target, pod: dict[str, Any]) -> web.Response:
    """``pods/<name>/log``: one container's log, with the API server's options and refusals."""
    containers = [c["name"] for c in (pod.get("spec") or {}).get("containers") or []]
    container = request.query.get("container")
    if not container:
        if len(containers) != 1:
            raise errors.bad_request(
                f"a container name must be specified for pod {target.name}, choose one of: "
                f"[{' '.join(containers)}]"
            )
        container = containers[0]
    if container not in containers:
        raise errors.bad_request(f"container {container} is not valid for pod {target.name}")
    since = None
    if request.query.get("sinceSeconds"):
        since = sim.clock.now() - dt.timedelta(seconds=int(request.query["sinceSeconds"]))
    elif request.query.get("sinceTime"):
        since = parse_time(request.query["sinceTime"])
    tail = int(request.query["tailLines"]) if request.query.get("tailLines") else None
    previous = query_bool(request, "previous")
    text = sim.logs.read(
        target.namespace or "", target.name or "", container,
        previous=previous, tail=tail, since=since,
        timestamps=query_bool(request, "timestamps"),
    )
    if text is None:
        if previous:
            raise errors.bad_request(
                f'previous terminated container "{container}" in pod "{target.name}" not found'
            )
        raise errors.bad_request(
            f'container "{container}" in pod "{target.name}" is waiting to start: ContainerCreating'
        )
    return web.Response(text=text, content_type="text/plain")
