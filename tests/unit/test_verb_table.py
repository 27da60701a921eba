"""The verb table is data; each row's handler module binds its command to that row (issue 39)."""

from __future__ import annotations

import pytest

from handlers.routing import Command
from handlers.verbs import VERBS, Entry, entry

ROW_FIELDS = ("name", "usage", "summary", "mutating", "takes_cluster", "acts", "chat", "lane", "shell_files", "flags")


@pytest.mark.parametrize("row", VERBS, ids=[e.name for e in VERBS])
def test_each_row_loads_the_command_its_module_bound_to_it(row: Entry) -> None:
    """issue 39: ``Entry.command()`` imports the row's handler module and returns the command of
    that verb, whose usage line, summary and routing data are the row's own (written once)."""
    command = row.command()
    assert isinstance(command, Command)
    assert {f: getattr(command, f) for f in ROW_FIELDS} == {f: getattr(row, f) for f in ROW_FIELDS}


def test_a_row_naming_no_command_of_its_module_is_an_error() -> None:
    """issue 39: a row whose ``module:ATTRIBUTE`` holds no command of its name fails loudly, never
    another verb's handler."""
    wrong = Entry("status", "status [<run>]", "one run, or every active run", "handlers.inventory:COMMAND")
    with pytest.raises(LookupError, match="no command 'status'"):
        wrong.command()
    assert entry("status").command().name == "status"


@pytest.mark.parametrize("argv", [["status", "--json"], ["status", "r-3k9x0b2a"], ["audit", "r-3k9x0b2a", "--all"],
                                  ["preflight", "target=1.33", "-f", "a.yaml"], ["local", "--help-not"]])
def test_a_verbs_own_parser_parses_as_the_whole_one(argv: list[str]) -> None:
    """issue 39: the shell builds the subparser of the verb it runs only; its words parse to the
    same namespace (or the same usage error) as with every verb's subparser built."""
    from bot.shell.cli import build_parser, parse_args
    from handlers.arguments import UsageError

    def parsed(only: str | None) -> object:
        try:
            return vars(parse_args(build_parser(only), argv))
        except UsageError as exc:
            return exc.reason, exc.usage

    assert parsed(argv[0]) == parsed(None)
    assert len(build_parser(argv[0])._subparsers._group_actions[0].choices) == 1  # type: ignore[union-attr]
