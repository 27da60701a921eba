"""``upgradebot <verb> …`` run by the CLI's ``main(argv)`` in the test process (issue 35).

A test that checks what a verb says, prints and stores pays about half a second of imports
for each process it starts, and more under load; :func:`in_process` runs the same ``main``
the console script calls, with what a process would have: ``env`` as the whole environment
(the settings, the identity token and the policy are read from it), stdin, stdout and stderr
of its own, and the shell's log handler on that stderr (the test runner's handlers are set
aside meanwhile, so a warning the verb logs shows in ``stderr`` as it would in a terminal).
What the process would leave behind when it exits is stopped when ``main`` returns: the
engine's shared watches (their informers would otherwise linger for two minutes).

It answers a :class:`subprocess.CompletedProcess`, so a test may mix both. What is about the
process itself (exit codes through ``sys.exit``, signals, a crash, the environment of a child,
a traceback never printed) keeps real processes: each module that uses this says which.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

UPGRADEBOT = str(Path(sys.executable).parent / "upgradebot")
OTHER_PROCESSES = ("aiohttp", "asyncio")
"""Loggers of the servers a test runs in this process (kubesim): not the command's output."""


def in_process(env: Mapping[str, str], *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
    """``upgradebot <args>`` as :func:`subprocess.run` would answer it, run by ``main`` here."""
    from bot.shell.cli import main

    assert "UPGRADEBOT_TEST_KILL_AT" not in env, "a command that must die runs in a process of its own"
    out, err = io.StringIO(), io.StringIO()
    with (_environment(env), _shell_logging(), _engines_stopped(), contextlib.redirect_stdout(out),
          contextlib.redirect_stderr(err), _stdin(input or "")):
        try:
            code = main(list(args), out=out, err=err)
        except SystemExit as exc:  # argparse's --help, as the console script's sys.exit would end
            code = exit_code(exc, err)
    return subprocess.CompletedProcess([UPGRADEBOT, *args], code, out.getvalue(), err.getvalue())


def exit_code(exc: SystemExit, err: io.StringIO) -> int:
    """The status an interpreter exits with on ``exc``: its code, 0 for None, else 1 with the text on stderr."""
    if exc.code is None or isinstance(exc.code, int):
        return exc.code or 0
    err.write(f"{exc.code}\n")
    return 1


@contextlib.contextmanager
def _environment(env: Mapping[str, str]) -> Iterator[None]:
    """``os.environ`` is ``env`` meanwhile (changed key by key: never empty for other threads)."""
    saved = dict(os.environ)
    for key in [k for k in os.environ if k not in env]:
        del os.environ[key]
    os.environ.update(env)
    try:
        yield
    finally:
        for key in [k for k in os.environ if k not in saved]:
            del os.environ[key]
        os.environ.update(saved)


@contextlib.contextmanager
def _shell_logging() -> Iterator[None]:
    """The root logger without handlers, as in a fresh process, so that ``main`` adds the shell's
    own (on its stderr); the runner's handlers and level are put back after."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    others = [logging.getLogger(name) for name in OTHER_PROCESSES]
    propagated = [logger.propagate for logger in others]
    root.handlers = []
    for logger in others:
        logger.propagate = False
    try:
        yield
    finally:
        for handler in root.handlers:
            handler.close()
        root.handlers = handlers
        root.setLevel(level)
        for logger, propagate in zip(others, propagated, strict=True):
            logger.propagate = propagate


@contextlib.contextmanager
def _engines_stopped() -> Iterator[None]:
    """Every engine the command builds has its watches closed when it returns, as its exit would."""
    from bot import runtime

    built: list[Any] = []
    build = runtime.build_engine

    def recording(*args: Any, **kwargs: Any) -> Any:
        engine = build(*args, **kwargs)
        built.append(engine)
        return engine

    runtime.build_engine = recording
    try:
        yield
    finally:
        runtime.build_engine = build
        for engine in built:
            if engine.watches is not None:
                engine.watches.close()


@contextlib.contextmanager
def _stdin(text: str) -> Iterator[None]:
    saved = sys.stdin
    sys.stdin = io.StringIO(text)
    try:
        yield
    finally:
        sys.stdin = saved
