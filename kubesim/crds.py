"""CustomResourceDefinitions whose kinds are then served, as kube-apiserver's apiextensions does.

A CRD stored (``apiextensions.k8s.io/v1``) adds each of its served versions to the API
surface at once: discovery lists the group, version and plural, and objects of the kind
can be created, read, listed, watched, patched and deleted under
``/apis/<group>/<version>/[namespaces/<ns>/]<plural>``, stored in the version marked
``storage``. The CRD's status then says so, as the apiextensions controllers write it:
``acceptedNames`` (``singular`` and ``listKind`` defaulted), the ``NamesAccepted`` and
``Established`` conditions, ``storedVersions``. ``kubectl get`` of the kind prints Name, then
the storage version's ``additionalPrinterColumns`` (simple JSONPaths), or Age. A CRD deleted takes its kinds off the
surface and its objects with them.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

from kubesim.clock import parse_time, rfc3339
from kubesim.resources import ResourceType
from kubesim.tables import human_duration, register_printer
from kubesim.tables.columns import _NAME_COL, _col

if TYPE_CHECKING:
    from kubesim.simulation import Simulation
    from kubesim.store import WatchEvent

CRDS = ("apiextensions.k8s.io", "customresourcedefinitions")


def served_types(crd: dict[str, Any]) -> list[ResourceType]:
    """The resources a CRD serves, its storage version first (the store keeps objects in the first)."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    group, kind, plural = spec.get("group") or "", names.get("kind") or "", names.get("plural") or ""
    if not (group and kind and plural):
        return []
    versions = sorted((v for v in spec.get("versions") or [] if isinstance(v, dict) and v.get("served", True)),
                      key=lambda v: not v.get("storage"))
    out = []
    for version in versions:
        subs = version.get("subresources") or {}
        out.append(ResourceType(
            group, str(version.get("name") or ""), kind, plural, spec.get("scope", "Namespaced") == "Namespaced",
            tuple(names.get("shortNames") or ()), tuple(s for s in ("status", "scale") if s in subs),
            categories=tuple(names.get("categories") or ()),
        ))
    return out


def _at(obj: Any, path: str) -> Any:
    """A simple JSONPath (``.spec.replicas``) of an additionalPrinterColumn; None when absent."""
    for part in [p for p in path.strip().lstrip("{").rstrip("}").split(".") if p]:
        obj = obj.get(part) if isinstance(obj, dict) else None
    return obj


def printer(version: dict[str, Any]) -> tuple[tuple[dict[str, Any], ...], Any]:
    """The apiextensions table convertor: Name, the version's additionalPrinterColumns (Age by default)."""
    extra = [c for c in version.get("additionalPrinterColumns") or [] if isinstance(c, dict)] or [
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}]
    columns = (_NAME_COL, *(_col(str(c.get("name")), str(c.get("type") or "string"), str(c.get("description") or ""),
                                 fmt=str(c.get("format") or ""), priority=int(c.get("priority") or 0)) for c in extra))

    def cells(obj: dict[str, Any], now: dt.datetime) -> list[Any]:
        out: list[Any] = [obj["metadata"]["name"]]
        for column in extra:
            value = _at(obj, str(column.get("jsonPath") or ""))
            when = parse_time(value) if column.get("type") == "date" and isinstance(value, str) else None
            out.append(human_duration(now - when) if when is not None else value)
        return out

    return columns, cells


def accepted_status(crd: dict[str, Any], now: str) -> dict[str, Any]:
    spec = crd.get("spec") or {}
    names = dict(spec.get("names") or {})
    names.setdefault("singular", str(names.get("kind", "")).lower())
    names.setdefault("listKind", f"{names.get('kind', '')}List")
    old = {c.get("type"): c for c in (crd.get("status") or {}).get("conditions") or []}

    def condition(kind: str, reason: str, message: str) -> dict[str, Any]:
        since = (old.get(kind) or {}).get("lastTransitionTime") if (old.get(kind) or {}).get("status") == "True" else None
        return {"type": kind, "status": "True", "lastTransitionTime": since or now, "reason": reason, "message": message}

    stored = [str(v.get("name")) for v in spec.get("versions") or [] if isinstance(v, dict) and v.get("storage")]
    return {
        "acceptedNames": names,
        "conditions": [condition("NamesAccepted", "NoConflicts", "no conflicts found"),
                       condition("Established", "InitialNamesAccepted", "the initial names have been accepted")],
        "storedVersions": sorted(set((crd.get("status") or {}).get("storedVersions") or []) | set(stored)),
    }


class CrdController:
    """Serves the kinds of the stored CRDs and writes their status."""

    def __init__(self) -> None:
        self.sim: Simulation | None = None
        self._served: dict[str, list[ResourceType]] = {}

    def start(self, sim: Simulation) -> None:
        self.sim = sim
        for crd in sim.store.iter(CRDS):
            self._serve(crd)
        sim.store.subscribe(self._on_event)

    def _on_event(self, res: ResourceType, event: WatchEvent) -> None:
        if res.group_resource != CRDS:
            return
        if event.type == "DELETED":
            self._withdraw(event.obj)
            return
        self._serve(event.obj)
        name = event.obj["metadata"]["name"]
        assert self.sim is not None
        self.sim.enqueue(("crd-status", name), lambda: self._accept(name))

    def _serve(self, crd: dict[str, Any]) -> None:
        assert self.sim is not None
        resources = self.sim.surface.resources
        for gone in self._served.pop(crd["metadata"]["name"], []):
            if gone in resources:
                resources.remove(gone)
        fresh = [r for r in served_types(crd) if self.sim.surface.lookup(r.group, r.version, r.plural) is None]
        self._served[crd["metadata"]["name"]] = fresh
        resources.extend(fresh)
        storage = next((v for v in (crd.get("spec") or {}).get("versions") or [] if isinstance(v, dict) and v.get("storage")),
                       None)
        if fresh and storage is not None:
            register_printer(fresh[0].plural, *printer(storage))

    def _withdraw(self, crd: dict[str, Any]) -> None:
        assert self.sim is not None
        served = self._served.pop(crd["metadata"]["name"], [])
        store = self.sim.store
        for res in served[:1]:
            for obj in store.list(res.group_resource):
                store.delete(res, obj["metadata"].get("namespace", ""), obj["metadata"]["name"], grace_seconds=0)
        for res in served:
            if res in self.sim.surface.resources:
                self.sim.surface.resources.remove(res)

    def _accept(self, name: str) -> None:
        assert self.sim is not None
        now = rfc3339(self.sim.clock.now())

        def write(crd: dict[str, Any]) -> None:
            crd["status"] = accepted_status(crd, now)

        self.sim.store.mutate(CRDS, "", name, write)
