"""Printer of storage.k8s.io/v1 CSIDrivers (``printCSIDriver``)."""

from __future__ import annotations

import datetime as dt

from kubesim.tables.columns import _AGE_COL, _NAME_COL, _col
from kubesim.tables.formatting import _age, _name

_CSI_DRIVER_COLUMNS = (
    _NAME_COL,
    _col("AttachRequired", "boolean", "attachRequired indicates this CSI volume driver requires an attach operation."),
    _col("PodInfoOnMount", "boolean", "podInfoOnMount indicates this CSI volume driver requires additional pod "
         "information (like podName, podUID, etc.) during mount operations."),
    _col("StorageCapacity", "boolean", "storageCapacity indicates that the CSI volume driver wants pod scheduling "
         "to consider the storage capacity that the driver deployment will report."),
    _col("TokenRequests", "string", "tokenRequests indicates the CSI driver needs pods' service account tokens it "
         "is mounting volume for to do necessary authentication."),
    _col("RequiresRepublish", "boolean", "requiresRepublish indicates the CSI driver wants `NodePublishVolume` "
         "being periodically called to reflect any possible change in the mounted volume."),
    _col("Modes", "string", "volumeLifecycleModes defines what kind of volumes this CSI volume driver supports."),
    _AGE_COL,
)


def _csi_driver_cells(driver: dict, now: dt.datetime) -> list:
    spec = driver.get("spec") or {}
    tokens = spec.get("tokenRequests")
    modes = ",".join(spec.get("volumeLifecycleModes") or [])
    return [
        _name(driver),
        spec.get("attachRequired", True) is not False,
        bool(spec.get("podInfoOnMount")),
        bool(spec.get("storageCapacity")),
        "<unset>" if tokens is None else ",".join(str(t.get("audience", "")) for t in tokens),
        bool(spec.get("requiresRepublish")),
        modes or "<none>",
        _age(driver, now),
    ]
