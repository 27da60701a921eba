"""`make demo` installs nothing outside `.venv/` (issue 64 item 7): the demo reads no metrics, so
Debian's prometheus package (installed with apt-get for `make test`'s metric tests) is not
one of its prerequisites. Read with `make -n` (nothing is run) and from the demo's sources."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def planned(target: str, makefile: Path = ROOT / "Makefile") -> str:
    """What ``make <target>`` would run, printed by ``make -n`` (run for nothing)."""
    proc = subprocess.run(["make", "-n", "-f", str(makefile), target, "VENV=/nonexistent/venv"], cwd=ROOT,
                          capture_output=True, text=True, timeout=30, check=True)
    return proc.stdout


def test_make_demo_installs_no_prometheus_and_make_test_still_does() -> None:
    assert "apt-get" not in planned("demo") and "prometheus" not in planned("demo")
    assert "apt-get install" in planned("test")


def test_the_demo_uses_no_prometheus() -> None:
    sources = sorted((ROOT / "bot" / "demo").glob("*.py"))
    assert sources and not [p.name for p in sources if "prometheus" in p.read_text().lower()]
