"""The run verbs of the shell: ``canary``, ``approve``, ``reject``, ``promote``, ``rollback``,
``close``, ``status``, ``runs``, ``resume``, ``audit``.

Wiring only: each verb parses its words with its handler, builds the engine on the Redis
store (``REDIS_URL``, else this user's local server, see :mod:`bot.storage.local`), the
cluster steps and the policy, calls the handler, and prints the run (``--json``: the
model). Commands that pass a gate run the steps in this process up to the next gate or
the end, printing each step as it happens; then, as ``resume`` does, they continue every
other unfinished run (a run left by a crashed command goes on with the next one). Exit codes: 0 done or waiting at a gate; 1
the run failed, was rolled back, rejected or expired; 2 bad usage, a refusal, or an
unreachable dependency (Redis, the cluster), with the one-line reason on stderr.

``--as <user>`` is who acts (default ``UPGRADEBOT_USER``, else the login name). When
``UPGRADEBOT_TEST_KILL_AT`` names an engine checkpoint the process SIGKILLs itself there
(the crash tests).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
from collections.abc import Callable, Iterable
from typing import Any, TextIO

from bot.settings import Settings
from bot.shell.render_runs import ShellObserver, render_audit, render_run, render_runs, run_json
from bot.storage.local import local_redis_url
from bot.storage.redis_store import RedisRunStore
from handlers import approve, audit, canary, close, promote, reject, resume, rollback, status
from handlers import runs as runs_handler
from handlers.arguments import UsageError
from runbooks.engine.approving import Actor
from runbooks.engine.commands import Engine, Outcome
from runbooks.engine.leasing import parse_owner
from runbooks.engine.runs import UNSUCCESSFUL, Run, RunState

PROG = "upgradebot"
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
VERB_HELP = {
    "canary": (canary.USAGE, "request a canary of a new image on one node"),
    "approve": (approve.USAGE, "approve a run's open request, then run it to the next gate"),
    "reject": (reject.USAGE, "reject a run's open request"),
    "promote": (promote.USAGE, "post a run's promotion request again"),
    "rollback": (rollback.USAGE, "request a rollback of a run (or roll back, if no approval is needed)"),
    "close": (close.USAGE, "end a monitoring run"),
    "status": (status.USAGE, "one run, or every active run"),
    "runs": (runs_handler.USAGE, "the newest runs"),
    "resume": (resume.USAGE, "continue every unfinished run (after a crash or a restart)"),
    "audit": (audit.USAGE, "a run's audit trail"),
}
ACTS = ("canary", "approve", "reject", "promote", "rollback", "close")


def add_run_verbs(verbs: Any) -> None:
    """Add the run verbs to the CLI's subparsers."""
    for name, (usage, summary) in VERB_HELP.items():
        parser = verbs.add_parser(name, help=summary, usage=f"{PROG} {usage} [--json]"
                                  + (" [--as USER]" if name in ACTS else "") + " [--kubeconfig PATH]")
        parser.add_argument("words", nargs="*", metavar="ARG", help="as in the usage line")
        parser.add_argument("--json", action="store_true", help="print the result as JSON")
        parser.add_argument("--kubeconfig", metavar="PATH", help="kubeconfig file (default: $KUBECONFIG)")
        if name in ACTS:
            parser.add_argument("--as", dest="as_user", metavar="USER", help="who acts (default: $USER)")


def local_owner_dead(owner: str) -> bool:
    """Whether a lease owner is a process on this host that no longer exists."""
    parsed = parse_owner(owner)
    if parsed is None or parsed[0] != socket.gethostname() or parsed[1] == os.getpid():
        return False
    try:
        os.kill(parsed[1], 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def killer(point: str | None) -> Callable[[str], None]:
    """The checkpoint hook of the crash tests: SIGKILL at ``point``; a no-op without one."""

    def checkpoint(reached: str) -> None:
        if point and reached == point:
            os.kill(os.getpid(), signal.SIGKILL)

    return checkpoint


class Shell:
    """One command's engine and output."""

    def __init__(self, args: argparse.Namespace, settings: Settings, out: TextIO) -> None:
        self.args, self.settings, self.out = args, settings, out
        self.policy = settings.policy()
        self._engine: Engine | None = None

    @property
    def actor(self) -> Actor:
        user = getattr(self.args, "as_user", None) or self.settings.shell_user
        if not user or not user.strip():
            raise UsageError("who is acting? pass --as <user>", f"{self.args.verb} … --as <user>")
        return Actor(user.strip())

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            from bot.shell.cli import connector  # the CLI's cluster factory (kubeconfig, context)
            from runbooks.daemonset.steps import DaemonSetSteps

            url = self.settings.redis_url or local_redis_url(self.settings.state_dir)
            self._engine = Engine(
                store=RedisRunStore.from_url(url), steps=DaemonSetSteps(), policy=self.policy,
                connect=connector(self.settings, self.args.kubeconfig),
                observer=None if self.args.json else ShellObserver(self.out, prog=PROG),
                owner_dead=local_owner_dead, checkpoint=killer(self.settings.test_kill_at),
            )
        return self._engine

    def print_run(self, run: Run, note: str = "", *, failing: Iterable[RunState] = UNSUCCESSFUL) -> int:
        if self.args.json:
            self.out.write(json.dumps(run_json(run, note), indent=2) + "\n")
        else:
            self.out.write(render_run(run, prog=PROG, note=note))
        return EXIT_FAILED if run.state in set(failing) else EXIT_OK

    def print_outcome(self, outcome: Outcome, **kwargs: Any) -> int:
        return self.print_run(outcome.run, outcome.note, **kwargs)

    def continue_others(self, done: str) -> None:
        """After a verb that advanced ``done``: continue every other unfinished run, as on start-up."""
        waiting = [r for r in self.engine.runs(active_only=True, limit=10_000) if r.id != done]
        if not waiting:
            return
        if not self.args.json:
            self.out.write(f"continuing {len(waiting)} other unfinished run(s)\n")
        for outcome in self.engine.resume():
            if outcome.paused and not self.args.json:
                self.out.write(outcome.note + "\n")

    def print_runs(self, runs: list[Run], notes: dict[str, str] | None = None, *, empty: str = "no runs") -> None:
        if self.args.json:
            items = [run_json(r, (notes or {}).get(r.id, "")) for r in runs]
            self.out.write(json.dumps({"runs": items}, indent=2) + "\n")
        else:
            self.out.write(render_runs(runs, empty=empty))
            for run_id, note in (notes or {}).items():
                if note:
                    self.out.write(f"{run_id}: {note}\n")


def run_canary(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    shell = Shell(args, settings, out)
    request = canary.parse(args.words)
    return shell.print_outcome(canary.handle(request, engine=shell.engine, actor=shell.actor))


def run_approve(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    shell = Shell(args, settings, out)
    run = approve.parse(args.words)
    code = shell.print_outcome(approve.handle(run, engine=shell.engine, actor=shell.actor))
    shell.continue_others(run)
    return code


def run_reject(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    shell = Shell(args, settings, out)
    run = reject.parse(args.words)
    code = shell.print_outcome(reject.handle(run, engine=shell.engine, actor=shell.actor), failing={RunState.FAILED})
    shell.continue_others(run)
    return code


def run_promote(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    shell = Shell(args, settings, out)
    run = promote.parse(args.words)
    return shell.print_outcome(promote.handle(run, engine=shell.engine, actor=shell.actor))


def run_rollback(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    shell = Shell(args, settings, out)
    request = rollback.parse(args.words)
    outcome = rollback.handle(request, engine=shell.engine, actor=shell.actor)
    code = shell.print_outcome(outcome, failing={RunState.FAILED})
    shell.continue_others(request.run)
    return code


def run_close(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    shell = Shell(args, settings, out)
    run = close.parse(args.words)
    return shell.print_outcome(close.handle(run, engine=shell.engine, actor=shell.actor))


def run_status(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    shell = Shell(args, settings, out)
    run = status.parse(args.words)
    found = status.handle(run, engine=shell.engine)
    if run is not None:
        return shell.print_run(found[0])
    shell.print_runs(found, empty="no active runs")
    return EXIT_OK


def run_runs(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    shell = Shell(args, settings, out)
    shell.print_runs(runs_handler.handle(runs_handler.parse(args.words), engine=shell.engine))
    return EXIT_OK


def run_resume(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    shell = Shell(args, settings, out)
    resume.parse(args.words)
    outcomes = resume.handle(None, engine=shell.engine)
    shell.print_runs([o.run for o in outcomes], {o.run.id: o.note for o in outcomes if o.note},
                     empty="no unfinished runs")
    if any(o.paused for o in outcomes):
        return EXIT_USAGE  # a cluster did not answer: those runs wait for the next resume
    return EXIT_FAILED if any(o.run.state in UNSUCCESSFUL for o in outcomes) else EXIT_OK


def run_audit(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    shell = Shell(args, settings, out)
    run, entries = audit.handle(audit.parse(args.words), engine=shell.engine)
    if args.json:
        out.write(json.dumps({"id": run.id, "state": run.state.value, "entries": entries}, indent=2) + "\n")
    else:
        out.write(render_audit(run, entries))
    return EXIT_OK


RUN_VERBS: dict[str, Callable[[argparse.Namespace, Settings, TextIO], int]] = {
    "canary": run_canary, "approve": run_approve, "reject": run_reject, "promote": run_promote,
    "rollback": run_rollback, "close": run_close, "status": run_status, "runs": run_runs,
    "resume": run_resume, "audit": run_audit,
}
