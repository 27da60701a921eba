"""The control plane's leader-election Leases with the real kubectl: ``kube-system/kube-controller-manager``
and ``kube-system/kube-scheduler``, held by ``<host>_<uuid>`` (cmd/kube-controller-manager and
cmd/kube-scheduler, v1.34.2: ``os.Hostname()`` + ``"_"`` + a UUID), ``leaseDurationSeconds: 15``
(``--leader-elect-lease-duration``), renewed every ``--leader-elect-retry-period`` (2 s) by
client-go's ``leaderelection`` LeaseLock."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator

import pytest

from kubesim import KubeSim
from tests.support import Kubectl

pytestmark = pytest.mark.conformance


@pytest.fixture(scope="module")
def sim() -> Iterator[KubeSim]:
    with KubeSim(scenario="gpu-small", k8s_version="1.34") as s:
        yield s


def stamp(value: str) -> dt.datetime:
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))


@pytest.mark.parametrize("component", ["kube-controller-manager", "kube-scheduler"])
def test_the_leader_lease_is_held_and_renewed(sim: KubeSim, component: str) -> None:
    kubectl = Kubectl(sim.kubeconfig)
    lease = kubectl.json("-n", "kube-system", "get", "lease", component)
    spec = lease["spec"]
    assert re.fullmatch(r"control-plane1_[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
                        spec["holderIdentity"]), spec
    assert (spec["leaseDurationSeconds"], spec["leaseTransitions"]) == (15, 0)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", spec["renewTime"])
    before = stamp(spec["renewTime"])
    sim.advance("60s")
    after = stamp(kubectl.json("-n", "kube-system", "get", "lease", component)["spec"]["renewTime"])
    assert dt.timedelta(seconds=58) <= after - before <= dt.timedelta(seconds=62)
    assert stamp(spec["acquireTime"]) <= before
    assert kubectl.json("-n", "kube-system", "get", "lease", component)["spec"]["holderIdentity"] == \
        spec["holderIdentity"]
