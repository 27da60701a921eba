"""``upgradebot <verb> …``: the shell front end, for people and for CI pipelines.

Exit codes (DESIGN.md): 0 all checks passed; 1 a check failed (or a run failed); 2 bad
usage, a refused request or an unreachable dependency (cluster, config, Redis), with a
one-line reason on stderr and no traceback. ``--json`` prints the result model for
pipelines. Each verb is a subcommand whose handler lives in ``handlers/``; the run verbs
are wired in ``bot/shell/runs.py``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn, TextIO

from bot import shell_messages as msg
from bot.console import CONSOLE_VERBS, add_console_verb
from bot.demo.world import DEMO_VERBS, add_demo_verb
from bot.settings import Settings, SettingsError, load_settings
from bot.shell.output import render_inventory
from bot.shell.report import REPORT_VERBS, add_report_verb
from bot.shell.runs import RUN_VERBS, add_run_verbs
from bot.shell.verify import VERIFY_VERBS, add_verify_verb
from bot.slack.serve import SERVE_VERBS, add_serve_verb
from bot.storage.embedded import RedisUnavailable
from handlers import inventory as inventory_handler
from handlers.arguments import UsageError
from runbooks.cluster import Cluster
from runbooks.engine.driving import StepPaused
from runbooks.engine.refusals import Refused
from runbooks.engine.store import StoreUnavailable
from runbooks.errors import ClusterConfigError, ClusterError

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class Parser(argparse.ArgumentParser):
    """argparse that raises :class:`UsageError` instead of printing and exiting."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message, self.format_usage().strip())


def build_parser() -> Parser:
    parser = Parser(prog=msg.PROG, description="Safe upgrades of GPU device plugins and DRA drivers.")
    verbs = parser.add_subparsers(dest="verb", metavar="<verb>", parser_class=Parser)
    verbs.required = True
    inventory = verbs.add_parser(
        "inventory", help="what the cluster runs, and what to fix before an upgrade",
        usage=f"{msg.PROG} {inventory_handler.USAGE} [--json] [--kubeconfig PATH]",
    )
    inventory.add_argument("words", nargs="*", metavar="cluster=<context>", help="kubeconfig context")
    inventory.add_argument("--json", action="store_true", help="print the inventory as JSON")
    inventory.add_argument("--kubeconfig", metavar="PATH", help="kubeconfig file (default: $KUBECONFIG)")
    add_run_verbs(verbs)
    add_verify_verb(verbs)
    add_report_verb(verbs)
    add_serve_verb(verbs)
    add_console_verb(verbs)
    add_demo_verb(verbs)
    return parser


def connector(settings: Settings, kubeconfig: str | None) -> Callable[[str | None], Cluster]:
    """Opens the cluster of a context: kubeconfig if there is one, else in-cluster."""

    def connect(context: str | None) -> Cluster:
        path = settings.kubeconfig_path(kubeconfig)
        if path is None:
            if context:
                raise ClusterConfigError(msg.no_kubeconfig())
            return Cluster.in_cluster()
        return Cluster.from_kubeconfig(path, context)

    return connect


def run_inventory(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    request = inventory_handler.parse(args.words)
    inventory = inventory_handler.handle(
        request, connect=connector(settings, args.kubeconfig), policy=settings.policy()
    )
    out.write(inventory.model_dump_json(indent=2) + "\n" if args.json else render_inventory(inventory))
    return EXIT_FAILED if inventory.failed else EXIT_OK


VERBS: dict[str, Callable[[argparse.Namespace, Settings, TextIO], int]] = {"inventory": run_inventory}
VERBS.update(RUN_VERBS)
VERBS.update(VERIFY_VERBS)
VERBS.update(REPORT_VERBS)
VERBS.update(SERVE_VERBS)
VERBS.update(CONSOLE_VERBS)
VERBS.update(DEMO_VERBS)


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    try:
        args = build_parser().parse_args(argv)
        return VERBS[args.verb](args, load_settings(), out)
    except UsageError as exc:
        err.write(msg.bad_usage(exc.reason) + "\n" + msg.usage_line(exc.usage) + "\n")
    except (ClusterError, SettingsError, Refused, StoreUnavailable, StepPaused, RedisUnavailable) as exc:
        err.write(msg.cluster_failed(" ".join(str(exc).split())) + "\n")
    except KeyboardInterrupt:
        err.write(msg.interrupted() + "\n")
        return 130
    return EXIT_USAGE
