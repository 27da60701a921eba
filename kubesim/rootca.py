"""kube-controller-manager's root-ca-cert-publisher: every namespace has a ``kube-root-ca.crt``
ConfigMap holding the cluster's CA bundle (``ca.crt``), made within a moment of the namespace and
again if someone deletes it. The service-account token volume the ServiceAccount admission adds to
every pod (:mod:`kubesim.admission`) projects it, so a pod's volumes can be mounted."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kubesim.certs import serving_cert
from kubesim.errors import ApiError

if TYPE_CHECKING:
    from kubesim.resources import ResourceType
    from kubesim.simulation import Simulation
    from kubesim.store import WatchEvent

NAMESPACES = ("", "namespaces")
CONFIGMAPS = ("", "configmaps")
NAME = "kube-root-ca.crt"
DESCRIPTION = ("Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints "
               "such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across "
               "distributions of Kubernetes clusters.")


def root_ca(namespace: str) -> dict[str, Any]:
    return {"metadata": {"name": NAME, "namespace": namespace, "annotations": {"kubernetes.io/description": DESCRIPTION}},
            "data": {"ca.crt": serving_cert().ca_pem.decode()}}


class RootCAPublisher:
    """Keeps ``kube-root-ca.crt`` in every namespace that is not terminating."""

    def __init__(self) -> None:
        self.sim: Simulation | None = None

    def start(self, sim: Simulation) -> None:
        self.sim = sim
        store = sim.store
        store.load(CONFIGMAPS, [root_ca(ns["metadata"]["name"]) for ns in store.iter(NAMESPACES)
                                if store.get(CONFIGMAPS, ns["metadata"]["name"], NAME) is None])
        store.subscribe(self._on_event)

    def _on_event(self, res: ResourceType, event: WatchEvent) -> None:
        assert self.sim is not None
        if res.group_resource == NAMESPACES and event.type == "ADDED":
            namespace = event.obj["metadata"]["name"]
        elif res.group_resource == CONFIGMAPS and event.type == "DELETED" and event.obj["metadata"]["name"] == NAME:
            namespace = event.obj["metadata"]["namespace"]
        else:
            return
        self.sim.enqueue(("root-ca", namespace), lambda: self._ensure(namespace))

    def _ensure(self, namespace: str) -> None:
        assert self.sim is not None
        store = self.sim.store
        ns = store.get(NAMESPACES, "", namespace)
        if ns is None or ns["metadata"].get("deletionTimestamp") or store.get(CONFIGMAPS, namespace, NAME) is not None:
            return
        try:
            store.create(store.storage_type(CONFIGMAPS), root_ca(namespace))
        except ApiError:
            return  # gone or terminating meanwhile
