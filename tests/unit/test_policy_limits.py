"""Finding 8 (and the policy half of finding 7) of the security review: a policy file that
cannot work, or that is not a policy file at all, is refused when it is read, in one line.

Before: duplicate approvers made a quorum nobody could reach; ``expire_after: 999999999d``
loaded and then every canary ended in an OverflowError; a non-UTF-8 file, a complex YAML
key or deep nesting gave "internal error"; ``/dev/zero`` or a FIFO as the policy hung.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from bot.settings import Settings, SettingsError

BASE = "approvers: {users: [U0LEAD1, U0LEAD2]}\n"
UPGRADEBOT = str(Path(sys.executable).parent / "upgradebot")


def load(path: Path | str, monkeypatch: pytest.MonkeyPatch) -> object:
    monkeypatch.setenv("UPGRADEBOT_CONFIG", str(path))
    return Settings().policy()


def refused(path: Path | str, monkeypatch: pytest.MonkeyPatch, why: str) -> None:
    """Reading the policy raises :class:`SettingsError` naming ``why``, in one line, within seconds."""
    result: list[BaseException | object] = []
    reader = threading.Thread(target=lambda: result.append(_catch(path, monkeypatch)), daemon=True)
    reader.start()
    reader.join(timeout=20)
    assert result, f"reading {path} did not return"
    error = result[0]
    assert isinstance(error, SettingsError), error
    assert why in str(error) and "\n" not in str(error), str(error)


def _catch(path: Path | str, monkeypatch: pytest.MonkeyPatch) -> BaseException | object:
    try:
        return load(path, monkeypatch)
    except BaseException as exc:  # the test judges what came out, whatever it is
        return exc


def write(tmp_path: Path, text: str | bytes) -> Path:
    path = tmp_path / "policy.yaml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


@pytest.mark.parametrize(("text", "why"), [
    ("approvers: {users: [U0A1, U0A1], quorum: 2}\n", "U0A1 is listed twice"),
    ("approvers: {users: [U0A1, U0A2], usergroups: [S0G1, S0G1]}\n", "S0G1 is listed twice"),
    ("requesters: {users: [U0R1, U0R1]}\n" + BASE, "U0R1 is listed twice"),
    ("approvers: {users: [U0A1, U0A2], quorum: 3}\n", "quorum 3 is more than the 2 approver"),
    ("approvers: {users: [U0A1, U0A2], expire_after: 999999999d}\n", "at most 365d"),
    ("approvers: {users: [U0A1, U0A2], expire_after: " + "9" * 400 + "d}\n", "at most 365d"),
    ("reports: {after: [24h, 366d]}\n" + BASE, "at most 365d"),
    ("reports: {claims_pending_after: 9999d}\n" + BASE, "at most 365d"),
    ("halt: {rollback_after: 9999d}\n" + BASE, "at most 365d"),
    ("steps: {ready_timeout: 9999d}\n" + BASE, "at most 365d"),
    ("steps: {settle_window: 9999d}\n" + BASE, "at most 365d"),
    ("steps: {smoke_test: {image: 'nvcr.io/x:1', timeout: .inf}}\n" + BASE, "timeout"),
    ("targets: [{namespace: kube-system, name: p, waves: [{nodes: 1, soak: 9999d}, 100%]}]\n" + BASE,
     "at most 365d"),
    ("targets: [{namespace: kube-system, name: p, drain: {timeout: 9999d}}]\n" + BASE, "at most 365d"),
    ("shell: {approvals: true}\n" + BASE, "shell.approvals needs identities"),
])
def test_finding8_an_impossible_policy_is_refused_with_the_key_and_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, why: str,
) -> None:
    """Duplicates, a quorum above the distinct approvers, durations above the 365d ceiling, an
    infinite smoke-test timeout, and (finding 7) shell approvals with no identities."""
    refused(write(tmp_path, text), monkeypatch, why)


def test_finding8_the_ceiling_keeps_what_people_use(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """365d itself, and a usergroup's unknown size (a quorum above the users listed) still load."""
    load(write(tmp_path, "approvers: {users: [U0A1], usergroups: [S0G1], quorum: 3, expire_after: 365d}\n"
                         "reports: {after: [24h, 8760h]}\n"), monkeypatch)


@pytest.mark.parametrize(("text", "why"), [
    (b"approvers: {users: [U0A1]}\n# caf\xe9\n", "not UTF-8"),
    ("? [a, b]\n: 1\n" + BASE, "a key must be a plain value"),
    ("approvers: {users: [U0A1], {x: 1}: 2}\n", "a key must be a plain value"),
    ("x: " + "[" * 5000 + "]" * 5000 + "\n" + BASE, "nested deeper than"),
    ("x:\n" + "".join("  " * i + "- \n" for i in range(1, 400)) + BASE, "nested deeper than"),
    ("a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 10)}]\n" for i in range(8)) + BASE,
     "once its aliases are expanded"),
    ("- just\n- a list\n", "must be a YAML mapping"),
    ("just a string\n", "must be a YAML mapping"),
    ("x: !!python/object:os.system [echo]\n" + BASE, "not valid YAML"),
])
def test_finding8_an_odd_yaml_file_is_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str | bytes, why: str,
) -> None:
    """Non-UTF-8, complex keys, deep nesting (flow and block), an alias bomb, a non-mapping top
    level: each one line naming the file, never "internal error"."""
    refused(write(tmp_path, text), monkeypatch, why)


def test_finding8_a_policy_that_is_not_a_regular_file_is_refused_unread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``/dev/zero``, a FIFO nobody writes to and a directory are refused at once; a file over
    1 MiB is refused without being read whole."""
    fifo = tmp_path / "policy.fifo"
    os.mkfifo(fifo)
    refused("/dev/zero", monkeypatch, "not a regular file")
    refused(fifo, monkeypatch, "not a regular file")
    refused(tmp_path, monkeypatch, "not a regular file")
    big = write(tmp_path, BASE + "#" * (2 << 20) + "\n")
    refused(big, monkeypatch, "larger than 1 MiB")


@pytest.mark.parametrize("verb", [["runs"], ["serve", "--port", "0"]])
def test_finding8_the_shell_and_serve_refuse_a_fifo_policy_with_exit_2(tmp_path: Path, verb: list[str]) -> None:
    """The processes that read the policy say so in one line and exit 2; neither hangs."""
    fifo = tmp_path / "policy.fifo"
    os.mkfifo(fifo)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBE", "UPGRADEBOT", "REDIS", "SLACK"))}
    env |= {"HOME": str(tmp_path), "UPGRADEBOT_CONFIG": str(fifo), "REDIS_URL": "redis://127.0.0.1:1/0",
            "SLACK_BOT_TOKEN": "xoxb-1111-2222-abcdefghijklmnop", "SLACK_SIGNING_SECRET": "0123456789abcdef" * 2}
    proc = subprocess.run([UPGRADEBOT, *verb], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "not a regular file" in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
