"""The control plane's leader-election Leases: ``kube-system/kube-controller-manager`` and
``kube-system/kube-scheduler``, as each component's client-go ``leaderelection`` (a ``LeaseLock``)
keeps its own.

Read in kubernetes/kubernetes v1.34.2: ``cmd/kube-controller-manager/app/controllermanager.go`` and
``cmd/kube-scheduler/app/server.go`` (the identity ``os.Hostname() + "_" + uuid``, the lock named
after the component in ``kube-system``), ``staging/src/k8s.io/component-base/config/v1alpha1/defaults.go``
(``leaseDuration`` 15 s, ``renewDeadline`` 10 s, ``retryPeriod`` 2 s), and client-go
``tools/leaderelection/resourcelock/leaselock.go`` (``LeaderElectionRecordToLeaseSpec``:
``holderIdentity``, ``leaseDurationSeconds``, ``acquireTime``, ``renewTime`` as MicroTimes,
``leaseTransitions``).

Each is acquired at kubesim's start and renewed every retry period. As with the kubelets'
node Leases (:mod:`kubesim.heartbeats`), a renewal is not stored: ``renewTime`` is the last
2-second tick of the simulated clock, filled in when the Lease is read, so a renewal is never a
write nor a watch event (on a real cluster each is an update).
"""

from __future__ import annotations

import datetime as dt
import math
import uuid
from typing import Any

from kubesim.clock import rfc3339, rfc3339_micro
from kubesim.eventseries import HOSTNAME

NAMESPACE = "kube-system"
LEADERS = ("kube-controller-manager", "kube-scheduler")
LEASE_SECONDS = 15
RETRY_PERIOD = 2.0


def leader_lease(name: str, acquired: dt.datetime) -> dict[str, Any]:
    """The Lease ``name``'s leader holds since ``acquired`` (``renewTime`` is filled on read)."""
    return {"metadata": {"name": name, "namespace": NAMESPACE, "creationTimestamp": rfc3339(acquired)},
            "spec": {"holderIdentity": f"{HOSTNAME}_{uuid.uuid4()}", "leaseDurationSeconds": LEASE_SECONDS,
                     "acquireTime": rfc3339_micro(acquired), "renewTime": rfc3339_micro(acquired),
                     "leaseTransitions": 0}}


def is_leader_lease(obj: dict[str, Any]) -> bool:
    m = obj.get("metadata") or {}
    return m.get("namespace") == NAMESPACE and m.get("name") in LEADERS


def view(obj: dict[str, Any], now: dt.datetime) -> dict[str, Any]:
    """The Lease as read: renewed at the last retry-period tick since it was acquired."""
    spec = obj.get("spec") or {}
    acquired = spec.get("acquireTime")
    holder = str(spec.get("holderIdentity") or "")
    if not acquired or not holder.startswith(f"{HOSTNAME}_"):
        return obj  # taken over by someone else: as they wrote it
    start = dt.datetime.fromisoformat(str(acquired).replace("Z", "+00:00"))
    ticks = math.floor(max((now - start).total_seconds(), 0.0) / RETRY_PERIOD)
    renewed = start + dt.timedelta(seconds=ticks * RETRY_PERIOD)
    return {**obj, "spec": {**spec, "renewTime": rfc3339_micro(renewed)}}
