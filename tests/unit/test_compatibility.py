"""The compatibility matrix (issue 36, item 2; issue 58, item 5): its rows validate and name
their sources (README prerequisites and CHANGELOG notes quoted at the release's tag), and
:func:`judge` refuses a hardware class whose driver is too old or a Kubernetes below the
floor (naming the row and the nodes), says what the cluster cannot show (the container
toolkit, the default runtime), warns on an unknown combination (a tag no release publishes,
such as ``-driver550``; a release newer than the matrix, naming its newest row), and follows
the policy's override."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from pydantic import ValidationError

from runbooks.inventory.compatibility import MATRIX, Row, judge, row_for
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
OLD = HardwareClass(name="Tesla-P100-PCIE-16GB / driver 375 / containerd 1.7", gpu_product="Tesla-P100-PCIE-16GB",
                    driver_branch="375", runtime="containerd 1.7", drivers=["375.66"], kubelets=["v1.32.1"],
                    nodes=["gpu-node7", "gpu-node8"])
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
    assert [r.release for r in plugin] == [f"v0.{n}.x" for n in range(14, 21)]
    assert all((r.min_driver, r.kubernetes_min, r.kubernetes_max) == ("384", "1.10", None) for r in plugin)
    for row in plugin:
        line = row.release.removesuffix(".x")
        assert row.changelog and all(n.startswith(f"{line}.") for n in row.changelog), row.changelog
        assert row.changelog_source is not None and "/CHANGELOG.md" in row.changelog_source.url
        assert row.prerequisites and set(row.unchecked) <= set(row.prerequisites)
        assert any("nvidia-container-toolkit >= 1.7.0" in u for u in row.unchecked)
    assert [r.runtimes for r in plugin if r.release == "v0.14.x"] == [["docker", "containerd"]]
    assert all(r.runtimes == ["docker", "containerd", "cri-o"] for r in plugin if r.release != "v0.14.x")
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
    """The tag's release line picks the row, v0.19 and v0.20 included; a -driver<branch> suffix
    is no build NVIDIA publishes (no Makefile makes one), so such a tag is in no row."""
    for tag, line in (("v0.17.0", "v0.17.x"), ("v0.19.0", "v0.19.x"), ("v0.19.3", "v0.19.x"), ("v0.20.0", "v0.20.x")):
        row = row_for(f"{PLUGIN}:{tag}")
        assert row is not None and row.release == line, tag
    assert row_for(f"{PLUGIN}:v0.17.0-driver550") is None and row_for(f"{PLUGIN}:v0.17.0-ubi9-driver550") is None
    assert row_for(f"{PLUGIN}:v0.13.0") is None and row_for("registry.example.com/acme/plugin:v1") is None


def test_a_class_on_an_older_driver_fails_naming_the_row_and_its_nodes() -> None:
    """A real release (v0.17.0, README: drivers ~= 384.81) fails the class on driver 375 naming
    gpu-node7, gpu-node8 and the row's source, with the host's fix (upgrade the driver), never
    another plugin image; the A100 and H100 classes do not fail; gpu-node5's unknown driver warns."""
    verdicts = judge(f"{PLUGIN}:v0.17.0", [OLD, A100, H100, UNKNOWN], kubernetes="v1.32.1")
    [fail] = [v for v in verdicts if v.status == "fail"]
    assert fail.nodes == ["gpu-node7", "gpu-node8"] and fail.row == "NVIDIA device plugin v0.17.x"
    assert "needs NVIDIA driver branch 384 or newer" in fail.detail and "375.66" in fail.detail
    assert "README.md#prerequisites" in fail.detail and "upgrade the NVIDIA driver" in fail.detail
    assert "another image" not in fail.detail and "build" not in fail.detail
    [warn] = [v for v in verdicts if v.status == "warn"]
    assert warn.nodes == ["gpu-node5"] and "unknown" in warn.detail


def test_a_driver_suffix_is_not_a_build_to_pick() -> None:
    """Issue 58: no NVIDIA release ships -driver<branch> tags (the image carries no NVML; the
    host's library is injected): v0.17.0-driver550 is not refused on driver 535 as a build for
    another driver; it is a warning that v0.17.x publishes no such tag, naming the tags it does."""
    for image in (f"{PLUGIN}:v0.17.0-driver550", f"{PLUGIN}:v0.17.0-ubi9-driver550"):
        [warn] = judge(image, [A100, H100], kubernetes="v1.32.1")
        assert warn.status == "warn" and warn.row == "NVIDIA device plugin v0.17.x", warn
        assert "is not a release tag NVIDIA device plugin v0.17.x publishes (v0.17.N, v0.17.N-ubi9" in warn.detail, warn
        assert "Makefile" in warn.detail and "550" not in warn.detail.replace(image, ""), warn.detail


def test_a_release_newer_than_the_matrix_is_unchecked_naming_the_newest_row() -> None:
    """v0.21.0 (and v1.0.0) of the device plugin, v0.5.0 of the DRA example driver: newer than
    any row, so a warning that nothing was checked, naming the newest row; never a pass."""
    for image, newest in ((f"{PLUGIN}:v0.21.0", "NVIDIA device plugin v0.20.x"),
                          (f"{PLUGIN}:v1.0.0", "NVIDIA device plugin v0.20.x"),
                          (f"{PLUGIN}:v0.21.0@sha256:{'0f' * 32}", "NVIDIA device plugin v0.20.x"),
                          ("registry.k8s.io/dra-example-driver/dra-example-driver:v0.5.0", "DRA example driver v0.4.x")):
        [warn] = judge(image, [A100, OLD], kubernetes="v1.32.1")
        assert warn.status == "warn" and warn.row == newest, warn
        assert f"newer than the compatibility matrix's newest row, {newest}" in warn.detail, warn.detail
        assert "not checked" in warn.detail and "\n" not in warn.detail
    policed = judge(f"{PLUGIN}:v0.21.0", [A100], kubernetes="v1.32.1", min_driver="535")
    assert [(v.status, v.row) for v in policed] == [("warn", "NVIDIA device plugin v0.20.x"), ("pass", "policy")]
    [older] = judge(f"{PLUGIN}:v0.13.0", [A100], kubernetes="v1.32.1")
    assert older.status == "warn" and "in no row of the compatibility matrix" in older.detail


def test_what_the_cluster_cannot_show_is_said_not_passed() -> None:
    """The README's container toolkit (>= 1.7.0) and default low-level runtime are the host's:
    no node reports them, so the passing verdict names them as not checked, quoting the README."""
    [verdict] = judge(f"{PLUGIN}:v0.20.0", [A100, H100], kubernetes="v1.34.0")
    assert verdict.status == "pass" and verdict.row == "NVIDIA device plugin v0.20.x"
    assert "v0.20.0 README" in verdict.detail
    assert ("not checked (on the host, no node reports it): nvidia-docker >= 2.0 || nvidia-container-toolkit "
            ">= 1.7.0") in verdict.detail, verdict.detail
    assert "nvidia-container-runtime configured as the default low-level runtime" in verdict.detail


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
    for tag in ("v0.15.0", "v0.19.3", "v0.20.0"):  # CRI-O is documented from v0.15.0
        assert [v.status for v in judge(f"{PLUGIN}:{tag}", [CRIO], kubernetes="v1.27.3")] == ["pass"], tag


def test_kubernetes_outside_the_row_fails() -> None:
    """A Kubernetes older than the row's minimum fails, naming the row."""
    [fail, *_] = judge(f"{PLUGIN}:v0.17.0", [H100], kubernetes="v1.9.11")
    assert fail.status == "fail" and "Kubernetes 1.10 or newer" in fail.detail and "v1.9.11" in fail.detail
    [fail, *_] = judge(f"{PLUGIN}:v0.20.0", [H100], kubernetes="v1.9.0")
    assert fail.status == "fail" and fail.row == "NVIDIA device plugin v0.20.x" and "v0.20.0 README" in fail.detail


def test_a_kubelet_below_the_floor_fails_its_class() -> None:
    """The plugin registers with each node's kubelet: a class whose kubelet is older than the
    row's Kubernetes floor fails, naming its nodes and kubelet version, whatever the server runs."""
    stale = OLD.model_copy(update={"driver_branch": "535", "drivers": ["535.183.01"], "kubelets": ["v1.9.11"]})
    verdicts = judge(f"{PLUGIN}:v0.17.0", [stale, H100], kubernetes="v1.11.0")
    [fail] = [v for v in verdicts if v.status == "fail"]
    assert fail.nodes == ["gpu-node7", "gpu-node8"] and "kubelet v1.9.11" in fail.detail, fail
    assert "Kubernetes 1.10 or newer" in fail.detail


def test_the_policy_override_wins() -> None:
    """compatibility.min_driver replaces the matrix's minimum (also for an image in no row);
    ignore: true skips the check."""
    verdicts = judge(f"{PLUGIN}:v0.17.0", [A100, H100], kubernetes="v1.32.1", min_driver="550")
    assert [v.nodes for v in verdicts if v.status == "fail"] == [["gpu-node1", "gpu-node2"]]
    assert "compatibility.min_driver" in verdicts[0].detail
    loose = judge(f"{PLUGIN}:v0.17.0", [OLD], kubernetes="v1.32.1", min_driver="370")
    assert [v.status for v in loose] == ["pass"]
    other = judge("registry.example.com/acme/plugin:v2", [A100], kubernetes="v1.32.1", min_driver="550")
    assert [v.status for v in other] == ["fail"]
    assert [v.status for v in judge(f"{PLUGIN}:v0.17.0", [OLD], kubernetes="v1.32.1", ignore=True)] == ["pass"]


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
RELEASE = f"{PLUGIN}:v0.17.0"
DIGEST = "sha256:" + "0f" * 32


def _same(spelling: str, canonical: str, rows: list[Row] | None = None) -> None:
    classes = [OLD, A100, H100, UNKNOWN]
    want = judge(canonical, classes, kubernetes="v1.32.1", **({"rows": rows} if rows else {}))
    got = judge(spelling, classes, kubernetes="v1.32.1", **({"rows": rows} if rows else {}))
    assert [(v.status, v.row, v.nodes, v.detail.replace(spelling, canonical)) for v in got] == \
        [(v.status, v.row, v.nodes, v.detail) for v in want]
    assert "fail" in {v.status for v in got}, got


@pytest.mark.parametrize("spelling", [
    "nvcr.io:443/nvidia/k8s-device-plugin:v0.17.0",
    "NVCR.IO/nvidia/k8s-device-plugin:v0.17.0",
    "Nvcr.Io:443/nvidia/k8s-device-plugin:v0.17.0",
    f"{PLUGIN}:v0.17.0-ubi9",
    f"{RELEASE}@{DIGEST}",
    f"nvcr.io:443/nvidia/k8s-device-plugin:v0.17.0-ubi9@{DIGEST}",
])
def test_a_spelling_of_the_image_is_judged_as_the_canonical_one(spelling: str) -> None:
    """The registry's case and https port, v0.17's published distribution suffix (ubi9) and a
    digest beside the tag leave v0.17.0 in its row: the same verdicts (the class on driver 375
    refused), row and nodes."""
    _same(spelling, RELEASE)


def _hub_rows(repository: str) -> list[Row]:
    return [Row.model_validate({**ROWS[3], "repositories": [repository]})]


@pytest.mark.parametrize(("row_repository", "canonical", "spellings"), [
    ("docker.io/nvidia/k8s-device-plugin", "docker.io/nvidia/k8s-device-plugin:v0.17.0",
     ["nvidia/k8s-device-plugin:v0.17.0", "index.docker.io/nvidia/k8s-device-plugin:v0.17.0",
      "registry-1.docker.io/nvidia/k8s-device-plugin:v0.17.0",
      "Docker.IO:443/nvidia/k8s-device-plugin:v0.17.0"]),
    ("gpu-plugin", "docker.io/library/gpu-plugin:v0.17.0",
     ["gpu-plugin:v0.17.0", "library/gpu-plugin:v0.17.0", "docker.io/gpu-plugin:v0.17.0",
      "index.docker.io/library/gpu-plugin:v0.17.0", f"registry-1.docker.io/gpu-plugin:v0.17.0@{DIGEST}"]),
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
    so a warning, as any other repository: not refused, even on a class the row would refuse."""
    for image in ("nvcr.io:5000/nvidia/k8s-device-plugin:v0.17.0", "ghcr.io/nvidia/k8s-device-plugin:v0.17.0",
                  "nvcr.io:5000/nvidia/k8s-device-plugin:v0.17.0-driver550"):
        verdicts = judge(image, [A100, OLD], kubernetes="v1.32.1")
        assert [(v.status, v.row) for v in verdicts] == [("warn", "")], verdicts
        assert "in no row of the compatibility matrix" in verdicts[0].detail


def test_each_line_takes_the_distribution_suffixes_its_makefile_publishes() -> None:
    """v0.14: -ubuntu20.04 and -ubi8; v0.15 and v0.16: -ubuntu22.04 and -ubi8; v0.17: -ubi9;
    v0.18 to v0.20: none (deployments/container/Makefile at each tag). A suffix the line does
    not publish (-driver550 at any line), or a pre-release, is in no row."""
    found = {tag: (row.release if (row := row_for(f"{PLUGIN}:{tag}")) else None) for tag in (
        "v0.14.5-ubuntu20.04", "v0.14.5-ubi8", "v0.15.1-ubuntu22.04", "v0.16.2-ubi8", "v0.17.4-ubi9",
        "v0.18.2", "v0.18.2-ubi9", "v0.17.0-ubuntu22.04", "v0.17.0-rc.1", "v0.17.0-ubi9-ubi9x", "v0.17",
        "v0.19.1", "v0.20.0", "v0.20.0-ubi9", "v0.17.0-driver550", "v0.15.1-driver535")}
    assert found == {"v0.14.5-ubuntu20.04": "v0.14.x", "v0.14.5-ubi8": "v0.14.x", "v0.15.1-ubuntu22.04": "v0.15.x",
                     "v0.16.2-ubi8": "v0.16.x", "v0.17.4-ubi9": "v0.17.x", "v0.18.2": "v0.18.x", "v0.18.2-ubi9": None,
                     "v0.17.0-ubuntu22.04": None, "v0.17.0-rc.1": None, "v0.17.0-ubi9-ubi9x": None, "v0.17": None,
                     "v0.19.1": "v0.19.x", "v0.20.0": "v0.20.x", "v0.20.0-ubi9": None, "v0.17.0-driver550": None,
                     "v0.15.1-driver535": None}


def test_a_digest_alone_warns_that_its_row_could_not_be_told() -> None:
    """A digest names no version: a repository the matrix knows, by digest only, is a warning
    saying so (not 'in no row'); the policy's min_driver still judges it."""
    image = f"{PLUGIN}@{DIGEST}"
    [warn] = judge(image, [A100], kubernetes="v1.32.1")
    assert warn.status == "warn" and "by digest only" in warn.detail and ":<tag>@sha256:<digest>" in warn.detail
    assert [v.status for v in judge(image, [A100], kubernetes="v1.32.1", min_driver="550")] == ["fail"]
    assert "in no row" in judge(f"registry.example.com/acme/plugin@{DIGEST}", [A100], kubernetes="v1.32.1")[0].detail


# ---------------------------------------------------------------------- the quotes, read at their tags (issue 58)
MIRROR = Path("/work/.mirror/NVIDIA+k8s-device-plugin/repo")


def _at(tag: str, path: str) -> str:
    return subprocess.run(["git", "-C", str(MIRROR), "show", f"{tag}:{path}"], capture_output=True, text=True,
                          check=True).stdout


def _flat(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.skipif(not MIRROR.is_dir(), reason="no local mirror of NVIDIA/k8s-device-plugin")
def test_each_device_plugin_row_quotes_its_release_at_the_tag() -> None:
    """Read in NVIDIA/k8s-device-plugin itself (where a mirror is at hand): each row's tag is the
    newest of its line; its README has every quoted prerequisite; its CHANGELOG has every quoted
    note under the version heading it is quoted with; CRI-O is named from v0.15 only."""
    tags = subprocess.run(["git", "-C", str(MIRROR), "tag"], capture_output=True, text=True, check=True).stdout.split()
    for row in (r for r in MATRIX if r.component == "NVIDIA device plugin"):
        line = row.release.removesuffix(".x")
        tag = row.source.url.split("/blob/")[1].split("/")[0]
        released = [t for t in tags if re.fullmatch(re.escape(line) + r"\.\d+", t)]
        assert tag == max(released, key=lambda t: int(t.rsplit(".", 1)[1])), (row.release, tag)
        readme = _flat(_at(tag, "README.md"))
        for quoted in row.prerequisites:
            assert _flat(quoted) in readme, (tag, quoted)
        assert ("Notes on `CRI-O` configuration" in readme) == ("cri-o" in (row.runtimes or [])), tag
        assert row.changelog_source is not None
        at = row.changelog_source.url.split("/blob/")[1].split("/")[0]
        changelog = _at(at, "CHANGELOG.md")
        for note in row.changelog:
            version, text = note.split(": ", 1)
            section = re.split(r"^###? (?:Version )?" + re.escape(version) + r"\s*$", changelog, maxsplit=1,
                               flags=re.M)[1]
            section = re.split(r"^###? ", section, maxsplit=1, flags=re.M)[0]
            assert _flat(text) in _flat(section), (at, note)
