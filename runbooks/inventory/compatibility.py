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

_DRIVER_SUFFIX = re.compile(r"driver(\d+)")
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
    variants: list[str] = []
    """The distribution suffixes the line's tags carry (``ubi9``: ``v0.17.0-ubi9``)."""
    variants_source: str = ""
    kubernetes_min: str | None = None
    kubernetes_max: str | None = None
    min_driver: str | None = None
    container_toolkit: str | None = None
    runtimes: list[str] | None = None
    source: Source
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

    def matches(self, image: ImageName) -> bool:
        """The image's repository is the row's and its tag a release of the row's line: its
        version matches ``tags`` and each suffix is a published variant or ``driver<branch>``."""
        parts = release(image.tag)
        if image.repository not in self.repositories or parts is None:
            return False
        version, suffixes = parts
        return re.fullmatch(self.tags, version) is not None and all(
            s in self.variants or _DRIVER_SUFFIX.fullmatch(s) for s in suffixes)


MATRIX: list[Row] = [Row.model_validate(row) for row in ROWS]


@dataclass(frozen=True)
class Verdict:
    status: Literal["pass", "fail", "warn"]
    detail: str
    row: str = ""
    nodes: list[str] = field(default_factory=list)


def driver_branch(tag: str) -> int | None:
    """550 of ``v0.17.0-driver550`` (or ``v0.17.0-driver550-ubi9``): the NVIDIA driver branch a
    ``-driver<branch>`` build needs, in whichever ``-``-separated part after the version; None without one."""
    for suffix in tag.split("-")[1:]:
        if found := _DRIVER_SUFFIX.fullmatch(suffix):
            return int(found.group(1))
    return None


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
            f"{', '.join(hw.drivers) or hw.driver_branch}: upgrade their driver first, or pin another image")


def kubernetes_outside(image: str, row: Row, version: str) -> str:
    wanted = (f"Kubernetes {row.kubernetes_min or '?'} to {row.kubernetes_max}" if row.kubernetes_max
              else f"Kubernetes {row.kubernetes_min} or newer")
    return f"{image} needs {wanted} ({row_text(row)}); this cluster runs {version}"


def not_in_matrix(image: str) -> str:
    return (f"{image} is in no row of the compatibility matrix: its Kubernetes range, driver and runtimes are "
            "unknown, so they were not checked (compatibility.min_driver in the policy checks a driver)")


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
    rows = list(rows)
    try:
        name: ImageName | None = parse(image)
    except ValueError:
        name = None
    row = row_for(name, rows) if name is not None else None
    tag_branch = driver_branch(name.tag) if name is not None else None
    verdicts: list[Verdict] = []
    if row is None and min_driver is None:
        by_digest = name is not None and not name.tag and any(name.repository in r.repositories for r in rows)
        verdicts.append(Verdict("warn", digest_only(image) if by_digest else not_in_matrix(image)))
    if min_driver is not None:
        needed, why = int(min_driver), f"{min_driver} or newer (compatibility.min_driver of this target in the policy)"
    elif row is not None and (row.min_driver is not None or tag_branch is not None):
        needed = max(int(row.min_driver or 0), tag_branch or 0)
        why = f"{needed} or newer ({row_text(row)}" + (f"; the tag's -driver{tag_branch} build" if tag_branch else "") + ")"
    elif tag_branch is not None:  # in no row, the tag still says what its build needs
        needed, why = tag_branch, f"{tag_branch} or newer (the tag's -driver{tag_branch} build)"
    else:
        needed, why = 0, ""
    label = row.name if row is not None else "policy" if min_driver is not None or tag_branch is None else "tag"
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
