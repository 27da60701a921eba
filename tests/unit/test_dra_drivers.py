"""``docs/dra-releases.md`` against the data preflight works from (issue 59, item 4 and Done when
line 4): every release 1.26 to 1.36 has its row, with the ``resource.k8s.io`` versions and kinds,
the versions served by default and the kubelet's DRA gRPC API of :mod:`runbooks.dra.releases`,
citing k8s.io/api and k8s.io/kubelet at its tag; the library, kubelet and driver-release tables
are those of :mod:`runbooks.dra.drivers`. And the kubelet facts the issue found, checked in the
data: at 1.31 only v1alpha4 (v1alpha3 drivers break too), at 1.34 only v1 and v1beta1."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from runbooks.dra import drivers, releases
from runbooks.dra.driver_check import Deployed, deployed

DOC = Path(__file__).resolve().parents[2] / "docs" / "dra-releases.md"


def table(header: str) -> list[list[str]]:
    """The rows of the doc's table whose header row starts with ``header``, as cells."""
    lines = DOC.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split(" | ")])
    return rows


def versions(cell: str) -> list[str]:
    return re.findall(r"`(v\w+)`", cell)


def kinds_of(cell: str) -> dict[str, frozenset[str]]:
    """```v1`, `v1beta1`: DeviceClass, …; `v1alpha3`: DeviceTaintRule`` -> {version: kinds}."""
    out: dict[str, frozenset[str]] = {}
    for part in cell.split("; "):
        names, _, kinds = part.partition(": ")
        for version in versions(names):
            out[version] = frozenset(k.strip() for k in kinds.split(","))
    return out


def test_the_release_table_is_the_data_each_row_citing_its_tags() -> None:
    rows = table("| Release | Versions that exist")
    assert [r[0] for r in rows] == [f"1.{m}" for m in range(26, 37)]
    assert (releases.FIRST, releases.LAST) == (26, 36)
    for minor, (_, kinds, default, gate, grpc, _changed, source) in zip(range(26, 37), rows, strict=True):
        release = releases.RELEASES[minor]
        assert kinds_of(kinds) == release.kinds, minor
        assert list(release.kinds) == versions(kinds), minor  # newest first, as the module
        assert versions(default) == list(release.default_served) and (default == "none") == (not release.default_served)
        assert tuple(versions(grpc)) == release.kubelet_grpc, minor
        assert gate.split(",")[0] in release.gate, minor
        assert f"(https://github.com/kubernetes/api/tree/v0.{minor}.0/resource)" in source, minor
        assert f"(https://github.com/kubernetes/kubelet/tree/v0.{minor}.0/pkg/apis/dra)" in source, minor
        assert release.source == releases.API.format(minor=minor) and release.kubelet_source in source


def test_the_library_and_kubelet_tables_are_the_data() -> None:
    libraries = table("| Library |")
    assert [r[0] for r in libraries] == [f"0.{m}" for m in drivers.LIBRARIES]
    for (_, grpc, registers, resource_api, source), library in zip(libraries, drivers.LIBRARIES.values(), strict=True):
        assert tuple(versions(grpc)) == library.grpc
        assert ("services" in registers) == library.services
        assert tuple(versions(resource_api)) == library.resource_api
        assert f"({library.source})" in source
    grid = table("| Built on |")
    for row, library in zip(grid, drivers.LIBRARIES.values(), strict=True):
        assert row[0] == f"0.{library.minor}"
        assert row[1:] == ["yes" if drivers.with_kubelet(library, m).works else "no" for m in range(26, 37)], row


def test_the_driver_release_table_is_the_data() -> None:
    rows = table("| Release | Image |")
    assert [r[0] for r in rows] == [d.name for d in drivers.DRIVERS]
    for (_, image, library, grpc, resource_api, kube, source), release in zip(rows, drivers.DRIVERS, strict=True):
        assert image == f"`{release.image}`" and library == f"0.{release.library}"
        assert tuple(versions(grpc)) == release.built_on.grpc
        assert tuple(versions(resource_api)) == release.built_on.resource_api
        assert kube == (f"`{release.kube_version}`" if release.kube_version else "none")
        assert f"({release.source})" in source and f"({release.chart_source})" in source
        assert f"/blob/{release.tag}/" in release.source and f"/blob/{release.tag}/" in release.chart_source


@pytest.mark.parametrize(("library", "minor", "works", "says"), [
    (31, 31, True, ""),
    (31, 33, True, ""),  # 1.32 and 1.33 take v1alpha4 from a driver listing no service
    (31, 34, False, "the 1.34 kubelet accepts only drivers listing v1.DRAPlugin or v1beta1.DRAPlugin"),
    (30, 31, False, "both are the gRPC service v1alpha3.Node, with other messages"),  # v1alpha3 drivers break
    (27, 31, False, "every NodePrepareResources call fails (Unimplemented)"),
    (32, 31, False, "reads the versions a driver registers as 1.x semver"),
    (34, 27, False, "registration fails"),
    (32, 36, True, ""), (36, 32, True, ""), (27, 30, True, ""),
])
def test_what_a_kubelet_takes(library: int, minor: int, works: bool, says: str) -> None:
    outcome = drivers.with_kubelet(drivers.LIBRARIES[library], minor)
    assert outcome.works is works and says in outcome.why


def test_the_kubelet_grpc_per_release() -> None:
    grpc = {m: releases.RELEASES[m].kubelet_grpc for m in releases.RELEASES}
    assert grpc[31] == ("v1alpha4",)
    assert grpc[34] == grpc[35] == grpc[36] == ("v1", "v1beta1")
    assert [lib.minor for lib in drivers.working_libraries(31)] == [31]


def test_images_find_their_releases() -> None:
    v010 = drivers.release_of("registry.k8s.io/dra-example-driver/dra-example-driver:v0.1.0")
    assert v010 is not None and v010.built_on.grpc == ("v1beta1",) and v010.built_on.services  # v1beta1 server only
    v020 = drivers.release_of("registry.k8s.io/dra-example-driver/dra-example-driver:v0.2.0")
    assert v020 is not None and (v020.library, v020.kube_min, v020.kube_max) == (34, 32, None)
    nvidia = drivers.release_of("nvcr.io/nvidia/k8s-dra-driver-gpu:v25.12.0")
    assert nvidia is not None and nvidia.kube_version == ">=1.32.0-0" and nvidia.kube_min == 32
    assert drivers.release_of("nvcr.io/nvidia/k8s-dra-driver-gpu:v25.3.0").kube_version == ""  # type: ignore[union-attr]
    assert drivers.release_of("registry.k8s.io/dra-example-driver/dra-example-driver:v0.5.0") is None
    assert drivers.newest("registry.k8s.io/dra-example-driver/dra-example-driver").tag == "v0.4.0"
    assert drivers.newest("nvcr.io/nvidia/k8s-dra-driver-gpu").tag == "v25.12.0"


def test_a_daemonset_s_driver_images_are_found_once_each() -> None:
    """NVIDIA's kubelet plugin runs one image in two containers (gpus, compute-domains): one driver;
    a DaemonSet recognised as a DRA kubelet plugin gives its plugin container's image; anything else none."""
    nvidia = {"metadata": {"name": "nvidia-dra-driver-gpu-kubelet-plugin", "namespace": "nvidia-dra-driver-gpu"},
              "spec": {"template": {"spec": {"containers": [
                  {"name": "gpus", "image": "nvcr.io/nvidia/k8s-dra-driver-gpu:v25.12.0"},
                  {"name": "compute-domains", "image": "nvcr.io/nvidia/k8s-dra-driver-gpu:v25.12.0"}]}}}}
    own = {"metadata": {"name": "acme-kubeletplugin", "namespace": "acme"},
           "spec": {"template": {"spec": {"containers": [{"name": "plugin", "image": "registry.example.com/acme:1"}]}}}}
    other = {"metadata": {"name": "node-exporter", "namespace": "monitoring"},
             "spec": {"template": {"spec": {"containers": [{"name": "e", "image": "quay.io/prometheus/node-exporter"}]}}}}
    assert deployed([nvidia, own, other]) == [
        Deployed("DaemonSet nvidia-dra-driver-gpu/nvidia-dra-driver-gpu-kubelet-plugin",
                 "nvcr.io/nvidia/k8s-dra-driver-gpu:v25.12.0"),
        Deployed("DaemonSet acme/acme-kubeletplugin", "registry.example.com/acme:1")]
