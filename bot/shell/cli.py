"""``upgradebot <verb> …``: the shell front end, for people and for CI pipelines.

One subcommand per row of the verb table (:data:`handlers.verbs.VERBS`, read as data: a
verb's handler module is imported when it runs): the same usage line, summary, parser and
handler as in Slack, and the same reply, printed as text, or with ``--json`` the verb's
model. Then the process verbs: ``serve`` (Slack), ``console`` (the chat in a terminal) and
``demo``.

Run verbs open the engine on Redis (``REDIS_URL``, else this user's local server) and run
the cluster steps in this process: the engine's ``wake`` is ``engine.advance``, which
drives a run up to its next gate or its end, printing each step as it happens. After a
verb that acts on a run, every other unfinished run is continued too (a run left by a
crashed command goes on with the next one). Who acts is derived, never told: the OS
account (or a CI job's ``UPGRADEBOT_TOKEN``) through the policy's ``identities``
(:mod:`bot.shell.identity`); ``--as`` may only name that identity.

Exit codes: 0 all checks passed (or the run waits at a gate; or the rollback or rejection
asked for happened: ``rollback``, ``reject``, ``approve <run> rollback``); 1 a check failed or
the run failed (rolled back, rejected, expired); 2 bad usage, a refusal or an unreachable
dependency (cluster, config, Redis), with a one-line reason on stderr and no traceback.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NoReturn, TextIO

from bot import logs
from bot.shell import local
from bot.shell.identity import IdentityRefused, ShellIdentity, check_as, resolve
from bot.storage.embedded import RedisUnavailable
from handlers import messages as msg
from handlers import startup_messages as startup_msg
from handlers.argument_help import described
from handlers.arguments import UsageError
from handlers.verbs import VERBS
from runbooks.errors import ClusterError, scrub, shorten

if TYPE_CHECKING:  # the settings, engine, routing and printing are loaded where used, not by `--help` (issue 39)
    from bot.runtime import Connect
    from bot.settings import Settings
    from bot.storage.redis_store import RedisRunStore
    from handlers.routing import Caller, Command, Deps
    from runbooks.engine.commands import Engine
    from runbooks.policy import Policy

SURFACE = "shell"
ProcessMain = Callable[[argparse.Namespace, "Settings", TextIO], int]


@dataclass(frozen=True)
class Process:
    """A verb that runs a long-lived process rather than a handler of the table."""

    summary: str
    usage: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: ProcessMain
    epilog: str | None = None
    """What ``--help`` prints after the flags (``serve``: the environment it reads)."""


def serve_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=int, default=3000, help="HTTP port (default 3000; 0 picks one)")
    parser.add_argument("--host", default="0.0.0.0", help="address to listen on (default 0.0.0.0)")
    parser.add_argument("--drain", type=float, default=30.0, help="seconds to finish work on SIGTERM (default 30)")
    parser.add_argument("--metrics-port", type=int, default=None,
                        help="serve /metrics on this port only (default: on --port, with the rest)")
    parser.add_argument("--allow-volatile-redis", action="store_true",
                        help="start even when Redis keeps nothing on disk (a Redis restart then loses every run)")


def environment_epilog(heading: str, variables: Sequence[tuple[str, str]]) -> str:
    """The ``--help`` text of the environment a process reads: each variable, then what it is, one line."""
    width = max(len(name) for name, _ in variables)
    return "\n".join([heading, *(f"  {name.ljust(width)}  {meaning}" for name, meaning in variables)])


def run_serve(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    # Loaded here, not at the top: Slack, HTTP and metrics are for `serve` only, and every
    # other verb (a CI pipeline's `verify`, `status`) starts faster without them.
    from bot.slack import serve

    return serve.run(args, settings, out)


def worker_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--lanes", default="decisions,commands,runs",
                        help="the lanes to take work from, comma-separated (default: decisions,commands,runs)")
    parser.add_argument("--drain", type=float, default=30.0, help="seconds to finish work on SIGTERM (default 30)")
    parser.add_argument("--read-only", action="store_true",
                        help="answer what a serve without a policy file queues (help, inventory; lanes decisions,commands)")


def run_worker(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    from bot.slack import worker  # loaded here, as serve is

    return worker.run(args, settings, out)


def console_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kubeconfig", metavar="PATH", help="kubeconfig file (default: $KUBECONFIG)")


def run_console(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    from bot import console  # loaded here, as serve is: the chat, its runtime and the reports

    return console.run(args, settings, out)


def demo_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--interactive", action="store_true", help="leave me at the console prompt instead")


def run_demo(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    # Loaded here, not at the top: the demo serves kubesim (aiohttp, a TLS server) in the
    # process, which no other verb needs.
    from bot.demo import story

    return story.run(args, settings, out)


PROCESSES: dict[str, Process] = {
    "serve": Process("the Slack front end: Socket Mode with SLACK_APP_TOKEN, else HTTP on --port",
                     "serve [--port 3000] [--host 0.0.0.0] [--drain 30] [--metrics-port N] [--allow-volatile-redis]",
                     serve_arguments, run_serve,
                     environment_epilog(startup_msg.SERVE_ENVIRONMENT_HEADING, startup_msg.SERVE_ENVIRONMENT)),
    "worker": Process("run what serve queues (serve starts its own; more on other machines)",
                      "worker [--lanes decisions|commands,runs] [--drain 30]", worker_arguments, run_worker),
    "console": Process("a chat in the terminal: the Slack commands and buttons, as text", "console [--kubeconfig PATH]",
                       console_arguments, run_console),
    "demo": Process("the whole story on a real Redis and a simulated cluster", "demo [--interactive]",
                    demo_arguments, run_demo),
    "local": Process(local.msg.LOCAL_SUMMARY, local.msg.LOCAL_USAGE, local.add_arguments, local.run),
}


class Parser(argparse.ArgumentParser):
    """argparse that raises :class:`UsageError` instead of printing and exiting."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message, self.format_usage().strip())


def build_parser(only: str | None = None) -> Parser:
    """The parser of every verb, or with ``only`` of that verb alone (what it parses and prints
    is the same: a verb's words, help and errors are its own subparser's; issue 39)."""
    parser = Parser(prog=msg.PROG, description="Safe upgrades of GPU device plugins and DRA drivers.")
    verbs = parser.add_subparsers(dest="verb", metavar="<verb>", parser_class=Parser)
    verbs.required = True
    for command in VERBS:  # the rows as data: no handler module is imported to list them
        if only is not None and command.name != only:
            continue
        usage = f"{msg.PROG} {command.usage} [--json]" + (" [--as USER]" if command.acts else "") + \
            " [--kubeconfig PATH]"
        sub = verbs.add_parser(command.name, help=command.summary, usage=usage.replace("%", "%%"),  # argparse formats %
                               description=command.summary, epilog=arguments_epilog(command.name, command.usage),
                               formatter_class=argparse.RawDescriptionHelpFormatter)
        sub.add_argument("words", nargs="*", metavar="ARG", help=msg.SHELL_ARGS_HELP)
        sub.add_argument("--json", action="store_true", help="print the result as JSON")
        for flag in command.flags:
            sub.add_argument(flag, action="append_const", const=flag, dest="flags", default=[],
                             help=dict(described(command.name, command.usage))[flag])
        sub.add_argument("--kubeconfig", metavar="PATH", help="kubeconfig file (default: $KUBECONFIG)")
        if command.shell_files:
            sub.add_argument("-f", "--filename", dest="files", action="append", default=[], metavar="PATH",
                             help="a manifest file or directory (repeatable)")
        if command.acts:
            sub.add_argument("--as", dest="as_user", metavar="USER",
                             help="your own identity, as the policy maps your account (any other is refused)")
    for name, process in PROCESSES.items():
        if only is not None and name != only:
            continue
        process.add_arguments(verbs.add_parser(name, help=process.summary, usage=f"{msg.PROG} {process.usage}",
                                               epilog=process.epilog,
                                               formatter_class=argparse.RawDescriptionHelpFormatter))
    return parser


def arguments_epilog(verb: str, usage: str) -> str:
    """The ``--help`` text of a verb's arguments: each, then what it means, wrapped."""
    lines = [msg.SHELL_ARGS_HEADING]
    for name, meaning in described(verb, usage):
        lines.append(f"  {name}")
        lines += textwrap.wrap(meaning, width=76, initial_indent="      ", subsequent_indent="      ")
    return "\n".join(lines)


def verb_names() -> list[str]:
    """Every verb the shell takes: the table's, then the processes."""
    return [c.name for c in VERBS] + list(PROCESSES)


def parse_args(parser: Parser, argv: list[str]) -> argparse.Namespace:
    """``argv`` parsed; an unknown verb is a :class:`UsageError` saying which verb it looks like."""
    names = verb_names()
    if argv and not argv[0].startswith("-") and argv[0] not in names:
        raise UsageError(msg.shell_unknown_verb(argv[0], names), parser.format_usage().strip())
    return parser.parse_args(argv)


class Session:
    """One command's surface: its cluster factory, and its run engine opened on first use."""

    def __init__(self, args: argparse.Namespace, settings: Settings, out: TextIO) -> None:
        # bot.runtime is loaded here, by the verbs of the table, not by `--help` or the processes (issue 39)
        from bot import runtime

        self.args, self.settings, self.out = args, settings, out
        # A policy file is read (and refused when bad) by every verb; the built-in defaults are
        # built when a verb uses them: `status` uses no policy (issue 39).
        self._policy: Policy | None = settings.policy() if settings.config_file is not None else None
        self.connect: Connect = runtime.connector(settings, args.kubeconfig)
        self._store: RedisRunStore | None = None

    @property
    def policy(self) -> Policy:
        if self._policy is None:
            self._policy = self.settings.policy()
        return self._policy

    @property
    def store(self) -> RedisRunStore:
        from bot import runtime

        if self._store is None:
            self._store = runtime.open_store(self.settings)
        return self._store

    def engine(self) -> Engine:
        from bot import runtime
        from bot.shell.output import ShellObserver

        observer = ShellObserver(sys.stderr, events=False) if self.args.json else ShellObserver(self.out)
        engine = runtime.build_engine(self.settings, self.policy, store=self.store, connect=self.connect,
                                      observer=observer)
        engine.wake = engine.advance  # the steps run here, printed as they happen
        return engine

    def continue_others(self, engine: Engine, done: str) -> None:
        """After a command that changed run ``done``: continue every other unfinished run, as on start-up."""
        waiting = [r for r in engine.runs(active_only=True, limit=10_000) if r.id != done]
        if not waiting:
            return
        if not self.args.json:
            self.out.write(msg.shell_continuing(len(waiting)) + "\n")
        for outcome in engine.resume():
            if outcome.paused and not self.args.json:
                self.out.write(outcome.note + "\n")

    def deps(self) -> Deps:
        from handlers.routing import Deps
        from runbooks.engine.reading import RunReader

        return Deps(load_policy=lambda: self.policy, connect=self.connect, open_engine=self.engine,
                    open_reader=lambda: RunReader(self.store),
                    read_tally=lambda run_id: self.store.read_tally(run_id))

    def identity(self) -> ShellIdentity:
        token = self.settings.identity_token
        return resolve(self.policy, token=token.get_secret_value() if token else None)

    def caller(self, command: Command) -> Caller:
        """Who acts: the identity the policy maps this account (or CI token) to. A verb that does
        not act is not told: it reads the same for anyone (and loads no policy for it: issue 39)."""
        from handlers.routing import Caller

        if not command.acts:
            return Caller(user="", channel=None, surface=SURFACE)
        found = self.identity()  # IdentityRefused: nothing is done
        check_as(found, getattr(self.args, "as_user", None))
        return Caller(user=found.user, channel=None, surface=SURFACE, account=found.account)

    def close(self) -> None:
        if self._store is not None:
            self._store.close()


def run_command(command: Command, args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    """One verb of the table: parse, handle, print; its exit code."""
    from bot.shell.output import print_result

    session = Session(args, settings, out)
    try:
        request = command.parse([*args.words, *getattr(args, "flags", [])])
        if command.shell_files and args.files:
            request = request.model_copy(update={"files": tuple(args.files)})
        deps = session.deps()
        result = command.handle(request, deps, session.caller(command))
        code = print_result(command, result, as_json=args.json, out=out, surface=SURFACE)
        if command.acts:  # the engine's commands, loaded by the verbs that act (issue 39)
            from runbooks.engine.commands import Outcome

            if isinstance(result, Outcome):
                session.continue_others(deps.engine, result.run.id)
        return code
    finally:
        session.close()


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    try:
        words = sys.argv[1:] if argv is None else list(argv)
        known = words[0] if words and words[0] in verb_names() else None
        args = parse_args(build_parser(known), words)
        process = PROCESSES.get(args.verb)
        from bot.settings import load_settings

        settings = load_settings()
        if args.verb not in ("serve", "worker"):  # those write log lines of their own (bot.logs)
            logs.configure_shell_logging(level=settings.log_level, secrets=secrets_of(settings), stream=err)
        if process is not None:
            return process.run(args, settings, out)
        command = next(c for c in VERBS if c.name == args.verb).command()  # its handler module, loaded now
        return run_command(command, args, settings, out)
    except UsageError as exc:
        err.write(msg.shell_error(exc.reason) + "\n" + msg.shell_usage(exc.usage) + "\n")
    except KeyboardInterrupt:
        err.write(msg.SHELL_INTERRUPTED + "\n")
        return 130
    except Exception as exc:
        if isinstance(exc, reported_errors()):
            err.write(msg.shell_error(str(exc)) + "\n")
        else:  # a bug: one line for the user, never a traceback (and nothing more is done)
            err.write(msg.shell_error(msg.shell_internal_error(type(exc).__name__, scrub(shorten(str(exc))))) + "\n")
    from handlers.routing import (
        EXIT_USAGE,  # loaded on the way out: `--help` does without the routing (issue 39)
    )

    return EXIT_USAGE


def secrets_of(settings: Settings) -> list[str]:
    """What a shell log line must never show: the CI identity token and the Slack secrets."""
    values = (settings.identity_token, settings.slack_bot_token, settings.slack_signing_secret, settings.slack_app_token)
    return [v.get_secret_value() for v in values if v is not None and v.get_secret_value()]


def reported_errors() -> tuple[type[Exception], ...]:
    """The failures a verb reports in one line (a refusal, an unreachable dependency, bad
    settings): imported when one is raised, so that ``--help`` loads neither the settings
    nor the engine's driving (issue 39)."""
    from bot.settings import SettingsError
    from bot.storage.private import UnsafeState
    from runbooks.engine.driving import StepPaused
    from runbooks.engine.refusals import Refused
    from runbooks.engine.store import StoreUnavailable

    return (ClusterError, SettingsError, Refused, StoreUnavailable, StepPaused, RedisUnavailable, IdentityRefused,
            UnsafeState)


def run() -> int:
    """The ``upgradebot`` command (``[project.scripts]``): :func:`main`, then the process ends at once.

    Nothing a verb loaded (pydantic, Redis, the kubernetes client, the verbs' modules) is
    garbage when it ends, yet the interpreter's exit would walk it all, collect it and tear
    down each module, object by object: 35-40 ms of ``status``, 0.1-0.2 s of a verb that loaded
    the kubernetes client (issues 35, 39). :func:`bot.exiting.exit_now` flushes the output, runs
    the exit handlers (the kubernetes client deletes the certificate files it wrote) and ends
    the process. Only here, where the process ends: :func:`main` called in a process that goes
    on (a test) returns as before; and a verb that left a thread working (none should) exits
    the usual way, the interpreter waiting for that thread."""
    code = main()
    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        return code
    from bot.exiting import exit_now

    exit_now(code)
