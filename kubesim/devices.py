"""The kubelets' device side: device-plugin and DRA-plugin registrations per node, the
``nvidia.com/gpu`` capacity/allocatable they advertise, and the ResourceSlices a registered
DRA driver publishes. GPU hardware per node lives here (set by the scenario)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from kubesim import dra, dradrivers
from kubesim.podstatus import GPU
from kubesim.simulation import Simulation

NODES = ("", "nodes")
DEVICE_PLUGIN_IMAGE = "k8s-device-plugin"
"""NVIDIA's device plugin; any other image named ``…device-plugin…`` is another vendor's,
which registers the same way and logs the generic line of Kubernetes' plugin examples."""
OTHER_DEVICE_PLUGIN = "device-plugin"
DRA_PLUGIN_IMAGE = "dra-example-driver"
DEVICE_PLUGIN_RESOURCES = (GPU,)
"""The extended resources the simulated device plugins advertise (and the device manager allocates)."""


NOT_THE_PLUGIN = ("gpu-feature-discovery", "mps-control-daemon", "config-manager")
"""Programs NVIDIA's device-plugin image ships beside ``nvidia-device-plugin`` (k8s-device-plugin's
``deployments/container/Dockerfile`` copies all four to ``/usr/bin``; its ENTRYPOINT is the plugin):
a container of that image whose command or args run one of them registers nothing (the Helm chart's
GFD and MPS control daemon, the config-manager sidecars of the chart and of the GPU operator)."""


def container_kind(image: str, runs: str = "") -> str:
    """``device-plugin``, ``dra-plugin`` or ``generic``, from the image name and what the
    container runs (``runs``: its command and args, see :func:`kind_of`)."""
    if DEVICE_PLUGIN_IMAGE in image and any(program in runs for program in NOT_THE_PLUGIN):
        return "generic"
    if DEVICE_PLUGIN_IMAGE in image or OTHER_DEVICE_PLUGIN in image.rsplit("/", 1)[-1]:
        return "device-plugin"
    if dradrivers.driver_for(image, runs):
        return "dra-plugin"
    return "generic"


def kind_of(container: Mapping[str, Any]) -> str:
    """:func:`container_kind` of a container of a pod spec."""
    runs = " ".join(str(word) for word in [*(container.get("command") or []), *(container.get("args") or [])])
    return container_kind(str(container.get("image", "")), runs)


class DeviceRegistry:
    """Registrations per node and what follows from them in the store."""

    def __init__(self) -> None:
        self.sim: Simulation | None = None
        self.gpus: dict[str, int] = {}
        self._dp: dict[str, set[str]] = defaultdict(set)
        self._dra: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
        self._slices: dict[tuple[str, str], set[str]] = defaultdict(set)
        self._broken: set[tuple[str, str]] = set()
        """(pod uid, driver) of DRA registrations whose devices cannot be allocated (``-noalloc`` images)."""
        self._published: dict[tuple[str, str], list[dradrivers.Device] | None] = {}
        """(node, driver) -> the devices its plugin publishes there (None: one generic GPU per GPU)."""
        self.on_dra_change: list[Any] = []

    # ------------------------------------------------------------- queries
    def set_gpus(self, node: str, count: int) -> None:
        """GPU hardware of a node (sim-internal; the scenario sets it)."""
        self.gpus[node] = count
        if self.sim is not None:
            self.sim.enqueue(("kubelet-node", node), lambda: self.sync_node(node))

    def device_plugin_registered(self, node: str) -> bool:
        return bool(self._dp.get(node))

    def drivers_on(self, node: str) -> set[str]:
        return {d for d, uids in (self._dra.get(node) or {}).items() if uids}

    def dra_inventory(self, driver: str) -> dict[str, list[str]]:
        """Devices per node of a registered DRA driver (what its slices would publish)."""
        return {
            node: self._device_names(node, driver)
            for node, drivers in self._dra.items()
            if drivers.get(driver) and not self._all_broken(node, driver)
        }

    def _device_names(self, node: str, driver: str) -> list[str]:
        published = self._published.get((node, driver))
        return dra.device_names(self.gpus.get(node, 0)) if published is None else [d[0] for d in published]

    def _all_broken(self, node: str, driver: str) -> bool:
        uids = self._dra[node][driver]
        return bool(uids) and all((uid, driver) in self._broken for uid in uids)

    # ------------------------------------------------------------- changes
    def register_device_plugin(self, node: str, uid: str) -> None:
        if uid not in self._dp[node]:
            self._dp[node].add(uid)
            self._enqueue_node(node)

    def register_dra(self, node: str, driver: str, uid: str, *, broken: bool = False,
                     devices: list[dradrivers.Device] | None = None) -> None:
        """A DRA driver's kubelet plugin registered; ``broken``: it publishes its devices in a pool
        it says has two slices but publishes one, so the scheduler never allocates from it;
        ``devices``: what it publishes (:func:`kubesim.dradrivers.devices`)."""
        if broken:
            self._broken.add((uid, driver))
        self._published[(node, driver)] = devices
        if uid not in self._dra[node][driver]:
            self._dra[node][driver].add(uid)
            self._dra_changed(node, driver)

    def unregister(self, node: str, uid: str, *, driver: str | None = None) -> None:
        """A plugin container stopped (crash, deletion): drop whatever it registered (only
        ``driver``'s registration when one container of a pod of several plugins stopped)."""
        if driver is None and uid in self._dp.get(node, ()):
            self._dp[node].discard(uid)
            self._enqueue_node(node)
        for name, uids in list((self._dra.get(node) or {}).items()):
            if uid in uids and driver in (None, name):
                self._broken.discard((uid, name))
                uids.discard(uid)
                self._dra_changed(node, name)

    def forget_node_registrations(self, node: str) -> tuple[set[str], dict[str, set[str]]]:
        """A kubelet restart: every registration on the node is lost; returns them."""
        dp = set(self._dp.get(node, ()))
        dra_regs = {d: set(u) for d, u in (self._dra.get(node) or {}).items() if u}
        self._dp[node] = set()
        for driver in dra_regs:
            self._dra[node][driver] = set()
        if dp:
            self._enqueue_node(node)
        for driver in dra_regs:
            self._dra_changed(node, driver, slices=False)
        return dp, dra_regs

    def _enqueue_node(self, node: str) -> None:
        assert self.sim is not None
        self.sim.enqueue(("kubelet-node", node), lambda: self.sync_node(node))

    def _dra_changed(self, node: str, driver: str, *, slices: bool = True) -> None:
        assert self.sim is not None
        if slices:
            self.sim.enqueue(("kubelet-slices", node, driver), lambda: self.sync_slices(node, driver))
        for hook in self.on_dra_change:
            hook(node, driver)

    # ------------------------------------------------------------- store side
    def desired_gpu(self, node_obj: dict[str, Any]) -> tuple[str | None, str | None]:
        """(capacity, allocatable) of nvidia.com/gpu the kubelet reports for the node."""
        name = node_obj["metadata"]["name"]
        status = node_obj.get("status") or {}
        capacity = (status.get("capacity") or {}).get(GPU)
        count = self.gpus.get(name, 0)
        if self._dp.get(name) and count:
            return str(count), str(count)
        if capacity is not None:
            return capacity, "0"
        return None, None

    def sync_node(self, node: str) -> None:
        assert self.sim is not None
        current = self.sim.store.get(NODES, "", node)
        if current is None:
            return
        cap, alloc = self.desired_gpu(current)
        status = current.get("status") or {}
        if (status.get("capacity") or {}).get(GPU) == cap and (status.get("allocatable") or {}).get(GPU) == alloc:
            return

        def apply(obj: dict[str, Any]) -> None:
            st = obj.setdefault("status", {})
            for field, value in (("capacity", cap), ("allocatable", alloc)):
                res = st.setdefault(field, {})
                if value is None:
                    res.pop(GPU, None)
                else:
                    res[GPU] = value

        self.sim.store.mutate(NODES, "", node, apply)

    def index_slice(self, obj: dict[str, Any], deleted: bool) -> None:
        node, driver = dra.slice_node_driver(obj)
        names = self._slices[(node, driver)]
        if deleted:
            names.discard(obj["metadata"]["name"])
        else:
            names.add(obj["metadata"]["name"])

    def sync_slices(self, node: str, driver: str) -> None:
        assert self.sim is not None
        sim = self.sim
        if not dra.has_slices(sim.minor):
            return
        registered = bool((self._dra.get(node) or {}).get(driver))
        existing = set(self._slices.get((node, driver), ()))
        if registered and not existing:
            node_obj = sim.store.get(NODES, "", node)
            published = self._published.get((node, driver))
            count = self.gpus.get(node, 0) if published is None else len(published)
            if node_obj is None or not count:
                return
            broken = self._all_broken(node, driver)
            obj = dra.resource_slice(sim.minor, node, node_obj["metadata"]["uid"], 0 if broken and not
                                     dra.has_pools(sim.minor) else count, driver, slices_in_pool=2 if broken else 1,
                                     devices=published)
            sim.store.create(sim.store.storage_type(dra.SLICES), obj)
        elif not registered:
            for name in existing:
                if sim.store.get(dra.SLICES, "", name) is not None:
                    sim.store.delete(dra.SLICES, "", name)
