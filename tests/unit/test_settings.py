"""Settings from the environment and the policy file named by UPGRADEBOT_CONFIG."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bot.settings import Settings, SettingsError
from handlers import inventory as inventory_handler
from handlers.arguments import UsageError

POLICY = """
slash_command: /upgrade
channels:
  C0OPS: {cluster: prod-east}
requesters: {users: [], usergroups: []}
approvers: {users: [U0LEAD1, U0LEAD2], usergroups: [S0LEADS], quorum: 1,
            allow_self_approval: false, expire_after: 30m}
oncall: {channel: C0ONCALL, mention: S0ONCALL}
reports: {after: [24h, 48h]}
rollback: {automatic: true, requires_approval: true}
targets:
  - kube-system/nvidia-device-plugin-daemonset
  - dra-example-driver/dra-example-driver-kubeletplugin
"""


def test_design_policy_file_validates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A full policy file loads, with its targets as namespace/name."""
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY)
    monkeypatch.setenv("UPGRADEBOT_CONFIG", str(path))
    policy = Settings().policy()
    assert policy.target_refs == [
        "kube-system/nvidia-device-plugin-daemonset", "dra-example-driver/dra-example-driver-kubeletplugin"]
    assert policy.channels["C0OPS"].cluster == "prod-east"
    assert policy.gpu_resources == ["nvidia.com/gpu"]


@pytest.mark.parametrize(
    ("text", "problem"),
    [("targets: [nvidia-device-plugin]", "is not a target"),
     ("aprovers: {}", "aprovers"),
     ("approvers: {expire_after: soon}", "is not a duration"),
     ("targets: [", "not valid YAML")],
)
def test_bad_policy_files_say_what_is_wrong(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, problem: str) -> None:
    """A bad policy file is refused with the file, the key and the reason in one message."""
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    monkeypatch.setenv("UPGRADEBOT_CONFIG", str(path))
    with pytest.raises(SettingsError, match=problem):
        Settings().policy()


def test_kubeconfig_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--kubeconfig beats KUBECONFIG, which beats ~/.kube/config; none of them means in-cluster."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    assert Settings().kubeconfig_path() is None
    (tmp_path / ".kube").mkdir()
    (tmp_path / ".kube" / "config").write_text("")
    assert Settings().kubeconfig_path() == str(tmp_path / ".kube" / "config")
    monkeypatch.setenv("KUBECONFIG", "/a:/b")
    assert Settings().kubeconfig_path() == "/a:/b"
    assert Settings().kubeconfig_path("/c") == "/c"


def test_secrets_do_not_show_in_repr(monkeypatch: pytest.MonkeyPatch) -> None:
    """Slack secrets are SecretStr: a repr of the settings never shows them."""
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-very-secret")
    assert "xoxb-very-secret" not in repr(Settings())


def test_inventory_arguments() -> None:
    """``inventory cluster=<ctx>`` parses; unknown keys, repeats and stray words are usage errors."""
    assert inventory_handler.parse(["cluster=prod"]).cluster == "prod"
    assert inventory_handler.parse([]).cluster is None
    for words in (["foo=bar"], ["cluster=a", "cluster=b"], ["prod"], ["cluster="]):
        with pytest.raises(UsageError):
            inventory_handler.parse(words)


def test_every_policy_example_in_the_docs_validates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/policy.md stays true: each of its YAML blocks loads as a policy file, without error
    (a block showing one section gets the approvers every policy file must name)."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "policy.md").read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", doc, flags=re.S)
    assert blocks, "docs/policy.md has no YAML example"
    for number, block in enumerate(blocks):
        path = tmp_path / f"example-{number}.yaml"
        path.write_text(block if re.search(r"^approvers:", block, re.M) else "approvers: {users: [U0LEAD01]}\n" + block)
        monkeypatch.setenv("UPGRADEBOT_CONFIG", str(path))
        Settings().policy()
