"""A custom resource's structural schema applied as apiextensions-apiserver applies it on a write.

For an object of a kind a stored CRD serves, the version's ``openAPIV3Schema``:

- **defaulting**: a property's ``default`` is set where the property is missing in an object that is present
  (a default inside ``spec.devicePlugin.mps`` applies only when ``mps`` is given), through ``items`` and
  ``additionalProperties`` too;
- **pruning**: fields the schema does not declare are dropped (unless ``x-kubernetes-preserve-unknown-fields``
  or ``additionalProperties`` keep them); ``apiVersion``, ``kind`` and ``metadata`` are always kept;
- **validation**: ``type`` (``x-kubernetes-int-or-string`` takes both), ``nullable``, ``enum`` and ``required``,
  refused with 422 and kube-openapi's wording (``spec.daemonsets.updateStrategy: Unsupported value: "x":
  supported values: "RollingUpdate", "OnDelete"``; ``... in body must be of type string: "integer"``;
  ``Required value``). Formats, patterns, bounds and CEL rules are not checked.

A client's create, update and patch pass here (:func:`admit`); a scenario's objects get the defaults
(:func:`default`); kubesim's controllers' own writes are stored as they write them.
"""

from __future__ import annotations

import copy
import json
from typing import TYPE_CHECKING, Any

from kubesim import errors

if TYPE_CHECKING:
    from kubesim.resources import ResourceType
    from kubesim.store import Store

CRDS = ("apiextensions.k8s.io", "customresourcedefinitions")
_ALWAYS = ("apiVersion", "kind", "metadata")
_TYPES: dict[str, tuple[type, ...]] = {"string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,),
                                       "object": (dict,), "array": (list,)}


def schema_of(store: Store, res: ResourceType) -> dict[str, Any] | None:
    """The ``openAPIV3Schema`` of ``res``'s version in the CRD that serves it, if a CRD does."""
    for crd in store.iter(CRDS):
        spec = crd.get("spec") or {}
        if spec.get("group") != res.group or (spec.get("names") or {}).get("plural") != res.plural:
            continue
        for version in spec.get("versions") or []:
            if isinstance(version, dict) and version.get("name") == res.version:
                schema = (version.get("schema") or {}).get("openAPIV3Schema")
                return schema if isinstance(schema, dict) else None
    return None


def default(schema: dict[str, Any], value: Any, *, root: bool = True) -> None:
    """Set the schema's defaults into ``value``, in place."""
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        for key, sub in props.items():
            if root and key in _ALWAYS:
                continue
            if key not in value and isinstance(sub, dict) and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
            if key in value and isinstance(sub, dict):
                default(sub, value[key], root=False)
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for key, item in value.items():
                if key not in props:
                    default(extra, item, root=False)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            default(schema["items"], item, root=False)


def prune(schema: dict[str, Any], value: Any, *, root: bool = True) -> None:
    """Drop the fields ``schema`` does not declare, in place."""
    if isinstance(value, dict):
        if schema.get("x-kubernetes-preserve-unknown-fields"):
            return
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key in list(value):
            if root and key in _ALWAYS:
                continue
            if key in props:
                prune(props[key], value[key], root=False)
            elif isinstance(extra, dict):
                prune(extra, value[key], root=False)
            elif extra is not True:
                del value[key]
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            prune(schema["items"], item, root=False)


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _quoted(value: Any) -> str:
    return json.dumps(value) if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def problems(schema: dict[str, Any], value: Any, path: str, *, root: bool = True) -> list[tuple[str, str, str]]:
    """(field, reason, message) for each way ``value`` breaks ``schema``."""
    out: list[tuple[str, str, str]] = []
    wanted = schema.get("type")
    if value is None:
        if wanted and not schema.get("nullable"):
            out.append((path, "FieldValueTypeInvalid",
                        f'Invalid value: "null": {path} in body must be of type {wanted}: "null"'))
        return out
    if schema.get("x-kubernetes-int-or-string"):
        if not isinstance(value, (int, str)) or isinstance(value, bool):
            out.append((path, "FieldValueTypeInvalid", f'Invalid value: "{_type_name(value)}": {path} in body must be '
                                                       f'of type integer or string: "{_type_name(value)}"'))
        return out
    if wanted in _TYPES and (not isinstance(value, _TYPES[wanted]) or (wanted != "boolean" and isinstance(value, bool))):
        got = _type_name(value)
        out.append((path, "FieldValueTypeInvalid", f'Invalid value: "{got}": {path} in body must be of type {wanted}: '
                                                   f'"{got}"'))
        return out
    enum = schema.get("enum")
    if isinstance(enum, list) and value not in enum:
        supported = ", ".join(_quoted(e) for e in enum)
        out.append((path, "FieldValueNotSupported", f"Unsupported value: {_quoted(value)}: supported values: {supported}"))
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        for key in schema.get("required") or []:
            if key not in value:
                out.append((f"{path}.{key}" if path else key, "FieldValueRequired", "Required value"))
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            if root and key in _ALWAYS:
                continue
            sub = props.get(key, extra if isinstance(extra, dict) else None)
            if isinstance(sub, dict):
                out.extend(problems(sub, item, f"{path}.{key}" if path else key, root=False))
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            out.extend(problems(schema["items"], item, f"{path}[{index}]", root=False))
    return out


def admit(store: Store, res: ResourceType, obj: dict[str, Any], *, status: bool = False) -> None:
    """Prune, default and validate a client's write of a custom resource, in place (422 when invalid); kinds no
    CRD serves are left alone. ``status``: a write of the status subresource (only ``status`` is checked)."""
    schema = schema_of(store, res)
    if schema is None:
        return
    prune(schema, obj)
    default(schema, obj)
    found = problems(schema, obj, "")
    if status:
        found = [p for p in found if p[0] == "status" or p[0].startswith("status.")]
    else:
        found = [p for p in found if not (p[0] == "status" or p[0].startswith("status."))]
    if found:
        raise errors.invalid_object(res, str((obj.get("metadata") or {}).get("name") or ""), found)
