"""The policy's booleans and numbers are what the file says, never coerced (attack finding 9).

``allow_self_approval: 'yes'`` (a string) used to turn self-approval on, ``rollback.automatic:
'false'`` read as False, ``quorum: true`` as 1. A boolean is ``true`` or ``false``; an integer
a whole number, never a boolean; a number (seconds) a number, never a string. YAML 1.1's
unquoted ``yes``/``no``/``on``/``off`` are strings in the policy file (docs/policy.md says
why), so they are refused as well. Each refusal is one line naming the key.

The walk over the models covers every boolean and number the policy has, the sections
added later included.
"""

from __future__ import annotations

import json
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin

import pytest
from pydantic import BaseModel

from bot.settings import Settings, SettingsError
from runbooks.policy import Policy

APPROVER = "approvers: {users: [U0BOB]}\n"


def refusal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> str:
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    monkeypatch.setenv("UPGRADEBOT_CONFIG", str(path))
    with pytest.raises(SettingsError) as refused:
        Settings().policy()
    message = str(refused.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(("text", "said"), [
    ("approvers: {users: [U0BOB], allow_self_approval: 'yes'}",
     "approvers.allow_self_approval: must be true or false, not the string 'yes'"),
    ("approvers: {users: [U0BOB], allow_self_approval: yes}",
     "approvers.allow_self_approval: must be true or false, not the string 'yes'"),
    ("approvers: {users: [U0BOB], allow_self_approval: On}",
     "approvers.allow_self_approval: must be true or false, not the string 'On'"),
    ("approvers: {users: [U0BOB], allow_self_approval: 1}",
     "approvers.allow_self_approval: must be true or false, not 1"),
    (APPROVER + "rollback: {automatic: 'false'}", "rollback.automatic: must be true or false, not the string 'false'"),
    (APPROVER + "rollback: {automatic: no}", "rollback.automatic: must be true or false, not the string 'no'"),
    (APPROVER + "rollback: {requires_approval: 0}", "rollback.requires_approval: must be true or false, not 0"),
    ("approvers: {users: [U0BOB], quorum: true}", "approvers.quorum: must be a whole number, not true"),
    ("approvers: {users: [U0BOB], quorum: '1'}", "approvers.quorum: must be a whole number, not the string '1'"),
    ("approvers: {users: [U0BOB], quorum: 1.0}", "approvers.quorum: must be a whole number, not 1.0"),
    (APPROVER + "limits: {per_user: false}", "limits.per_user: must be a whole number, not false"),
    (APPROVER + "steps: {smoke_test: {timeout: '120'}}",
     "steps.smoke_test.timeout: must be a number, not the string '120'"),
    (APPROVER + "verify: {metrics: [{name: xid, query: up, condition: result == 0, failure_limit: true}]}",
     "verify.metrics.0.failure_limit: must be a whole number, not true"),
    (APPROVER + "prometheus: {url: 'http://prometheus:9090', timeout: '5'}",
     "prometheus.timeout: must be a number, not the string '5'"),
    # a second attack run (N5): YAML 1.1's other integer forms, which YAML 1.2 tools read otherwise
    ("approvers: {users: [U0BOB], quorum: 010}", "approvers.quorum: must be a whole number, not the string '010'"),
    ("approvers: {users: [U0BOB], quorum: 0x10}", "approvers.quorum: must be a whole number, not the string '0x10'"),
    ("approvers: {users: [U0BOB], quorum: 1_0}", "approvers.quorum: must be a whole number, not the string '1_0'"),
    ("approvers: {users: [U0BOB], quorum: 1:05}", "approvers.quorum: must be a whole number, not the string '1:05'"),
])
def test_a_boolean_or_number_of_another_type_is_refused_naming_the_key(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, said: str) -> None:
    """finding 9: no coercion; the one line names the key, what it must be and what it was."""
    assert said in refusal(tmp_path, monkeypatch, text)


def test_true_false_whole_numbers_and_integral_seconds_still_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the policy always meant still loads: true/false (any case YAML 1.2 allows), whole
    numbers, a number of seconds written as a whole number, durations as strings."""
    path = tmp_path / "policy.yaml"
    path.write_text("approvers: {users: [U0A1, U0A2], quorum: 2, allow_self_approval: True, expire_after: 30m}\n"
                    "rollback: {automatic: FALSE, requires_approval: false}\n"
                    "steps: {observe_window: 5s, smoke_test: {image: 'cuda:1', timeout: 60}}\n"
                    "prometheus: {url: 'http://prometheus:9090', timeout: 2.5}\n")
    monkeypatch.setenv("UPGRADEBOT_CONFIG", str(path))
    policy = Settings().policy()
    assert policy.approvers.quorum == 2 and policy.approvers.allow_self_approval is True
    assert policy.rollback.automatic is False
    assert policy.steps.smoke_test is not None and policy.steps.smoke_test.timeout == 60.0
    assert policy.prometheus is not None and policy.prometheus.timeout == 2.5


def _fields(model: type[BaseModel], path: list[str | int]) -> Iterator[tuple[list[str | int], Any]]:
    """``(path, annotation)`` of every field under ``model``, descending into models, lists and mappings."""
    for name, field in model.model_fields.items():
        yield from _under(field.annotation, [*path, field.alias or name])


def _under(annotation: Any, path: list[str | int]) -> Iterator[tuple[list[str | int], Any]]:
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        yield from _under(args[0], path)
    elif origin in (Union, types.UnionType):
        for arg in args:
            if arg is not type(None):
                yield from _under(arg, path)
    elif origin is list:
        yield from _under(args[0], [*path, 0])
    elif origin is dict:
        yield from _under(args[1], [*path, "C0OPS"])
    elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield from _fields(annotation, path)
    else:
        yield path, annotation


def _nested(path: list[str | int], value: object) -> object:
    """The policy data holding ``value`` at ``path`` (a list of one item for an index)."""
    for part in reversed(path):
        value = [value] if isinstance(part, int) else {part: value}
    return value


def _typed(kind: type) -> list[list[str | int]]:
    return [path for path, annotation in _fields(Policy, []) if annotation is kind]


@pytest.mark.parametrize(("kind", "bad", "said"), [
    (bool, "yes", "must be true or false, not the string 'yes'"),
    (bool, "false", "must be true or false, not the string 'false'"),
    (bool, 1, "must be true or false, not 1"),
    (int, True, "must be a whole number, not true"),
    (int, "2", "must be a whole number, not the string '2'"),
    (float, True, "must be a number, not true"),
    (float, "30", "must be a number, not the string '30'"),
])
def test_every_boolean_and_number_of_the_policy_is_strict(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: type, bad: object, said: str) -> None:
    """finding 9, everywhere: each boolean, integer and float field of every section, found by
    walking the models, refuses a value of another type with its own key named."""
    paths = _typed(kind)
    assert len(paths) >= {bool: 9, int: 5, float: 2}[kind], paths  # the walk found them (not vacuous)
    for path in paths:
        data = _nested(path, bad)
        if path[0] != "approvers":
            data = {"approvers": {"users": ["U0BOB"]}, **data}  # type: ignore[dict-item]
        message = refusal(tmp_path, monkeypatch, json.dumps(data))
        key = ".".join(str(p) for p in path)
        assert f"{key}: {said}" in message, (key, message)
