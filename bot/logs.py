"""The process's log lines: one line each, at most 2 KB, secrets masked, as text or JSON.

``LOG_LEVEL`` (default ``INFO``) and ``LOG_FORMAT`` (``text``, default, or ``json``)
choose what ``serve`` writes to stderr (:func:`configure_logging`). Every line is one
line: newlines escaped (a traceback included), cut at :data:`MAX_LOG_LINE` bytes of UTF-8,
so nothing a request carries can forge or flood a line; the Slack tokens and signing
secret, passwords in URLs and bearer tokens are masked (:func:`runbooks.errors.scrub`).

:func:`bound` adds context to every line logged inside it (and in the threads that work
for it): the run id, the user, the verb or action. Text lines carry it as
``[run=r-… user=U… verb=approve]``, JSON lines as fields::

    with bound(run="r-3k9x0b2a", user="U0LEAD"):
        log.info("approved")   # {"time": …, "level": "INFO", "logger": …, "message": "approved",
                               #  "run": "r-3k9x0b2a", "user": "U0LEAD"}
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
import json
import logging
import sys
from collections.abc import Iterator, Sequence
from typing import TextIO

from runbooks.errors import scrub

MAX_LOG_LINE = 2048
FIELDS = ("run", "user", "verb", "channel")
"""What :func:`bound` may add to a line, in this order."""
_CONTEXT: contextvars.ContextVar[tuple[tuple[str, str], ...]] = contextvars.ContextVar("upgradebot_log_context",
                                                                                      default=())
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


@contextlib.contextmanager
def bound(**fields: str | None) -> Iterator[None]:
    """Every line logged inside carries ``fields`` (those of :data:`FIELDS` that are set)."""
    unknown = set(fields) - set(FIELDS)
    if unknown:
        raise ValueError(f"cannot bind {', '.join(sorted(unknown))}: use {', '.join(FIELDS)}")
    merged = {**dict(_CONTEXT.get()), **{k: str(v) for k, v in fields.items() if v}}
    token = _CONTEXT.set(tuple(merged.items()))
    try:
        yield
    finally:
        _CONTEXT.reset(token)


def context() -> dict[str, str]:
    """The fields bound here now."""
    return dict(_CONTEXT.get())


def _cut(text: str) -> str:
    """``text`` in at most :data:`MAX_LOG_LINE` bytes of UTF-8 (bytes, not characters)."""
    if len(text.encode("utf-8", errors="replace")) <= MAX_LOG_LINE:
        return text
    return _shorter(text, MAX_LOG_LINE - len("…".encode()))


class SecretFilter(logging.Filter):
    """Last line of defence: the given secrets, URL passwords and bearer tokens never reach a
    line; and the bound context is put on the record (``record.bound``)."""

    def __init__(self, secrets: Sequence[str] = ()) -> None:
        super().__init__()
        self.secrets = tuple(secrets)

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        cleaned = scrub(text, *self.secrets)
        if cleaned != text:
            record.msg, record.args = cleaned, None
        if not hasattr(record, "bound"):
            record.bound = context()
        return True


class OneLineFormatter(logging.Formatter):
    """Text: every log line one line (newlines escaped, a traceback included) of at most
    :data:`MAX_LOG_LINE` bytes, with the bound context in brackets."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        fields = getattr(record, "bound", None) or context()
        if fields:
            text += " [" + " ".join(f"{k}={fields[k]}" for k in FIELDS if k in fields) + "]"
        return _cut(text.replace("\r", "\\r").replace("\n", "\\n"))


class JsonFormatter(logging.Formatter):
    """JSON: one object a line (``time``, ``level``, ``logger``, ``message``, the bound
    fields, ``exception``), at most :data:`MAX_LOG_LINE` bytes: a long message is cut so
    the line stays valid JSON."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, str] = {
            "time": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        line.update(getattr(record, "bound", None) or context())
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        text = json.dumps(line, ensure_ascii=False)
        if len(text.encode()) > MAX_LOG_LINE and len(line["message"].encode()) > MAX_LOG_LINE // 2:
            line["message"] = _shorter(line["message"], MAX_LOG_LINE // 2)  # room for the traceback's end
            text = json.dumps(line, ensure_ascii=False)
        for key in ("exception", "message"):  # cut what is still too long, keeping the line JSON
            excess = len(text.encode()) - MAX_LOG_LINE
            if excess <= 0 or key not in line:
                continue
            keep = len(line[key].encode()) - excess - 16
            if key == "exception":  # a traceback's end says what was raised: keep that
                line[key] = "…" + line[key].encode()[-max(0, keep):].decode(errors="ignore")
            else:
                line[key] = _shorter(line[key], keep)
            text = json.dumps(line, ensure_ascii=False)
        return text if len(text.encode()) <= MAX_LOG_LINE else _cut(text)


def _shorter(value: str, size: int) -> str:
    """``value`` in at most about ``size`` bytes of UTF-8 (JSON escapes aside), ending with "…"."""
    return value.encode("utf-8", errors="replace")[:max(0, size)].decode("utf-8", errors="ignore") + "…"


def configure_logging(*, level: str = "INFO", form: str = "text", secrets: Sequence[str] = (),
                      stream: TextIO | None = None) -> None:
    """The root logger writes one handler's lines to ``stream`` (stderr)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if form == "json" else OneLineFormatter(TEXT_FORMAT))
    handler.addFilter(SecretFilter(secrets))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


class _ShellFormatter(logging.Formatter):
    """The shell's log lines: the message alone, on one line, without a traceback (finding 13
    of the security review: a step's unexpected error printed 21 lines at the terminal)."""

    def format(self, record: logging.LogRecord) -> str:
        return _cut(" ".join(record.getMessage().split()))


def configure_shell_logging(*, level: str, secrets: Sequence[str] = (), stream: TextIO | None = None) -> None:
    """The shell, the console and the demo: WARNING and worse as one line each on ``stream``
    (stderr), secrets masked; ``LOG_LEVEL=DEBUG`` shows everything, tracebacks included.
    Nothing is done when the root logger already has a handler (a test runner, a program
    embedding the CLI): Python's last-resort handler, which prints tracebacks, is never used."""
    root = logging.getLogger()
    if root.handlers:
        return
    handler = logging.StreamHandler(stream or sys.stderr)
    debug = level == "DEBUG"
    handler.setFormatter(logging.Formatter(TEXT_FORMAT) if debug else _ShellFormatter())
    handler.addFilter(SecretFilter(secrets))
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if debug else max(logging.WARNING, logging.getLevelName(level)))
