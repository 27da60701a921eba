"""Helpers shared by the in-process kubesim controller tests (no HTTP), and the per-release
clusters of the kubectl conformance modules (:func:`per_release`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from kubesim import KubeSim
from kubesim.scenarios import build
from kubesim.simulation import Simulation
from tests.support import TEST_BUILDS, Kubectl, push_test_builds

RELEASES = ["1.27", "1.32", "1.34"]
"""The releases a conformance module checks each behaviour on, as the real kubectl sees it."""


def per_release() -> tuple[Any, Any]:
    """A conformance module's ``sim`` and ``kubectl`` fixtures (``sim, kubectl = per_release()``):
    one gpu-small kubesim per release of :data:`RELEASES`, shared by the module's tests."""

    @pytest.fixture(scope="module", params=RELEASES, name="sim")
    def sim(request: pytest.FixtureRequest) -> Iterator[KubeSim]:
        with KubeSim(pushed=TEST_BUILDS, scenario="gpu-small", k8s_version=request.param, speed=5.0) as s:
            yield s

    @pytest.fixture(scope="module", name="kubectl")
    def kubectl(sim: KubeSim) -> Kubectl:
        return Kubectl(sim.kubeconfig)

    return sim, kubectl

PODS = ("", "pods")
NODES = ("", "nodes")
EVENTS = ("", "events")
DAEMONSETS = ("apps", "daemonsets")
REVISIONS = ("apps", "controllerrevisions")


def small(minor: int = 31) -> Simulation:
    return push_test_builds(build(scenario="gpu-small", minor=minor))


def create(sim: Simulation, gr: tuple[str, str], obj: dict[str, Any]) -> dict[str, Any]:
    out = sim.store.create(sim.store.storage_type(gr), obj)
    sim.settle()
    return out


def get(sim: Simulation, gr: tuple[str, str], ns: str, name: str) -> dict[str, Any] | None:
    return sim.store.get(gr, ns, name)


def pods_of(sim: Simulation, ns: str, label: str, value: str, *, alive: bool = False) -> list[dict[str, Any]]:
    out = [p for p in sim.store.list(PODS, ns) if (p["metadata"].get("labels") or {}).get(label) == value]
    if alive:
        out = [p for p in out if not p["metadata"].get("deletionTimestamp")]
    return out


def events(sim: Simulation, *, reason: str | None = None, name: str | None = None) -> list[dict[str, Any]]:
    return [
        e for e in sim.store.list(EVENTS)
        if (reason is None or e["reason"] == reason) and (name is None or e["involvedObject"].get("name") == name)
    ]


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond["type"] == kind:
            return cond
    return None


def daemonset(name: str, *, ns: str = "default", image: str = "registry.example.com/agent:1.0",
              node_selector: dict[str, str] | None = None, tolerations: list[dict[str, Any]] | None = None,
              strategy: dict[str, Any] | None = None, history_limit: int | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "agent", "image": image}]}
    if node_selector:
        spec["nodeSelector"] = node_selector
    if tolerations:
        spec["tolerations"] = tolerations
    ds: dict[str, Any] = {
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": spec},
        },
    }
    if strategy:
        ds["spec"]["updateStrategy"] = strategy
    if history_limit is not None:
        ds["spec"]["revisionHistoryLimit"] = history_limit
    return ds


def set_image(sim: Simulation, ns: str, name: str, image: str, container: int = 0) -> None:
    def apply(obj: dict[str, Any]) -> None:
        obj["spec"]["template"]["spec"]["containers"][container]["image"] = image

    sim.store.mutate(DAEMONSETS, ns, name, apply)
    sim.settle()
