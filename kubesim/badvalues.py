"""How a field error prints the value it refuses (``field.Error.ErrorBody`` of
k8s.io/apimachinery/pkg/util/validation/field), per release, for the Go types kubesim refuses
whole: a workload's label selector and template labels, a ResourceClaim's spec.

- up to 1.33 a pointer is dereferenced, then a struct, slice or map is printed with ``%#v``:
  ``resource.ResourceClaimSpec{Devices:resource.DeviceClaim{Requests:[]resource.DeviceRequest{...}}}``;
  a nil slice is ``[]T(nil)``, a nil pointer ``(*T)(nil)``, a named string type is quoted. A
  non-nil pointer inside the value prints as the address of a Go heap object
  (``(*resource.CELDeviceSelector)(0xc00123abcd)``), a different number on each request of a real
  server; kubesim prints :data:`ADDRESS` in its place.
- from 1.34 (apimachinery's "Nicer value rendering in API errors") the value is ``json.Marshal``-ed:
  the fields of a type with JSON tags by their tags (``omitempty`` honoured), those of an internal
  API type (``k8s.io/kubernetes/pkg/apis/...``, which has no tags) by their Go names, every one
  present, nil as ``null``; an embedded struct's fields inline; HTML characters escaped.

The internal types' field order is that of their Go declarations in each release (they mirror the
newest served version: resource.k8s.io v1alpha2 on 1.27, v1beta1 on 1.32, v1 on 1.34).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

ADDRESS = "0xc000000000"
"""The stand-in for the heap address ``%#v`` prints for a non-nil pointer inside a value."""
JSON_FROM = 34
"""The first release whose field errors print a value as JSON."""


@dataclass(frozen=True)
class Go:
    """A Go type as a field error prints it: ``kind`` is string, int64, bool, ptr, slice, map,
    struct or raw (``runtime.RawExtension``, JSON as it is); ``name`` as ``%#v`` names it."""

    kind: str
    name: str = ""
    elem: Go | None = None
    fields: tuple[Field, ...] = ()


@dataclass(frozen=True)
class Field:
    """A struct field: its Go name, its name in the served JSON ('' for an embedded struct, whose
    fields are inline), its JSON tag name when the Go type has tags (None for internal types)."""

    go: str
    served: str
    type: Go
    tag: str | None = None
    omitempty: bool = False


def _struct(name: str, *fields: Field) -> Go:
    return Go("struct", name, fields=fields)


def _ptr(elem: Go) -> Go:
    return Go("ptr", "*" + elem.name, elem=elem)


def _slice(elem: Go) -> Go:
    return Go("slice", "[]" + elem.name, elem=elem)


STRING = Go("string", "string")
INT64 = Go("int64", "int64")
BOOL = Go("bool", "bool")
STRINGS = _slice(STRING)
LABELS = Go("map", "map[string]string", elem=STRING)
LABEL_SELECTOR = _ptr(_struct(
    "v1.LabelSelector",
    Field("MatchLabels", "matchLabels", LABELS, "matchLabels", True),
    Field("MatchExpressions", "matchExpressions", _slice(_struct(
        "v1.LabelSelectorRequirement",
        Field("Key", "key", STRING, "key"),
        Field("Operator", "operator", STRING, "operator"),
        Field("Values", "values", STRINGS, "values", True))), "matchExpressions", True)))
"""``*metav1.LabelSelector`` (a workload's ``spec.selector``)."""


def _f(go: str, kind: Go) -> Field:
    """A field of an internal type: served as lowerCamel Go name, no JSON tag."""
    return Field(go, go[0].lower() + go[1:], kind)


_SELECTORS = _slice(_struct("resource.DeviceSelector",
                            Field("CEL", "cel", _ptr(_struct("resource.CELDeviceSelector", _f("Expression", STRING))))))
_CONFIG = _struct("resource.DeviceConfiguration", _f("Opaque", _ptr(_struct(
    "resource.OpaqueDeviceConfiguration", _f("Driver", STRING), _f("Parameters", Go("raw", "runtime.RawExtension"))))))
_CLAIM_CONFIG = _slice(_struct("resource.DeviceClaimConfiguration", _f("Requests", STRINGS),
                               Field("DeviceConfiguration", "", _CONFIG)))
_TOLERATIONS = _slice(_struct("resource.DeviceToleration", _f("Key", STRING), _f("Operator", STRING),
                              _f("Value", STRING), _f("Effect", STRING), _f("TolerationSeconds", _ptr(INT64))))
_CAPACITY = _ptr(_struct("resource.CapacityRequirements",
                         _f("Requests", Go("map", "map[resource.QualifiedName]resource.Quantity", elem=STRING))))
_QUALIFIED = Go("string", "resource.FullyQualifiedName")


def _claim_spec(request: Go, constraint: Go) -> Go:
    return _struct("resource.ResourceClaimSpec", _f("Devices", _struct(
        "resource.DeviceClaim", _f("Requests", _slice(request)), _f("Constraints", _slice(constraint)),
        _f("Config", _CLAIM_CONFIG))))


_FLAT_CLAIM_SPEC = _claim_spec(
    _struct("resource.DeviceRequest", _f("Name", STRING), _f("DeviceClassName", STRING), _f("Selectors", _SELECTORS),
            _f("AllocationMode", STRING), _f("Count", INT64), _f("AdminAccess", _ptr(BOOL))),
    _struct("resource.DeviceConstraint", _f("Requests", STRINGS), _f("MatchAttribute", _ptr(_QUALIFIED))))
CLAIM_SPECS: dict[int, Go] = {
    27: _struct("resource.ResourceClaimSpec", _f("ResourceClassName", STRING),
                _f("ParametersRef", _ptr(_struct("resource.ResourceClaimParametersReference", Field(
                    "APIGroup", "apiGroup", STRING), _f("Kind", STRING), _f("Name", STRING)))),
                _f("AllocationMode", Go("string", "resource.AllocationMode"))),
    31: _FLAT_CLAIM_SPEC,
    32: _FLAT_CLAIM_SPEC,
    34: _claim_spec(
        _struct("resource.DeviceRequest", _f("Name", STRING), _f("Exactly", _ptr(_struct(
            "resource.ExactDeviceRequest", _f("DeviceClassName", STRING), _f("Selectors", _SELECTORS),
            _f("AllocationMode", STRING), _f("Count", INT64), _f("AdminAccess", _ptr(BOOL)),
            _f("Tolerations", _TOLERATIONS), _f("Capacity", _CAPACITY)))),
            _f("FirstAvailable", _slice(_struct(
                "resource.DeviceSubRequest", _f("Name", STRING), _f("DeviceClassName", STRING),
                _f("Selectors", _SELECTORS), _f("AllocationMode", STRING), _f("Count", INT64),
                _f("Tolerations", _TOLERATIONS), _f("Capacity", _CAPACITY))))),
        _struct("resource.DeviceConstraint", _f("Requests", STRINGS), _f("MatchAttribute", _ptr(_QUALIFIED)),
                _f("DistinctAttribute", _ptr(_QUALIFIED)))),
}
"""The internal ``resource.ResourceClaimSpec`` by the release it took that shape in (1.27 stands for
1.27-1.30: ResourceClassName, ParametersRef, AllocationMode; 1.31-1.33: flat device requests, as
1.32's; 1.34: the ``exactly``/``firstAvailable`` requests). 1.27, 1.32 and 1.34 are the ones the
conformance tests check."""


def claim_spec(minor: int) -> Go:
    """The internal ``ResourceClaimSpec`` of release ``1.<minor>`` (the nearest checked one before it)."""
    return CLAIM_SPECS[max(m for m in CLAIM_SPECS if m <= minor)]


def render(value: Any, kind: Go, *, minor: int) -> str:
    """The bad value as ``ErrorBody`` of release ``1.<minor>`` prints it (for a non-scalar value)."""
    if minor >= JSON_FROM:
        return _json(value, kind)
    if kind.kind == "ptr":  # ErrorBody dereferences the pointer it is given
        return "null" if value is None else _gov(value, kind.elem or kind)
    return _gov(value, kind)


def _gov(value: Any, kind: Go) -> str:
    """Go's ``%#v``."""
    if kind.kind == "string":
        return json.dumps("" if value is None else str(value), ensure_ascii=False)
    if kind.kind == "int64":
        return str(int(value or 0))
    if kind.kind == "bool":
        return "true" if value else "false"
    if kind.kind == "ptr":
        return f"({kind.name})(nil)" if value is None else f"({kind.name})({ADDRESS})"
    if kind.kind == "slice":
        if value is None:
            return f"{kind.name}(nil)"
        elem = kind.elem or STRING
        return kind.name + "{" + ", ".join(_gov(v, elem) for v in value) + "}"
    if kind.kind == "map":
        if value is None:
            return f"{kind.name}(nil)"
        elem = kind.elem or STRING
        return kind.name + "{" + ", ".join(f"{json.dumps(k)}:{_gov(v, elem)}" for k, v in sorted(value.items())) + "}"
    if kind.kind == "raw":
        return "runtime.RawExtension{Raw:[]uint8(nil), Object:runtime.Object(nil)}" if value is None else \
            "runtime.RawExtension{Raw:[]uint8{" + ", ".join(f"0x{b:x}" for b in _compact(value).encode()) + \
            "}, Object:runtime.Object(nil)}"
    data: Mapping[str, Any] = value if isinstance(value, Mapping) else {}
    return kind.name + "{" + ", ".join(f"{f.go}:{_gov(_get(data, f), f.type)}" for f in kind.fields) + "}"


def _get(data: Mapping[str, Any], field: Field) -> Any:
    return data if field.served == "" else data.get(field.served)


def _compact(value: Any) -> str:
    """``json.Marshal``'s bytes: compact, map keys sorted, ``<``, ``>`` and ``&`` escaped."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def _json(value: Any, kind: Go) -> str:
    """``json.Marshal``."""
    if value is None and kind.kind in ("ptr", "slice", "map", "raw"):
        return "null"
    if kind.kind == "ptr":
        return _json(value, kind.elem or kind)
    if kind.kind in ("string", "int64", "bool"):
        zero: Any = {"string": "", "int64": 0, "bool": False}[kind.kind]
        return _compact(zero if value is None else value)
    if kind.kind == "slice":
        elem = kind.elem or STRING
        return "[" + ",".join(_json(v, elem) for v in value) + "]"
    if kind.kind in ("map", "raw"):
        return _compact(value)
    data: Mapping[str, Any] = value if isinstance(value, Mapping) else {}
    return "{" + ",".join(_json_fields(data, kind)) + "}"


def _json_fields(data: Mapping[str, Any], kind: Go) -> list[str]:
    out: list[str] = []
    for f in kind.fields:
        if f.served == "" and f.tag is None:  # an embedded struct: its fields inline
            out += _json_fields(data, f.type)
            continue
        v = _get(data, f)
        if f.omitempty and v in (None, "", 0, False, [], {}):
            continue
        out.append(_compact(f.tag or f.go) + ":" + _json(v, f.type))
    return out
