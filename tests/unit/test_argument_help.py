"""Every verb's ``--help`` describes each argument of its usage line (issue 41: ``audit --help``
said "ARG as in the usage line" and nothing more)."""

from __future__ import annotations

import pytest

from bot.shell.cli import main
from handlers.argument_help import argument_names
from handlers.verbs import VERBS


@pytest.mark.parametrize("command", VERBS, ids=[c.name for c in VERBS])
def test_every_verbs_help_describes_each_argument(command, capsys: pytest.CaptureFixture[str]) -> None:
    """issue 41: `upgradebot <verb> --help` lists every argument its usage line names, each with
    a sentence of its own, and never "as in the usage line"."""
    with pytest.raises(SystemExit) as exited:
        main([command.name, "--help"])
    assert exited.value.code == 0
    text = capsys.readouterr().out
    assert "as in the usage line" not in text, text
    names = argument_names(command.usage)
    assert names or command.name in ("claims", "cleanup-claims", "inventory") , command.usage
    described = text.split("arguments (key=value words may come in any order):", 1)[1].splitlines()
    for name in names:
        at = described.index(f"  {name}")
        assert described[at + 1].startswith("      ") and len(described[at + 1].split()) >= 3, text


def test_argument_names_read_the_usage_line_as_written() -> None:
    """The names are those a usage line writes: ``key=``, a placeholder, a flag (issue 41)."""
    assert argument_names("canary <namespace>/<daemonset> image=<ref> node=<node>|auto [env=NAME=value|env=NAME- ...] "
                          "[toleration=key[=value][:Effect][-] ...]") == [
        "<namespace>/<daemonset>", "image=", "node=", "env=", "toleration="]
    assert argument_names("migrate <namespace>/[<kind>/]<workload> [class=<device class>] [-f <file|dir>]") == [
        "<namespace>/[<kind>/]<workload>", "class=", "-f"]
