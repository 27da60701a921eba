"""Which process holds a claim, and whether that process is provably dead.

A claim in Redis (:mod:`bot.slack.claims`) records its holder as ``<owner id> <mark>``; the
mark names the process exactly: ``<space>.<pid>.<start>``, where ``space`` is a digest of
the kernel's boot id and the process's pid namespace (the space its pid means something
in), and ``start`` the process's start time in clock ticks since boot (``/proc/<pid>/stat``),
which tells a pid given again to another process from the one that held it.

:func:`holder_dead` is true only when it can be proved: the holder's pid lives in this
process's space (same boot, same pid namespace) and that pid is gone, a zombie, or now
another process (another start time). A holder elsewhere (another host or container,
another boot), a mark this process cannot read, or a holder that runs, even stopped
(SIGSTOP, a starved node), is never called dead: its claim is kept until its time to live
ends, as before. Without ``/proc`` (not Linux) nothing is ever dead.
"""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path


def _stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after ``pid (comm)`` (state first), or None when
    there is no such process."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return text.rsplit(")", 1)[1].split()


@functools.cache
def _space() -> str:
    """This process's pid space (boot id and pid namespace), digested; empty when unknown."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""
    return hashlib.sha256(f"{boot} {namespace}".encode()).hexdigest()[:16]


def mark(pid: int | None = None) -> str:
    """The mark of process ``pid`` (this one by default): ``<space>.<pid>.<start>``, or empty
    when this process cannot tell (no ``/proc``, the process is gone)."""
    pid = os.getpid() if pid is None else pid
    try:
        fields = _stat(pid)
    except OSError:
        return ""
    if not _space() or fields is None or len(fields) < 20:
        return ""
    return f"{_space()}.{pid}.{fields[19]}"


def holder(owner: str) -> str:
    """What a claim of this process records: its ``owner`` id and its mark."""
    return f"{owner} {mark()}".rstrip()


def holder_dead(value: str) -> bool:
    """Whether the process that recorded ``value`` (:func:`holder`) is provably dead."""
    _, _, found = value.rpartition(" ")
    space, _, rest = found.partition(".")
    pid, _, start = rest.partition(".")
    if not (space and space == _space() and pid.isdigit() and start.isdigit()):
        return False  # not ours to judge: another host, container or boot, or no mark at all
    try:
        fields = _stat(int(pid))
    except OSError:  # unreadable: it exists; nothing proved
        return False
    if fields is None:  # no such entry: gone, unless /proc hides it (hidepid) and a signal still reaches it
        return _gone(int(pid))
    if len(fields) < 20:
        return False
    return fields[0] in ("Z", "X") or fields[19] != start  # a zombie holds nothing; another start: pid reused


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # another user's process
        return False
    return False
