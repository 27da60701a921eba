"""Who the shell acts as: derived from the invoking account through the policy, never taken on trust.

The shell (and the console) cannot see a Slack session, so it never believes a name it
is given (``--as``, ``$USER``). It asks the operating system which account runs it (the
effective uid's name) and maps that, through the policy's ``identities.accounts``, to a
Slack user id; ``alice@bastion-1`` maps alice on that host only, ``alice`` on any host. A
CI job instead holds a secret token in ``UPGRADEBOT_TOKEN``: the policy keeps only its
SHA-256 (``identities.tokens``) and the user id the job acts as. ``--as`` may only name the
identity found this way (or the account itself): it documents, it never chooses.

A policy without any ``identities`` leaves the OS account as the identity: it can
request when the policy lets anyone request, and never approve (approvers are Slack ids).
Approving from the shell at all needs ``shell.approvals: true``; the engine refuses it
otherwise. Every audit line of a shell command records the surface, the identity and the
account with its host.

This is as strong as the machine's accounts: whoever can run commands as alice on a
host that maps alice acts as alice. ``docs/security.md`` says what to trust.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import pwd
import socket
from dataclasses import dataclass

from runbooks.policy import Policy

TOKEN_ENV = "UPGRADEBOT_TOKEN"


class IdentityRefused(Exception):
    """The caller has no identity the policy vouches for, or ``--as`` names someone else."""


@dataclass(frozen=True)
class ShellIdentity:
    """Who acts, and what they were found as."""

    user: str
    """The user id the policy maps the caller to (the OS account when it maps none)."""
    account: str
    """``alice@bastion-1`` (an OS account) or ``ci:release@runner-7`` (a CI token), for the audit."""
    mapped: bool


def os_account() -> str:
    """The name of the account this process runs as (its effective uid; ``$USER`` is not asked)."""
    uid = os.geteuid()
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:  # a container's uid without a passwd entry
        return f"uid-{uid}"


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def resolve(policy: Policy, *, token: str | None, account: str | None = None, host: str | None = None) -> ShellIdentity:
    """The caller's identity; :class:`IdentityRefused` when the policy maps identities and this
    caller is not one of them (or the token is not one it knows)."""
    account = account or os_account()
    host = host or socket.gethostname()
    identities = policy.identities
    if token:
        digest = _digest(token)
        for entry in identities.tokens:
            if hmac.compare_digest(entry.sha256, digest):
                return ShellIdentity(user=entry.user, account=f"ci:{entry.name}@{host}", mapped=True)
        raise IdentityRefused(f"{TOKEN_ENV} matches no identities.tokens entry of the policy: nothing was done")
    for key in (f"{account}@{host}", account):
        user = identities.accounts.get(key)
        if user is not None:
            return ShellIdentity(user=user, account=f"{account}@{host}", mapped=True)
    if identities.empty:
        return ShellIdentity(user=account, account=f"{account}@{host}", mapped=False)
    raise IdentityRefused(
        f"the OS account {account} on {host} has no identity in the policy (identities.accounts): "
        "ask an operator to map it to your Slack user ID; nothing was done")


def check_as(identity: ShellIdentity, as_user: str | None) -> None:
    """``--as`` may name the caller's own identity (or account), no one else."""
    if not as_user:
        return
    account = identity.account.rsplit("@", 1)[0]
    if as_user.strip() not in (identity.user, account):
        raise IdentityRefused(
            f"--as {as_user.strip()} refused: you act as {identity.user} ({identity.account}, as the policy's "
            "identities map you); --as may only name that identity: nothing was done")
