"""Patch application for the simulated API server: JSON merge patch (RFC 7386),
JSON patch (RFC 6902) and Kubernetes strategic merge patch.

The strategic merge patch follows ``k8s.io/apimachinery/pkg/util/strategicpatch``
as the API server runs it for built-in types (``MergeParallelList`` and
``IgnoreUnmatchedNulls`` on).  Patch metadata normally comes from Go struct
tags; here it is keyed by field name in ``MERGE_KEYS``/``MERGE_PRIMITIVE_LISTS``.
Merged lists are ordered like the server orders them: patch items in patch
order, server-only items slotted in by their original position (so a brand-new
element lands *before* the existing ones unless ``$setElementOrder`` says
otherwise).  Every function works on deep copies and never mutates its inputs.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

__all__ = [
    "KIND_MERGE_KEYS",
    "MERGE_KEYS",
    "MERGE_PRIMITIVE_LISTS",
    "PatchError",
    "json_merge_patch",
    "json_patch",
    "merge_keys_for",
    "strategic_merge_patch",
]


class PatchError(ValueError):
    """A patch could not be applied (message modelled on the API server's)."""


#: field name -> merge key for lists of maps patched with strategy "merge";
#: ``None`` (or absence) means an atomic list that the patch replaces wholesale.
MERGE_KEYS: dict[str, str | None] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "ports": "containerPort",  # Container.ports; a Service's ports: KIND_MERGE_KEYS
    "imagePullSecrets": "name",
    "secrets": "name",  # ServiceAccount.secrets
    "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey",
    "schedulingGates": "name",
    "resourceClaims": "name",
    "resourceClaimStatuses": "name",
    "reservedFor": "uid",
    "conditions": "type",
    "addresses": "type",
    "podIPs": "ip",
    "hostIPs": "ip",
    "ownerReferences": "uid",
    "tolerations": None,
    "taints": None,
    "containerStatuses": None,
    "initContainerStatuses": None,
    "ephemeralContainerStatuses": None,
    "readinessGates": None,
    "managedFields": None,
}

#: per kind (group, plural), the fields whose Go struct tags differ from ``MERGE_KEYS``:
#: ``ServiceSpec.ports`` is ``patchMergeKey:"port"`` (``Container.ports`` merges on containerPort).
KIND_MERGE_KEYS: dict[tuple[str, str], dict[str, str | None]] = {
    ("", "services"): {"ports": "port"},
}


def merge_keys_for(group_resource: tuple[str, str]) -> Mapping[str, str | None]:
    """The merge-key table of one kind: ``MERGE_KEYS`` with the kind's own tags over it."""
    own = KIND_MERGE_KEYS.get(group_resource)
    return {**MERGE_KEYS, **own} if own else MERGE_KEYS


#: primitive lists with patch strategy "merge": the patch is unioned in.
MERGE_PRIMITIVE_LISTS: frozenset[str] = frozenset({"finalizers", "podCIDRs"})

_PATCH = "$patch"
_RETAIN_KEYS = "$retainKeys"
_SET_ORDER = "$setElementOrder"
_DELETE_PRIMITIVE = "$deleteFromPrimitiveList"
_DROP = object()  # sentinel: a value that must not be kept at all


# ---------------------------------------------------------------- RFC 7386
def json_merge_patch(target: Any, patch: Any) -> Any:
    """Apply an RFC 7386 JSON merge patch: ``null`` deletes, non-objects replace."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = json_merge_patch(result.get(key), value)
    return result


# ---------------------------------------------------------------- RFC 6902
def _pointer(path: Any) -> list[str]:
    if not isinstance(path, str) or (path and not path.startswith("/")):
        raise PatchError(f"invalid JSON pointer: {path!r}")
    tokens = path.split("/")[1:]
    for tok in tokens:
        if "~" in tok.replace("~0", "").replace("~1", ""):
            raise PatchError(f"invalid JSON pointer escape in {path!r}")
    return [t.replace("~1", "/").replace("~0", "~") for t in tokens]


def _index(tok: str, size: int, path: str, *, insert: bool = False) -> int:
    if insert and tok == "-":
        return size
    if not tok.isdigit() or (tok != "0" and tok.startswith("0")) or not tok.isascii():
        raise PatchError(f"invalid array index {tok!r} in path {path!r}")
    idx = int(tok)
    if idx > size or (idx == size and not insert):
        raise PatchError(f"array index {idx} out of bounds in path {path!r}")
    return idx


def _resolve(doc: Any, tokens: list[str], path: str) -> Any:
    for tok in tokens:
        if isinstance(doc, dict) and tok in doc:
            doc = doc[tok]
        elif isinstance(doc, list):
            doc = doc[_index(tok, len(doc), path)]
        else:
            raise PatchError(f"doc is missing path: {path!r}")
    return doc


def _json_equal(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, (dict, list)) or isinstance(b, (dict, list)):
        return False
    return a == b


def _add(doc: Any, path: str, value: Any) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return value
    parent, last = _resolve(doc, tokens[:-1], path), tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(last, len(parent), path, insert=True), value)
    else:
        raise PatchError(f"doc is missing path: {path!r}")
    return doc


def _remove(doc: Any, path: str) -> Any:
    tokens = _pointer(path)
    if not tokens:
        raise PatchError("cannot remove the whole document")
    parent, last = _resolve(doc, tokens[:-1], path), tokens[-1]
    if isinstance(parent, dict) and last in parent:
        return parent.pop(last)
    if isinstance(parent, list):
        return parent.pop(_index(last, len(parent), path))
    raise PatchError(f"unable to remove nonexistent key: {last!r} (path {path!r})")


def _replace(doc: Any, path: str, value: Any) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return value
    parent, last = _resolve(doc, tokens[:-1], path), tokens[-1]
    if isinstance(parent, dict) and last in parent:
        parent[last] = value
    elif isinstance(parent, list):
        parent[_index(last, len(parent), path)] = value
    else:
        raise PatchError(f"replace operation does not apply: doc is missing key: {path!r}")
    return doc


def json_patch(target: dict, ops: list[dict]) -> dict:
    """Apply an RFC 6902 JSON patch (add, remove, replace, move, copy, test)."""
    if not isinstance(ops, list):
        raise PatchError("invalid JSON patch: expected a list of operations")
    doc = copy.deepcopy(target)
    for op in ops:
        if not isinstance(op, dict) or "path" not in op:
            raise PatchError(f"invalid JSON patch operation: {op!r}")
        kind, path = op.get("op"), op["path"]
        if kind in ("add", "replace", "test") and "value" not in op:
            raise PatchError(f"{kind} operation on {path!r} is missing 'value'")
        if kind in ("move", "copy") and "from" not in op:
            raise PatchError(f"{kind} operation on {path!r} is missing 'from'")
        if kind == "add":
            doc = _add(doc, path, copy.deepcopy(op["value"]))
        elif kind == "remove":
            _remove(doc, path)
        elif kind == "replace":
            doc = _replace(doc, path, copy.deepcopy(op["value"]))
        elif kind == "move":
            src = op["from"]
            if path != src and path.startswith(src + "/"):
                raise PatchError(f"cannot move {src!r} into its own child {path!r}")
            doc = _add(doc, path, _remove(doc, src)) if path != src else doc
        elif kind == "copy":
            value = copy.deepcopy(_resolve(doc, _pointer(op["from"]), op["from"]))
            doc = _add(doc, path, value)
        elif kind == "test":
            if not _json_equal(_resolve(doc, _pointer(path), path), op["value"]):
                raise PatchError(f"testing value {path!r} failed")
        else:
            raise PatchError(f"unknown JSON patch operation: {kind!r}")
    return doc


# ------------------------------------------------------ strategic merge patch
def strategic_merge_patch(
    target: dict, patch: dict, *, merge_keys: Mapping[str, str | None] | None = None
) -> dict:
    """Apply a Kubernetes strategic merge patch the way the API server does.

    ``merge_keys`` replaces the ``MERGE_KEYS`` table (e.g. for Service ports).
    """
    if not isinstance(patch, dict):
        raise PatchError("strategic merge patch must be a JSON object")
    if target is not None and not isinstance(target, dict):
        raise PatchError("strategic merge patch target must be a JSON object")
    smp = _Strategic(MERGE_KEYS if merge_keys is None else merge_keys)
    return smp.merge_map(copy.deepcopy(target) or {}, copy.deepcopy(patch))


def _clean(value: Any) -> Any:
    """Drop directives and nulls from a value taken from the patch as-is."""
    if isinstance(value, dict):
        if _PATCH in value:
            return _DROP
        out = {}
        for k, v in value.items():
            if v is not None and not k.startswith("$") and (c := _clean(v)) is not _DROP:
                out[k] = c
        return out
    if isinstance(value, list):
        return [c for c in map(_clean, value) if c is not _DROP]
    return value


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b


def _kind(value: Any) -> str:
    return "map" if isinstance(value, dict) else "list" if isinstance(value, list) else "scalar"


def _field(key: str, prefix: str) -> str:
    head, sep, rest = key.partition("/")
    if not sep or head != prefix:
        what = "primitive list" if prefix == _DELETE_PRIMITIVE else "setElementOrder list"
        raise PatchError(f"invalid patch format of {what}")
    return rest


def _element_kind(*lists: list) -> str:
    kinds = set()
    for lst in lists:
        for v in lst:
            if isinstance(v, list):
                raise PatchError("lists of lists are not supported")
            kinds.add("number" if type(v) in (int, float) else type(v).__name__)
    if len(kinds) > 1:
        raise PatchError(f"list element types are not identical: {lists}")
    return "map" if kinds == {"dict"} else "scalar"


def _key_of(item: Any, mk: str) -> Any:
    if not isinstance(item, dict):
        raise PatchError(f"expected a map, but received {type(item).__name__}: {item!r}")
    if mk not in item:
        raise PatchError(f"map: {item} does not contain declared merge key: {mk}")
    return item[mk]


def _find(items: list, item: Any, mk: str) -> int:
    """Index of ``item`` in ``items`` (by merge key value for maps), or -1."""
    want = item.get(mk) if mk and isinstance(item, dict) else item
    for i, v in enumerate(items):
        if _same(want, v.get(mk) if mk and isinstance(v, dict) else v):
            return i
    return -1


def _partition(merged: list[Any], by: list[Any], mk: str) -> tuple[list[Any], list[Any]]:
    inside: list[Any] = []
    outside: list[Any] = []
    for v in merged:
        if mk:
            _key_of(v, mk)
        (inside if _find(by, v, mk) >= 0 else outside).append(v)
    return inside, outside


def _sort_by(items: list, order: list, mk: str) -> list:
    if mk:
        for v in (*items, *order):
            _key_of(v, mk)
        deletes = [v for v in items if v.get(_PATCH) == "delete"]
        items = [v for v in items if v.get(_PATCH) != "delete"]
    else:
        deletes = []

    def rank(v: Any) -> int:
        i = _find(order, v, mk)
        return i if i >= 0 else len(order)

    return sorted(items, key=rank) + deletes


def _normalize_order(patch_items: list, server_only: list, patch_order: list,
                     server_order: list, mk: str) -> list:
    """Mirror ``normalizeElementOrder``/``mergeSortedSlice`` of apimachinery."""
    right, left = _sort_by(patch_items, patch_order, mk), _sort_by(server_only, server_order, mk)
    out: list = []
    i = j = 0
    while i < len(left) or j < len(right):
        if i < len(left) and j < len(right):
            li, ri = _find(server_order, left[i], mk), _find(server_order, right[j], mk)
            take_left = li >= 0 and ri >= 0 and li < ri
        else:
            take_left = j >= len(right)
        if take_left:
            out.append(left[i])
            i += 1
        else:
            out.append(right[j])
            j += 1
    return out


class _Strategic:
    """One patch application; works in place on already deep-copied data."""

    def __init__(self, merge_keys: Mapping[str, str | None]) -> None:
        self.merge_keys = merge_keys

    def strategy(self, field: str) -> tuple[bool, str]:
        """(is the list merged?, merge key or '' for primitives)."""
        mk = self.merge_keys.get(field)
        if mk:
            return True, mk
        return field in MERGE_PRIMITIVE_LISTS, ""

    def merge_map(self, original: dict, patch: dict) -> dict:
        if _PATCH in patch:
            directive = patch.pop(_PATCH)
            if directive == "replace":
                return _clean(patch)
            if directive == "delete":
                return {}
            raise PatchError(f"unknown patch type: {directive} in map: {patch}")
        self.retain_keys(original, patch)
        self.set_element_orders(original, patch)
        for key, pval in list(patch.items()):
            delete_list = key.startswith(_DELETE_PRIMITIVE)
            if delete_list:
                key = _field(key, _DELETE_PRIMITIVE)
            elif key.startswith("$"):
                continue  # unknown directive: never stored
            if pval is None:
                original.pop(key, None)
            elif key not in original or _kind(original[key]) != _kind(pval):
                if not delete_list:
                    cleaned = _clean(pval)
                    if cleaned is _DROP:
                        original.pop(key, None)
                    else:
                        original[key] = cleaned
            elif isinstance(pval, dict):
                original[key] = self.merge_map(original[key], pval)
            elif isinstance(pval, list):
                original[key] = self.merge_list(key, original[key], pval, delete_list)
            else:
                original[key] = pval
        return original

    def merge_list(self, field: str, original: list, patch: list, delete_list: bool) -> list:
        is_merge, mk = self.strategy(field)
        if not (is_merge or delete_list):
            return _clean(patch)  # atomic list
        if not original and not patch:
            return original
        if _element_kind(original, patch) == "scalar":
            if delete_list:
                return [v for v in original if _find(patch, v, "") < 0]
            result: list = []
            for v in original + patch:
                if _find(result, v, "") < 0:
                    result.append(v)
        else:
            if not mk:
                raise PatchError(f"cannot merge lists without merge key for {field}")
            original, patch = self.special_elements(original, patch, mk)
            result = list(original)  # ``original`` keeps its length: it ranks server items
            for item in patch:
                idx = _find(result, {mk: _key_of(item, mk)}, mk)
                if idx >= 0:
                    result[idx] = self.merge_map(result[idx], item)
                else:
                    result.append(_clean(item))
        inside, outside = _partition(result, patch, mk)
        return _normalize_order(inside, outside, patch, original, mk)

    @staticmethod
    def special_elements(original: list, patch: list, mk: str) -> tuple[list, list]:
        plain, replace = [], False
        for item in patch:
            if not isinstance(item, dict):
                raise PatchError(f"expected a map, but received {type(item).__name__}")
            if _PATCH not in item:
                plain.append(item)
            elif item[_PATCH] == "delete":
                value = _key_of({k: v for k, v in item.items() if k != _PATCH}, mk)
                original = [o for o in original if not (isinstance(o, dict) and mk in o
                                                        and _same(o[mk], value))]
            elif item[_PATCH] == "replace":
                replace = True
            elif item[_PATCH] == "merge":
                raise PatchError("merging lists cannot yet be specified in the patch")
            else:
                raise PatchError(f"unknown patch type: {item[_PATCH]} in map: {item}")
        if replace:
            return [_clean(v) for v in plain], []
        return original, plain

    @staticmethod
    def retain_keys(original: dict, patch: dict) -> None:
        if _RETAIN_KEYS not in patch:
            return
        retain = patch.pop(_RETAIN_KEYS)
        if not isinstance(retain, list):
            raise PatchError("invalid patch format of retainKeys")
        for key, value in patch.items():
            if value is not None and not key.startswith((_DELETE_PRIMITIVE, _SET_ORDER)) \
                    and key not in retain:
                raise PatchError("invalid patch format of retainKeys")
        for key in [k for k in original if k not in retain]:
            del original[key]

    def set_element_orders(self, original: dict, patch: dict) -> None:
        for key in [k for k in patch if k.startswith(_SET_ORDER)]:
            order = patch.pop(key)
            field = _field(key, _SET_ORDER)
            if not isinstance(order, list):
                raise PatchError("invalid patch format of setElementOrder list")
            in_orig, in_patch = field in original, field in patch
            if not (in_orig or in_patch):
                continue
            orig_list = original.get(field, [])
            patch_list = patch.pop(field, [])
            if not isinstance(orig_list, list) or not isinstance(patch_list, list):
                raise PatchError(f"setElementOrder applies to a list, {field} is not one")
            _, mk = self.strategy(field)
            self.check_order(patch_list, order, mk)
            merged = self.merge_list(field, orig_list, patch_list, False) if in_patch else orig_list
            if not mk and merged and _element_kind(merged) == "map":
                original[field] = merged  # atomic list of maps: nothing to order by
                continue
            inside, outside = _partition(merged, order, mk)
            original[field] = _normalize_order(inside, outside, order, orig_list, mk)

    @staticmethod
    def check_order(patch_list: list, order: list, mk: str) -> None:
        """The patch list must be a subsequence of ``$setElementOrder``."""
        items = [v for v in patch_list if not (isinstance(v, dict) and _PATCH in v)]
        if not order:
            return
        pi = si = 0
        while pi < len(items) and si < len(order):
            a, b = (_key_of(items[pi], mk), _key_of(order[si], mk)) if mk else (items[pi], order[si])
            if _same(a, b):
                pi += 1
            si += 1
        if pi < len(items):
            raise PatchError(f"The order in patch list:\n{patch_list}\n doesn't match "
                             f"{_SET_ORDER} list:\n{order}\n")
