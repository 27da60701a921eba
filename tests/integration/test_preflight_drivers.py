"""``preflight`` judges each deployed DRA driver against the releases on the way (issue 59, item 4):
the kubelet's DRA gRPC API (a driver working with the 1.31 kubelet cannot register with the 1.34
one), the ``resource.k8s.io`` version the driver uses, and its Helm chart's ``kubeVersion``; an
unknown release is said to be unchecked, naming the newest known one; 1.36 is judged.

gpu-small runs the DRA example driver's kubelet plugin; each test sets its image (the pod
template is what preflight reads, so no rollout is awaited)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from kubesim import KubeSim
from runbooks.cluster import Cluster
from runbooks.dra.preflight import Preflight, PreflightFinding, preflight
from tests.integration.test_cli import run
from tests.support import Kubectl

DRIVER = ("-n", "dra-example-driver", "daemonset/dra-example-driver-kubeletplugin")
SUBJECT = "DaemonSet dra-example-driver/dra-example-driver-kubeletplugin"
EXAMPLE = "registry.k8s.io/dra-example-driver/dra-example-driver"
NVIDIA = "nvcr.io/nvidia/k8s-dra-driver-gpu"
IN_HOUSE = "registry.example.com/gpu-team/dra-driver:2024.09.1"
"""A build of a team's own driver: no release the matrix knows."""


@pytest.fixture(scope="module")
def sims() -> Iterator[dict[int, KubeSim]]:
    """gpu-small at each release a test asks for, started when first asked."""
    with ExitStack() as stack:
        started: dict[int, KubeSim] = {}

        class Lazy(dict[int, KubeSim]):
            def __missing__(self, minor: int) -> KubeSim:
                started[minor] = stack.enter_context(KubeSim(scenario="gpu-small", k8s_version=f"1.{minor}"))
                self[minor] = started[minor]
                return started[minor]
        yield Lazy()


def with_image(sim: KubeSim, image: str) -> None:
    Kubectl(sim.kubeconfig)("set", "image", *DRIVER, f"plugin={image}")


def checked(sim: KubeSim, target: int) -> Preflight:
    with Cluster.from_kubeconfig(str(sim.kubeconfig)) as cluster:
        return preflight(cluster, target)


def about_drivers(result: Preflight) -> dict[str, PreflightFinding]:
    found = [f for f in result.findings if f.code.startswith("driver-")]
    assert all(f.subject == SUBJECT and f.origin == "cluster" for f in found), found
    by_code = {f.code: f for f in found}
    assert len(by_code) == len(found), found
    return by_code


def test_a_driver_working_with_the_1_31_kubelet_stops_registering_at_1_34(sims: dict[int, KubeSim],
                                                                            tmp_path: Path) -> None:
    """Done when, line 3: the 1.31 kubelet calls only v1alpha4 and takes a driver registered as
    version 1.0.0 (k8s.io/dynamic-resource-allocation 0.31); the 1.34 kubelet accepts only drivers
    listing v1.DRAPlugin or v1beta1.DRAPlugin. Whatever the in-house driver is built on, working on
    1.31 it stops registering at 1.34: preflight names the removal, the driver and its DaemonSet."""
    sim = sims[31]
    with_image(sim, IN_HOUSE)
    proc = run("preflight", "target=1.34", env={"KUBECONFIG": str(sim.kubeconfig)}, home=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert f"FAIL  {SUBJECT} (cluster): {IN_HOUSE}" in proc.stdout, proc.stdout
    assert "the 1.34 kubelet accepts only drivers listing v1.DRAPlugin or v1beta1.DRAPlugin" in proc.stdout
    assert "k8s.io/dynamic-resource-allocation 0.31 serves v1alpha4 registered as version 1.0.0" in proc.stdout
    assert "https://github.com/kubernetes/kubelet/tree/v0.34.0/pkg/apis/dra" in proc.stdout
    assert "1.34: the kubelet accepts only drivers listing the v1.DRAPlugin or v1beta1.DRAPlugin" in proc.stdout
    assert "; 1 DRA driver(s)" in proc.stdout

    grpc = about_drivers(checked(sim, 34))["driver-kubelet-grpc"]
    assert grpc.severity == "fail" and IN_HOUSE in grpc.problem
    # to 1.33 the same driver keeps registering (the 1.32 and 1.33 kubelets call v1alpha4 for it):
    # only "unchecked", and why
    early = about_drivers(checked(sim, 33))
    assert set(early) == {"driver-unchecked"} and early["driver-unchecked"].severity == "warn"
    assert "a DRA driver the matrix does not know" in early["driver-unchecked"].problem


def test_the_example_driver_v0_2_0_does_not_fit_1_27(sims: dict[int, KubeSim]) -> None:
    """v0.2.0 requires k8s.io/dynamic-resource-allocation v0.34.0 (go.mod): it lists gRPC services,
    which a kubelet before 1.32 reads as no version; it uses resource.k8s.io v1, v1beta2 or v1beta1,
    none of which 1.28 has; its chart says kubeVersion >=1.32.0-0. Each is named, with its source."""
    sim = sims[27]
    with_image(sim, f"{EXAMPLE}:v0.2.0")
    found = about_drivers(checked(sim, 28))
    assert set(found) == {"driver-kubelet-grpc", "driver-resource-api", "driver-kube-version"}
    assert all(f.severity == "fail" for f in found.values())
    grpc = found["driver-kubelet-grpc"]
    assert grpc.problem.startswith(f"{EXAMPLE}:v0.2.0 (DRA example driver v0.2.0, built on "
                                   "k8s.io/dynamic-resource-allocation 0.34): the 1.28 kubelet reads the versions "
                                   "a driver registers as 1.x semver"), grpc.problem
    assert "https://github.com/kubernetes/kubelet/tree/v0.28.0/pkg/apis/dra" in grpc.source
    assert "https://github.com/kubernetes-sigs/dra-example-driver/blob/v0.2.0/go.mod" in grpc.source
    assert 'kubeVersion: ">=1.32.0-0"' in found["driver-kube-version"].problem
    assert found["driver-kube-version"].source.endswith("/v0.2.0/deployments/helm/dra-example-driver/Chart.yaml")


def test_nvidia_s_driver_below_its_chart_floor_is_named(sims: dict[int, KubeSim]) -> None:
    """NVIDIA's DRA driver v25.8.0: chart kubeVersion >=1.32.0-0, built on 0.34 (v1 and v1beta1 gRPC
    services): a 1.30 cluster going to 1.31 fails on all three counts, the driver named."""
    sim = sims[30]
    with_image(sim, f"{NVIDIA}:v25.8.0")
    found = about_drivers(checked(sim, 31))
    floor = found["driver-kube-version"]
    assert floor.severity == "fail"
    assert "1.31 is below the Kubernetes range of NVIDIA DRA driver v25.8.0's Helm chart " \
           '(kubeVersion: ">=1.32.0-0")' in floor.problem, floor.problem
    assert floor.source == ("https://github.com/NVIDIA/k8s-dra-driver-gpu/blob/v25.8.0/"
                            "deployments/helm/nvidia-dra-driver-gpu/Chart.yaml")
    assert found["driver-kubelet-grpc"].severity == "fail"
    assert f"{NVIDIA}:v25.8.0 (NVIDIA DRA driver v25.8.0" in found["driver-kubelet-grpc"].problem


def test_1_36_is_judged_not_left_unchecked(sims: dict[int, KubeSim]) -> None:
    """A 1.34 cluster going to 1.36: no "not checked" note; the example driver v0.4.0 (0.36, chart
    >=1.33) fits; v0.1.0 (0.32: resource.k8s.io/v1beta1 only; chart 1.32.x) is warned about."""
    sim = sims[34]
    with_image(sim, f"{EXAMPLE}:v0.4.0")
    result = checked(sim, 36)
    assert result.steps == [35, 36]
    assert not [n for n in result.notes if "not checked" in n.text], result.notes
    assert any(n.release == "1.36" and "v1beta2 is deprecated" in n.text for n in result.notes)
    assert about_drivers(result) == {}
    with_image(sim, f"{EXAMPLE}:v0.1.0")
    found = about_drivers(checked(sim, 36))
    assert set(found) == {"driver-resource-api", "driver-kube-version"}
    assert all(f.severity == "warn" for f in found.values())
    assert "uses resource.k8s.io/v1beta1, which 1.35 serves only when the API server enables it" in \
        found["driver-resource-api"].problem
    assert "upgrade the driver to registry.k8s.io/dra-example-driver/dra-example-driver:v0.4.0" in \
        found["driver-resource-api"].fix


def test_an_unknown_release_is_unchecked_naming_the_newest_known(sims: dict[int, KubeSim]) -> None:
    sim = sims[34]
    with_image(sim, f"{EXAMPLE}:v0.5.0")
    found = about_drivers(checked(sim, 35))
    assert set(found) == {"driver-unchecked"}
    unchecked = found["driver-unchecked"]
    assert unchecked.severity == "warn"
    assert unchecked.problem.startswith(f"{EXAMPLE}:v0.5.0 is not a release in the DRA driver matrix (newest known: "
                                        "DRA example driver v0.4.0, "), unchecked.problem
    assert "were not checked against 1.35" in unchecked.problem
