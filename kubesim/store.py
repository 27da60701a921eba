"""The object store behind kubesim's API: what etcd plus the watch cache do in a real cluster.

Objects are plain JSON-shaped dicts kept in the storage version of their resource. A
stored dict is never mutated in place: every write stores a new dict, so watch history
and readers can hold references safely. One global ``resourceVersion`` counter orders
every write; a bounded history per resource serves watches, and a watch (or a continue
token) older than that history gets ``410 Gone`` as from a real API server.

The store is single-threaded by design: everything runs on the simulation's event loop.
"""

from __future__ import annotations

import base64
import bisect
import builtins
import copy
import json
import re
import secrets
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kubesim import apivalidation, crdschema, errors, installkinds, schemas, validation
from kubesim.clock import SimClock, rfc3339
from kubesim.defaults import DEFAULTERS
from kubesim.resources import ApiSurface, ResourceType
from kubesim.sharing import share_unchanged

GroupResource = tuple[str, str]
Key = tuple[str, str]  # (namespace, name); namespace "" for cluster-scoped objects
Listener = Callable[[ResourceType, "WatchEvent"], None]

_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"
_EMPTY: dict[Any, Any] = {}
IMMORTAL_NAMESPACES = ("default", "kube-system", "kube-public")
_NO_GENERATION = {"Pod", "Node", "Namespace", "Event", "ConfigMap", "ServiceAccount", "ControllerRevision",
                  "CSIDriver", "Service", "Lease"}


@dataclass(frozen=True)
class WatchEvent:
    """One change: ``ADDED``, ``MODIFIED`` or ``DELETED``, with the object before it."""

    rv: int
    type: str
    obj: dict[str, Any]
    old: dict[str, Any] | None


def meta(obj: dict[str, Any]) -> dict[str, Any]:
    return obj.setdefault("metadata", {})


def key_of(obj: dict[str, Any]) -> Key:
    m = obj.get("metadata") or {}
    return (m.get("namespace") or "", m.get("name") or "")


def generate_name(prefix: str) -> str:
    return prefix + "".join(secrets.choice(_NAME_CHARS) for _ in range(5))


def encode_continue(rv: int, start: Key) -> str:
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": list(start)}).encode()
    return base64.urlsafe_b64encode(raw).decode()


def decode_continue(token: str) -> tuple[int, Key]:
    try:
        data = json.loads(base64.urlsafe_b64decode(token.encode()))
        return int(data["rv"]), (str(data["start"][0]), str(data["start"][1]))
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise errors.bad_request(f"continue key is not valid: {exc}") from None


class Store:
    """In-memory objects, a global resourceVersion, bounded watch history, listeners."""

    def __init__(
        self, clock: SimClock, surface: ApiSurface, *, history_size: int = 20_000
    ) -> None:
        self.clock = clock
        self.surface = surface
        self.rv = 0
        self.history_size = history_size
        self._objects: dict[GroupResource, dict[Key, dict[str, Any]]] = {}
        self._sorted: dict[GroupResource, list[Key] | None] = {}
        self._history: dict[GroupResource, deque[WatchEvent]] = {}
        self._floor: dict[GroupResource, int] = {}
        self._caches_started = 0
        self._listeners: list[Listener] = []
        self._uid_index: dict[str, tuple[GroupResource, Key]] = {}
        self._owned: dict[str, set[tuple[GroupResource, Key]]] = {}
        self.definitions = schemas.for_release(surface.minor)

    def complete(self, res: ResourceType, obj: dict[str, Any], seen: set[int] | None = None) -> dict[str, Any]:
        """Write the fields a Go server always writes (its defaults for the kinds in
        :data:`kubesim.defaults.DEFAULTERS`, zero values of required fields), in place."""
        defaulter = DEFAULTERS.get(res.group_resource)
        if defaulter is not None:
            defaulter(obj)
        return self.definitions.complete_kind(obj, res.group, res.version, res.kind, seen)

    # ----------------------------------------------------------------- reads
    def storage_type(self, gr: GroupResource | ResourceType) -> ResourceType:
        if isinstance(gr, ResourceType):
            gr = gr.group_resource
        return self.surface.storage_version(*gr)

    def _bucket(self, gr: GroupResource) -> dict[Key, dict[str, Any]]:
        bucket = self._objects.get(gr)
        if bucket is None:
            bucket = self._objects[gr] = {}
            self._history[gr] = deque(maxlen=self.history_size)
            self._floor[gr] = self._caches_started  # its watch cache listed when the API server started
        return bucket

    def get(self, gr: GroupResource, namespace: str, name: str) -> dict[str, Any] | None:
        """The stored object (treat it as read-only) or ``None``."""
        return self._objects.get(gr, _EMPTY).get((namespace or "", name))

    def by_uid(self, uid: str) -> dict[str, Any] | None:
        where = self._uid_index.get(uid)
        if where is None:
            return None
        return self._objects.get(where[0], _EMPTY).get(where[1])

    def sorted_keys(self, gr: GroupResource) -> builtins.list[Key]:
        keys = self._sorted.get(gr)
        if keys is None:
            keys = sorted(self._objects.get(gr, _EMPTY))
            if gr in self._objects:
                self._sorted[gr] = keys
        return keys

    def list(
        self,
        gr: GroupResource,
        namespace: str | None = None,
        predicate: Callable[[dict[str, Any]], bool] | None = None,
    ) -> builtins.list[dict[str, Any]]:
        """Objects in key order, optionally in one namespace and matching a predicate."""
        return list(self.iter(gr, namespace, predicate))

    def iter(
        self,
        gr: GroupResource,
        namespace: str | None = None,
        predicate: Callable[[dict[str, Any]], bool] | None = None,
        start: Key | None = None,
    ) -> Iterable[dict[str, Any]]:
        bucket = self._objects.get(gr, _EMPTY)
        keys = self.sorted_keys(gr)
        lo = 0
        if namespace:
            lo = bisect.bisect_left(keys, (namespace, ""))
        if start is not None:
            lo = max(lo, bisect.bisect_right(keys, start))
        for i in range(lo, len(keys)):
            key = keys[i]
            if namespace and key[0] != namespace:
                break
            obj = bucket.get(key)
            if obj is not None and (predicate is None or predicate(obj)):
                yield obj

    def page(
        self,
        gr: GroupResource,
        *,
        namespace: str | None,
        predicate: Callable[[dict[str, Any]], bool] | None,
        limit: int,
        continue_token: str | None,
    ) -> tuple[builtins.list[dict[str, Any]], str | None, int | None]:
        """One page of a paginated list: items, the next continue token, remaining count.

        As the API server: the remaining count only without a selector (with one, how many
        of the rest match is unknown, and finding out would test the whole rest on every
        page); with a selector, a token is given when one more object matches."""
        start: Key | None = None
        if continue_token:
            token_rv, start = decode_continue(continue_token)
            if token_rv < self._floor.get(gr, 0):
                raise errors.gone(
                    "The provided continue parameter is too old to display a consistent list "
                    "result. You can start a new list without the continue parameter, or use "
                    "the continue token in this response to retrieve the remainder of the results."
                )
        items: builtins.list[dict[str, Any]] = []
        last: Key | None = None
        it = iter(self.iter(gr, namespace, predicate, start))
        for obj in it:
            items.append(obj)
            last = key_of(obj)
            if limit and len(items) >= limit:
                break
        if not limit or last is None:
            return items, None, None
        if predicate is not None:
            more = next(it, None) is not None  # the next page's first: only the gap to it is tested again
            return items, (encode_continue(self.rv, last) if more else None), None
        keys = self.sorted_keys(gr)
        end = bisect.bisect_left(keys, (namespace + "\x00",)) if namespace else len(keys)
        remaining = end - bisect.bisect_right(keys, last)
        if remaining <= 0:
            return items, None, None
        return items, encode_continue(self.rv, last), remaining

    # ------------------------------------------------------------- watching
    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener(resource, event)`` after every write; returns an unsubscribe."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    def history_since(self, gr: GroupResource, rv: int) -> builtins.list[WatchEvent]:
        """Events after ``rv``; 410 Gone when ``rv`` is older than the history kept."""
        self.storage_type(gr)
        self._bucket(gr)
        if rv < self._floor[gr]:  # the watch cache's words (watch_cache.go getAllEventsSinceLocked)
            raise errors.gone(f"too old resource version: {rv} ({self._floor[gr]})")
        return [e for e in self._history[gr] if e.rv > rv]

    def start_watch_caches(self) -> None:
        """The API server's start: each resource's watch cache lists at the current version, so a
        watch from an older one is expired (the scenario's objects are loaded without events)."""
        self._caches_started = self.rv
        for gr in self._floor:
            self._floor[gr] = max(self._floor[gr], self.rv)

    def compact(self) -> None:
        """Drop all watch history, as etcd compaction does: older watches get 410."""
        for gr in self._history:
            self._history[gr].clear()
            self._floor[gr] = self.rv

    def _index_owners(
        self, gr: GroupResource, key: Key, old: dict[str, Any] | None, new: dict[str, Any] | None
    ) -> None:
        """Keep ``owner uid -> dependents`` current, so garbage collection is not a scan."""
        before = {r.get("uid") for r in ((old or {}).get("metadata") or {}).get("ownerReferences") or []}
        after = {r.get("uid") for r in ((new or {}).get("metadata") or {}).get("ownerReferences") or []}
        for uid in before - after:
            owned = self._owned.get(uid)
            if owned is not None:
                owned.discard((gr, key))
                if not owned:
                    del self._owned[uid]
        for uid in after - before:
            if uid:
                self._owned.setdefault(uid, set()).add((gr, key))

    def _record(self, res: ResourceType, event: WatchEvent) -> None:
        gr = res.group_resource
        history = self._history[gr]
        full = len(history) == history.maxlen
        history.append(event)
        if full:  # the oldest event left: a watch may start just before the one now first
            self._floor[gr] = history[0].rv - 1
        for listener in list(self._listeners):
            listener(res, event)

    # --------------------------------------------------------------- writes
    def _next_rv(self) -> int:
        self.rv += 1
        return self.rv

    def _validate_name(self, res: ResourceType, name: str) -> None:
        if not name:
            raise errors.invalid(
                res, name, [("metadata.name", "Required value: name or generateName is required")]
            )
        if len(name) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(name):
            raise errors.invalid(
                res,
                name,
                [
                    (
                        "metadata.name",
                        f'Invalid value: "{name}": {apivalidation.SUBDOMAIN_MSG}',
                    )
                ],
            )

    def create(
        self, res: ResourceType, obj: dict[str, Any], *, dry_run: bool = False, warnings: builtins.list[str] | None = None
    ) -> dict[str, Any]:
        """Store a new object; fills uid, timestamps, resourceVersion and generation; admission's
        warnings are added to ``warnings``."""
        res = self.storage_type(res)
        obj = copy.deepcopy(obj)
        m = meta(obj)
        shown = m.get("name") or m.get("generateName") or ""
        if not m.get("name") and m.get("generateName"):
            m["name"] = generate_name(m["generateName"])
        self._validate_name(res, m.get("name", ""))
        if res.namespaced:
            ns = m.get("namespace") or "default"
            m["namespace"] = ns
            namespace = self.get(("", "namespaces"), "", ns) if res.plural != "namespaces" else {}
            if namespace is None:
                raise errors.ApiError(
                    404,
                    "NotFound",
                    f'namespaces "{ns}" not found',
                    {"name": ns, "kind": "namespaces"},
                )
            if namespace.get("metadata", {}).get("deletionTimestamp"):  # NamespaceLifecycle admission
                raise errors.forbidden(
                    res, m.get("name", ""),
                    f"unable to create new content in namespace {ns} because it is being terminated",
                    [{"reason": "NamespaceTerminating", "message": f"namespace {ns} is being terminated",
                      "field": "metadata.namespace"}],
                )
        else:
            m.pop("namespace", None)
        bucket = self._bucket(res.group_resource)
        key = key_of(obj)
        if key in bucket:
            raise errors.already_exists(res, key[1])
        obj["apiVersion"], obj["kind"] = res.api_version, res.kind
        m["uid"] = str(uuid.uuid4())
        m["creationTimestamp"] = rfc3339(self.clock.now())
        m.pop("resourceVersion", None)
        m.pop("deletionTimestamp", None)
        if res.has_spec and res.kind not in _NO_GENERATION:
            m["generation"] = 1
        if res.kind == "Namespace":
            obj.setdefault("spec", {"finalizers": ["kubernetes"]})
            obj["status"] = {"phase": "Active"}
        validation.prepare_for_create(res, obj)
        installkinds.admit(self, res, obj, shown)
        self.complete(res, obj)
        crdschema.admit(self, res, obj)
        validation.validate(res, obj, minor=self.surface.minor)
        installkinds.pod_security(self, res, obj, None, [] if warnings is None else warnings)
        if dry_run:
            return obj
        m["resourceVersion"] = str(self._next_rv())
        bucket[key] = obj
        self._sorted[res.group_resource] = None
        self._uid_index[m["uid"]] = (res.group_resource, key)
        self._index_owners(res.group_resource, key, None, obj)
        self._record(res, WatchEvent(self.rv, "ADDED", obj, None))
        return obj

    def replace(
        self,
        res: ResourceType,
        obj: dict[str, Any],
        *,
        subresource: str | None = None,
        dry_run: bool = False,
        warnings: builtins.list[str] | None = None,
    ) -> dict[str, Any]:
        """PUT semantics: optimistic concurrency on resourceVersion, status split off."""
        res = self.storage_type(res)
        obj = self.complete(res, copy.deepcopy(obj))
        m = meta(obj)
        key = (m.get("namespace") or "", m.get("name") or "") if res.namespaced else ("", m.get("name") or "")
        current = self._bucket(res.group_resource).get(key)
        if current is None:
            raise errors.not_found(res, key[1])
        cm = current["metadata"]
        if m.get("resourceVersion") and m["resourceVersion"] != cm["resourceVersion"]:
            raise errors.conflict(res, key[1])
        if m.get("uid") and m["uid"] != cm["uid"]:
            raise errors.conflict(res, key[1])
        if subresource == "status":
            new = copy.deepcopy(current)
            if "status" in obj:
                new["status"] = obj["status"]
            else:
                new.pop("status", None)
            if "managedFields" in m:
                meta(new)["managedFields"] = m["managedFields"]
            elif "managedFields" in cm:
                del meta(new)["managedFields"]
        else:
            new = obj
            if "status" in current and "status" in res.subresources:
                new["status"] = copy.deepcopy(current["status"])
            elif "status" in res.subresources:
                new.pop("status", None)
            nm = meta(new)
            for field in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds"):
                if field in cm:
                    nm[field] = cm[field]
                else:
                    nm.pop(field, None)
            if "generation" in cm:
                nm["generation"] = cm["generation"]
                if _spec_changed(current, new):
                    nm["generation"] = cm["generation"] + 1
            if res.namespaced:
                nm["namespace"] = key[0]
            else:
                nm.pop("namespace", None)
        new["apiVersion"], new["kind"] = res.api_version, res.kind
        crdschema.admit(self, res, new, status=subresource == "status")
        validation.validate(res, new, subresource=subresource, old=current, minor=self.surface.minor)
        if not subresource:
            installkinds.pod_security(self, res, new, current, [] if warnings is None else warnings)
        if unchanged_write(current, new):  # the API server skips a write that changes nothing
            return current
        if dry_run:
            meta(new)["resourceVersion"] = cm["resourceVersion"]
            return new
        return self._write(res, key, current, new)

    def _write(
        self, res: ResourceType, key: Key, current: dict[str, Any], new: dict[str, Any]
    ) -> dict[str, Any]:
        nm = meta(new)
        if nm.get("deletionTimestamp") and not nm.get("finalizers") and res.kind != "Pod" and not (
                res.kind == "Namespace" and (new.get("spec") or {}).get("finalizers")):
            return self._remove(res, key, current)
        nm["resourceVersion"] = str(self._next_rv())
        new = share_unchanged(new, current)
        self._bucket(res.group_resource)[key] = new
        self._index_owners(res.group_resource, key, current, new)
        self._record(res, WatchEvent(self.rv, "MODIFIED", new, current))
        return new

    def mutate(
        self,
        res: ResourceType | GroupResource,
        namespace: str,
        name: str,
        fn: Callable[[dict[str, Any]], None],
    ) -> dict[str, Any] | None:
        """Controllers' write: copy the current object, let ``fn`` change it, store it.

        Returns the stored object, or ``None`` when the object is gone. No write (and no
        watch event) happens when ``fn`` leaves the object unchanged.
        """
        rt = self.storage_type(res)
        key = (namespace or "", name) if rt.namespaced else ("", name)
        current = self._bucket(rt.group_resource).get(key)
        if current is None:
            return None
        new = copy.deepcopy(current)
        fn(new)
        self.complete(rt, new)  # a controller's write, decoded as the server decodes every object
        if new == current:
            return current
        nm = meta(new)
        if "generation" in current["metadata"] and _spec_changed(current, new):
            nm["generation"] = current["metadata"]["generation"] + 1
        return self._write(rt, key, current, new)

    def delete(
        self,
        res: ResourceType | GroupResource,
        namespace: str,
        name: str,
        *,
        dry_run: bool = False,
        grace_seconds: int | None = None,
        propagation: str | None = None,
        preconditions: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """Delete: pods on a node and objects with finalizers first get a deletionTimestamp."""
        rt = self.storage_type(res)
        key = (namespace or "", name) if rt.namespaced else ("", name)
        current = self._bucket(rt.group_resource).get(key)
        if current is None:
            raise errors.not_found(rt, name)
        cm = current["metadata"]
        if preconditions:
            if preconditions.get("uid") and preconditions["uid"] != cm["uid"]:
                raise errors.conflict(rt, name)
            if preconditions.get("resourceVersion") and preconditions["resourceVersion"] != cm["resourceVersion"]:
                raise errors.conflict(rt, name)
        if rt.kind == "Namespace":
            return self._delete_namespace(rt, key, current, dry_run=dry_run)
        graceful = rt.kind == "Pod" and (current.get("spec") or {}).get("nodeName") and grace_seconds != 0
        if graceful and cm.get("deletionTimestamp"):
            return current
        if graceful or cm.get("finalizers"):
            new = copy.deepcopy(current)
            nm = new["metadata"]
            if not nm.get("deletionTimestamp"):
                grace = grace_seconds if grace_seconds is not None else (
                    (current.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
                    if rt.kind == "Pod" else 0
                )
                nm["deletionTimestamp"] = rfc3339(self.clock.now())
                nm["deletionGracePeriodSeconds"] = int(grace)
            if dry_run:
                return new
            nm["resourceVersion"] = str(self._next_rv())
            new = share_unchanged(new, current)
            self._bucket(rt.group_resource)[key] = new
            self._record(rt, WatchEvent(self.rv, "MODIFIED", new, current))
            return new
        if dry_run:
            return current
        removed = self._remove(rt, key, current)
        if propagation != "Orphan":
            self._collect_dependents(cm["uid"], namespace)
        else:
            self._orphan_dependents(cm["uid"], namespace)
        return removed

    def _delete_namespace(self, rt: ResourceType, key: Key, current: dict[str, Any], *,
                          dry_run: bool) -> dict[str, Any]:
        """A namespace is not removed at once: it turns ``Terminating`` until the namespace
        controller (:mod:`kubesim.namespaces`) has deleted its content and its finalizer."""
        name = key[1]
        if name in IMMORTAL_NAMESPACES:  # NamespaceLifecycle admission
            raise errors.forbidden(rt, name, "this namespace may not be deleted")
        cm = current["metadata"]
        if cm.get("deletionTimestamp"):
            raise errors.ApiError(
                409, "Conflict",
                f'Operation cannot be fulfilled on namespaces "{name}": The system is ensuring all content '
                "is removed from this namespace.  Upon completion, this namespace will automatically be "
                "purged by the system.", {"name": name, "kind": "namespaces"})
        if not (current.get("spec") or {}).get("finalizers") and not cm.get("finalizers"):
            return current if dry_run else self._remove(rt, key, current)
        new = copy.deepcopy(current)
        new["metadata"]["deletionTimestamp"] = rfc3339(self.clock.now())
        new.setdefault("status", {})["phase"] = "Terminating"
        if dry_run:
            return new
        new["metadata"]["resourceVersion"] = str(self._next_rv())
        self._bucket(rt.group_resource)[key] = new
        self._record(rt, WatchEvent(self.rv, "MODIFIED", new, current))
        return new

    def _remove(self, res: ResourceType, key: Key, current: dict[str, Any]) -> dict[str, Any]:
        gr = res.group_resource
        del self._bucket(gr)[key]
        self._sorted[gr] = None
        self._uid_index.pop(current["metadata"]["uid"], None)
        self._index_owners(gr, key, current, None)
        gone = {**current, "metadata": {**current["metadata"], "resourceVersion": str(self._next_rv())}}
        self._record(res, WatchEvent(self.rv, "DELETED", gone, current))
        return gone

    def _dependents(self, owner_uid: str, namespace: str) -> builtins.list[tuple[ResourceType, dict[str, Any]]]:
        out: builtins.list[tuple[ResourceType, dict[str, Any]]] = []
        for gr, key in sorted(self._owned.get(owner_uid, ())):
            obj = self._objects.get(gr, _EMPTY).get(key)
            if obj is not None and (not key[0] or not namespace or key[0] == namespace):
                out.append((self.storage_type(gr), obj))
        return out

    def _collect_dependents(self, owner_uid: str, namespace: str) -> None:
        for rt, obj in self._dependents(owner_uid, namespace):
            ns, name = key_of(obj)
            if self.get(rt.group_resource, ns, name) is not None:
                self.delete(rt, ns, name)

    def _orphan_dependents(self, owner_uid: str, namespace: str) -> None:
        for rt, obj in self._dependents(owner_uid, namespace):
            def drop(o: dict[str, Any]) -> None:
                o["metadata"]["ownerReferences"] = [
                    r for r in o["metadata"].get("ownerReferences") or [] if r.get("uid") != owner_uid
                ]
            self.mutate(rt, *key_of(obj), drop)

    # -------------------------------------------------------------- loading
    def load(self, res: ResourceType | GroupResource, objs: Iterable[dict[str, Any]]) -> int:
        """Bulk-insert prepared objects (scenario start-up): no validation, no listeners.

        Objects get uid, creationTimestamp and resourceVersion when they lack them.
        """
        rt = self.storage_type(res)
        bucket = self._bucket(rt.group_resource)
        now = rfc3339(self.clock.now())
        count = 0
        seen: set[int] = set()
        for obj in objs:
            self.complete(rt, obj, seen)
            m = meta(obj)
            m.setdefault("uid", str(uuid.uuid4()))
            m.setdefault("creationTimestamp", now)
            if rt.has_spec and rt.kind not in _NO_GENERATION:
                m.setdefault("generation", 1)
            obj["apiVersion"], obj["kind"] = rt.api_version, rt.kind
            m["resourceVersion"] = str(self._next_rv())
            key = key_of(obj)
            self._index_owners(rt.group_resource, key, bucket.get(key), obj)
            bucket[key] = obj
            self._uid_index[m["uid"]] = (rt.group_resource, key)
            count += 1
        self._sorted[rt.group_resource] = None
        return count

    def count(self, gr: GroupResource) -> int:
        return len(self._objects.get(gr, _EMPTY))


def _spec_changed(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """Generation moves when anything but metadata and status changes."""
    skip = {"metadata", "status", "apiVersion", "kind"}
    return {k: v for k, v in old.items() if k not in skip} != {
        k: v for k, v in new.items() if k not in skip
    }


def unchanged_write(current: dict[str, Any], new: dict[str, Any]) -> bool:
    """A write that would store ``current`` again: equal but for the resourceVersion and the time
    of managedFields entries (the field manager moves an entry's time only when its fields change,
    and the API server stores nothing when the object's bytes are unchanged)."""
    def comparable(obj: dict[str, Any]) -> dict[str, Any]:
        m = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "resourceVersion"}
        if "managedFields" in m:
            m["managedFields"] = [{k: v for k, v in e.items() if k != "time"} for e in m["managedFields"] or []]
        return {**obj, "metadata": m}
    return comparable(current) == comparable(new)
