"""The one table of verbs, in the order ``help`` lists them.

Each row is data: the verb's name, usage line, summary, what the router and the shell's
parser need to know of it, and where its handler is (``module:ATTRIBUTE``). The handler
module binds its row to its parse, handle and present functions
(:meth:`~handlers.routing.Command.of`), so the usage line and the summary are written
here only; :meth:`Entry.command` imports that module when the verb runs. ``upgradebot
--help`` and ``upgradebot status`` thus import no other verb's module (issue 39).

Both front ends read it: the chat router registers every row (but the shell-only ones)
bound to the surface's :class:`~handlers.routing.Deps`, and the shell builds one argparse
subcommand per row. A new verb is a row here and a :class:`~handlers.routing.Command` next
to its handler (run verbs in :mod:`handlers.runs`).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the routing loads the engine's and the policy's models: not for `--help` (issue 39)
    from handlers.routing import Command, Deps, Lane, Verb


@dataclass(frozen=True)
class Entry:
    """One row of the table, without its handler. ``mutating`` verbs are limited to the policy's
    requesters; ``takes_cluster`` verbs get a channel's default ``cluster=``; ``acts`` verbs need
    to know who acts (the shell's identity); ``chat`` False keeps a verb to the shell; ``lane``
    says which workers a chat surface runs it on; ``shell_files``: the shell offers ``-f``;
    ``flags``: words of the verb that look like options (``--all``)."""

    name: str
    usage: str
    summary: str
    handler: str
    """``module:ATTRIBUTE``: the module's :class:`~handlers.routing.Command` (or tuple of them) of this row."""
    mutating: bool = False
    takes_cluster: bool = True
    acts: bool = False
    chat: bool = True
    lane: Lane = "short"
    shell_files: bool = False
    flags: tuple[str, ...] = ()

    def command(self) -> Command:
        """This row's command, its handler module imported now."""
        module, attribute = self.handler.split(":")
        found = getattr(importlib.import_module(module), attribute)
        for command in found if isinstance(found, tuple) else (found,):
            if command.name == self.name:
                return command
        raise LookupError(f"{self.handler} has no command {self.name!r}")


_RUNS = "handlers.runs:COMMANDS"
VERBS: tuple[Entry, ...] = (
    Entry("inventory", "inventory [cluster=<context>]", "what the cluster runs, and what to fix before an upgrade",
          "handlers.inventory:COMMAND", lane="long"),
    Entry("canary", "canary <namespace>/<daemonset> image=<ref> node=<node>|auto [container=<name>] "
          "[cluster=<context>] [when=next-window] [env=NAME=value|env=NAME- ...] [args=a,b|-] "
          "[limits=cpu=…,memory=…] [requests=…] [security=allowPrivilegeEscalation=false,capabilities.drop=ALL] "
          "[pod-security=…] [priority=<class>|-] [toleration=key[=value][:Effect][-] ...] "
          "[volume=<name>:<hostPath> ...]",
          "request a canary of a new image on one node", _RUNS, mutating=True, acts=True, lane="long"),
    Entry("restart", "restart <namespace>/<daemonset> node=<node>|auto [container=<name>] [cluster=<context>] "
          "[when=next-window]",
          "restart a plugin's pods, one node first, then the rest (approved)", _RUNS, mutating=True, acts=True,
          lane="long"),
    Entry("repair", "repair <namespace>/<daemonset> [cluster=<context>]",
          "delete the pods a plugin's outage left stuck, so their controllers recreate them", _RUNS, mutating=True,
          acts=True, lane="long"),
    Entry("quarantine", "quarantine <namespace>/<daemonset> node=<node> [cluster=<context>] [when=next-window]",
          "keep a plugin off one node (cordon, label, affinity term) while the others keep working (approved)",
          "handlers.quarantine:COMMANDS", mutating=True, acts=True, lane="long"),
    Entry("release", "release <namespace>/<daemonset> node=<node> [cluster=<context>] [when=next-window]",
          "give a quarantined node back to its plugin (approved)", "handlers.quarantine:COMMANDS", mutating=True,
          acts=True, lane="long"),
    Entry("approve", "approve <run> <canary|migration|repair|cleanup|quarantine|release|promotion|rollback>",
          "approve a run's open request (or click Approve)", _RUNS, takes_cluster=False, acts=True,
          lane="decision"),
    Entry("reject", "reject <run> <canary|migration|repair|cleanup|quarantine|release|promotion|rollback>",
          "reject a run's open request (or click Reject)", _RUNS, takes_cluster=False, acts=True, lane="decision"),
    Entry("promote", "promote <run>", "post a run's promotion request again", _RUNS, mutating=True,
          takes_cluster=False, acts=True),
    Entry("rollback", "rollback <run> [reason=<text>]", "request a rollback of a run", _RUNS, takes_cluster=False,
          acts=True, lane="decision"),
    Entry("pause", "pause <run> [reason=<text>]", "stop a run before its next node or wave", _RUNS,
          takes_cluster=False, acts=True, lane="decision"),
    Entry("continue", "continue <run>", "go on with a paused run", _RUNS, takes_cluster=False, acts=True,
          lane="decision"),
    Entry("close", "close <run>", "end a monitoring run", _RUNS, takes_cluster=False, acts=True, lane="decision"),
    Entry("status", "status [<run>]", "one run, or every active run", _RUNS, takes_cluster=False),
    Entry("runs", "runs [limit=<n>]", "the newest runs", _RUNS, takes_cluster=False),
    Entry("audit", "audit <run> [--all]", "a run's audit trail", _RUNS, takes_cluster=False, flags=("--all",)),
    Entry("resume", "resume [<run>]", "run a halted run's step again (shell: every unfinished run)", _RUNS,
          mutating=True, takes_cluster=False, acts=True),
    Entry("verify", "verify <run>|<namespace>/<daemonset> [node=<node>] [cluster=<context>] [window=<duration>]",
          "check that a plugin works: pods, registration, GPUs, events", "handlers.verify:COMMAND", lane="long"),
    Entry("report", "report <run>", "a run's stability report now (as the 24 h / 48 h ones)",
          "handlers.report:COMMAND", takes_cluster=False, lane="long"),
    Entry("preflight", "preflight target=<version> [-f <file|dir>] [cluster=<context>]",
          "what a Kubernetes upgrade would break in DRA objects and manifests", "handlers.preflight:COMMAND",
          lane="long", shell_files=True),
    Entry("migrate", "migrate <namespace>/[<kind>/]<workload> [class=<device class>] [cluster=<context>]",
          "the ResourceClaims that replace a workload's device-plugin resources", "handlers.migrate:COMMAND",
          lane="long"),
    Entry("apply-migration", "apply-migration <namespace>/[<kind>/]<workload> [class=<device class>] "
          "[canary=<n>|<p>%] [cluster=<context>]",
          "request a migration run: approved, applied, verified, rolled back on failure",
          "handlers.migrate:APPLY_COMMAND", mutating=True, acts=True, lane="long"),
    Entry("claims", "claims [cluster=<context>]",
          "broken ResourceClaims cluster-wide, each with why and the fix (read-only)", "handlers.claims:COMMAND",
          lane="long"),
    Entry("cleanup-claims", "cleanup-claims [cluster=<context>]",
          "request a run deleting the broken ResourceClaims `claims` lists, each only as listed (approved)",
          "handlers.claims:CLEANUP_COMMAND", mutating=True, acts=True, lane="long"),
    Entry("rbac", "rbac [repair=<namespace>,...] [account=<namespace>/<name>]",
          "the Roles and bindings the policy needs (pipe to kubectl apply -f -)", "handlers.rbac:COMMAND",
          takes_cluster=False, chat=False),
)


def entry(name: str) -> Entry:
    """The row of verb ``name`` (a handler module binds its command to it)."""
    return next(e for e in VERBS if e.name == name)


def chat_verbs(deps: Deps) -> list[Verb]:
    """Every verb a chat surface offers (after ``help``), bound to ``deps``: every handler module imported."""
    return [e.command().verb(deps) for e in VERBS if e.chat]
