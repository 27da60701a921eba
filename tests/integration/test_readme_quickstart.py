"""README's Quickstart, walked as a newcomer walks it (issue 41): its shell blocks, taken from
README.md verbatim, run one after the other by bash in a fresh ``git clone`` of the repository.

What is not the newcomer's: the home directory (the test's own, so what ``make try`` leaves
running is the test's) and the virtualenv. ``make try`` would build ``.venv`` in the clone (a
minute or more); the clone's ``.venv`` is instead a link to the venv running this test, its
install stamp newer than the clone's ``pyproject.toml`` so make builds nothing. So the
README, the Makefile and the paths are the clone's, and the Python code run is the one
installed in that venv (this checkout's, installed editable).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bot.shell.identity import os_account
from bot.shell.local import policy_text
from tests.shell_support import in_process

ROOT = Path(__file__).resolve().parents[2]
VENV = Path(sys.executable).parent.parent


def quickstart() -> tuple[list[str], str]:
    """The Quickstart's shell blocks, in order, and the policy it shows."""
    readme = (ROOT / "README.md").read_text()
    section = re.search(r"\n## Quickstart[^\n]*\n(.*?)\n## ", readme, re.S)
    assert section, "README.md has no '## Quickstart' section"
    shell = re.findall(r"```sh\n(.*?)```", section.group(1), re.S)
    policy = re.findall(r"```yaml\n(.*?)```", section.group(1), re.S)
    assert len(policy) == 1, "the Quickstart shows one policy"
    return shell, policy[0]


@pytest.fixture
def clone(tmp_path: Path) -> Iterator[tuple[Path, dict[str, str]]]:
    """A fresh clone with the test's venv linked in, and a newcomer's environment (a home of
    its own, no KUBECONFIG, REDIS_URL or UPGRADEBOT_*); whatever it left running is stopped."""
    stamp = VENV / ".installed"
    assert stamp.exists(), f"{VENV} was not built by `make install` (no {stamp})"
    repo = tmp_path / "upgradebot"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(repo)], check=True, timeout=120)
    (repo / ".venv").symlink_to(VENV)
    older = stamp.stat().st_mtime - 60
    os.utime(repo / "pyproject.toml", (older, older))
    home = Path(tempfile.mkdtemp(prefix="qs-"))  # short: the local Redis's unix socket path is under it
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBE", "UPGRADEBOT", "REDIS", "XDG_STATE"))}
    env["HOME"] = str(home)
    yield repo, env
    in_process(env, "local", "stop")  # a clean-up, in this process: the README's own stop is the clone's
    state = home / ".local" / "state" / "upgradebot"
    for pid_file in (state / "redis.pid", state / "try" / "kubesim.pid"):
        with contextlib.suppress(OSError, ValueError):  # stop failed: leave nothing running
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
    shutil.rmtree(home, ignore_errors=True)


def bash(script: str, *, repo: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-e", "-c", script], cwd=repo, env=env, capture_output=True, text=True,
                          timeout=240)


def printed_json(out: str) -> list[dict[str, Any]]:
    """The JSON documents printed in ``out`` (``--json``: each an object from a line's start)."""
    decoder = json.JSONDecoder()
    return [decoder.raw_decode(out, found.start() + 1)[0] for found in re.finditer(r"\n\{\n", out)]


def test_the_quickstart_runs_to_its_end_the_rollback_approved_included(
        clone: tuple[Path, dict[str, str]]) -> None:
    """issue 41: README's Quickstart, verbatim, in a fresh clone: `make try` prints the very lines
    the README says to paste and writes the policy it shows; Alice requests a canary and her own
    approval is refused; Bob (his CI token) approves the canary, which is verified on gpu-node1,
    then the promotion, verified on every node; issue 64: Alice's `rollback` opens a request and
    Bob's approval of it rolls the run back, every command exiting 0 under `bash -e` but the one
    the README says is refused; `local stop` leaves nothing running."""
    repo, env = clone
    blocks, shown_policy = quickstart()
    assert len(blocks) == 6, blocks
    make_try, paste, alice, bob, rollback, stop = blocks

    tried = bash(make_try, repo=repo, env=env)
    assert tried.returncode == 0, tried.stdout + tried.stderr
    for line in paste.strip().splitlines():  # what README says to paste is what make try printed
        assert line in tried.stdout.splitlines(), (line, tried.stdout)
    state = Path(env["HOME"]) / ".local" / "state" / "upgradebot"
    written = (state / "try" / "policy.yaml").read_text()
    digest = re.search(r"sha256: ([0-9a-f]{64})", written)
    assert digest and written == policy_text(account=os_account(), token_sha256=digest.group(1))
    assert shown_policy == policy_text(account="alice", token_sha256="5c0f…")

    walked = bash("\n".join([paste, alice, bob, 'upgradebot status "$run" --json', rollback,
                              'upgradebot status "$run" --json || true']), repo=repo, env=env)
    out = walked.stdout
    assert walked.returncode == 0, out[-3000:] + walked.stderr  # bash -e: each command exited 0
    assert "refused, as it should be" in out  # README's echo: Alice's own approve exited non-zero
    assert "canary approved (U0BOB)" in out
    assert re.search(r"ok +step +verify_canary\n", out), out[-3000:]
    assert "promotion approved (U0BOB)" in out
    assert re.search(r"ok +step +verify_all\n", out), out[-3000:]
    promoted, rolled_back = printed_json(out)
    assert promoted["state"] == "monitoring" and promoted["requester"] == "U0ALICE", promoted["state"]
    assert "rollback approved (U0BOB)" in out
    assert rolled_back["state"] == "rolled_back" and rolled_back["gate"]["kind"] == "rollback", rolled_back["state"]

    stopped = bash(stop, repo=repo, env={**env, "PATH": f"{repo / '.venv' / 'bin'}:{env['PATH']}"})
    assert stopped.returncode == 0 and "Stopped kubesim" in stopped.stdout, stopped.stdout + stopped.stderr
    assert "Stopped the local Redis" in stopped.stdout
