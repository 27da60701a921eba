"""What a simulated dcgm-exporter exports: its counters CSV, its release's node label, its options.

dcgm-exporter reads the fields it exports from a counters CSV (``-f`` /
``DCGM_EXPORTER_COLLECTORS``): one ``DCGM field, Prometheus type, help`` per line, ``#`` for
a comment. The two files kubesim serves are NVIDIA's own, as released in dcgm-exporter
``4.5.3-4.8.2`` (``etc/default-counters.csv``, the exporter's default, and
``etc/dcp-metrics-included.csv``, which the GPU operator's DaemonSet names in
``DCGM_EXPORTER_COLLECTORS``), kept unchanged in ``kubesim/dcgm_counters/``:

- profile ``default`` and profile ``dcp`` export exactly the uncommented lines of their file;
- a field that is commented out there (``DCGM_FI_DEV_ECC_DBE_VOL_TOTAL``,
  ``DCGM_EXP_XID_ERRORS_COUNT``, ...) is exported only when the simulation *enables* it, with
  the type and help of its commented line, as a user's own CSV with that line uncommented does;
- ``label`` lines (``DCGM_FI_DRIVER_VERSION``) are labels of every other series, not series.

The node's name is the ``Hostname`` label in every release up to and including ``4.5.3-4.8.2``
(``internal/pkg/rendermetrics/render_metrics.go``); dcgm-exporter's main branch renamed it
``hostname`` (commit ``d5e5f51``, "Rename Hostname label to hostname (#655)"): release
``main-d5e5f51`` here. ``DCGM_EXP_XID_ERRORS_COUNT`` counts a GPU's XIDs over the last
``--xid-count-window-size`` milliseconds (``pkg/cmd/app.go``: 5 minutes by default), one series
per XID code (label ``xid``) with the window in ``window_size_in_ms``, and one series of 0
without ``xid`` on a GPU that raised none in the window (``internal/pkg/collector/expcollector.go``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

PROFILES = {"default": "default-counters.csv", "dcp": "dcp-metrics-included.csv"}
"""Profile -> NVIDIA's counters CSV of dcgm-exporter 4.5.3-4.8.2."""
RELEASES = {"4.5.3-4.8.2": "Hostname", "main-d5e5f51": "hostname"}
"""Release -> the label naming the node."""
DEFAULT_PROFILE, DEFAULT_RELEASE = "default", "4.5.3-4.8.2"
XID_COUNT = "DCGM_EXP_XID_ERRORS_COUNT"
XID_WINDOW_MS = 5 * 60 * 1000
"""``--xid-count-window-size``'s default (``pkg/cmd/app.go``)."""


@dataclass(frozen=True)
class Counter:
    """One line of a counters CSV."""

    name: str
    kind: str
    """``gauge``, ``counter`` or ``label``."""
    help: str


def _parse(text: str) -> tuple[list[Counter], list[Counter]]:
    """(enabled, commented-out) counters of a CSV, in the file's order."""
    enabled: list[Counter] = []
    disabled: list[Counter] = []
    for raw in text.splitlines():
        line = raw.strip()
        target = enabled
        if line.startswith("#"):
            line, target = line.lstrip("#").strip(), disabled
        parts = [p.strip() for p in line.split(",", 2)]
        if len(parts) != 3 or not parts[0].startswith("DCGM_") or parts[1] not in ("gauge", "counter", "label"):
            continue
        target.append(Counter(parts[0], parts[1], parts[2]))
    return enabled, disabled


@cache
def _csv(profile: str) -> tuple[tuple[Counter, ...], tuple[Counter, ...]]:
    text = (resources.files("kubesim") / "dcgm_counters" / PROFILES[profile]).read_text(encoding="utf-8")
    enabled, disabled = _parse(text)
    return tuple(enabled), tuple(disabled)


@dataclass(frozen=True)
class ExporterConfig:
    """How the simulated dcgm-exporters run: profile, extra fields, release, XID window."""

    profile: str = DEFAULT_PROFILE
    enabled: tuple[str, ...] = ()
    """Fields commented out in the profile's CSV that this exporter exports all the same."""
    release: str = DEFAULT_RELEASE
    xid_window_ms: int = XID_WINDOW_MS
    counters: tuple[Counter, ...] = field(init=False, compare=False)

    def __post_init__(self) -> None:
        if self.profile not in PROFILES:
            raise ValueError(f"unknown dcgm-exporter profile {self.profile!r}: one of {', '.join(PROFILES)}")
        if self.release not in RELEASES:
            raise ValueError(f"unknown dcgm-exporter release {self.release!r}: one of {', '.join(RELEASES)}")
        if not 1000 <= self.xid_window_ms <= 24 * 3600 * 1000:
            raise ValueError("xid_window_ms must be from 1000 to 86400000")
        on, off = _csv(self.profile)
        known = {c.name: c for c in (*on, *off)}
        unknown = [name for name in self.enabled if name not in known]
        if unknown:
            raise ValueError(f"{', '.join(unknown)} is not a field of dcgm-exporter's {PROFILES[self.profile]}")
        extra = [known[name] for name in self.enabled if known[name] not in on]
        object.__setattr__(self, "counters", (*on, *extra))

    @property
    def node_label(self) -> str:
        return RELEASES[self.release]

    def series(self) -> list[Counter]:
        """The counters exported as series (``label`` lines are labels of the others)."""
        return [c for c in self.counters if c.kind != "label"]

    def labels(self) -> list[Counter]:
        return [c for c in self.counters if c.kind == "label"]

    def exports(self, name: str) -> bool:
        return any(c.name == name for c in self.counters)

    @classmethod
    def of(cls, data: dict[str, Any], *, base: ExporterConfig | None = None) -> ExporterConfig:
        """From the control API's JSON (``profile``, ``enable``, ``release``, ``xid_window_ms``);
        keys left out keep ``base``'s. ValueError with the reason when a value is bad."""
        base = base or cls()
        extra = set(data) - {"profile", "enable", "release", "xid_window_ms"}
        if extra:
            raise ValueError(f"unknown key(s) {', '.join(sorted(extra))}: profile, enable, release, xid_window_ms")
        enable = data.get("enable", list(base.enabled))
        if not isinstance(enable, list) or not all(isinstance(n, str) for n in enable):
            raise ValueError("enable must be a list of DCGM field names")
        window = data.get("xid_window_ms", base.xid_window_ms)
        if not isinstance(window, int) or isinstance(window, bool):
            raise ValueError("xid_window_ms must be a whole number of milliseconds")
        profile, release = data.get("profile", base.profile), data.get("release", base.release)
        if not isinstance(profile, str) or not isinstance(release, str):
            raise ValueError("profile and release must be strings")
        return cls(profile=profile, enabled=tuple(enable), release=release, xid_window_ms=window)

    def as_json(self) -> dict[str, Any]:
        return {"profile": self.profile, "enable": list(self.enabled), "release": self.release,
                "xid_window_ms": self.xid_window_ms, "node_label": self.node_label,
                "fields": [c.name for c in self.series()]}
