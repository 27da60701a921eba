"""Watch streams: history replay from a resourceVersion, live events, bookmarks, 410 Gone.

A watch is a chunked response of JSON lines ``{"type": ..., "object": ...}``. With a
``resourceVersion`` it replays the events after it from the store's history (an
``ERROR`` event carrying a 410 ``Expired`` Status when that history is gone, as the real
API server does); without one it starts with ``ADDED`` for every current object. With
selectors, an object that starts or stops matching arrives as ``ADDED`` or ``DELETED``.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

from aiohttp import web

from kubesim import errors, tables
from kubesim.params import include_object, query_bool
from kubesim.store import WatchEvent

if TYPE_CHECKING:
    from kubesim.httpio import Target
    from kubesim.resources import ResourceType
    from kubesim.server import ApiServer

BOOKMARK_EVERY = 60.0
"""Real seconds between bookmarks to a watch that allows them (``defaultBookmarkFrequency``)."""
BOOKMARK_BEFORE_TIMEOUT = 2.0
"""A bookmark is due this long before the watch's timeout (``nextBookmarkTime``)."""
MAX_TIMEOUT = 1800.0


def _translate(event: WatchEvent, match: Any) -> str | None:
    """The event type a filtered watcher sees, or ``None`` when it sees nothing."""
    if match is None:
        return event.type
    now = match(event.obj) if event.type != "DELETED" else False
    before = match(event.old) if event.old is not None else False
    if event.type == "DELETED":
        return "DELETED" if before else None
    if now and before:
        return "MODIFIED"
    if now:
        return "ADDED"
    if before:
        return "DELETED"
    return None


SHUTDOWN = "shutdown"
"""Queued to every open watch when the server shuts down: the stream ends (the client watches again)."""


async def end_watches(server: ApiServer) -> None:
    """On shutdown: end every open watch now rather than wait for its timeout."""
    for queue in list(server.watches):
        queue.put_nowait((SHUTDOWN, {}))


async def serve_watch(server: ApiServer, request: web.Request, target: Target) -> web.StreamResponse:
    sim, res = server.sim, target.res
    try:
        predicate = server.predicate(request, target)
    except ValueError as exc:
        raise errors.bad_request(str(exc)) from None
    namespace = target.namespace
    if target.name:
        raise errors.method_not_allowed()
    as_table = "as=Table" in request.headers.get("Accept", "")
    include = include_object(request)
    timeout = min(float(request.query.get("timeoutSeconds") or MAX_TIMEOUT), MAX_TIMEOUT)
    bookmarks = query_bool(request, "allowWatchBookmarks")
    send_initial = query_bool(request, "sendInitialEvents")
    rv_text = request.query.get("resourceVersion") or ""

    def in_scope(obj: dict[str, Any]) -> bool:
        return not namespace or (obj.get("metadata") or {}).get("namespace") == namespace

    def match(obj: dict[str, Any]) -> bool:
        return in_scope(obj) and (predicate is None or predicate(obj))

    queue: asyncio.Queue[tuple[str, dict[str, Any]]] = asyncio.Queue()
    initial: list[tuple[str, dict[str, Any]]] = []
    error: dict[str, Any] | None = None
    gr = res.group_resource
    # Everything up to subscribe() runs without awaiting, so no write can slip between.
    initial_end: dict[str, Any] | None = None
    if send_initial:
        # WatchList (client-go informers, kubectl rollout status): the current state as
        # ADDED events, then a bookmark marking the end of the initial events.
        initial = [("ADDED", o) for o in sim.store.iter(gr, namespace, predicate)]
        initial_end = {
            "kind": res.kind, "apiVersion": res.api_version,
            "metadata": {"resourceVersion": str(sim.store.rv),
                         "annotations": {"k8s.io/initial-events-end": "true"}},
        }
    elif rv_text in ("", "0"):
        initial = [("ADDED", o) for o in sim.store.iter(gr, namespace, predicate)]
    else:
        try:
            since = int(rv_text)
        except ValueError:
            raise errors.bad_request(f"invalid resource version: {rv_text}") from None
        try:
            for ev in sim.store.history_since(gr, since):
                seen = _translate(ev, match)
                if seen:
                    initial.append((seen, ev.obj))
        except errors.ApiError as exc:
            error = exc.status()

    def listener(changed: ResourceType, event: WatchEvent) -> None:
        if changed.group_resource != gr:
            return
        kind = _translate(event, match)
        if kind:
            queue.put_nowait((kind, event.obj))

    unsubscribe = sim.store.subscribe(listener) if error is None else (lambda: None)
    server.watches.add(queue)  # a shutting-down server ends it, as the API server ends its watches
    response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
    response.enable_chunked_encoding()
    try:
        await response.prepare(request)

        async def send(kind: str, obj: dict[str, Any]) -> None:
            if kind == "ERROR" or kind == "BOOKMARK":
                payload = obj
            else:
                payload = server.from_storage(res, obj)
                if as_table:
                    payload = tables.to_table(res.plural, [payload], api_version=res.api_version, now=sim.clock.now(), include_object=include,
                                              list_meta={"resourceVersion": payload["metadata"].get("resourceVersion", "")})
            line = (json.dumps({"type": kind, "object": payload}) + "\n").encode()
            server.count_bytes("watch", res.plural, len(line))
            await response.write(line)

        if error is not None:
            await send("ERROR", error)
            return response
        for kind, obj in initial:
            await send(kind, obj)
        if initial_end is not None:
            await send("BOOKMARK", initial_end)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout

        def next_bookmark(now: float) -> float | None:
            """``nextBookmarkTime``: a minute on, or 2 s before the timeout if that is sooner; none past it."""
            due = min(now + BOOKMARK_EVERY, deadline - BOOKMARK_BEFORE_TIMEOUT)
            return due if bookmarks and due >= now else None

        bookmark_at = next_bookmark(loop.time())
        while True:
            now = loop.time()
            remaining = deadline - now
            if remaining <= 0:
                break
            if bookmark_at is not None and now >= bookmark_at:
                await send("BOOKMARK", {"kind": res.kind, "apiVersion": res.api_version,
                                        "metadata": {"resourceVersion": str(sim.store.rv)}})
                bookmark_at = next_bookmark(now + 0.001)
                continue
            wait = remaining if bookmark_at is None else min(remaining, max(0.0, bookmark_at - now))
            try:
                kind, obj = await asyncio.wait_for(queue.get(), timeout=wait)
            except TimeoutError:
                continue
            if kind == SHUTDOWN:
                break
            await send(kind, obj)
    except (ConnectionResetError, asyncio.CancelledError):
        pass
    finally:
        server.watches.discard(queue)
        unsubscribe()
    return response
