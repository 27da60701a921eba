"""An upgrade through the GPU operator's ClusterPolicy: the fields a run changes, saved and put back. Pure.

The operator renders the device plugin's DaemonSet from ``spec.devicePlugin`` (``repository``,
``image``, ``version``, ``env``, ``args``) and ``spec.daemonsets`` (``updateStrategy``:
``RollingUpdate`` or ``OnDelete``, ``rollingUpdate.maxUnavailable``) and rewrites it whenever its
desired object changes (NVIDIA/gpu-operator v26.7.0: ``api/nvidia/v1/clusterpolicy_types.go``
``DevicePluginSpec`` and ``DaemonsetsSpec``; ``controllers/object_controls.go``). A run on such a
target never patches the DaemonSet: it changes the ClusterPolicy's fields for the new image (and
the run's env and args) together with ``spec.daemonsets.updateStrategy: OnDelete`` in one merge
patch, so the operator renders the new template without replacing any pod; the steps then replace
the pods node by node as for any OnDelete canary. What the run saves is the value of each field it
changes, as it was (``None``: absent); putting them back is one merge patch of those values, a
``None`` deleting the key again, so a rollback restores exactly those fields and no other.

Fields are named by their dotted path (``spec.devicePlugin.version``): none of the ClusterPolicy's
own keys holds a dot.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

from runbooks.owners import device_plugin_image
from runbooks.templates import Edits

PLUGIN = "spec.devicePlugin"
STRATEGY = "spec.daemonsets.updateStrategy"
ON_DELETE = "OnDelete"
IMAGE_FIELDS = ("repository", "image", "version")


class NotThroughClusterPolicy(ValueError):
    """A change the ClusterPolicy cannot express (the sentence says which and what to do)."""


def field(obj: Mapping[str, Any], path: str) -> Any:
    """The value at dotted ``path``, None when any part is absent."""
    value: Any = obj
    for key in path.split("."):
        if not isinstance(value, Mapping) or key not in value:
            return None
        value = value[key]
    return value


def _image_fields(plugin: Mapping[str, Any], image: str) -> dict[str, Any]:
    """The ``spec.devicePlugin`` fields that make the operator render ``image``: ``repository``,
    ``image`` and ``version`` when the ClusterPolicy names them (they must all be set together), or
    ``image`` alone, the whole path, when it names neither repository nor version (``imagePath``)."""
    if not plugin.get("repository") and not plugin.get("version") and plugin.get("image"):
        return {f"{PLUGIN}.image": image}
    parts = device_plugin_image(image)
    if not all(parts.values()):
        raise NotThroughClusterPolicy(f"{image} cannot be written as the ClusterPolicy's repository, image and "
                                      "version: name a registry path and a tag or digest")
    return {f"{PLUGIN}.{key}": parts[key] for key in IMAGE_FIELDS}


def _env(plugin: Mapping[str, Any], changes: Mapping[str, str | None]) -> list[dict[str, Any]]:
    """``spec.devicePlugin.env`` with the run's changes: a value replaced in place, a new one appended,
    ``None`` removing it (the order of the others kept)."""
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for entry in plugin.get("env") or []:
        name = str(entry.get("name", ""))
        if name in changes:
            seen.add(name)
            if changes[name] is not None:
                out.append({"name": name, "value": changes[name]})
        else:
            out.append(dict(entry))
    out += [{"name": name, "value": value} for name, value in changes.items() if name not in seen and value is not None]
    return out


def wanted(policy: Mapping[str, Any], *, image: str, edits: Edits) -> dict[str, Any]:
    """``{path: value}`` the run writes: the image's fields, env and args from ``edits``, and
    ``spec.daemonsets.updateStrategy: OnDelete``; only the fields whose value changes (the strategy
    always: it is written with the rest). :class:`NotThroughClusterPolicy` for an edit the
    ClusterPolicy's ``devicePlugin`` has no field for."""
    other = [name for name, value in (("limits", edits.limits), ("requests", edits.requests), ("security", edits.security),
                                      ("pod_security", edits.pod_security), ("priority", edits.priority),
                                      ("tolerate", edits.tolerate), ("untolerate", edits.untolerate),
                                      ("annotations", edits.annotations)) if value or (name == "priority" and value == "")]
    if other:
        raise NotThroughClusterPolicy(f"{', '.join(other)} cannot be changed through the ClusterPolicy's "
                                      "spec.devicePlugin by this bot (image, env and args can): change it in the "
                                      "ClusterPolicy yourself")
    plugin: Mapping[str, Any] = field(policy, PLUGIN) or {}
    out: dict[str, Any] = _image_fields(plugin, image) if image else {}
    if edits.env:
        out[f"{PLUGIN}.env"] = _env(plugin, edits.env)
    if edits.args is not None:
        out[f"{PLUGIN}.args"] = list(edits.args) or None
    changed = {path: value for path, value in out.items() if field(policy, path) != value}
    return {**changed, STRATEGY: ON_DELETE}


def saved(policy: Mapping[str, Any], paths: list[str]) -> dict[str, Any]:
    """``{path: value now}`` of each path, ``None`` for an absent one: what a rollback puts back."""
    return {path: field(policy, path) for path in paths}


def merge_patch(fields: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON merge patch (RFC 7386) that sets each dotted path to its value, a ``None`` removing it."""
    body: dict[str, Any] = {}
    for path, value in fields.items():
        keys = path.split(".")
        at = body
        for key in keys[:-1]:
            at = at.setdefault(key, {})
        at[keys[-1]] = value
    return body


def holds(policy: Mapping[str, Any], fields: Mapping[str, Any]) -> bool:
    """Does the ClusterPolicy hold every field's value (``None``: absent) already?"""
    return all(field(policy, path) == value for path, value in fields.items())


def _shown(value: Any) -> str:
    if value is None:
        return "(absent)"
    if isinstance(value, str):
        return value
    return yaml.safe_dump(value, default_flow_style=True, sort_keys=False).strip()


def diff(before: Mapping[str, Any], after: Mapping[str, Any]) -> str:
    """The change as the request shows it: per field, ``- path: now`` then ``+ path: after``."""
    lines: list[str] = []
    for path, value in after.items():
        lines += [f"- {path}: {_shown(before.get(path))}", f"+ {path}: {_shown(value)}"]
    return "\n".join(lines)


def renders(template: Mapping[str, Any], strategy: Mapping[str, Any], *, container: str, image: str,
            edits: Edits | None = None) -> bool:
    """Has the operator rendered the run's change into the DaemonSet: ``container`` on ``image`` with the
    run's env (each variable set, or gone) and args, and ``OnDelete``? (The operator adds env of its own
    to the container: only the run's variables are compared.)"""
    containers = ((template.get("spec") or {}).get("containers")) or []
    found: Mapping[str, Any] = next((c for c in containers if c.get("name") == container), {})
    env = {str(e.get("name")): e.get("value") for e in found.get("env") or []}
    edits = edits or Edits()
    return (found.get("image") == image and (strategy.get("type") or "RollingUpdate") == ON_DELETE
            and all(env.get(k) == v if v is not None else k not in env for k, v in edits.env.items())
            and (edits.args is None or list(found.get("args") or []) == list(edits.args)))
