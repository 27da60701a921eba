"""Address management: the node IPAM controller's pod CIDRs and the CNI's pod IPs.

- :class:`NodeIpam` (kube-controller-manager's ``nodeipam`` with ``--allocate-node-cidrs``): a
  node without ``spec.podCIDR`` gets the first /24 of the cluster CIDR no other node holds, in
  ``spec.podCIDR`` and ``spec.podCIDRs``;
- :class:`PodAddresses` (a host-local IPAM per node): a pod's IP is the lowest free address of
  its node's CIDR (the network address and the gateway ``.1`` excluded), held until the pod is
  deleted, so no two pods of a node share one; the addresses of the pods already there are
  taken first.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from kubesim.fixtures import pod_cidr
from kubesim.simulation import Simulation
from kubesim.store import WatchEvent

NODES = ("", "nodes")
CLUSTER_CIDRS = 512
"""How many /24s the cluster CIDR holds (10.244.0.0/24 downwards, as the scenarios number nodes)."""


class NodeIpam:
    """Gives each node without one a pod CIDR of its own."""

    def __init__(self) -> None:
        self.sim: Simulation | None = None

    def start(self, sim: Simulation) -> None:
        self.sim = sim
        sim.store.subscribe(self._on_event)
        for node in sim.store.list(NODES):
            self._check(node)

    def _on_event(self, res: Any, ev: WatchEvent) -> None:
        if res.group == "" and res.plural == "nodes" and ev.type != "DELETED":
            self._check(ev.obj)

    def _check(self, node: dict[str, Any]) -> None:
        if (node.get("spec") or {}).get("podCIDR") or node["metadata"].get("deletionTimestamp"):
            return
        assert self.sim is not None
        name = node["metadata"]["name"]
        self.sim.enqueue(("nodeipam", name), lambda: self._assign(name))

    def _assign(self, name: str) -> None:
        assert self.sim is not None
        store = self.sim.store
        taken = {(n.get("spec") or {}).get("podCIDR") for n in store.iter(NODES)}
        cidr = next((c for c in map(pod_cidr, range(CLUSTER_CIDRS)) if c not in taken), None)
        if cidr is None:
            return  # the cluster CIDR is full: the node stays without one (CIDRNotAvailable)

        def assign(node: dict[str, Any]) -> None:
            spec = node.setdefault("spec", {})
            if not spec.get("podCIDR"):
                spec["podCIDR"], spec["podCIDRs"] = cidr, [cidr]
        store.mutate(NODES, "", name, assign)


class PodAddresses:
    """The pod IPs in use on each node: node -> IP -> pod uid, and pod uid -> (node, IP)."""

    def __init__(self) -> None:
        self._used: dict[str, dict[str, str]] = {}
        self._of: dict[str, tuple[str, str]] = {}

    def hold(self, node: str, ip: str, uid: str) -> None:
        """Record an address a pod already has (a pod loaded with its status, or adopted)."""
        self._used.setdefault(node, {})[ip] = uid
        self._of[uid] = (node, ip)

    def allocate(self, node: str, cidr: str, uid: str) -> str | None:
        """The pod's address on ``node`` (its own if it has one), or None when the range is full."""
        held = self._of.get(uid)
        if held is not None and held[0] == node:
            return held[1]
        used = self._used.setdefault(node, {})
        network = ipaddress.ip_network(cidr, strict=False)
        for host in network.hosts():
            ip = str(host)
            if host == network.network_address + 1 or ip in used:
                continue
            self.hold(node, ip, uid)
            return ip
        return None

    def release(self, uid: str) -> None:
        held = self._of.pop(uid, None)
        if held is not None:
            node, ip = held
            used = self._used.get(node, {})
            if used.get(ip) == uid:
                del used[ip]
