"""Who the shell acts as: derived from the invoking account through the policy, never taken on trust.

The shell (and the console) cannot see a Slack session, so it never believes a name it
is given (``--as``, ``$USER``). It asks the operating system which account runs it (the
effective uid's name) and maps that, through the policy's ``identities.accounts``, to a
Slack user id. A CI job instead holds a secret token in ``UPGRADEBOT_TOKEN``: the policy
keeps only its SHA-256 (``identities.tokens``) and the user id the job acts as. ``--as``
may only name the identity found this way (or the account itself): it documents, it never
chooses.

The host is never part of an identity (finding 2 of the security review). Any user can
name their host as they like in a UTS namespace of their own (``unshare -Ur -u hostname
bastion-1``), so ``alice@bastion-1`` is refused when the policy is read, and the audit
records the account alone. A host identity the process cannot change was weighed and
left out: ``/etc/machine-id``, even owned by root, can be bind-mounted over in a mount
namespace of the user's own (``unshare -Urm``), and with a subordinate uid range
(``/etc/subuid``, common for rootless containers) the fake shows as owned by root too.
The account itself has the same weakness: in a user namespace a process takes any uid
(``unshare --map-user=<uid>``), and the passwd file says whose name that is. So an OS
account is believed only in the machine's own user namespace (``/proc/self/uid_map`` the
identity map); from inside another one it is refused, token or not aside. That check is a
tripwire, not a wall: a user who also mounts over ``/proc/<pid>/uid_map``, or who runs a
changed copy of this program, passes it. What holds against them is what the shell needs
besides its identity: Redis (``REDIS_URL``) and the cluster's credentials. Give those only
to accounts that may act, or disable unprivileged user namespaces on a host whose accounts
the policy maps (``sysctl user.max_user_namespaces=0``); a CI token, being a secret, is
not spoofed this way.

A policy without any ``identities`` leaves the OS account as the identity: it can
request when the policy lets anyone request, and never approve (approvers are Slack ids,
and ``shell.approvals: true`` needs ``identities``). An account named like a Slack ID
(``U0LEAD``) is then refused, never taken as that Slack user (finding 7). Every audit line
of a shell command records the surface, the identity and the account (``alice``,
``ci:release``).

``docs/security.md`` says what to trust.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import pwd
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from handlers import messages as msg

if TYPE_CHECKING:  # the policy's models are loaded by the settings, when a verb reads them (issue 39)
    from runbooks.policy import Policy

TOKEN_ENV = "UPGRADEBOT_TOKEN"
SLACK_ID_SHAPED = re.compile(r"[A-Z][A-Z0-9]{2,}")
"""Any Slack ID's shape (users U…/W…, groups S…, channels, teams): an unmapped account named so is refused."""
UID_MAP = Path("/proc/self/uid_map")
IDENTITY_MAP = ["0", "0", "4294967295"]
"""``/proc/self/uid_map`` in the machine's own user namespace: every uid is itself."""


class IdentityRefused(Exception):
    """The caller has no identity the policy vouches for, or ``--as`` names someone else."""


@dataclass(frozen=True)
class ShellIdentity:
    """Who acts, and what they were found as."""

    user: str
    """The user id the policy maps the caller to (the OS account when it maps none)."""
    account: str
    """``alice`` (an OS account) or ``ci:release`` (a CI token), for the audit; never a host."""
    mapped: bool


def os_account() -> str:
    """The name of the account this process runs as (its effective uid; ``$USER`` is not asked)."""
    uid = os.geteuid()
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:  # a container's uid without a passwd entry
        return f"uid-{uid}"


def in_user_namespace(uid_map: Path = UID_MAP) -> bool:
    """Whether this process runs in a user namespace other than the machine's own (its uid map
    is not the identity map); False where the kernel has no such file."""
    try:
        return uid_map.read_text().split() != IDENTITY_MAP
    except OSError:
        return False


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def resolve(policy: Policy, *, token: str | None, account: str | None = None,
            uid_map: Path = UID_MAP) -> ShellIdentity:
    """The caller's identity; :class:`IdentityRefused` when the policy maps identities and this
    caller is not one of them (or the token is not one it knows), when the OS account is seen
    from inside a user namespace, or when an unmapped account is named like a Slack ID."""
    identities = policy.identities
    if token:
        digest = _digest(token)
        for entry in identities.tokens:
            if hmac.compare_digest(entry.sha256, digest):
                return ShellIdentity(user=entry.user, account=f"ci:{entry.name}", mapped=True)
        raise IdentityRefused(f"{TOKEN_ENV} matches no identities.tokens entry of the policy: nothing was done")
    account = account or os_account()
    if in_user_namespace(uid_map):
        raise IdentityRefused(msg.identity_in_user_namespace(account))
    user = identities.accounts.get(account)
    if user is not None:
        return ShellIdentity(user=user, account=account, mapped=True)
    if not identities.empty:
        raise IdentityRefused(msg.identity_unmapped(account))
    if SLACK_ID_SHAPED.fullmatch(account):
        raise IdentityRefused(msg.identity_named_like_slack(account))
    return ShellIdentity(user=account, account=account, mapped=False)


def check_as(identity: ShellIdentity, as_user: str | None) -> None:
    """``--as`` may name the caller's own identity (or account), no one else."""
    if not as_user:
        return
    if as_user.strip() not in (identity.user, identity.account):
        raise IdentityRefused(
            f"--as {as_user.strip()} refused: you act as {identity.user} ({identity.account}, as the policy's "
            "identities map you); --as may only name that identity: nothing was done")
