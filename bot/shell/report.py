"""The ``report`` verb of the shell: a run's stability report now, for people and CI.

``upgradebot report <run> [--json]`` reads the run and what the bot collected of its
events from Redis (``REDIS_URL``, else this user's local server) and the run's cluster,
and prints the report (``--json``: the model). Exit codes: 0 stable; 1 degraded or
failing; 2 bad usage, a run not yet promoted, or an unreachable dependency (one line on
stderr, from :func:`bot.shell.cli.main`).
"""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from bot.settings import Settings
from bot.shell.output import render_reply
from bot.shell.runs import Shell
from bot.storage.redis_store import RedisRunStore
from handlers import report as report_handler

PROG = "upgradebot"
EXIT_OK, EXIT_FAILED = 0, 1


def add_report_verb(verbs: Any) -> None:
    """Add ``report`` to the CLI's subparsers."""
    parser = verbs.add_parser("report", help="a run's stability report now (as the scheduled 24 h / 48 h ones)",
                              usage=f"{PROG} {report_handler.USAGE} [--json] [--kubeconfig PATH]")
    parser.add_argument("words", nargs="*", metavar="<run>", help="the run's id")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--kubeconfig", metavar="PATH", help="kubeconfig file (default: $KUBECONFIG)")


def run_report(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    from bot.shell.cli import connector  # the CLI's cluster factory (kubeconfig, context)

    shell = Shell(args, settings, out)
    run = report_handler.parse(args.words)
    store = shell.engine.store
    assert isinstance(store, RedisRunStore)
    report = report_handler.handle(run, engine=shell.engine, connect=connector(settings, args.kubeconfig),
                                   policy=shell.policy, read_tally=store.read_tally)
    if args.json:
        out.write(report.model_dump_json(indent=2) + "\n")
    else:
        out.write(render_reply(report_handler.present(report), prefix=PROG))
    return EXIT_OK if report.stable else EXIT_FAILED


REPORT_VERBS = {"report": run_report}
