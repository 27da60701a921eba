"""The ``verify`` verb of the shell: the verify checks outside a run, for people and CI.

Exit codes: 0 every check passed (warnings and skips included); 1 a check failed; 2 bad
usage or an unreachable cluster (one line on stderr, from :func:`bot.shell.cli.main`).
"""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from bot.settings import Settings
from bot.shell.render_checks import render_verification
from handlers import verify as verify_handler

PROG = "upgradebot"
EXIT_OK, EXIT_FAILED = 0, 1


def add_verify_verb(verbs: Any) -> None:
    """Add ``verify`` to the CLI's subparsers."""
    parser = verbs.add_parser(
        "verify", help="check that a plugin works: pods, registration, GPU capacity, events",
        usage=f"{PROG} {verify_handler.USAGE} [--json] [--kubeconfig PATH]",
    )
    parser.add_argument("words", nargs="*", metavar="<namespace>/<daemonset> [key=value]",
                        help="target, then node=, cluster=, window=")
    parser.add_argument("--json", action="store_true", help="print the checks as JSON")
    parser.add_argument("--kubeconfig", metavar="PATH", help="kubeconfig file (default: $KUBECONFIG)")


def run_verify(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    from bot.shell.cli import connector  # the CLI's cluster factory (kubeconfig, context)

    request = verify_handler.parse(args.words)
    result = verify_handler.handle(request, connect=connector(settings, args.kubeconfig), policy=settings.policy())
    if args.json:
        out.write(result.model_dump_json(indent=2) + "\n")
    else:
        out.write(render_verification(result, target=request.target, scope=request.node or "all nodes"))
    return EXIT_OK if result.ok else EXIT_FAILED


VERIFY_VERBS = {"verify": run_verify}
