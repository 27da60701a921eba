"""ControllerRevisions of DaemonSets: the template hash, snapshots and history pruning.

``compute_hash`` follows ``controller.ComputeHash``: an FNV-32a hash of the pod template
rendered as a decimal number and encoded with ``rand.SafeEncodeString`` (the hash
input is canonical JSON here rather than Go's spew dump, so the values differ from a real
cluster's but have the same form). A revision holds the patch ``kubectl rollout undo``
applies: ``{"spec": {"template": {..., "$patch": "replace"}}}``.
"""

from __future__ import annotations

import json
from typing import Any

from kubesim.errors import ApiError
from kubesim.simulation import Simulation

REVISIONS = ("apps", "controllerrevisions")
HASH_LABEL = "controller-revision-hash"
TEMPLATE_GENERATION = "deprecated.daemonset.template.generation"
_ALPHANUMS = "bcdfghjklmnpqrstvwxz2456789"


def fnv32a(data: bytes) -> int:
    h = 0x811C9DC5
    for byte in data:
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return h


def safe_encode(text: str) -> str:
    """``rand.SafeEncodeString``: map each byte onto consonants and digits without vowels."""
    return "".join(_ALPHANUMS[b % len(_ALPHANUMS)] for b in text.encode())


def compute_hash(template: dict[str, Any], collision_count: int | None = None) -> str:
    raw = json.dumps(template, sort_keys=True, separators=(",", ":")).encode()
    if collision_count:
        raw += collision_count.to_bytes(4, "little")
    return safe_encode(str(fnv32a(raw)))


def _sorted(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _sorted(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_sorted(v) for v in value]
    return value


def revision_data(template: dict[str, Any]) -> dict[str, Any]:
    """``getPatch``: the DaemonSet patch that replaces spec.template (keys sorted as Go does)."""
    return _sorted({"spec": {"template": {**template, "$patch": "replace"}}})


def controller_uid(obj: dict[str, Any]) -> str | None:
    for ref in obj["metadata"].get("ownerReferences") or []:
        if ref.get("controller"):
            return ref.get("uid")
    return None


class History:
    """Revisions of one simulation's DaemonSets (and StatefulSets: the same history, its own owner kind)."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim

    def owned(self, ds: dict[str, Any]) -> list[dict[str, Any]]:
        uid = ds["metadata"]["uid"]
        return [r for r in self.sim.store.iter(REVISIONS, ds["metadata"]["namespace"]) if controller_uid(r) == uid]

    def snapshot(self, ds: dict[str, Any], hash_: str, revision: int) -> dict[str, Any]:
        """The ControllerRevision the controller writes for the DaemonSet's template."""
        m = ds["metadata"]
        tlabels = ((ds["spec"]["template"].get("metadata") or {}).get("labels")) or {}
        meta: dict[str, Any] = {
            "name": f"{m['name']}-{hash_}",
            "namespace": m["namespace"],
            "labels": {**tlabels, HASH_LABEL: hash_},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": ds.get("kind") or "DaemonSet", "name": m["name"],
                                 "uid": m["uid"], "controller": True, "blockOwnerDeletion": True}],
        }
        if m.get("annotations"):
            meta["annotations"] = dict(m["annotations"])
        return {"metadata": meta, "data": revision_data(ds["spec"]["template"]), "revision": revision}

    def construct(self, ds: dict[str, Any], hash_: str) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        """``constructHistory``: the current revision (created or renumbered) and the old ones."""
        store = self.sim.store
        data = revision_data(ds["spec"]["template"])
        mine = self.owned(ds)
        current = [r for r in mine if r.get("data") == data]
        old = [r for r in mine if r.get("data") != data]
        next_revision = max((int(r.get("revision") or 0) for r in old), default=0) + 1
        ns = ds["metadata"]["namespace"]
        if not current:
            obj = self.snapshot(ds, hash_, next_revision)
            try:
                return store.create(store.storage_type(REVISIONS), obj), old
            except ApiError:
                existing = store.get(REVISIONS, ns, obj["metadata"]["name"])
                return existing, old
        current.sort(key=lambda r: int(r.get("revision") or 0))
        keep = current[-1]
        for dup in current[:-1]:
            store.delete(REVISIONS, ns, dup["metadata"]["name"])
        if int(keep.get("revision") or 0) < next_revision:
            keep = store.mutate(REVISIONS, ns, keep["metadata"]["name"],
                                lambda obj: obj.__setitem__("revision", next_revision)) or keep
        return keep, old

    def cleanup(self, ds: dict[str, Any], old: list[dict[str, Any]], by_node: dict[str, list[dict[str, Any]]]) -> None:
        """Delete the oldest revisions beyond revisionHistoryLimit that no live pod uses."""
        limit = ds["spec"].get("revisionHistoryLimit")
        limit = 10 if limit is None else int(limit)
        to_kill = len(old) - limit
        if to_kill <= 0:
            return
        live = {(p["metadata"].get("labels") or {}).get(HASH_LABEL) for pods in by_node.values() for p in pods}
        ns = ds["metadata"]["namespace"]
        for rev in sorted(old, key=lambda r: int(r.get("revision") or 0)):
            if to_kill <= 0:
                break
            if (rev["metadata"].get("labels") or {}).get(HASH_LABEL) in live:
                continue
            if self.sim.store.get(REVISIONS, ns, rev["metadata"]["name"]) is not None:
                self.sim.store.delete(REVISIONS, ns, rev["metadata"]["name"])
            to_kill -= 1
