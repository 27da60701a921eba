"""What a container's log says, kept as evidence (issue 36 item 4, issue 61 item 3): the bounded
tail of a log and its error and warning lines, each scrubbed of secrets
(:func:`runbooks.errors.scrub`) and made :func:`~runbooks.characters.shown`. Pure.

The GPU plugins log through klog (NVIDIA's device plugin, the DRA kubelet plugins, Kubernetes'
example plugins), whose header is ``Lmmdd hh:mm:ss.uuuuuu threadid file:line] msg`` with ``L``
the severity: ``I``, ``W``, ``E`` or ``F`` (k8s.io/klog/v2 ``klog.go``, "LOG LINE PREFIX
FORMAT"; :func:`kubesim.pluginlogs.klog` writes it so). A message of several lines (the device
plugin's ``Running with config:`` JSON) continues on lines without a header: they belong to the
record above them. Lines with logrus's ``level=error`` / ``level=warning`` (another vendor's
plugin) are errors and warnings too.
"""

from __future__ import annotations

import re

from runbooks.characters import shown
from runbooks.errors import scrub

TAIL_LINES = 40
TAIL_BYTES = 4096
ERROR_LINES = 20
"""Error and warning lines kept of one log, the newest (at most :data:`TAIL_BYTES` of them)."""

KLOG_HEADER = re.compile(r"^(?P<level>[IWEF])\d{4} \d{2}:\d{2}:\d{2}\.\d{6} +\d+ [^\s\]]+:\d+\] ")
LOGFMT_LEVEL = re.compile(r"(?:^|\s)level=\"?(?P<level>error|warning|warn|fatal|panic|info|debug|trace)\b", re.I)
_LOGFMT = {"error": "E", "fatal": "F", "panic": "F", "warning": "W", "warn": "W"}
PROBLEMS = frozenset({"W", "E", "F"})
_PEM_BEGIN, _PEM_END = re.compile(r"-----BEGIN [A-Z ]+-----"), re.compile(r"-----END [A-Z ]+-----")


def severity(line: str) -> str | None:
    """``I``, ``W``, ``E`` or ``F`` for a line that starts a log record (klog's header, logrus's
    ``level=``), else None (a continuation line, or a format this does not know)."""
    head = KLOG_HEADER.match(line)
    if head:
        return head.group("level")
    level = LOGFMT_LEVEL.search(line)
    if level:
        return _LOGFMT.get(level.group("level").lower(), "I")
    return None


def _bounded(kept: list[str], limit: int) -> list[str]:
    while kept and len("\n".join(kept).encode()) > limit:
        kept = kept[1:] if len(kept) > 1 else [kept[0].encode()[-limit:].decode("utf-8", "ignore")]
    return kept


def tail(text: str, *, lines: int = TAIL_LINES, limit: int = TAIL_BYTES) -> list[str]:
    """The last ``lines`` lines of ``text``, at most ``limit`` bytes of them, secrets scrubbed,
    each :func:`~runbooks.characters.shown`."""
    kept = [shown(line) for line in scrub(text).splitlines()[-lines:]]
    end = next((i for i, ln in enumerate(kept) if _PEM_END.search(ln)), None)
    if end is not None and not any(_PEM_BEGIN.search(ln) for ln in kept[:end]):
        kept = ["<redacted>", *kept[end + 1:]]  # the tail began inside a PEM block: its start was cut off
    return _bounded(kept, limit)


def errors(text: str, *, lines: int = ERROR_LINES, limit: int = TAIL_BYTES) -> list[str]:
    """The lines of ``text``'s error and warning records (``W``, ``E``, ``F``: their header line
    and the lines continuing it), the newest ``lines`` of them in at most ``limit`` bytes,
    secrets scrubbed, each :func:`~runbooks.characters.shown`, as in a :func:`tail`."""
    kept: list[str] = []
    inside = False
    for line in scrub(text).splitlines():
        level = severity(line)
        if level is not None:
            inside = level in PROBLEMS
        if inside and line.strip():
            kept.append(line)
    return _bounded([shown(line) for line in kept[-lines:]], limit)
