"""Two controllers of kube-controller-manager that clients rely on without knowing it.

- The ServiceAccount controller: every namespace has a ``default`` ServiceAccount, made
  within a moment of the namespace (and again if someone deletes it). Code that creates
  a namespace and then a pod, or waits for ``default`` as the client's examples do,
  depends on it.
- The namespace controller: a deleted namespace stays ``Terminating`` (the API server
  refuses new content in it) while the controller deletes everything in it; once nothing
  is left it removes the ``kubernetes`` finalizer and the namespace is gone. Its status
  conditions say what it is waiting for, worded as the controller words them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kubesim.clock import rfc3339
from kubesim.errors import ApiError
from kubesim.store import WatchEvent

if TYPE_CHECKING:
    from kubesim.resources import ResourceType
    from kubesim.simulation import Simulation

NAMESPACES = ("", "namespaces")
SERVICE_ACCOUNTS = ("", "serviceaccounts")
DEFAULT_ACCOUNT = "default"
FINALIZER = "kubernetes"
RETRY_SECONDS = 1.0


def default_account(namespace: str) -> dict[str, Any]:
    return {"metadata": {"name": DEFAULT_ACCOUNT, "namespace": namespace}}


def _condition(kind: str, status: bool, reason: str, message: str, now: str) -> dict[str, Any]:
    return {"type": kind, "status": "True" if status else "False", "lastTransitionTime": now,
            "reason": reason, "message": message}


def deletion_conditions(remaining: dict[str, int], finalizers: dict[str, int], now: str) -> list[dict[str, Any]]:
    """``status.conditions`` of a terminating namespace, as the namespace controller sets them."""
    left = ", ".join(f"{resource} has {count} resource instances" for resource, count in sorted(remaining.items()))
    held = ", ".join(f"{name} in {count} resource instances" for name, count in sorted(finalizers.items()))
    return [
        _condition("NamespaceDeletionDiscoveryFailure", False, "ResourcesDiscovered",
                   "All resources successfully discovered", now),
        _condition("NamespaceDeletionGroupVersionParsingFailure", False, "ParsedGroupVersions",
                   "All legacy kube types successfully parsed", now),
        _condition("NamespaceDeletionContentFailure", False, "ContentDeleted",
                   "All content successfully deleted, may be waiting on finalization", now),
        _condition("NamespaceContentRemaining", bool(remaining), "SomeResourcesRemain" if remaining else "ContentRemoved",
                   f"Some resources are remaining: {left}" if remaining else "All content successfully removed", now),
        _condition("NamespaceFinalizersRemaining", bool(finalizers),
                   "SomeFinalizersRemain" if finalizers else "ContentHasNoFinalizers",
                   f"Some content in the namespace has finalizers remaining: {held}" if finalizers
                   else "All content-preserving finalizers finished", now),
    ]


class NamespaceController:
    """``default`` ServiceAccounts and namespace finalization (kube-controller-manager)."""

    def __init__(self) -> None:
        self.sim: Simulation | None = None

    def start(self, sim: Simulation) -> None:
        self.sim = sim
        store = sim.store
        missing = [default_account(ns["metadata"]["name"]) for ns in store.iter(NAMESPACES)
                   if store.get(SERVICE_ACCOUNTS, ns["metadata"]["name"], DEFAULT_ACCOUNT) is None]
        store.load(SERVICE_ACCOUNTS, missing)  # as old as the namespaces the scenario starts with
        store.subscribe(self._on_event)
        for ns in store.iter(NAMESPACES):
            if ns["metadata"].get("deletionTimestamp"):
                self._enqueue_finalize(ns["metadata"]["name"])

    # ----------------------------------------------------------------- events
    def _on_event(self, res: ResourceType, event: WatchEvent) -> None:
        assert self.sim is not None
        name = event.obj["metadata"]["name"]
        if res.group_resource == NAMESPACES:
            if event.type == "ADDED":
                self.sim.enqueue(("default-account", name), lambda: self._ensure_account(name))
            elif event.type == "MODIFIED" and event.obj["metadata"].get("deletionTimestamp"):
                self._enqueue_finalize(name)
        elif res.group_resource == SERVICE_ACCOUNTS and event.type == "DELETED" and name == DEFAULT_ACCOUNT:
            namespace = event.obj["metadata"]["namespace"]
            self.sim.enqueue(("default-account", namespace), lambda: self._ensure_account(namespace))

    def _enqueue_finalize(self, name: str) -> None:
        assert self.sim is not None
        self.sim.enqueue(("namespace-finalize", name), lambda: self._finalize(name))

    # ---------------------------------------------------------------- workers
    def _ensure_account(self, namespace: str) -> None:
        assert self.sim is not None
        store = self.sim.store
        ns = store.get(NAMESPACES, "", namespace)
        if ns is None or ns["metadata"].get("deletionTimestamp"):
            return
        if store.get(SERVICE_ACCOUNTS, namespace, DEFAULT_ACCOUNT) is None:
            try:
                store.create(store.storage_type(SERVICE_ACCOUNTS), default_account(namespace))
            except ApiError:
                return  # gone or terminating meanwhile: nothing to make

    def _finalize(self, name: str) -> None:
        """Delete the namespace's content; once it is all gone, drop the finalizer."""
        assert self.sim is not None
        sim, store = self.sim, self.sim.store
        ns = store.get(NAMESPACES, "", name)
        if ns is None or not ns["metadata"].get("deletionTimestamp"):
            return
        remaining: list[ResourceType] = []
        for res in {r.group_resource: r for r in sim.surface.resources if r.namespaced}.values():
            objs = store.list(res.group_resource, name)
            if not objs:
                continue
            remaining.append(res)
            for obj in objs:
                if obj["metadata"].get("deletionTimestamp"):
                    continue  # a pod still terminating on its node
                try:
                    store.delete(res, name, obj["metadata"]["name"])
                except ApiError:
                    continue
        left: dict[str, int] = {}
        held: dict[str, int] = {}
        for res in remaining:
            for obj in store.list(res.group_resource, name):
                left[res.qualified] = left.get(res.qualified, 0) + 1
                for finalizer in obj["metadata"].get("finalizers") or ():
                    held[finalizer] = held.get(finalizer, 0) + 1
        now = rfc3339(sim.clock.now())

        def report(obj: dict[str, Any]) -> None:
            status = obj.setdefault("status", {})
            old = {c["type"]: c for c in status.get("conditions") or []}
            fresh = deletion_conditions(left, held, now)
            for cond in fresh:  # a condition keeps its transition time while it holds
                before = old.get(cond["type"])
                if before and before["status"] == cond["status"] and before.get("message") == cond["message"]:
                    cond["lastTransitionTime"] = before["lastTransitionTime"]
            status["conditions"] = fresh
            if not left:
                obj["spec"] = {**(obj.get("spec") or {}), "finalizers": [
                    f for f in (obj.get("spec") or {}).get("finalizers") or [] if f != FINALIZER]}

        store.mutate(NAMESPACES, "", name, report)
        if left:
            sim.call_later(RETRY_SECONDS, lambda: self._enqueue_finalize(name))

