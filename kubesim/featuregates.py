"""The feature gates each simulated release registers, from the data file ``feature_gates.json``.

Each gate has the specs it went through (first release of the spec, stage, default), from 1.27 on
as each release's Go sources register it (the data file's "about" names them); a release has the
gates whose first spec is at or before it and, for a removed gate, not after its last release.
What ``/metrics`` reports as ``kubernetes_feature_enabled{name, stage}`` (stage ``""`` for GA)
comes from here; the simulation's own settings (``Simulation.feature_gates``, e.g. the
scenarios turning DynamicResourceAllocation on) override the defaults.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

Spec = tuple[int, str, bool]


def _minor(version: str) -> int:
    major, minor = version.split(".")
    return int(minor) if major == "1" else 0


@functools.cache
def _data() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((resources.files("kubesim") / "feature_gates.json").read_text())
    return loaded


@functools.cache
def gates(minor: int) -> dict[str, tuple[str, bool]]:
    """``{gate: (stage, default)}`` of the release ``1.<minor>``, sorted by name."""
    data = _data()
    last: dict[str, str] = data["last"]
    out: dict[str, tuple[str, bool]] = {}
    for name, raw in data["gates"].items():
        specs: list[Spec] = [(_minor(v), stage, bool(default)) for v, stage, default in raw]
        if name in last and minor > _minor(last[name]):
            continue
        current = [s for s in specs if s[0] <= minor]
        if current:
            out[name] = (current[-1][1], current[-1][2])
    return dict(sorted(out.items()))
