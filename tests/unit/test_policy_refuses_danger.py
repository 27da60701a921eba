"""A policy file that would be dangerous is refused when it is read, with the key and why.

Each file here was accepted silently before: a later duplicate key overriding an earlier
one, IDs that are not Slack IDs (or carry trailing spaces), a quorum nobody can reach,
durations that make requests expire at once or the steps poll without pause, an empty
slash command, and a misspelt smoke-test key.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.settings import Settings, SettingsError

BASE = "approvers: {users: [U0LEAD1, U0LEAD2]}\n"


def load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> object:
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    monkeypatch.setenv("UPGRADEBOT_CONFIG", str(path))
    return Settings().policy()


@pytest.mark.parametrize(("text", "why"), [
    ("approvers: {users: [U0LEAD1]}\napprovers: {users: []}\n", "'approvers' is given twice"),
    ("approvers: {users: ['U0LEAD1 ']}\n", "not a Slack user ID"),
    ("approvers: {users: [alice]}\n", "not a Slack user ID"),
    ("approvers: {users: [U0LEAD1], usergroups: [leads]}\n", "not a Slack user group ID"),
    ("channels: {ops: {}}\n" + BASE, "not a Slack channel ID"),
    ("oncall: {channel: C0ONCALL, mention: '@oncall'}\n" + BASE, "not a Slack user or user group ID"),
    ("approvers: {users: [U0LEAD1], quorum: 2}\n", "quorum 2 is more than the 1 approver"),
    ("approvers: {users: [U0LEAD1, U0LEAD2], expire_after: 0s}\n", "at least 1m"),
    ("steps: {poll_interval: 0s}\n" + BASE, "at least 0.1s"),
    ("slash_command: ''\n" + BASE, "slash command"),
    ("steps: {smoke_test: {image: 'nvcr.io/x:1', timout: 300}}\n" + BASE, "timout"),
    ("approvers: {users: []}\n", "approvers: name at least one user or user group"),
    ("requesters: {users: [U0PLAT1]}\n", "approvers: name at least one user or user group"),
    ("", "approvers: name at least one user or user group"),
    ("identities: {accounts: {'bob smith': U0BOB}}\n" + BASE, "not an OS account name"),
    ("identities: {accounts: {bob: bob}}\n" + BASE, "not a Slack user ID"),
    ("identities: {tokens: [{name: ci, sha256: abc, user: U0CI1}]}\n" + BASE, "not a SHA-256"),
    ("identities: {tokens: [{name: ci, sha256: " + "a" * 64 + ", user: U0CI1}, {name: ci2, sha256: " + "a" * 64
     + ", user: U0CI2}]}\n" + BASE, "its own token"),
    ("shell: {approvals: yes-please}\n" + BASE, "shell.approvals"),
    ("limits: {longest_wait: 99999999d}\n" + BASE, "too long"),
    ("limits: {per_user: 0}\n" + BASE, "limits.per_user"),
])
def test_a_dangerous_policy_is_refused_with_the_key_and_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, why: str,
) -> None:
    with pytest.raises(SettingsError, match=why) as refused:
        load(tmp_path, monkeypatch, text)
    assert "\n" not in str(refused.value)


def test_a_sound_policy_still_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A group may hold any number of approvers, so a quorum above the listed users is kept."""
    load(tmp_path, monkeypatch, "approvers: {users: [U0LEAD1], usergroups: [S0LEADS], quorum: 3}\n"
         "steps: {smoke_test: {image: 'nvcr.io/x:1', timeout: 300, gpus: 1, runtime_class: nvidia}}\n"
         "oncall: {channel: C0ONCALL, mention: S0ONCALL}\nchannels: {C0OPS: {cluster: prod}}\n")


LONG = "a" * 70
TARGET_DS = "name: nvidia-device-plugin-daemonset"


@pytest.mark.parametrize(("text", "key"), [
    (f"targets: [{{namespace: {LONG}, {TARGET_DS}}}]\n", "targets.0.namespace"),
    (f"targets: [{{namespace: Kube_System, {TARGET_DS}}}]\n", "targets.0.namespace"),
    (f"targets: [{{namespace: kube-system, {TARGET_DS}}}, {{namespace: '-gpu', {TARGET_DS}}}]\n", "targets.1.namespace"),
    (f"targets: ['{LONG}/nvidia-device-plugin-daemonset']\n", "targets"),
    ("targets: [{namespace: kube-system, name: Plugin_DS}]\n", "targets.0.name"),
    (f"migrations: {{namespaces: [ml-team, {LONG}]}}\n", "migrations.namespaces.1"),
    ("migrations: {namespaces: [ml-team, 'ml.team']}\n", "migrations.namespaces.1"),
    (f"steps: {{smoke_test: {{namespace: {'b' * 64}}}}}\n", "steps.smoke_test.namespace"),
    ("steps: {smoke_test: {runtime_class: NVIDIA_Runtime}}\n", "steps.smoke_test.runtime_class"),
    ("steps: {smoke_test: {runtime_class: [nvidia]}}\n", "steps.smoke_test.runtime_class"),
])
def test_a_namespace_that_is_no_dns_label_is_refused_naming_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, key: str,
) -> None:
    """Attack finding 6: every namespace the policy names (a target's, migrations.namespaces, the
    smoke test's) is a DNS-1123 label, at most 63 lower-case letters, digits and '-', starting
    and ending with a letter or digit; anything else is refused in one line naming the key."""
    with pytest.raises(SettingsError) as refused:
        load(tmp_path, monkeypatch, BASE + text)
    said = str(refused.value)
    assert f": {key}: " in said and ("namespace" in said or "target" in said or "name" in said), said
    assert "\n" not in said and "Traceback" not in said


def test_a_63_character_namespace_is_a_label(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ns = "a" + "-" * 61 + "z"
    policy = load(tmp_path, monkeypatch, BASE + f"targets: [{{namespace: {ns}, {TARGET_DS}}}]\n"
                  f"migrations: {{namespaces: [{ns}]}}\n")
    assert policy.targets[0].namespace == ns  # type: ignore[attr-defined]
