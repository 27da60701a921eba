"""The one table of verbs, in the order ``help`` lists them.

Both front ends read it: the chat router registers every row (but the shell-only ones)
bound to the surface's :class:`~handlers.routing.Deps`, and the shell builds one argparse
subcommand per row. A new verb is a :class:`~handlers.routing.Command` next to its handler
(run verbs in :mod:`handlers.runs`), added here.
"""

from __future__ import annotations

from handlers import claims, inventory, migrate, preflight, rbac, report, runs, verify
from handlers.routing import Command, Deps, Verb

VERBS: tuple[Command, ...] = (inventory.COMMAND, *runs.COMMANDS, verify.COMMAND, report.COMMAND, preflight.COMMAND,
                              migrate.COMMAND, migrate.APPLY_COMMAND, claims.COMMAND,
                              claims.CLEANUP_COMMAND, rbac.COMMAND)


def chat_verbs(deps: Deps) -> list[Verb]:
    """Every verb a chat surface offers (after ``help``), bound to ``deps``."""
    return [command.verb(deps) for command in VERBS if command.chat]

