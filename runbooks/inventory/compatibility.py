"""The compatibility matrix, loaded and validated, and a plugin image checked against the nodes.

:data:`MATRIX` holds the rows of :mod:`.compatibility_matrix` as :class:`Row` models (a bad
row fails at import, not at a request). :func:`judge` answers, for the image a request
wants and the hardware classes of the nodes the plugin runs on, one :class:`Verdict` each:

- ``fail``: a class whose driver branch is older than the row's minimum (or the tag's
  ``-driver<branch>``, or the policy's ``compatibility.min_driver``), or a cluster whose
  Kubernetes is outside the row's range: the row and the nodes are named;
- ``warn``: an unknown combination: an image the matrix has no row for, GPU nodes whose
  driver or runtime is unknown (no GPU Feature Discovery labels), a runtime the row's
  source does not document;
- ``pass``: the classes the row's stated needs were checked against.

The policy's override per target (``compatibility: {min_driver: "550"}`` or ``{ignore:
true}``) is passed in as ``min_driver``/``ignore``. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, field_validator

from runbooks.inventory.compatibility_matrix import ROWS
from runbooks.inventory.models import HardwareClass
from runbooks.inventory.stacks import UNKNOWN

_DRIVER_TAG = re.compile(r"-driver(\d+)$")
_K8S = re.compile(r"^1\.\d+$")


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
    kubernetes_min: str | None = None
    kubernetes_max: str | None = None
    min_driver: str | None = None
    container_toolkit: str | None = None
    runtimes: list[str] | None = None
    source: Source
    note: str = ""

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

    def matches(self, repository: str, tag: str) -> bool:
        return repository in self.repositories and re.fullmatch(self.tags, tag) is not None


MATRIX: list[Row] = [Row.model_validate(row) for row in ROWS]


@dataclass(frozen=True)
class Verdict:
    status: Literal["pass", "fail", "warn"]
    detail: str
    row: str = ""
    nodes: list[str] = field(default_factory=list)


def split_image(image: str) -> tuple[str, str]:
    """``(repository, tag)`` of an image reference; the digest dropped, ``latest`` when untagged."""
    name = image.split("@", 1)[0]
    head, _, last = name.rpartition("/")
    if ":" in last:
        last, tag = last.split(":", 1)
    else:
        tag = "latest"
    return (f"{head}/{last}" if head else last), tag


def base_tag(tag: str) -> tuple[str, int | None]:
    """``("v0.17.0", 550)`` of ``v0.17.0-driver550``: the release tag and the driver branch the build needs."""
    found = _DRIVER_TAG.search(tag)
    return (tag[: found.start()], int(found.group(1))) if found else (tag, None)


def row_for(image: str, rows: Iterable[Row] = MATRIX) -> Row | None:
    repository, tag = split_image(image)
    release, _ = base_tag(tag)
    return next((r for r in rows if r.matches(repository, release)), None)


def _minor(version: str) -> int:
    return int(version.split(".")[1])


def _runtime_name(runtime: str | None) -> str | None:
    return runtime.split(" ", 1)[0].lower() if runtime else None


# ------------------------------------------------------------------ sentences
def row_text(row: Row) -> str:
    return f"matrix row {row.name} ({row.source.title}; {row.source.url})"


def driver_too_old(image: str, why: str, hw: HardwareClass) -> str:
    return (f"{image} needs NVIDIA driver branch {why}; class {hw.name} has {', '.join(hw.nodes)} on driver "
            f"{', '.join(hw.drivers) or hw.driver_branch}: upgrade their driver first, or pin another image")


def kubernetes_outside(image: str, row: Row, version: str) -> str:
    wanted = (f"Kubernetes {row.kubernetes_min or '?'} to {row.kubernetes_max}" if row.kubernetes_max
              else f"Kubernetes {row.kubernetes_min} or newer")
    return f"{image} needs {wanted} ({row_text(row)}); this cluster runs {version}"


def not_in_matrix(image: str) -> str:
    return (f"{image} is in no row of the compatibility matrix: its Kubernetes range, driver and runtimes are "
            "unknown, so they were not checked (compatibility.min_driver in the policy checks a driver)")


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
    return f"{image} fits every hardware class it will run on ({where}) per {row_text(row) if row else 'the policy'}"


# ------------------------------------------------------------------ the check
def judge(
    image: str, classes: list[HardwareClass], *, kubernetes: str, min_driver: str | None = None,
    ignore: bool = False, rows: Iterable[Row] = MATRIX,
) -> list[Verdict]:
    """The verdicts for ``image`` on the nodes of ``classes`` in a cluster running ``kubernetes``
    (``v1.32.1``); ``min_driver`` and ``ignore`` are the policy's override for the target."""
    if ignore:
        return [Verdict("pass", compatible(image, None, classes, True))]
    row = row_for(image, rows)
    _, tag_branch = base_tag(split_image(image)[1])
    verdicts: list[Verdict] = []
    if row is None and min_driver is None:
        verdicts.append(Verdict("warn", not_in_matrix(image)))
    if min_driver is not None:
        needed, why = int(min_driver), f"{min_driver} or newer (compatibility.min_driver of this target in the policy)"
    elif row is not None and (row.min_driver is not None or tag_branch is not None):
        needed = max(int(row.min_driver or 0), tag_branch or 0)
        why = f"{needed} or newer ({row_text(row)}" + (f"; the tag's -driver{tag_branch} build" if tag_branch else "") + ")"
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
        runtime = _runtime_name(hw.runtime)
        if row is not None and row.runtimes is not None and runtime is not None and runtime not in row.runtimes:
            verdicts.append(Verdict("warn", runtime_undocumented(image, row, hw), row=row.name, nodes=hw.nodes))
    if unknown and needed:
        verdicts.append(Verdict("warn", stack_unknown(sorted(unknown)), row=label, nodes=sorted(unknown)))
    if not any(v.status == "fail" for v in verdicts) and (row is not None or min_driver is not None):
        verdicts.append(Verdict("pass", compatible(image, row, [c for c in classes if c.driver_branch], False),
                                row=label))
    return verdicts
