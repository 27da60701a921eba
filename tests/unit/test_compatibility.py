"""The compatibility matrix (issue 36, item 2): its rows validate and name their sources, and
:func:`judge` refuses a hardware class whose driver is too old (naming the row and the nodes),
warns on an unknown combination, and follows the policy's override."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from runbooks.inventory.compatibility import MATRIX, Row, driver_branch, judge, row_for
from runbooks.inventory.compatibility_matrix import ROWS
from runbooks.inventory.models import HardwareClass
from runbooks.policy import Policy

A100 = HardwareClass(name="NVIDIA-A100-SXM4-80GB / driver 535 / containerd 1.7", gpu_product="NVIDIA-A100-SXM4-80GB",
                     driver_branch="535", runtime="containerd 1.7", drivers=["535.183.01"],
                     nodes=["gpu-node1", "gpu-node2"])
H100 = HardwareClass(name="NVIDIA-H100-80GB-HBM3 / driver 550 / containerd 2.0", gpu_product="NVIDIA-H100-80GB-HBM3",
                     driver_branch="550", runtime="containerd 2.0", drivers=["550.127.05"],
                     nodes=["gpu-node3", "gpu-node4"])
UNKNOWN = HardwareClass(name="unknown GPU / driver unknown / containerd 1.7", runtime="containerd 1.7",
                        nodes=["gpu-node5"])
CRIO = HardwareClass(name="NVIDIA-A100-SXM4-80GB / driver 535 / cri-o 1.30", gpu_product="NVIDIA-A100-SXM4-80GB",
                     driver_branch="535", runtime="cri-o 1.30", nodes=["gpu-node9"])
PLUGIN = "nvcr.io/nvidia/k8s-device-plugin"


def test_every_row_validates_and_names_its_source() -> None:
    """Each row loads as a Row, has a source URL at the release's tag, and a device plugin row
    carries the README's stated minimum (driver 384, Kubernetes 1.10) with no invented maximum."""
    assert len(MATRIX) == len(ROWS) >= 9
    for row in MATRIX:
        assert row.source.url.startswith("https://github.com/") and "/blob/v" in row.source.url
        assert row.note
    plugin = [r for r in MATRIX if r.component == "NVIDIA device plugin"]
    assert {r.release for r in plugin} == {"v0.14.x", "v0.15.x", "v0.16.x", "v0.17.x", "v0.18.x"}
    assert all((r.min_driver, r.kubernetes_min, r.kubernetes_max) == ("384", "1.10", None) for r in plugin)
    assert [r.runtimes for r in plugin if r.release == "v0.14.x"] == [["docker", "containerd"]]
    dra = [r for r in MATRIX if r.component == "DRA example driver"]
    assert dra and all(r.min_driver is None and r.kubernetes_min is None for r in dra)


def test_a_bad_row_is_refused_when_loaded() -> None:
    """A row with a driver branch that is not a number, or an unknown key, does not load."""
    good = dict(ROWS[0])
    with pytest.raises(ValidationError, match="not a driver branch"):
        Row.model_validate({**good, "min_driver": "5x0"})
    with pytest.raises(ValidationError):
        Row.model_validate({**good, "max_driver": "600"})


def test_images_find_their_rows() -> None:
    """The tag's release line picks the row; a -driver<branch> suffix is a build of that release."""
    assert driver_branch("v0.17.0-driver550") == 550 and driver_branch("v0.17.0-driver550-ubi9") == 550
    assert driver_branch("v0.17.0") is None and driver_branch("driver550") is None
    row = row_for(f"{PLUGIN}:v0.17.0-driver550")
    assert row is not None and row.release == "v0.17.x"
    assert row_for(f"{PLUGIN}:v0.13.0") is None and row_for("registry.example.com/acme/plugin:v1") is None


def test_a_class_on_an_older_driver_fails_naming_the_row_and_its_nodes() -> None:
    """A build needing driver 550 fails the A100 class (driver 535) naming gpu-node1 and gpu-node2
    and the row's source; the H100 class on 550 does not fail; gpu-node5's unknown driver warns."""
    verdicts = judge(f"{PLUGIN}:v0.17.0-driver550", [A100, H100, UNKNOWN], kubernetes="v1.32.1")
    [fail] = [v for v in verdicts if v.status == "fail"]
    assert fail.nodes == ["gpu-node1", "gpu-node2"] and fail.row == "NVIDIA device plugin v0.17.x"
    assert "needs NVIDIA driver branch 550 or newer" in fail.detail and "535.183.01" in fail.detail
    assert "README.md#prerequisites" in fail.detail and "-driver550 build" in fail.detail
    [warn] = [v for v in verdicts if v.status == "warn"]
    assert warn.nodes == ["gpu-node5"] and "unknown" in warn.detail


def test_the_release_itself_fits_and_unknowns_only_warn() -> None:
    """v0.17.0 (driver 384 or newer) fails nothing on 535 and 550; an image in no row warns and
    is not refused; a runtime the row does not document (CRI-O for v0.14) warns."""
    verdicts = judge(f"{PLUGIN}:v0.17.0", [A100, H100], kubernetes="v1.32.1")
    assert [v.status for v in verdicts] == ["pass"]
    unknown = judge("registry.example.com/acme/plugin:v2", [A100], kubernetes="v1.32.1")
    assert [v.status for v in unknown] == ["warn"] and "in no row of the compatibility matrix" in unknown[0].detail
    crio = judge(f"{PLUGIN}:v0.14.5", [CRIO], kubernetes="v1.27.3")
    assert {v.status for v in crio} == {"warn", "pass"}
    assert any("cri-o 1.30 on gpu-node9" in v.detail for v in crio if v.status == "warn")


def test_kubernetes_outside_the_row_fails() -> None:
    """A Kubernetes older than the row's minimum fails, naming the row."""
    [fail, *_] = judge(f"{PLUGIN}:v0.17.0", [H100], kubernetes="v1.9.11")
    assert fail.status == "fail" and "Kubernetes 1.10 or newer" in fail.detail and "v1.9.11" in fail.detail


def test_the_policy_override_wins() -> None:
    """compatibility.min_driver replaces the matrix's minimum (also for an image in no row);
    ignore: true skips the check."""
    verdicts = judge(f"{PLUGIN}:v0.17.0", [A100, H100], kubernetes="v1.32.1", min_driver="550")
    assert [v.nodes for v in verdicts if v.status == "fail"] == [["gpu-node1", "gpu-node2"]]
    assert "compatibility.min_driver" in verdicts[0].detail
    loose = judge(f"{PLUGIN}:v0.17.0-driver550", [A100], kubernetes="v1.32.1", min_driver="535")
    assert [v.status for v in loose] == ["pass"]
    other = judge("registry.example.com/acme/plugin:v2", [A100], kubernetes="v1.32.1", min_driver="550")
    assert [v.status for v in other] == ["fail"]
    assert [v.status for v in judge(f"{PLUGIN}:v0.17.0-driver550", [A100], kubernetes="v1.32.1", ignore=True)] == ["pass"]


def test_the_policy_reads_the_override_per_target() -> None:
    """targets[].compatibility takes min_driver (a branch, a number is read as one) and ignore;
    anything else is refused when the file is read."""
    policy = Policy.model_validate({"approvers": {"users": ["U0BOB"]}, "targets": [
        {"namespace": "kube-system", "name": "a", "compatibility": {"min_driver": 550}},
        {"namespace": "kube-system", "name": "b", "compatibility": {"ignore": True}}]})
    a, b = (policy.target(f"kube-system/{n}") for n in "ab")
    assert a is not None and a.compatibility is not None and a.compatibility.min_driver == "550"
    assert b is not None and b.compatibility is not None and b.compatibility.ignore
    with pytest.raises(ValidationError, match="not a driver branch"):
        Policy.model_validate({"approvers": {"users": ["U0BOB"]}, "targets": [
            {"namespace": "kube-system", "name": "a", "compatibility": {"min_driver": "r550"}}]})


# ---------------------------------------------------------------------- spellings (attack finding 5)
NEEDS_550 = f"{PLUGIN}:v0.17.0-driver550"
DIGEST = "sha256:" + "0f" * 32


def _same(spelling: str, canonical: str, rows: list[Row] | None = None) -> None:
    classes = [A100, H100, UNKNOWN]
    want = judge(canonical, classes, kubernetes="v1.32.1", **({"rows": rows} if rows else {}))
    got = judge(spelling, classes, kubernetes="v1.32.1", **({"rows": rows} if rows else {}))
    assert [(v.status, v.row, v.nodes, v.detail.replace(spelling, canonical)) for v in got] == \
        [(v.status, v.row, v.nodes, v.detail) for v in want]
    assert "fail" in {v.status for v in got}, got


@pytest.mark.parametrize("spelling", [
    "nvcr.io:443/nvidia/k8s-device-plugin:v0.17.0-driver550",
    "NVCR.IO/nvidia/k8s-device-plugin:v0.17.0-driver550",
    "Nvcr.Io:443/nvidia/k8s-device-plugin:v0.17.0-driver550",
    f"{PLUGIN}:v0.17.0-ubi9-driver550",
    f"{PLUGIN}:v0.17.0-driver550-ubi9",
    f"{NEEDS_550}@{DIGEST}",
    f"nvcr.io:443/nvidia/k8s-device-plugin:v0.17.0-ubi9-driver550@{DIGEST}",
])
def test_a_spelling_of_the_image_is_judged_as_the_canonical_one(spelling: str) -> None:
    """The registry's case and https port, v0.17's published distribution suffix (ubi9) and a
    digest beside the tag leave the -driver550 build in its row: the same verdicts, row and nodes."""
    _same(spelling, NEEDS_550)


def _hub_rows(repository: str) -> list[Row]:
    return [Row.model_validate({**ROWS[3], "repositories": [repository]})]


@pytest.mark.parametrize(("row_repository", "canonical", "spellings"), [
    ("docker.io/nvidia/k8s-device-plugin", "docker.io/nvidia/k8s-device-plugin:v0.17.0-driver550",
     ["nvidia/k8s-device-plugin:v0.17.0-driver550", "index.docker.io/nvidia/k8s-device-plugin:v0.17.0-driver550",
      "registry-1.docker.io/nvidia/k8s-device-plugin:v0.17.0-driver550",
      "Docker.IO:443/nvidia/k8s-device-plugin:v0.17.0-driver550"]),
    ("gpu-plugin", "docker.io/library/gpu-plugin:v0.17.0-driver550",
     ["gpu-plugin:v0.17.0-driver550", "library/gpu-plugin:v0.17.0-driver550", "docker.io/gpu-plugin:v0.17.0-driver550",
      "index.docker.io/library/gpu-plugin:v0.17.0-driver550", f"registry-1.docker.io/gpu-plugin:v0.17.0-driver550@{DIGEST}"]),
])
def test_docker_hub_spellings_are_one_repository(row_repository: str, canonical: str, spellings: list[str]) -> None:
    """Docker Hub by no registry, docker.io, index.docker.io, registry-1.docker.io (any case,
    :443), and library/ for a one-component name: one repository, whichever way the row or the
    request spells it."""
    rows = _hub_rows(row_repository)
    for spelling in spellings:
        _same(spelling, canonical, rows)


def test_another_port_or_registry_is_another_repository() -> None:
    """An explicit port other than 443 is another endpoint (a mirror, another registry): in no row,
    so a warning, as any other repository; its -driver550 tag still refuses the older driver."""
    for image in ("nvcr.io:5000/nvidia/k8s-device-plugin:v0.17.0", "ghcr.io/nvidia/k8s-device-plugin:v0.17.0"):
        assert [v.status for v in judge(image, [A100], kubernetes="v1.32.1")] == ["warn"]
    verdicts = judge("nvcr.io:5000/nvidia/k8s-device-plugin:v0.17.0-driver550", [A100, H100], kubernetes="v1.32.1")
    assert [(v.status, v.row, v.nodes) for v in verdicts] == [("warn", "", []), ("fail", "tag", ["gpu-node1", "gpu-node2"])]
    assert "the tag's -driver550 build" in verdicts[1].detail


def test_each_line_takes_the_distribution_suffixes_its_makefile_publishes() -> None:
    """v0.14: -ubuntu20.04 and -ubi8; v0.15 and v0.16: -ubuntu22.04 and -ubi8; v0.17: -ubi9;
    v0.18: none (deployments/container/Makefile at each tag). A suffix the line does not
    publish, or a pre-release, is in no row."""
    found = {tag: (row.release if (row := row_for(f"{PLUGIN}:{tag}")) else None) for tag in (
        "v0.14.5-ubuntu20.04", "v0.14.5-ubi8", "v0.15.1-ubuntu22.04", "v0.16.2-ubi8", "v0.17.4-ubi9",
        "v0.18.2", "v0.18.2-ubi9", "v0.17.0-ubuntu22.04", "v0.17.0-rc.1", "v0.17.0-ubi9-ubi9x", "v0.17")}
    assert found == {"v0.14.5-ubuntu20.04": "v0.14.x", "v0.14.5-ubi8": "v0.14.x", "v0.15.1-ubuntu22.04": "v0.15.x",
                     "v0.16.2-ubi8": "v0.16.x", "v0.17.4-ubi9": "v0.17.x", "v0.18.2": "v0.18.x", "v0.18.2-ubi9": None,
                     "v0.17.0-ubuntu22.04": None, "v0.17.0-rc.1": None, "v0.17.0-ubi9-ubi9x": None, "v0.17": None}


def test_a_digest_alone_warns_that_its_row_could_not_be_told() -> None:
    """A digest names no version: a repository the matrix knows, by digest only, is a warning
    saying so (not 'in no row'); the policy's min_driver still judges it."""
    image = f"{PLUGIN}@{DIGEST}"
    [warn] = judge(image, [A100], kubernetes="v1.32.1")
    assert warn.status == "warn" and "by digest only" in warn.detail and ":<tag>@sha256:<digest>" in warn.detail
    assert [v.status for v in judge(image, [A100], kubernetes="v1.32.1", min_driver="550")] == ["fail"]
    assert "in no row" in judge(f"registry.example.com/acme/plugin@{DIGEST}", [A100], kubernetes="v1.32.1")[0].detail
