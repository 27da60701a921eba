"""kubesim's HTTP front: the Kubernetes REST API over aiohttp, answered from the store.

Routing follows the real paths (``/api/v1/...``, ``/apis/<group>/<version>/...``,
``namespaces/<ns>/<plural>/<name>/<subresource>``); every answer is what a real API
server would send, errors included (``metav1.Status`` with code and reason). Requests
need a bearer token, except the health and version endpoints: the kubeconfig's (an
admin with every right), or a ServiceAccount's, authorized by RBAC (:mod:`kubesim.rbac`).
"""

from __future__ import annotations

import asyncio
import builtins
import email.utils
import json
import secrets
from collections import Counter
from typing import Any

import yaml
from aiohttp import web

from kubesim import (
    answers,
    applying,
    control,
    conversion,
    discovery,
    errors,
    eviction,
    execstream,
    patching,
    protokinds,
    protowire,
    quantities,
    rbac,
    registryapi,
    selectors,
    strategies,
    tables,
)
from kubesim.clock import rfc3339
from kubesim.httpio import (
    Target,
    body_options,
    error_response,
    field_validation,
    json_response,
    parse_target,
    patch_options_invalid,
    warned,
)
from kubesim.params import include_object, query_bool
from kubesim.resources import ResourceType
from kubesim.simulation import Simulation
from kubesim.watching import end_watches, serve_watch

SERVICE_ACCOUNT = "system:serviceaccount:upgradebot:upgradebot"
PUBLIC_PATHS = ("/healthz", "/readyz", "/livez", "/version")
MUTATING = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
REVIEWS = frozenset({"selfsubjectaccessreviews", "selfsubjectrulesreviews", "selfsubjectreviews"})
"""Created and answered, never stored: asking the API server a question changes nothing, so a
review is not in the log of mutating requests (``/sim/v1/requests``)."""
APPLY_PATCH = "application/apply-patch+yaml"
PATCH_TYPES = (
    "application/json-patch+json",
    "application/merge-patch+json",
    APPLY_PATCH,
    "application/strategic-merge-patch+json",
)


class ApiServer:
    """The aiohttp application around one :class:`Simulation`."""

    def __init__(self, sim: Simulation, *, token: str) -> None:
        self.sim = sim
        self.token = token
        self.admin = rbac.User(SERVICE_ACCOUNT, ("system:masters", rbac.AUTHENTICATED))
        self.authorizer = rbac.Authorizer(sim.store)
        self.address = "127.0.0.1:0"
        self.request_counts: Counter[tuple[str, str, int]] = Counter()
        self.response_sizes: dict[tuple[str, str], tuple[int, int]] = {}
        """(verb, resource) -> (responses, bytes); for ``watch``: (events, bytes), counted as they are sent."""
        self.types = applying.Types(sim.store.definitions)
        self._field_managers: dict[ResourceType, applying.FieldManager] = {}
        self.app = web.Application(client_max_size=64 * 1024 * 1024)
        self.app.router.add_route("*", "/{tail:.*}", self.dispatch)
        self.app.on_response_prepare.append(self._stamp_date)
        self.watches: set[asyncio.Queue[Any]] = set()
        """The queues of the open watches (:func:`kubesim.watching.end_watches` ends them on shutdown)."""
        self.app.on_shutdown.append(lambda app: end_watches(self))

    async def _stamp_date(self, request: web.Request, response: web.StreamResponse) -> None:
        """``Date`` in simulated time, so clients can learn the server's "now"."""
        response.headers["Date"] = email.utils.format_datetime(self.sim.clock.now(), usegmt=True)
        # As kube-apiserver's WithCacheControl: kubectl's HTTP cache must not serve discovery from before a CRD.
        response.headers.setdefault("Cache-Control", "no-cache, private")

    # ------------------------------------------------------------ dispatch
    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        if path.rstrip("/") in PUBLIC_PATHS:
            return self.public(path.rstrip("/"))
        if path == "/v2" or path.startswith("/v2/"):  # the registry, pulled from anonymously
            return registryapi.answer(self.sim.registry, request)
        user = self.authenticate(request.headers.get("Authorization", ""))
        if user is None:
            return error_response(errors.ApiError(401, "Unauthorized", "Unauthorized"))
        fault = self.sim.faults.next_api_error(path)
        if fault is not None:
            if fault.get("delay"):
                await asyncio.sleep(float(fault["delay"]))
            if fault.get("code"):
                code = int(fault["code"])
                reason = "TooManyRequests" if code == 429 else "InternalError"
                msg = (
                    "the server has received too many requests and has asked us to try again later"
                    if code == 429
                    else "an error on the server (\"injected fault\") has prevented the request from succeeding"
                )
                headers = {"Retry-After": str(fault.get("retry_after", 1))} if code == 429 else {}
                return error_response(errors.ApiError(code, reason, msg), headers)
        try:
            if path.startswith("/sim/"):
                if not user.admin:
                    raise rbac.forbidden(user, rbac.Attributes(verb=request.method.lower(), path=path))
                return await control.handle(self.sim, request)
            return await self.route(request, user)
        except errors.ApiError as exc:
            return error_response(exc)

    def authenticate(self, header: str) -> rbac.User | None:
        """The admin (the kubeconfig's token), a ServiceAccount (a token it was given), or None."""
        scheme, _, token = header.partition(" ")
        if scheme != "Bearer" or not token:
            return None
        if secrets.compare_digest(token, self.token):
            return self.admin
        return self.sim.tokens.user(token, self.sim.store)

    def authorize(self, user: rbac.User, ask: rbac.Attributes) -> None:
        if not self.authorizer.allows(user, ask):
            self.request_counts[(ask.verb, ask.path or ask.resource, 403)] += 1  # apiserver_request_total
            raise rbac.forbidden(user, ask)

    def public(self, path: str) -> web.Response:
        if path == "/version":
            return json_response(discovery.version_info(self.sim.minor))
        return web.Response(text="ok", content_type="text/plain")

    async def route(self, request: web.Request, user: rbac.User) -> web.StreamResponse:
        path = request.path.rstrip("/") or "/"
        method = request.method
        if method == "GET" and parse_target(self.sim, path) is None:
            if self.sim.faults.is_forbidden(path, "get"):
                raise errors.ApiError(
                    403, "Forbidden",
                    f'forbidden: User "{SERVICE_ACCOUNT}" cannot get path "{path}"', {},
                )
            self.authorize(user, rbac.Attributes(verb="get", path=path))
            body = answers.discovery_answer(self, path, request.headers.get("Accept", ""))
            if body is not None:
                return body
        target = parse_target(self.sim, path)
        if target is None:
            raise errors.ApiError(404, "NotFound", "the server could not find the requested resource")
        verb = self.verb(request, target)
        if self.sim.faults.is_forbidden(path, verb):
            scope = f'in the namespace "{target.namespace}"' if target.namespace else "at the cluster scope"
            raise errors.ApiError(
                403,
                "Forbidden",
                f'{target.res.plural} is forbidden: User "{SERVICE_ACCOUNT}" '
                f'cannot {verb} resource "{target.res.plural}" in API group "{target.res.group}" {scope}',
                {"kind": target.res.plural, "group": target.res.group},
            )
        self.authorize(user, rbac.Attributes(verb=verb, group=target.res.group, resource=target.res.plural,
                                             subresource=target.sub or "", namespace=target.namespace or "",
                                             name=target.name or ""))
        code, size = 200, 0
        try:
            response = await self.serve(request, target, verb, user)
            code = response.status
            body = getattr(response, "body", None)
            if verb != "watch" and isinstance(body, bytes | bytearray):
                size = len(body)
                self.count_bytes(verb, target.res.plural, size)
            return response
        except errors.ApiError as exc:
            code = exc.code
            raise
        finally:
            self.request_counts[(verb, target.res.plural, code)] += 1
            if method in MUTATING and target.res.plural not in REVIEWS:
                self.sim.mutations.append(
                    {
                        "verb": verb,
                        "method": method,
                        "path": request.path,
                        "query": request.query_string,
                        "dryRun": request.query.get("dryRun") == "All",
                        "code": code,
                        "time": self.sim.clock.now().isoformat().replace("+00:00", "Z"),
                    }
                )
            elif method == "GET":
                self.sim.reads.append({"verb": verb, "path": request.path, "query": request.query_string,
                                       "code": code, "bytes": size})

    def count_bytes(self, verb: str, resource: str, size: int) -> None:
        count, total = self.response_sizes.get((verb, resource), (0, 0))
        self.response_sizes[(verb, resource)] = (count + 1, total + size)

    @staticmethod
    def verb(request: web.Request, target: Target) -> str:
        if request.method == "GET":
            if target.name:
                return "get"
            return "watch" if query_bool(request, "watch") else "list"
        if request.method == "DELETE" and not target.name:
            return "deletecollection"
        return MUTATING.get(request.method, request.method.lower())

    # --------------------------------------------------------------- verbs
    async def serve(self, request: web.Request, target: Target, verb: str,
                    user: rbac.User | None = None) -> web.StreamResponse:
        res = target.res
        dry_run = request.query.get("dryRun") == "All"
        if "dryRun" in request.query and not dry_run:
            raise errors.bad_request(f"Invalid dry run value: {request.query['dryRun']}")
        if verb == "watch":
            return await serve_watch(self, request, target)
        if target.sub == "exec" and target.name:  # kubectl exec over WebSocket (kubesim.execstream)
            return await execstream.serve(self.sim, request, target.namespace or "", target.name)
        if verb == "list":
            return self.list(request, target)
        if verb == "get":
            if target.sub == "log":
                return answers.log_answer(self.sim, request, target, self.fetch(target))
            obj = self.fetch(target)
            return self.respond_object(request, target, obj)
        if verb == "create" and res.kind == "SelfSubjectAccessReview":
            spec = rbac.review_spec(await request.read(), request.content_type)
            return json_response(rbac.review(self.authorizer, user or self.admin, spec), 201)
        if verb == "create" and res.kind == "SelfSubjectRulesReview":
            namespace = rbac.rules_review_namespace(await request.read(), request.content_type)
            return json_response(rbac.rules_review(self.authorizer, user or self.admin, namespace), 201)
        if verb == "create" and res.kind == "SelfSubjectReview":
            return json_response(rbac.self_subject_review(user or self.admin, self.sim.store), 201)
        if verb == "create" and target.sub == "token" and res.kind == "ServiceAccount":
            return await self.token_request(request, target)
        if verb == "create" and target.sub == "eviction" and res.kind == "Pod" and target.name:
            evicting = eviction.decode(await request.read(), request.content_type)
            return json_response(eviction.evict(self.sim, target.namespace or "", target.name, evicting,
                                                dry_run=dry_run), 201)
        if verb == "patch" and request.content_type == APPLY_PATCH:
            return self.apply(request, target, await request.read(), dry_run)
        if "force" in request.query and verb == "patch":
            raise patch_options_invalid("force", "Forbidden", "may not be specified for non-apply patch")
        body = await self.body(request, res) if request.method in ("POST", "PUT", "PATCH") else None
        validation = field_validation(request)
        warnings: list[str] = []
        if verb in ("create", "update") and isinstance(body, dict) and not target.sub:
            body, warnings = self.unknown_fields(res, body, validation)
            if (refused := quantities.refusal(res.kind, res.version, body, minor=self.sim.minor)) is not None:
                raise refused
        store = self.sim.store
        if verb == "create":
            if target.name:
                raise errors.method_not_allowed()
            obj = self.to_storage(res, body)
            self.check_namespace(target, obj)
            self.track(request, target, None, obj)
            strategies.prepare_for_create(res, obj, minor=self.sim.minor, now=self.sim.clock.now())
            created = store.create(res, obj, dry_run=dry_run, warnings=warnings)
            return warned(self.respond_object(request, target, created, status=201), warnings)
        if verb == "update":
            obj = self.to_storage(res, body)
            self.check_namespace(target, obj)
            if (obj.get("metadata") or {}).get("name") != target.name:
                raise errors.bad_request("the name of the object does not match the name on the URL")
            self.track(request, target, self.fetch(target), obj)
            updated = store.replace(res, obj, subresource=target.sub, dry_run=dry_run, warnings=warnings)
            return warned(self.respond_object(request, target, updated), warnings)
        if verb == "patch":
            return self.patch(request, target, body, dry_run, validation)
        if verb == "delete":
            options = body_options(await request.read(), request.query)
            deleted = store.delete(
                res,
                target.namespace or "",
                target.name or "",
                dry_run=dry_run,
                grace_seconds=options.get("gracePeriodSeconds"),
                propagation=options.get("propagationPolicy"),
                preconditions=options.get("preconditions"),
            )
            return self.respond_object(request, target, deleted)
        if verb == "deletecollection":
            predicate = self.predicate(request, target)
            victims = store.list(res.group_resource, target.namespace, predicate)
            for obj in victims:
                store.delete(res, obj["metadata"].get("namespace", ""), obj["metadata"]["name"], dry_run=dry_run)
            return self.list_response(target, victims, None, None)
        raise errors.method_not_allowed()

    async def token_request(self, request: web.Request, target: Target) -> web.Response:
        """``kubectl create token``: a token for a ServiceAccount that exists (JSON or protobuf body)."""
        namespace, name = target.namespace or "", target.name or ""
        if self.sim.store.get(("", "serviceaccounts"), namespace, name) is None:
            raise errors.not_found(target.res, name)
        seconds = rbac.token_seconds(await request.read(), request.content_type)
        if seconds < 600:
            raise errors.ApiError(422, "Invalid", f'TokenRequest.authentication.k8s.io "{name}" is invalid: '
                                  "spec.expirationSeconds: Invalid value: may not specify a duration less than 10 minutes",
                                  {"name": name, "group": "authentication.k8s.io", "kind": "TokenRequest"})
        now = self.sim.clock.now()
        token, expires = self.sim.tokens.mint(namespace, name, now, seconds)
        return json_response(rbac.token_request(namespace, name, token, now, expires, seconds), 201)

    async def body(self, request: web.Request, res: ResourceType | None = None) -> Any:
        raw = await request.read()
        if res is not None and request.content_type == protowire.PROTOBUF:  # kubectl create's typed clients
            return protokinds.decode(res.group, res.kind, raw)
        try:
            return json.loads(raw or b"{}")
        except ValueError as exc:
            raise errors.bad_request(f"the request body is not valid JSON: {exc}") from None

    def check_namespace(self, target: Target, obj: dict[str, Any]) -> None:
        if not target.res.namespaced:
            return
        m = obj.setdefault("metadata", {})
        if m.get("namespace") and target.namespace and m["namespace"] != target.namespace:
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent on the request"
            )
        if target.namespace:
            m["namespace"] = target.namespace

    def fetch(self, target: Target) -> dict[str, Any]:
        obj = self.sim.store.get(target.res.group_resource, target.namespace or "", target.name or "")
        if obj is None:
            raise errors.not_found(target.res, target.name or "")
        return obj

    def to_storage(self, res: ResourceType, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise errors.bad_request("the request body must be a JSON object")
        if body.get("kind") and body["kind"] != res.kind:
            raise errors.bad_request(
                f"the API version in the data ({body.get('apiVersion')}) does not match the expected "
                f"API version ({res.api_version})"
            )
        storage = self.sim.store.storage_type(res)
        return conversion.convert(body, res, storage)

    def from_storage(self, res: ResourceType, obj: dict[str, Any], *, read: bool = True) -> dict[str, Any]:
        """``obj`` in ``res``'s version; ``read``: as a client reads it (a write's base is as stored)."""
        heartbeats = self.sim.controllers.get("nodeheartbeats") if read and res.plural in ("leases", "nodes") else None
        if heartbeats is not None:  # a node's Lease and conditions carry its kubelet's last beat (kubesim.heartbeats)
            obj = heartbeats.view(obj)
        storage = self.sim.store.storage_type(res)
        if storage.version == res.version:
            return obj
        return self.sim.store.complete(res, conversion.convert(obj, storage, res))

    def respond_object(
        self, request: web.Request, target: Target, obj: dict[str, Any], status: int = 200
    ) -> web.Response:
        out = self.from_storage(target.res, obj)
        if "as=Table" in request.headers.get("Accept", "") and target.sub is None:
            table = tables.to_table(
                target.res.plural, [out], api_version=target.res.api_version, now=self.sim.clock.now(),
                include_object=include_object(request),
                list_meta={"resourceVersion": out["metadata"].get("resourceVersion", "")},
            )
            return json_response(table, status)
        return json_response(out, status)

    def predicate(self, request: web.Request, target: Target) -> Any:
        label = selectors.parse_label_selector(request.query.get("labelSelector", ""))
        field_text = request.query.get("fieldSelector", "")
        allowed = selectors.FIELD_SELECTORS.get(target.res.plural, selectors.FIELD_SELECTORS["default"])
        field = selectors.parse_field_selector(field_text, allowed) if field_text else None
        if not request.query.get("labelSelector") and field is None:
            return None

        def match(obj: dict[str, Any]) -> bool:
            return label.matches((obj.get("metadata") or {}).get("labels")) and (
                field is None or field.matches(obj)
            )

        return match

    def list(self, request: web.Request, target: Target) -> web.Response:
        try:
            predicate = self.predicate(request, target)
        except selectors.SelectorError as exc:
            raise errors.bad_request(str(exc)) from None
        try:
            limit = int(request.query.get("limit") or 0)
        except ValueError:
            raise errors.bad_request("limit must be an integer") from None
        items, token, remaining = self.sim.store.page(
            target.res.group_resource,
            namespace=target.namespace,
            predicate=predicate,
            limit=max(limit, 0),
            continue_token=request.query.get("continue") or None,
        )
        items = [self.from_storage(target.res, o) for o in items]
        if "as=Table" in request.headers.get("Accept", ""):
            return json_response(
                tables.to_table(
                    target.res.plural, items, api_version=target.res.api_version, now=self.sim.clock.now(),
                    include_object=include_object(request), list_meta=self.list_meta(token, remaining),
                )
            )
        return self.list_response(target, items, token, remaining)

    def list_meta(self, token: str | None, remaining: int | None) -> dict[str, Any]:
        """A list's metadata: its resourceVersion; the continue token and, when known, how many remain."""
        meta: dict[str, Any] = {"resourceVersion": str(self.sim.store.rv)}
        if token:
            meta["continue"] = token
            if remaining is not None:
                meta["remainingItemCount"] = remaining
        return meta

    def list_response(
        self, target: Target, items: builtins.list[dict[str, Any]], token: str | None, remaining: int | None
    ) -> web.Response:
        return json_response(
            {
                "kind": f"{target.res.kind}List",
                "apiVersion": target.res.api_version,
                "metadata": self.list_meta(token, remaining),
                "items": items,
            }
        )

    def unknown_fields(self, res: ResourceType, obj: dict[str, Any], validation: str) -> tuple[dict[str, Any], builtins.list[str]]:
        """Server-side field validation of a decoded body: ``Strict`` refuses fields the schema does
        not declare, ``Warn`` (the default) drops them with a warning each, ``Ignore`` drops them."""
        try:
            clean, unknown = self.field_manager(res).walker.strip_unknown(obj)
        except applying.ApplyError:
            return obj, []
        if not unknown:
            return obj, []
        if validation == "Strict":
            said = ", ".join(f'unknown field "{u}"' for u in unknown)
            raise errors.bad_request(f'{res.kind} in version "{res.version}" cannot be handled as a {res.kind}: '
                                     f"strict decoding error: {said}")
        return clean, ([] if validation == "Ignore" else [f'unknown field "{u}"' for u in unknown])

    def patch(self, request: web.Request, target: Target, body: Any, dry_run: bool,
              validation: str = "Warn") -> web.Response:
        content_type = request.content_type
        if content_type not in PATCH_TYPES:
            raise errors.unsupported_media(content_type)
        res = target.res
        current = self.from_storage(res, self.fetch(target), read=False)
        try:
            if content_type == "application/json-patch+json":
                if not isinstance(body, list):
                    raise patching.PatchError("a JSON patch must be a list of operations")
                patched = patching.json_patch(current, body)
            elif content_type == "application/merge-patch+json":
                patched = patching.json_merge_patch(current, body)
            else:
                patched = patching.strategic_merge_patch(
                    current, body, merge_keys=patching.merge_keys_for(res.group_resource))
        except patching.PatchError as exc:
            raise errors.ApiError(422, "Invalid", f"the patch could not be applied: {exc}") from None
        if not isinstance(patched, dict):
            raise errors.bad_request("the patch did not produce an object")
        if (refused := quantities.refusal(res.kind, res.version, patched, minor=self.sim.minor,
                                          patch=(content_type, body))) is not None:
            raise refused
        warnings: list[str] = []
        if not target.sub:
            patched, warnings = self.unknown_fields(res, patched, validation)
        requested_rv = ((body or {}).get("metadata") or {}).get("resourceVersion") if isinstance(body, dict) else None
        patched.setdefault("metadata", {})["resourceVersion"] = requested_rv or current["metadata"]["resourceVersion"]
        patched["metadata"]["name"] = target.name
        obj = self.to_storage(res, patched)
        self.track(request, target, self.fetch(target), obj)
        updated = self.sim.store.replace(res, obj, subresource=target.sub, dry_run=dry_run, warnings=warnings)
        return warned(self.respond_object(request, target, updated), warnings)

    # ------------------------------------------------------ field management
    def field_manager(self, res: ResourceType) -> applying.FieldManager:
        fm = self._field_managers.get(res)
        if fm is None:
            fm = self._field_managers[res] = applying.FieldManager(
                self.types, res.group, res.version, res.kind, has_status="status" in res.subresources)
        return fm

    @staticmethod
    def manager_name(request: web.Request) -> str:
        """``fieldManager``, else the User-Agent's product (``kubectl``, ``OpenAPI-Generator``)."""
        return request.query.get("fieldManager") or request.headers.get("User-Agent", "").split("/")[0][:128] or "unknown"

    def track(self, request: web.Request, target: Target, live: dict[str, Any] | None,
              new: dict[str, Any]) -> None:
        """``new``'s managedFields after this Update (create, update or patch) by its manager."""
        res = target.res
        view = self.sim.store.complete(res, self.from_storage(res, new))
        before = self.from_storage(res, live) if live is not None else None
        managed = self.field_manager(res).update(
            before, view, self.manager_name(request), rfc3339(self.sim.clock.now()), target.sub)
        meta = new.setdefault("metadata", {})
        if managed:
            meta["managedFields"] = managed
        else:
            meta.pop("managedFields", None)

    def apply(self, request: web.Request, target: Target, raw: bytes, dry_run: bool) -> web.Response:
        """Server-side apply: merge the configuration, track its fields, refuse conflicts unless forced."""
        res, store = target.res, self.sim.store
        manager = request.query.get("fieldManager")
        if not manager:
            raise patch_options_invalid("fieldManager", "Required value", "is required for apply patch")
        force = query_bool(request, "force")
        try:
            config = yaml.safe_load(raw.decode() or "{}")
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            raise errors.bad_request(f"error decoding YAML: {exc}") from None
        if not isinstance(config, dict):
            raise errors.bad_request("the body of an apply patch must be an object")
        if config.get("apiVersion") != res.api_version or config.get("kind") != res.kind:
            raise errors.bad_request(
                f"the API version in the data ({config.get('apiVersion')}) does not match the expected "
                f"API version ({res.api_version})" if config.get("kind") in (None, res.kind) else
                f"the kind in the data ({config.get('kind')}) does not match the expected kind ({res.kind})")
        if config.get("metadata") is None:
            config["metadata"] = {}
        meta = config["metadata"]
        if not isinstance(meta, dict):
            raise errors.bad_request("metadata must be an object")
        if meta.get("name") not in (None, target.name):
            raise errors.bad_request(
                f"the name of the object ({meta['name']}) does not match the name on the URL ({target.name})")
        if meta.get("managedFields") is not None:
            raise errors.bad_request("metadata.managedFields must be nil")
        meta["name"] = target.name
        self.check_namespace(target, config)
        stored = store.get(res.group_resource, target.namespace or "", target.name or "")
        live = self.from_storage(res, stored, read=False) if stored is not None else None
        try:
            merged = self.field_manager(res).apply(
                live, config, manager, rfc3339(self.sim.clock.now()), force=force, subresource=target.sub)
        except applying.ApplyConflicts as exc:
            causes = [{"reason": "FieldManagerConflict", "message": f"conflict with {applying.describe(c.manager)}",
                       "field": applying.path_text(c.path)} for c in exc.conflicts]
            raise errors.ApiError(409, "Conflict", str(exc), {"causes": causes}) from None
        except applying.ApplyError as exc:
            where = f"{target.namespace}/{target.name}" if target.namespace else target.name
            raise errors.bad_request(f"failed to create typed patch object ({where}; {res.api_version}, "
                                     f"Kind={res.kind}): {exc}") from None
        merged["apiVersion"], merged["kind"] = res.api_version, res.kind
        if (refused := quantities.refusal(res.kind, res.version, merged, minor=self.sim.minor)) is not None:
            raise refused  # as a create's decode error (how apply words it is not verified)
        obj = self.to_storage(res, merged)
        if stored is None:
            if target.sub:
                raise errors.not_found(res, target.name or "")
            strategies.prepare_for_create(res, obj, minor=self.sim.minor, now=self.sim.clock.now())
            warnings: builtins.list[str] = []
            created = store.create(res, obj, dry_run=dry_run, warnings=warnings)
            return warned(self.respond_object(request, target, created, status=201), warnings)
        if _unchanged(stored, obj):
            return self.respond_object(request, target, stored)
        obj["metadata"]["resourceVersion"] = meta.get("resourceVersion") or stored["metadata"]["resourceVersion"]
        warnings = []
        updated = store.replace(res, obj, subresource=target.sub, dry_run=dry_run, warnings=warnings)
        return warned(self.respond_object(request, target, updated), warnings)


def _unchanged(stored: dict[str, Any], new: dict[str, Any]) -> bool:
    """An apply that changes no field and no ownership: the server writes nothing."""
    def fields(obj: dict[str, Any]) -> Any:
        return {k: v for k, v in obj.items() if k != "metadata"}, {
            k: v for k, v in obj["metadata"].items() if k not in ("managedFields", "resourceVersion")}

    def owners(obj: dict[str, Any]) -> list[Any]:
        return [{k: v for k, v in e.items() if k != "time"} for e in obj["metadata"].get("managedFields") or []]
    return fields(stored) == fields(new) and owners(stored) == owners(new)
