"""The CPU seconds each process of a bench used, from ``/proc`` (:mod:`bench.bench_ack`'s CPU lines)."""

from __future__ import annotations

import os
from pathlib import Path


def processes() -> dict[int, tuple[int, float]]:
    """Every process of the machine: its parent's pid and the CPU seconds (user and system) it
    used, from ``/proc`` (empty without it: not Linux). One that ends meanwhile is left out."""
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    try:
        entries = os.listdir("/proc")
    except OSError:
        return {}
    found: dict[int, tuple[int, float]] = {}
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            text = Path(f"/proc/{entry}/stat").read_text()
        except OSError:  # gone meanwhile
            continue
        fields = text[text.rindex(")") + 2:].split()  # after "pid (comm) ": state, ppid, … utime, stime
        found[int(entry)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / ticks)
    return found


class CpuTally:
    """CPU seconds of the bench's processes by role (:func:`processes`): each process under the
    nearest of ``roles`` (pid: name) it is or descends from, a descendant named by ``children``
    where its ancestor has a name there (``serve``'s worker processes). A process that exited
    in between is not counted; without ``/proc`` (not Linux) nothing is."""

    def __init__(self, roles: dict[int, str], *, children: dict[int, str] | None = None) -> None:
        self.roles, self.children = roles, children or {}

    def sample(self) -> dict[str, float]:
        found = processes()
        parents = {pid: parent for pid, (parent, _) in found.items()}
        tally: dict[str, float] = {}
        for pid, (_, used) in found.items():
            role = self._role(pid, parents)
            if role is not None:
                tally[role] = tally.get(role, 0.0) + used
        return tally

    def since(self, before: dict[str, float]) -> dict[str, float]:
        return {role: used - before.get(role, 0.0) for role, used in self.sample().items()}

    def _role(self, pid: int, parents: dict[int, int]) -> str | None:
        if pid in self.roles:
            return self.roles[pid]
        ancestor, hops = parents.get(pid), 0
        while ancestor and hops < 16:
            if ancestor in self.roles:
                return self.children.get(ancestor, f"{self.roles[ancestor]} (children)")
            ancestor, hops = parents.get(ancestor), hops + 1
        return None
