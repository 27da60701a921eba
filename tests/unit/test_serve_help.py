"""``upgradebot serve --help`` lists the environment variables ``serve`` reads, one line each
(issue 64 item 6): the Slack secrets are not flags, so ``--help`` is where an operator looks.

The list is read from :class:`bot.settings.Settings` (every variable it declares), so a
variable added there and not to the help fails here."""

from __future__ import annotations

import re

import pytest
from pydantic import AliasChoices

from bot.settings import Settings
from bot.shell.cli import main

NOT_SERVES = {
    "UPGRADEBOT_TOKEN": "the shell's CI identity; serve acts for Slack users",
    "UPGRADEBOT_TEST_KILL_AT": "the crash tests only (docs/operations.md: never in production)",
    "UPGRADEBOT_WORKER_OF": "set by serve for the workers it starts",
}


def variables() -> set[str]:
    names = set()
    for field in Settings.model_fields.values():
        alias = field.validation_alias
        assert isinstance(alias, AliasChoices), field
        names |= {str(choice) for choice in alias.choices}
    return names


def test_serve_help_lists_every_variable_it_reads_one_line_each(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["serve", "--help"])
    assert exited.value.code == 0
    text = capsys.readouterr().out
    listed = {m.group(1): m.group(2) for m in re.finditer(r"^  ([A-Z][A-Z0-9_]+)\s{2,}(\S.*)$", text, re.M)}
    expected = variables() - set(NOT_SERVES)
    assert {"SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET", "SLACK_APP_TOKEN", "SLACK_API_URL", "REDIS_URL", "KUBECONFIG",
            "UPGRADEBOT_CONFIG", "LOG_LEVEL", "LOG_FORMAT"} <= expected
    assert set(listed) == expected, text
    environment = text[text.index("environment ("):]
    assert "docs/operations.md" in environment.splitlines()[0]  # where each is described in full
    assert all(len(line) <= 100 for line in environment.splitlines()), environment
