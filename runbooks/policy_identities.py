"""The policy's ``identities``: who the shell acts as (OS accounts and CI tokens, each mapped to
a Slack user), as validated pydantic models, no I/O (see :mod:`runbooks.policy`)."""

from __future__ import annotations

import re

from pydantic import Field, field_validator, model_validator

from runbooks.policy_checks import USER_ID, Strict, account_without_host
from runbooks.policy_checks import slack_ids as _ids

ACCOUNT = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}(@[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?)?$")
IDENTITY_NAME = re.compile(r"^[a-z0-9]([a-z0-9._-]{0,62}[a-z0-9])?$")
SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")


class TokenIdentity(Strict):
    """A CI identity: the job holds a secret token (``UPGRADEBOT_TOKEN``), the policy only
    its SHA-256, and the Slack user the job acts as."""

    name: str
    sha256: str
    user: str

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not IDENTITY_NAME.fullmatch(value):
            raise ValueError(f"{value!r} is not an identity name: lower-case letters, digits, '.', '_' and '-'")
        return value

    @field_validator("sha256")
    @classmethod
    def _digest(cls, value: str) -> str:
        if not SHA256_HEX.fullmatch(value):
            raise ValueError("not a SHA-256: 64 lower-case hex digits (printf %s \"$TOKEN\" | sha256sum)")
        return value

    @field_validator("user")
    @classmethod
    def _user(cls, value: str) -> str:
        return _ids([value], USER_ID, "user")[0]


class Identities(Strict):
    """Who the shell acts as: never what it is told (``--as``, ``$USER``), always what the
    policy maps the invoking OS account, or the CI job's token, to."""

    accounts: dict[str, str] = Field(default_factory=dict)
    """OS account (``alice``) -> Slack user ID; ``alice@bastion-1`` is refused (a host name is not an identity)."""
    tokens: list[TokenIdentity] = Field(default_factory=list)

    @field_validator("accounts")
    @classmethod
    def _accounts(cls, value: dict[str, str]) -> dict[str, str]:
        for account, user in value.items():
            if not ACCOUNT.fullmatch(account):
                raise ValueError(f"{account!r} is not an OS account name")
            account_without_host(account)
            _ids([user], USER_ID, "user")
        return value

    @model_validator(mode="after")
    def _distinct(self) -> Identities:
        names = [t.name for t in self.tokens]
        digests = [t.sha256 for t in self.tokens]
        if len(set(names)) != len(names) or len(set(digests)) != len(digests):
            raise ValueError("every token identity needs its own name and its own token")
        return self

    @property
    def empty(self) -> bool:
        return not self.accounts and not self.tokens
