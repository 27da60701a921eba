"""The compatibility matrix, loaded and validated, and a plugin image checked against the nodes.

:data:`MATRIX` holds the rows of :mod:`.compatibility_matrix` as :class:`Row` models (a bad
row fails at import, not at a request). :func:`judge` answers, for the image a request
wants and the hardware classes of the nodes the plugin runs on, one :class:`Verdict` each:

- ``fail``: a class whose driver branch is older than the row's minimum (or the policy's
  ``compatibility.min_driver``) or whose kubelet is older than the row's Kubernetes floor, or
  a cluster whose Kubernetes is outside the row's range: the row and the nodes are named,
  with the host's fix (upgrade the driver, the kubelet);
- ``warn``: an unknown combination: an image the matrix has no row for (another repository;
  a tag its release line does not publish, such as kubesim's old ``-driver550``; a release
  newer than the matrix, naming its newest row), GPU nodes whose driver or runtime is unknown
  (no GPU Feature Discovery labels), a runtime the row's source does not document;
- ``pass``: the classes the row's stated needs were checked against, naming what the cluster
  cannot show (the row's ``unchecked``: the container toolkit, the default runtime) as not
  checked.

There is no build per driver branch: the plugin's image carries no NVML, the host's library
is injected, so ``Driver/library version mismatch`` is the node's (its driver upgraded, its
kernel module not reloaded: reboot or reload it), named by the failure signatures
(:mod:`runbooks.daemonset.signatures`), never answered with another plugin image.

The image is read once, by :mod:`runbooks.image_names`, whatever its spelling: the registry's
case and ``:443``, Docker Hub's defaults and a digest beside the tag do not change its row;
the tag's version picks the row (``v0.17.0-ubi9`` is ``v0.17.0`` where the row's line
publishes ``ubi9``). A digest alone names no version: an image of a repository the matrix
knows, by digest only, warns that its row could not be told (write ``:tag@sha256:…``).

The policy's override per target (``compatibility: {min_driver: "550"}`` or ``{ignore:
true}``) is passed in as ``min_driver``/``ignore``. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, field_validator

from runbooks.image_names import ImageName, parse, release, repository
from runbooks.inventory.compatibility_matrix import ROWS
from runbooks.inventory.models import HardwareClass
from runbooks.inventory.stacks import UNKNOWN

_K8S = re.compile(r"^1\.\d+$")
_KUBELET = re.compile(r"^v?1\.(\d+)(?:\.|$)")
_LINE = re.compile(r"^v?(\d+)\.(\d+)")


class Source(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    title: str
    url: str


class Row(BaseModel):
    """One release line of a plugin and what its documentation says it needs (``None``: unsaid)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    component: str
    release: str
    repositories: list[str]
    tags: str
    variants: list[str] = []
    """The distribution suffixes the line's tags carry (``ubi9``: ``v0.17.0-ubi9``)."""
    variants_source: str = ""
    kubernetes_min: str | None = None
    kubernetes_max: str | None = None
    min_driver: str | None = None
    container_toolkit: str | None = None
    runtimes: list[str] | None = None
    prerequisites: list[str] = []
    """The source's prerequisites, quoted."""
    unchecked: list[str] = []
    """Those of ``prerequisites`` no node object reports (the host's): said, not passed."""
    source: Source
    changelog: list[str] = []
    """Notes of the line's CHANGELOG, quoted, each after its version heading (``v0.19.2: …``)."""
    changelog_source: Source | None = None
    note: str = ""

    @field_validator("repositories")
    @classmethod
    def _canonical(cls, values: list[str]) -> list[str]:
        return [repository(v) for v in values]

    @field_validator("tags")
    @classmethod
    def _regex(cls, value: str) -> str:
        re.compile(value)
        return value

    @field_validator("kubernetes_min", "kubernetes_max")
    @classmethod
    def _k8s(cls, value: str | None) -> str | None:
        if value is not None and not _K8S.fullmatch(value):
            raise ValueError(f"{value!r} is not a Kubernetes minor version (1.NN)")
        return value

    @field_validator("min_driver")
    @classmethod
    def _branch(cls, value: str | None) -> str | None:
        if value is not None and not value.isdigit():
            raise ValueError(f"{value!r} is not a driver branch (its major version)")
        return value

    @property
    def name(self) -> str:
        return f"{self.component} {self.release}"

    @property
    def line(self) -> tuple[int, int]:
        """(0, 20) of ``v0.20.x``: the release line, to tell a newer release."""
        found = _LINE.match(self.release)
        return (int(found.group(1)), int(found.group(2))) if found else (0, 0)

    def of_line(self, image: ImageName) -> bool:
        """The image's repository is the row's and its tag's version is of the row's line."""
        parts = release(image.tag)
        return image.repository in self.repositories and parts is not None and \
            re.fullmatch(self.tags, parts[0]) is not None

    def matches(self, image: ImageName) -> bool:
        """The image's tag is a release of the row's line as published: its version matches
        ``tags`` and each suffix is a variant the line's Makefile builds."""
        parts = release(image.tag)
        return self.of_line(image) and parts is not None and all(s in self.variants for s in parts[1])


MATRIX: list[Row] = [Row.model_validate(row) for row in ROWS]


@dataclass(frozen=True)
class Verdict:
    status: Literal["pass", "fail", "warn"]
    detail: str
    row: str = ""
    nodes: list[str] = field(default_factory=list)


def row_for(image: str | ImageName, rows: Iterable[Row] = MATRIX) -> Row | None:
    """The row of ``image`` (any spelling); None for a reference that is not one, or is in no row."""
    try:
        name = image if isinstance(image, ImageName) else parse(image)
    except ValueError:
        return None
    return next((r for r in rows if r.matches(name)), None)


def _minor(version: str) -> int:
    return int(version.split(".")[1])


def _runtime_name(runtime: str | None) -> str | None:
    return runtime.split(" ", 1)[0].lower() if runtime else None


# ------------------------------------------------------------------ sentences
def row_text(row: Row) -> str:
    return f"matrix row {row.name} ({row.source.title}; {row.source.url})"


def driver_too_old(image: str, why: str, hw: HardwareClass) -> str:
    return (f"{image} needs NVIDIA driver branch {why}; class {hw.name} has {', '.join(hw.nodes)} on driver "
            f"{', '.join(hw.drivers) or hw.driver_branch}: upgrade the NVIDIA driver on those nodes first")


def _wanted(row: Row) -> str:
    return (f"Kubernetes {row.kubernetes_min or '?'} to {row.kubernetes_max}" if row.kubernetes_max
            else f"Kubernetes {row.kubernetes_min} or newer")


def kubernetes_outside(image: str, row: Row, version: str) -> str:
    return f"{image} needs {_wanted(row)} ({row_text(row)}); this cluster runs {version}"


def kubelet_too_old(image: str, row: Row, hw: HardwareClass, kubelets: list[str]) -> str:
    return (f"{image} needs {_wanted(row)} ({row_text(row)}); class {hw.name} has {', '.join(hw.nodes)} on "
            f"kubelet {', '.join(kubelets)}: upgrade the kubelet on those nodes first")


def not_in_matrix(image: str) -> str:
    return (f"{image} is in no row of the compatibility matrix: its Kubernetes range, driver and runtimes are "
            "unknown, so they were not checked (compatibility.min_driver in the policy checks a driver)")


def not_published(image: str, row: Row) -> str:
    line = row.release.removesuffix(".x")
    tags = ", ".join([f"{line}.N"] + [f"{line}.N-{v}" for v in row.variants])
    return (f"{image} is not a release tag {row.name} publishes ({tags}, per {row.variants_source or row.source.url}): "
            "its row's needs were not checked against it")


def newer_than_matrix(image: str, row: Row) -> str:
    return (f"{image} is newer than the compatibility matrix's newest row, {row.name} ({row.source.url}): its "
            "Kubernetes range, driver and runtimes were not checked (compatibility.min_driver in the policy "
            "checks a driver)")


def digest_only(image: str) -> str:
    return (f"{image} names its image by digest only: the compatibility matrix is by version, so its row "
            "could not be told and nothing was checked against it (name the tag too, :<tag>@sha256:<digest>, "
            "or set compatibility.min_driver in the policy)")


def stack_unknown(nodes: list[str]) -> str:
    return (f"the driver of {', '.join(nodes)} is unknown (no GPU Feature Discovery labels): the matrix's "
            "driver minimum could not be checked there")


def runtime_undocumented(image: str, row: Row, hw: HardwareClass) -> str:
    return (f"{hw.runtime or UNKNOWN} on {', '.join(hw.nodes)} is not among the runtimes {row_text(row)} documents "
            f"({', '.join(row.runtimes or [])}) for {image}")


def compatible(image: str, row: Row | None, classes: list[HardwareClass], ignored: bool) -> str:
    if ignored:
        return f"the compatibility check of {image} is off for this target (compatibility.ignore in the policy)"
    where = "; ".join(f"{c.name}: {', '.join(c.nodes)}" for c in classes) or "no GPU node"
    if row is None:
        return f"{image} fits every hardware class it will run on ({where}) per the policy"
    unchecked = f"; not checked (on the host, no node reports it): {'; '.join(row.unchecked)}" if row.unchecked else ""
    return f"{image} fits every hardware class it will run on per {row.name}{unchecked} ({where}; {row_text(row)})"


# ------------------------------------------------------------------ the check
def _unmatched(image: str, name: ImageName | None, rows: list[Row]) -> Verdict:
    """The warning for an image in no row: why its row could not be told."""
    known = [r for r in rows if name is not None and name.repository in r.repositories]
    if name is None or not known:
        return Verdict("warn", not_in_matrix(image))
    if not name.tag:
        return Verdict("warn", digest_only(image))
    if (line := next((r for r in known if r.of_line(name)), None)) is not None:
        return Verdict("warn", not_published(image, line), row=line.name)
    parts, newest = release(name.tag), max(known, key=lambda r: r.line)
    found = _LINE.match(parts[0]) if parts else None
    if found is not None and (int(found.group(1)), int(found.group(2))) > newest.line:
        return Verdict("warn", newer_than_matrix(image, newest), row=newest.name)
    return Verdict("warn", not_in_matrix(image))


def _old_kubelets(row: Row, hw: HardwareClass) -> list[str]:
    if row.kubernetes_min is None:
        return []
    floor = _minor(row.kubernetes_min)
    return [k for k in hw.kubelets if (found := _KUBELET.match(k)) is not None and int(found.group(1)) < floor]


def judge(
    image: str, classes: list[HardwareClass], *, kubernetes: str, min_driver: str | None = None,
    ignore: bool = False, rows: Iterable[Row] = MATRIX,
) -> list[Verdict]:
    """The verdicts for ``image`` on the nodes of ``classes`` in a cluster running ``kubernetes``
    (``v1.32.1``); ``min_driver`` and ``ignore`` are the policy's override for the target."""
    if ignore:
        return [Verdict("pass", compatible(image, None, classes, True))]
    rows = list(rows)
    try:
        name: ImageName | None = parse(image)
    except ValueError:
        name = None
    row = row_for(name, rows) if name is not None else None
    verdicts: list[Verdict] = []
    if row is None and ((unmatched := _unmatched(image, name, rows)).row or min_driver is None):
        verdicts.append(unmatched)  # the policy's min_driver stands for an unknown repository, not a release
        # of a known one the matrix cannot judge (newer than its rows, a tag its line does not publish)
    if min_driver is not None:
        needed, why = int(min_driver), f"{min_driver} or newer (compatibility.min_driver of this target in the policy)"
    elif row is not None and row.min_driver is not None:
        needed, why = int(row.min_driver), f"{row.min_driver} or newer ({row_text(row)})"
    else:
        needed, why = 0, ""
    label = row.name if row is not None else "policy"
    minor = _minor(kubernetes.lstrip("v"))
    if row is not None and (
        (row.kubernetes_min is not None and minor < _minor(row.kubernetes_min))
        or (row.kubernetes_max is not None and minor > _minor(row.kubernetes_max))
    ):
        verdicts.append(Verdict("fail", kubernetes_outside(image, row, kubernetes), row=row.name))
    unknown: list[str] = []
    for hw in classes:
        if hw.driver_branch is None:
            unknown += hw.nodes
        elif needed and int(hw.driver_branch) < needed:
            verdicts.append(Verdict("fail", driver_too_old(image, why, hw), row=label, nodes=hw.nodes))
        if row is not None and (old := _old_kubelets(row, hw)):
            verdicts.append(Verdict("fail", kubelet_too_old(image, row, hw, old), row=row.name, nodes=hw.nodes))
        runtime = _runtime_name(hw.runtime)
        if row is not None and row.runtimes is not None and runtime is not None and runtime not in row.runtimes:
            verdicts.append(Verdict("warn", runtime_undocumented(image, row, hw), row=row.name, nodes=hw.nodes))
    if unknown and needed:
        verdicts.append(Verdict("warn", stack_unknown(sorted(unknown)), row=label, nodes=sorted(unknown)))
    if not any(v.status == "fail" for v in verdicts) and (row is not None or min_driver is not None):
        verdicts.append(Verdict("pass", compatible(image, row, [c for c in classes if c.driver_branch], False),
                                row=label))
    return verdicts
