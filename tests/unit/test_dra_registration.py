"""A DRA driver's registration seen in the API (issue 59): its ResourceSlices for the node, as the
kubelet-plugin helper of kubernetes/dynamic-resource-allocation publishes them
(``resourceslice/resourceslicecontroller.go`` at v0.34.0: owned by the Node, ``generateName``
``<node>-<driver>-``, ``spec.pool`` with ``generation`` and ``resourceSliceCount``), judged against
the start of the container now serving the driver. Log lines are supporting evidence only. Pure:
slices and pods built by hand, modelled on NVIDIA/k8s-dra-driver-gpu v25.12.0 (two kubelet-plugin
containers, ``gpus`` and ``compute-domains``, one DaemonSet)."""

from __future__ import annotations

import datetime as dt

from runbooks.daemonset import dra_registered
from runbooks.daemonset.observing import Snapshot
from runbooks.engine.steps import CheckStatus
from runbooks.inventory import PluginPod, ResourceSlice, reading
from runbooks.inventory.plugins import LogResult
from runbooks.inventory.registration import KUBELET_WIPING_DELAY, slice_registration

T0 = dt.datetime(2026, 12, 7, 12, 0, 0, tzinfo=dt.UTC)


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def published(node: str, driver: str = "gpu.nvidia.com", *, created: float = 5, generation: int = 1,
              count: int = 1, devices: int = 8, owner: str | None = None, pool: str | None = None) -> ResourceSlice:
    """A slice as the upstream controller creates it (the dict a list returns, read by reading.slice_from)."""
    obj = {"metadata": {"name": f"{node}-{driver}-abcde", "creationTimestamp": at(created).isoformat(),
                        "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": owner or node,
                                             "uid": "u-1", "controller": True}]},
           "spec": {"driver": driver, "nodeName": node,
                    "pool": {"name": pool or node, "generation": generation, "resourceSliceCount": count},
                    "devices": [{"name": f"gpu-{i}", "attributes": {"type": {"string": "gpu"}}}
                                for i in range(devices)]}}
    return reading.slice_from(obj)


def test_a_slice_carries_what_says_who_published_it() -> None:
    s = published("n1", created=5, generation=3, count=2)
    assert (s.owner_node, s.generation, s.slice_count, s.created) == ("n1", 3, 2, at(5))


def test_slices_published_since_the_container_started_register_it_whatever_the_log_says() -> None:
    verdict = slice_registration("n1", "gpu.nvidia.com", [published("n1", created=5)], started=at(2), now=at(10))
    assert verdict.registered is True and verdict.how == "published", verdict


def test_no_slice_for_the_node_is_no_registration() -> None:
    verdict = slice_registration("n1", "gpu.nvidia.com", [published("n2"), published("n1", "compute-domain.nvidia.com")],
                                 started=at(2), now=at(60))
    assert verdict.registered is False and "no ResourceSlice of gpu.nvidia.com" in verdict.detail


def test_an_incomplete_pool_is_no_registration_a_scheduler_can_use() -> None:
    """``-noalloc``: the pool says two slices, one is published: the scheduler allocates nothing from it."""
    verdict = slice_registration("n1", "gpu.nvidia.com", [published("n1", count=2)], started=at(2), now=at(60))
    assert verdict.registered is False and verdict.how == "incomplete"
    assert "1 of 2 ResourceSlices" in verdict.detail and "allocates nothing" in verdict.detail


def test_an_older_generation_left_behind_does_not_count_against_a_complete_newer_one() -> None:
    old = published("n1", generation=1, count=2)
    new = published("n1", generation=2, count=1, created=6)
    assert slice_registration("n1", "gpu.nvidia.com", [old, new], started=at(2), now=at(60)).registered is True


def test_slices_of_another_node_owner_are_not_this_plugins() -> None:
    verdict = slice_registration("n1", "gpu.nvidia.com", [published("n1", owner="n9")], started=at(2), now=at(60))
    assert verdict.registered is False


def test_slices_older_than_the_container_prove_it_once_the_kubelets_wiping_delay_passed() -> None:
    """A plugin restarted within the kubelet's wiping delay finds its slices unchanged and writes none;
    the kubelet deletes a driver's slices once no plugin of it is connected for that delay, so slices
    still there that long after the container started mean the new plugin registered."""
    kept = [published("n1", created=0)]
    early = slice_registration("n1", "gpu.nvidia.com", kept, started=at(20), now=at(25))
    assert early.registered is None and early.how == "unproven" and "predate" in early.detail
    late = slice_registration("n1", "gpu.nvidia.com", kept, started=at(20), now=at(20 + KUBELET_WIPING_DELAY))
    assert late.registered is True and late.how == "kept"


def test_a_pod_whose_container_is_not_running_has_not_registered_though_slices_remain() -> None:
    verdict = slice_registration("n1", "gpu.nvidia.com", [published("n1")], started=None, now=at(60))
    assert verdict.registered is False and "not running" in verdict.detail


def _pod(node: str, started: dict[str, float]) -> PluginPod:
    return PluginPod(name=f"nvidia-dra-driver-gpu-kubelet-plugin-{node}", node=node, phase="Running", ready=True,
                     restarts=0, crashloop=False, images={"gpus": "x", "compute-domains": "x"},
                     started={c: at(s) for c, s in started.items()})


def test_verify_passes_a_driver_that_logs_nothing_when_its_slices_are_there() -> None:
    """The example driver's chart runs it at verbosity 0: no registration line, its slices are the proof."""
    snap = Snapshot(ds={}, pods=[_pod("n1", {"gpus": 2, "compute-domains": 2})], revisions=[])
    silent = {"n1": LogResult(registered=False, drivers=[])}
    check = dra_registered.judge(snap, ["n1"], [published("n1")], drivers={"gpu.nvidia.com": ["gpus"]},
                                 logs=silent, now=at(10), everywhere=False)
    assert check.status is CheckStatus.PASS, check.detail
    assert "ResourceSlices of gpu.nvidia.com published" in check.detail


def test_verify_judges_the_driver_of_the_canaried_container_against_that_containers_start() -> None:
    """A canary of ``gpus`` restarts that container only: gpu.nvidia.com's slices must be newer than it;
    compute-domain.nvidia.com's are judged against compute-domains' own start."""
    snap = Snapshot(ds={}, pods=[_pod("n1", {"gpus": 50, "compute-domains": 0})], revisions=[])
    slices = [published("n1", created=1), published("n1", "compute-domain.nvidia.com", created=1, devices=1)]
    drivers = {"gpu.nvidia.com": ["gpus"], "compute-domain.nvidia.com": ["compute-domains"]}
    check = dra_registered.judge(snap, ["n1"], slices, drivers=drivers, logs={}, now=at(55), everywhere=False)
    assert check.status is CheckStatus.UNKNOWN and "gpu.nvidia.com" in check.detail, check.detail
    assert "compute-domain" not in check.detail
    newer = [published("n1", created=51), slices[1]]
    assert dra_registered.judge(snap, ["n1"], newer, drivers=drivers, logs={}, now=at(55),
                                everywhere=False).status is CheckStatus.PASS


def test_verify_fails_an_incomplete_pool_naming_it() -> None:
    snap = Snapshot(ds={}, pods=[_pod("n1", {"gpus": 2})], revisions=[])
    check = dra_registered.judge(snap, ["n1"], [published("n1", count=2)], drivers={"gpu.nvidia.com": ["gpus"]},
                                 logs={"n1": LogResult(registered=True, drivers=[])}, now=at(60), everywhere=False)
    assert check.status is CheckStatus.FAIL and check.name == "plugin-registered"
    assert "n1" in check.detail and "incomplete" in check.detail and "gpu.nvidia.com" in check.detail
