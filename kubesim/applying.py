"""Server-side apply and field management, as the API server's field manager does them.

Every write through the API records who set which fields in ``metadata.managedFields``:
an ``Update`` entry per manager for create, update and patch requests (the fields the
write added or changed become the writer's, and leave other managers), and an ``Apply``
entry per manager for apply requests (``application/apply-patch+yaml``: exactly the fields
of the applied configuration). An apply merges its configuration into the live object by
the release's published schema (:mod:`kubesim.schemas`: struct fields, granular or atomic
maps, lists that are atomic, sets, or maps keyed by some fields), removes the fields the
same manager applied last time and no longer applies (unless another manager owns them),
and is refused with 409 when it would change a field another manager owns, unless forced,
in which case the field changes hands. Paths, field sets and their ``FieldsV1`` encoding
follow ``sigs.k8s.io/structured-merge-diff``.

Writes made inside the simulation by its controllers (kubelet status, the DaemonSet
controller) are not tracked.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kubesim.schemas import Definitions, schema_type

Element = tuple[str, Any]  # ("f", name) | ("k", ((key, json), ...)) | ("v", json) | ("i", index)
Path = tuple[Element, ...]
FieldSet = set[Path]

#: Fields no manager owns (``stripMeta``): identity and bookkeeping the server writes.
_SERVER_META = ("name", "namespace", "creationTimestamp", "selfLink", "uid", "clusterName", "generation",
                "managedFields", "resourceVersion")
STRIPPED: frozenset[Path] = frozenset(
    [(("f", "apiVersion"),), (("f", "kind"),), (("f", "metadata"),),
     *((("f", "metadata"), ("f", name)) for name in _SERVER_META)]
)
_MANAGED = "managedFields"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
CSA_UPGRADER = "kubectl"


class ApplyError(ValueError):
    """A configuration that cannot be typed by the schema (``field not declared in schema``)."""


@dataclass(frozen=True)
class Conflict:
    manager: str
    """The manager's identifier (:func:`identifier`)."""
    path: Path


# ------------------------------------------------------------------- types
@dataclass(frozen=True)
class Node:
    """The shape of one value: ``struct``, ``map``, ``list`` or ``scalar``, atomic or not."""

    kind: str
    atomic: bool = False
    fields: tuple[tuple[str, Any], ...] = ()
    element: Any = None
    list_type: str = ""  # "set" or "map" for granular lists
    keys: tuple[str, ...] = ()
    deduced: bool = False


class Types:
    """Schema lookups for one release, cached per schema."""

    def __init__(self, defs: Definitions) -> None:
        self.defs = defs
        self._cache: dict[int, tuple[dict[str, Any], Node]] = {}

    def of_kind(self, group: str, version: str, kind: str) -> Node:
        name = self.defs.kind(group, version, kind)
        if name is None:
            return Node("map", deduced=True)
        return self.node({"$ref": f"#/$defs/{name}"})

    def node(self, schema: dict[str, Any] | None) -> Node:
        if schema is None:
            return Node("map", deduced=True)
        cached = self._cache.get(id(schema))
        if cached is not None and cached[0] is schema:
            return cached[1]
        node = self._build(schema)
        self._cache[id(schema)] = (schema, node)  # the schema kept alive: its id stays its own
        return node

    def _build(self, schema: dict[str, Any]) -> Node:
        outer = schema
        _, schema = self.defs.resolve(schema)
        props = schema.get("properties")
        kind = schema_type(schema)
        if props:
            atomic = schema.get("x-kubernetes-map-type") == "atomic"
            return Node("struct", atomic=atomic, fields=tuple(props.items()))
        if kind == "array":
            list_type = outer.get("x-kubernetes-list-type") or schema.get("x-kubernetes-list-type")
            keys = tuple(outer.get("x-kubernetes-list-map-keys") or schema.get("x-kubernetes-list-map-keys") or ())
            if not list_type:
                strategy = str(outer.get("x-kubernetes-patch-strategy") or "")
                merge_key = outer.get("x-kubernetes-patch-merge-key")
                if "merge" in strategy.split(","):
                    list_type, keys = ("map", (merge_key,)) if merge_key else ("set", ())
                else:
                    list_type = "atomic"
            if list_type == "atomic":
                return Node("list", atomic=True, element=schema.get("items"))
            return Node("list", element=schema.get("items"), list_type=list_type, keys=keys)
        if kind == "object":
            extra = schema.get("additionalProperties")
            if isinstance(extra, dict):
                atomic = (outer.get("x-kubernetes-map-type") or schema.get("x-kubernetes-map-type")) == "atomic"
                return Node("map", atomic=atomic, element=extra)
            return Node("map", deduced=True)
        if kind is None and not schema.get("oneOf"):
            return Node("map", deduced=True)  # RawExtension and other free-form values
        return Node("scalar")

    def field(self, node: Node, name: str) -> Node | None:
        """The type of ``name`` in a struct or map; ``None`` when the struct declares no such field."""
        if node.deduced:
            return Node("map", deduced=True)
        if node.kind == "map":
            return self.node(node.element)
        for fname, schema in node.fields:
            if fname == name:
                return self.node(schema)
        return None

    def item(self, node: Node) -> Node:
        return self.node(node.element)


# ---------------------------------------------------------------- path text
def element_text(element: Element) -> str:
    """An element as ``FieldsV1`` writes it: ``f:name``, ``k:{"name":"c"}``, ``v:"x"``, ``i:0``."""
    kind, value = element
    if kind == "f":
        return f"f:{value}"
    if kind == "k":  # the key fields' values are kept as JSON text already
        return "k:{" + ",".join(f"{json.dumps(k)}:{v}" for k, v in value) + "}"
    if kind == "v":
        return "v:" + value
    return f"i:{value}"


def path_text(path: Path) -> str:
    """A path as conflicts print it: ``.spec.template.spec.containers[name="c"].image``."""
    out = []
    for kind, value in path:
        if kind == "f":
            out.append(f".{value}")
        elif kind == "k":
            out.append("[" + ",".join(f"{k}={v}" for k, v in value) + "]")
        elif kind == "v":
            out.append(f"[={value}]")
        else:
            out.append(f"[{value}]")
    return "".join(out)


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def _item_element(node: Node, index: int, item: Any) -> Element:
    if node.list_type == "map" and isinstance(item, dict):
        return ("k", tuple((k, _json(item.get(k))) for k in sorted(node.keys) if k in item))
    if node.list_type == "set":
        return ("v", _json(item))
    return ("i", index)


# ---------------------------------------------------------------- field sets
class Walker:
    """Field sets and leaf values of objects of one kind."""

    def __init__(self, types: Types, root: Node) -> None:
        self.types, self.root = types, root

    def leaves(self, obj: Any, *, maps: bool = False) -> dict[Path, Any]:
        """Every owned path with its value (a marker for a list item's or map's own entry).

        ``maps`` also lists every granular map (``labels``) as a member of its own, as a
        comparison does: an update that creates a map owns the map as well as its keys.
        """
        out: dict[Path, Any] = {}
        self._walk(obj, self.root, (), out, maps)
        return {p: v for p, v in out.items() if p not in STRIPPED}

    def fieldset(self, obj: Any) -> FieldSet:
        return set(self.leaves(obj))

    def strip_unknown(self, obj: Any) -> tuple[Any, list[str]]:
        """``obj`` without the fields its schema does not declare, and those fields as strict
        decoding names them (``spec.template.spec.containers[0].foo``)."""
        found: list[str] = []
        return self._strip(obj, self.root, "", found), found

    def _strip(self, value: Any, node: Node, where: str, found: list[str]) -> Any:
        if node.deduced or node.kind == "scalar" or value is None:
            return value
        if node.kind == "list":
            if not isinstance(value, list) or node.element is None:
                return value
            item = self.types.item(node)
            return [self._strip(child, item, f"{where}[{i}]", found) for i, child in enumerate(value)]
        if not isinstance(value, dict):
            return value
        out = {}
        for key, child in value.items():
            here = f"{where}.{key}" if where else key
            child_node = self.types.field(node, key)
            if child_node is None:
                found.append(here)
                continue
            out[key] = self._strip(child, child_node, here, found)
        return out

    def validate(self, obj: Any) -> None:
        """Every field of ``obj`` is declared by the schema, atomic parts included (``AsTyped``)."""
        self._check(obj, self.root, ())

    def _check(self, value: Any, node: Node, path: Path) -> None:
        if node.deduced or node.kind == "scalar" or value is None:
            return
        if node.kind == "list":
            if isinstance(value, list) and node.element is not None:
                item = self.types.item(node)
                for index, child in enumerate(value):
                    element = ("i", index) if node.atomic else _item_element(node, index, child)
                    self._check(child, item, (*path, element))
            return
        if not isinstance(value, dict):
            return
        for key, child in value.items():
            child_node = self.types.field(node, key)
            if child_node is None:
                raise ApplyError(f"{path_text((*path, ('f', key)))}: field not declared in schema")
            self._check(child, child_node, (*path, ("f", key)))

    def _walk(self, value: Any, node: Node, path: Path, out: dict[Path, Any], maps: bool) -> None:
        if node.atomic or node.kind == "scalar":
            out[path] = value
            return
        if node.kind == "list":
            if not isinstance(value, list):
                out[path] = value
                return
            if node.deduced:
                out[path] = value
                return
            item_node = self.types.item(node)
            for index, item in enumerate(value):
                sub = (*path, _item_element(node, index, item))
                self._walk(item, item_node, sub, out, maps)
                out.setdefault(sub, _MEMBER)
            return
        if not isinstance(value, dict):
            out[path] = value
            return
        if maps and node.kind == "map" and path:
            out.setdefault(path, _MEMBER)
        for key, child in value.items():
            child_node = self.types.field(node, key)
            if child_node is None:
                raise ApplyError(f"{path_text((*path, ('f', key)))}: field not declared in schema")
            sub = (*path, ("f", key))
            self._walk(child, child_node, sub, out, maps)
            declared = node.kind == "struct"
            if child is None or child == {} or not declared:
                out.setdefault(sub, child if child is None or child == {} else _MEMBER)


class _Member:
    def __repr__(self) -> str:
        return "<member>"


_MEMBER = _Member()


def compare(walker: Walker, old: Any, new: Any) -> tuple[FieldSet, FieldSet, FieldSet]:
    """``(added, modified, removed)`` paths from ``old`` to ``new``."""
    before, after = walker.leaves(old, maps=True), walker.leaves(new, maps=True)
    added = {p for p in after if p not in before}
    removed = {p for p in before if p not in after}
    modified = {p for p, v in after.items() if p in before and v is not _MEMBER and before[p] != v}
    return added, modified, removed


# ------------------------------------------------------------------ merging
def merge(types: Types, live: Any, config: Any, node: Node) -> Any:
    """``config`` merged into ``live``: granular parts by field, key or value; atomic parts replaced."""
    if node.atomic or node.kind == "scalar" or live is None or config is None:
        return config
    if node.kind == "list":
        if node.deduced or not isinstance(live, list) or not isinstance(config, list):
            return config
        item_node = types.item(node)
        result = list(live)
        where = {_item_element(node, i, item): i for i, item in enumerate(result)}
        for index, item in enumerate(config):
            element = _item_element(node, index, item)
            if element in where:
                at = where[element]
                result[at] = merge(types, result[at], item, item_node)
            else:
                where[element] = len(result)
                result.append(item)
        return result
    if not isinstance(live, dict) or not isinstance(config, dict):
        return config
    out = dict(live)
    for key, value in config.items():
        child = types.field(node, key) or Node("map", deduced=True)
        out[key] = merge(types, live.get(key), value, child) if key in live else value
    return out


def remove(types: Types, obj: Any, path: Path, node: Node) -> Any:
    """``obj`` without the value at ``path`` (an absent path changes nothing)."""
    if not path or not isinstance(obj, dict | list):
        return obj
    element, rest = path[0], path[1:]
    if isinstance(obj, list):
        for index, item in enumerate(obj):
            if _item_element(node, index, item) == element:
                if not rest:
                    return obj[:index] + obj[index + 1:]
                return [*obj[:index], remove(types, item, rest, types.item(node)), *obj[index + 1:]]
        return obj
    key = element[1]
    if element[0] != "f" or key not in obj:
        return obj
    if not rest:
        return {k: v for k, v in obj.items() if k != key}
    child = types.field(node, key) or Node("map", deduced=True)
    value = remove(types, obj[key], rest, child)
    if value in ({}, []) and child.kind in ("map", "list"):  # an empty map or list is omitted (omitempty)
        return {k: v for k, v in obj.items() if k != key}
    return {**obj, key: value}


# ----------------------------------------------------------- FieldsV1 codec
def encode(fields: Iterable[Path]) -> dict[str, Any]:
    """A field set as ``FieldsV1``: nested ``{element: {...}}``, ``"."`` marking a member with children."""
    paths = set(fields)
    prefixes = {p[:i] for p in paths for i in range(1, len(p))}
    root: dict[str, Any] = {}
    for path in sorted(paths, key=lambda p: [element_text(e) for e in p]):
        node = root
        for element in path:
            node = node.setdefault(element_text(element), {})
        if path in prefixes:
            node["."] = {}
    return root


def _parse_element(text: str) -> Element:
    kind, _, rest = text.partition(":")
    if kind == "f":
        return ("f", rest)
    if kind == "k":
        return ("k", tuple((k, _json(v)) for k, v in sorted(json.loads(rest).items())))
    if kind == "v":
        return ("v", _json(json.loads(rest)))
    return ("i", int(rest))


def decode(fields: dict[str, Any] | None, prefix: Path = ()) -> FieldSet:
    out: FieldSet = set()
    for text, child in (fields or {}).items():
        if text == ".":
            out.add(prefix)
            continue
        path = (*prefix, _parse_element(text))
        if child:
            out |= decode(child, path)
        else:
            out.add(path)
    return out


# ----------------------------------------------------------------- managers
def identifier(entry: dict[str, Any]) -> str:
    """A manager's identity: name, operation, subresource, and the version an updater used."""
    ident = {"manager": entry.get("manager", ""), "operation": entry.get("operation", "")}
    if entry.get("operation") == "Update":
        ident["apiVersion"] = entry.get("apiVersion", "")
    if entry.get("subresource"):
        ident["subresource"] = entry["subresource"]
    return json.dumps(ident, sort_keys=True)


def describe(ident: str) -> str:
    """A manager as conflicts name it: ``"kubectl"``, ``"kubectl-edit" using apps/v1``."""
    entry = json.loads(ident)
    text = json.dumps(entry["manager"])
    if entry.get("subresource"):
        text += f" with subresource {json.dumps(entry['subresource'])}"
    if entry["operation"] == "Update":
        text += f" using {entry.get('apiVersion', '')}"
    return text


def conflict_message(conflicts: list[Conflict]) -> str:
    if len(conflicts) == 1:
        only = conflicts[0]
        return f"Apply failed with 1 conflict: conflict with {describe(only.manager)}: {path_text(only.path)}"
    lines: list[str] = []
    for manager in sorted({c.manager for c in conflicts}):
        lines.append(f"conflicts with {describe(manager)}:")
        lines.extend(f"- {path_text(c.path)}" for c in conflicts if c.manager == manager)
    return f"Apply failed with {len(conflicts)} conflicts: " + "\n".join(lines)


@dataclass
class Managed:
    """The managers of one object: identifier -> (entry without fields, field set)."""

    entries: dict[str, tuple[dict[str, Any], FieldSet]]

    @classmethod
    def of(cls, obj: dict[str, Any] | None) -> Managed:
        entries: dict[str, tuple[dict[str, Any], FieldSet]] = {}
        for entry in ((obj or {}).get("metadata") or {}).get(_MANAGED) or []:
            if not isinstance(entry, dict):
                continue
            head = {k: v for k, v in entry.items() if k not in ("fieldsV1", "fieldsType")}
            entries[identifier(head)] = (head, decode(entry.get("fieldsV1")))
        return cls(entries)

    def encoded(self) -> list[dict[str, Any]]:
        out = []
        for head, fields in self.entries.values():
            if fields:
                out.append({**head, "fieldsType": "FieldsV1", "fieldsV1": encode(fields)})
        out.sort(key=lambda e: (e.get("operation", ""), e.get("time", ""), e.get("manager", ""),
                                e.get("apiVersion", ""), e.get("subresource", "")))
        return out

    def others(self, me: str) -> Iterable[tuple[str, FieldSet]]:
        return ((ident, fields) for ident, (_, fields) in self.entries.items() if ident != me)

    def take(self, me: str, paths: FieldSet) -> None:
        """``paths`` leave every other manager (a forced apply, an update)."""
        for ident, (head, fields) in list(self.entries.items()):
            if ident != me and fields & paths:
                self.entries[ident] = (head, fields - paths)


def scope_filter(paths: FieldSet, subresource: str | None, has_status: bool) -> FieldSet:
    """What a write on this endpoint may own: ``status`` only there, everything else elsewhere."""
    if not has_status:
        return paths
    status = ("f", "status")
    if subresource == "status":
        return {p for p in paths if p[:1] == (status,)}
    return {p for p in paths if p[:1] != (status,)}


class FieldManager:
    """Updates and applies for one kind in one release."""

    def __init__(self, types: Types, group: str, version: str, kind: str, *, has_status: bool) -> None:
        self.types = types
        self.root = types.of_kind(group, version, kind)
        self.walker = Walker(types, self.root)
        self.api_version = f"{group}/{version}" if group else version
        self.has_status = has_status

    def _scope(self, paths: FieldSet, subresource: str | None) -> FieldSet:
        return scope_filter(paths, subresource, self.has_status)

    def update(self, live: dict[str, Any] | None, new: dict[str, Any], manager: str, now: str,
               subresource: str | None = None) -> list[dict[str, Any]]:
        """``managedFields`` after an Update by ``manager`` from ``live`` to ``new``."""
        requested = (new.get("metadata") or {}).get(_MANAGED)
        if requested == []:
            return []  # the client asked for the field management to be reset
        source = new if requested and requested != ((live or {}).get("metadata") or {}).get(_MANAGED) else live
        managed = Managed.of(source)
        try:
            added, modified, removed = compare(self.walker, live or {}, new)
        except ApplyError:
            return managed.encoded()  # free-form content the schema cannot type: leave ownership alone
        changed = self._scope(added | modified, subresource)
        removed = self._scope(removed, subresource)
        head = {"manager": manager, "operation": "Update", "apiVersion": self.api_version, "time": now}
        if subresource:
            head["subresource"] = subresource
        me = identifier(head)
        managed.take(me, changed | removed)
        _, mine = managed.entries.get(me, (head, set()))
        managed.entries[me] = (head, (mine - removed) | changed)
        return managed.encoded()

    def apply(self, live: dict[str, Any] | None, config: dict[str, Any], manager: str, now: str, *,
              force: bool, subresource: str | None = None) -> dict[str, Any]:
        """The object after applying ``config`` as ``manager``; raises :class:`ApplyConflicts`."""
        live = live or {}
        managed = Managed.of(live)
        head = {"manager": manager, "operation": "Apply", "apiVersion": self.api_version, "time": now}
        if subresource:
            head["subresource"] = subresource
        me = identifier(head)
        self.walker.validate(config)
        applied = self._scope(self.walker.fieldset(config), subresource)
        merged = merge(self.types, live, config, self.root)
        _, last = managed.entries.get(me, (head, set()))
        others: FieldSet = set().union(*(fields for _, fields in managed.others(me)))
        keep = applied | others
        kept_prefixes = {p[:i] for p in keep for i in range(1, len(p) + 1)}
        for path in sorted(last - keep, key=len):
            if path not in kept_prefixes:
                merged = remove(self.types, merged, path, self.root)
        added, modified, removed = compare(self.walker, live, merged)
        changed = self._scope(added | modified, subresource)
        conflicts = [Conflict(ident, path) for ident, fields in sorted(managed.others(me))
                     for path in sorted(fields & changed, key=path_text)]
        if conflicts and not force:
            allowed = self._client_side_applied(live) if manager == CSA_UPGRADER else set()
            left = [c for c in conflicts if c.path not in allowed]
            if left:
                raise ApplyConflicts(left)
        managed.take(me, changed | self._scope(removed, subresource))
        managed.entries[me] = (head, applied)
        merged.setdefault("metadata", {})[_MANAGED] = managed.encoded()
        return merged


    def _client_side_applied(self, live: dict[str, Any]) -> FieldSet:
        """The fields of the object's last client-side apply (``lastAppliedManager``).

        ``kubectl apply --server-side`` (manager ``kubectl``) may take over from
        ``kubectl apply`` without conflicts on the fields the last client-side apply set.
        """
        text = ((live.get("metadata") or {}).get("annotations") or {}).get(LAST_APPLIED)
        if not text:
            return set()
        try:
            return self.walker.fieldset(json.loads(text))
        except (ValueError, ApplyError):
            return set()


class ApplyConflicts(Exception):
    def __init__(self, conflicts: list[Conflict]) -> None:
        super().__init__(conflict_message(conflicts))
        self.conflicts = conflicts
