"""Leaving a process at once when its work is done.

The output and the log are flushed and the exit handlers run (the kubernetes client deletes
the certificate files it wrote for a kubeconfig's ``certificate-authority-data``), then the
process ends without the interpreter's teardown: freeing the objects of the thousand-odd
modules a verb loads costs 0.1-0.3 s of CPU per process (more on a loaded node) for memory
the OS takes back anyway, and every CLI command, CI step and pod stop paid it (issues 35, 39).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import sys
from typing import NoReturn, TextIO


def flush(*streams: TextIO) -> None:
    for stream in (*streams, sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed pipe: nothing more can be said
            stream.flush()


def exit_now(code: int, *streams: TextIO) -> NoReturn:
    """Exit with ``code``: ``streams``, stdout, stderr and the log flushed, the exit handlers run, no teardown."""
    flush(*streams)
    with contextlib.suppress(Exception):
        atexit._run_exitfuncs()  # what the interpreter runs at exit; logging.shutdown is one of them
    logging.shutdown()
    flush(*streams)
    os._exit(code)
