"""Every sentence the shell front end (``upgradebot …``) prints of its own.

Runbook results carry their own sentences (findings, errors); these are the shell's
framing around them. Each is one line: stderr of a failed command is read by pipelines.
"""

from __future__ import annotations

PROG = "upgradebot"


def bad_usage(reason: str) -> str:
    return f"{PROG}: {reason}"


def usage_line(usage: str) -> str:
    return usage if usage.startswith("usage:") else f"usage: {PROG} {usage}"


def cluster_failed(reason: str) -> str:
    return f"{PROG}: {reason}"


def settings_failed(reason: str) -> str:
    return f"{PROG}: {reason}"


def no_kubeconfig() -> str:
    return "no kubeconfig: set KUBECONFIG or pass --kubeconfig (or run in a pod with a ServiceAccount)"


def interrupted() -> str:
    return f"{PROG}: interrupted"
