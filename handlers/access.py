"""Who is who: user ids and the members of user groups, as the policy names them.

The policy lists principals as user ids and user-group ids (``S…``). Resolving a group
is the front end's job: Slack asks ``usergroups.users.list`` (``bot/slack/web.py``,
cached), the console and the tests use :class:`StaticDirectory`. Who may request or
approve is the run engine's rule (:mod:`runbooks.engine.approving`); this module only finds the
groups a user is in, as :attr:`~runbooks.engine.approving.Actor.groups`.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import TYPE_CHECKING, Protocol

from runbooks.engine.actors import Actor

if TYPE_CHECKING:  # types only: the shell's reading verbs load no policy model (issue 39)
    from runbooks.policy import Policy, Principals


class DirectoryUnavailable(Exception):
    """The members of a group could not be read; nothing may be allowed on a guess."""


class Directory(Protocol):
    def members(self, usergroup: str) -> frozenset[str]:
        """User ids in the group; ``DirectoryUnavailable`` when it cannot be read."""
        ...


class StaticDirectory:
    """Groups given up front: the console, the demo and the tests."""

    def __init__(self, groups: Mapping[str, Collection[str]] | None = None) -> None:
        self._groups = {name: frozenset(users) for name, users in (groups or {}).items()}

    def members(self, usergroup: str) -> frozenset[str]:
        return self._groups.get(usergroup, frozenset())


def is_listed(user: str, principals: Principals, directory: Directory) -> bool:
    """``user`` is one of the principals' users or a member of one of their groups."""
    if user in principals.users:
        return True
    return any(user in directory.members(group) for group in principals.usergroups)


def groups_of(user: str, directory: Directory, usergroups: Iterable[str]) -> frozenset[str]:
    """The ``usergroups`` that ``user`` is a member of (for the engine's ``Actor.groups``)."""
    return frozenset(group for group in usergroups if user in directory.members(group))


def policy_groups(policy: Policy) -> list[str]:
    """Every usergroup the policy grants something to: requesters and approvers (the on-call
    mention grants nothing, so it is never looked up to decide)."""
    return list(dict.fromkeys([*policy.requesters.usergroups, *policy.approvers.usergroups]))


def requester(user: str, policy: Policy, directory: Directory) -> Actor:
    """``user`` with the requester groups they are in (none looked up when listed by id)."""
    if user in policy.requesters.users:
        return Actor(user)
    return Actor(user, groups_of(user, directory, policy.requesters.usergroups))


def actor(user: str, policy: Policy, directory: Directory) -> Actor:
    """``user`` with every policy group they are in: what the engine checks requests and approvals on."""
    return Actor(user, groups_of(user, directory, policy_groups(policy)))
