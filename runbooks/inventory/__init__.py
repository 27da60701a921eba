"""The inventory runbook: what the cluster looks like before anyone touches a plugin.

``models`` holds the pydantic models (the baseline later steps diff against);
``reading`` reduces API JSON to them (pure); ``plugins`` recognises plugin DaemonSets and
reads a device plugin's registration from its log; ``registration`` sees a DRA driver's in its
ResourceSlices (pure); ``stacks`` reads a node's driver, CUDA, OS and runtime
and groups GPU nodes into hardware classes (pure); ``findings`` judges (pure); ``taking`` runs it all
through a :class:`~runbooks.cluster.Cluster`.
"""

from runbooks.inventory.models import (
    DaemonSet,
    DeviceClass,
    DraInfo,
    Finding,
    HardwareClass,
    Inventory,
    KubernetesInfo,
    Node,
    PluginPod,
    ResourceClaim,
    ResourceSlice,
)
from runbooks.inventory.taking import DEFAULT_GPU_RESOURCES, take_inventory

__all__ = [
    "DEFAULT_GPU_RESOURCES",
    "DaemonSet",
    "DeviceClass",
    "DraInfo",
    "Finding",
    "HardwareClass",
    "Inventory",
    "KubernetesInfo",
    "Node",
    "PluginPod",
    "ResourceClaim",
    "ResourceSlice",
    "take_inventory",
]
