"""Each simulated release's published API definitions, and what kubesim derives from them.

The definitions are the ones Kubernetes publishes for every release (its OpenAPI
``definitions``, generated from the Go types), as the ``kubernetes-validate`` package ships
them per minor release (``v1.<minor>.0-local/_definitions.json``). kubesim uses them for:

- the ``/openapi/v3`` documents it serves (:mod:`kubesim.openapi`);
- Go-faithful serialization (:meth:`Definitions.complete`): a Go API server decodes every
  object into its Go struct, so a field without ``omitempty`` is always written, as ``""``,
  ``0``, ``false`` or ``null`` when nothing set it. The generator marks exactly those fields
  ``required``; kubesim writes each missing required field with its Go zero value when it
  stores an object, as decoding into the struct would;
- the field structure server-side apply merges and tracks by (:mod:`kubesim.applying`):
  struct fields, maps, and lists that are atomic, sets, or maps keyed by some fields.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

_REF = "#/$defs/"
_QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
_INT_OR_STRING = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"
_NEW_DICT: Callable[[], Any] = dict


def _package_dir(minor: int) -> Any:
    return resources.files("kubernetes_validate") / "kubernetes-json-schema" / f"v1.{minor}.0-local"


def schema_type(schema: dict[str, Any]) -> str | None:
    """The JSON type a property holds (the package's ``["string", "null"]`` read as ``string``)."""
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), None)
    return kind


@dataclass
class Shape:
    """What completing one struct takes: its missing required fields, then the children to visit."""

    zeros: list[tuple[str, Callable[[], Any]]] = field(default_factory=list)
    structs: list[tuple[str, str]] = field(default_factory=list)
    """Required struct fields: written as ``{}`` when missing (then completed)."""
    children: list[tuple[str, str, str]] = field(default_factory=list)
    """``(field, how, definition)``: ``how`` is ``one``, ``list`` or ``map``."""

    @property
    def empty(self) -> bool:
        return not (self.zeros or self.structs or self.children)


class Definitions:
    """One release's definitions, indexed by name and by group/version/kind."""

    def __init__(self, minor: int, defs: dict[str, dict[str, Any]]) -> None:
        self.minor = minor
        self.defs = defs
        self.by_gvk: dict[tuple[str, str, str], str] = {}
        for name, schema in defs.items():
            for gvk in schema.get("x-kubernetes-group-version-kind") or ():
                self.by_gvk.setdefault((gvk.get("group", ""), gvk["version"], gvk["kind"]), name)
        self._shapes: dict[str, Shape] = {}

    # ------------------------------------------------------------ lookups
    def kind(self, group: str, version: str, kind: str) -> str | None:
        """The definition name of a kind (``io.k8s.api.apps.v1.DaemonSet``), if published."""
        return self.by_gvk.get((group, version, kind))

    @staticmethod
    def ref_name(schema: dict[str, Any]) -> str | None:
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref.startswith(_REF):
            return ref[len(_REF):]
        for part in schema.get("allOf") or ():
            name = Definitions.ref_name(part)
            if name:
                return name
        return None

    def resolve(self, schema: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
        """A property's schema with its reference followed: ``(definition name, schema)``."""
        name = self.ref_name(schema)
        if name is None:
            return None, schema
        return name, self.defs.get(name, {})

    def closure(self, names: list[str]) -> list[str]:
        """The named definitions and every definition they refer to, in a stable order."""
        seen: dict[str, None] = {}
        todo = list(names)
        while todo:
            name = todo.pop()
            if name in seen or name not in self.defs:
                continue
            seen[name] = None
            todo.extend(_refs(self.defs[name]))
        return sorted(seen)

    # ----------------------------------------------------------- zero values
    def _zero(self, prop: dict[str, Any]) -> tuple[str, Any]:
        """``("struct", definition)`` or ``("value", factory)`` for a missing required field."""
        name, schema = self.resolve(prop)
        if name == _QUANTITY:
            return "value", lambda: "0"
        if name == _INT_OR_STRING:
            return "value", lambda: 0
        if name is not None and schema.get("properties"):
            return "struct", name
        kind = schema_type(schema)
        if kind == "string":
            if schema.get("format") in ("date-time", "byte"):
                return "value", lambda: None  # metav1.Time and []byte: null when zero
            return "value", lambda: ""
        if kind in ("integer", "number"):
            return "value", lambda: 0
        if kind == "boolean":
            return "value", lambda: False
        return "value", lambda: None  # nil slices, maps, pointers and raw extensions

    def shape(self, name: str) -> Shape:
        """The completion plan of one definition, children pruned to those with work below."""
        cached = self._shapes.get(name)
        if cached is not None:
            return cached
        shape = self._shapes[name] = Shape()  # a placeholder ends recursion (JSONSchemaProps)
        schema = self.defs.get(name, {})
        props: dict[str, Any] = schema.get("properties") or {}
        for fname in schema.get("required") or ():
            if fname not in props:
                continue
            how, what = self._zero(props[fname])
            if how == "struct":
                shape.structs.append((fname, what))
            else:
                shape.zeros.append((fname, what))
        required = set(schema.get("required") or ())
        for fname, prop in props.items():
            target, how = self._child(prop)
            if target is None or (fname in required and how == "one"):
                continue
            if not self.shape(target).empty or target == name:
                shape.children.append((fname, how, target))
        return shape

    def _child(self, prop: dict[str, Any]) -> tuple[str | None, str]:
        name, schema = self.resolve(prop)
        if name is not None:
            return (name, "one") if schema.get("properties") else (None, "")
        kind = schema_type(prop)
        if kind == "array":
            item = self.ref_name(prop.get("items") or {})
            return (item, "list") if item and (self.defs.get(item) or {}).get("properties") else (None, "")
        if kind == "object" and isinstance(prop.get("additionalProperties"), dict):
            value = self.ref_name(prop["additionalProperties"])
            return (value, "map") if value and (self.defs.get(value) or {}).get("properties") else (None, "")
        return None, ""

    def complete(self, obj: dict[str, Any], name: str, seen: set[int] | None = None) -> None:
        """Write every missing required field of ``obj`` (a ``name``) and below, in place.

        ``seen`` skips dicts already completed in the same pass (objects built in bulk share
        parts); ``None`` completes everything.
        """
        if seen is not None:
            if id(obj) in seen:
                return
            seen.add(id(obj))
        shape = self.shape(name)
        for fname, factory in shape.zeros:
            if fname not in obj:
                obj[fname] = factory()
        for fname, target in shape.structs:
            value = obj.get(fname)
            if value is None:
                value = obj[fname] = {}
            if isinstance(value, dict):
                self.complete(value, target, seen)
        for fname, how, target in shape.children:
            value = obj.get(fname)
            if value is None:
                continue
            if how == "one" and isinstance(value, dict):
                self.complete(value, target, seen)
            elif how == "list" and isinstance(value, list):
                for item in value:
                    if isinstance(item, dict):
                        self.complete(item, target, seen)
            elif how == "map" and isinstance(value, dict):
                for item in value.values():
                    if isinstance(item, dict):
                        self.complete(item, target, seen)

    def complete_kind(self, obj: dict[str, Any], group: str, version: str, kind: str,
                      seen: set[int] | None = None) -> dict[str, Any]:
        name = self.kind(group, version, kind)
        if name is not None:
            self.complete(obj, name, seen)
        return obj


def _refs(schema: Any) -> list[str]:
    out: list[str] = []
    if isinstance(schema, dict):
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref.startswith(_REF):
            out.append(ref[len(_REF):])
        for value in schema.values():
            out.extend(_refs(value))
    elif isinstance(schema, list):
        for value in schema:
            out.extend(_refs(value))
    return out


@functools.cache
def for_release(minor: int) -> Definitions:
    """The definitions Kubernetes 1.<minor> publishes (read once per process)."""
    path = _package_dir(minor) / "_definitions.json"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"no published API definitions for Kubernetes 1.{minor}") from None
    return Definitions(minor, data["$defs"])
