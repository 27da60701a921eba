"""Who acts on a run, and through which surface: what every audit line records.

An :class:`Actor` is a person as a front end vouches for them: the user id (Slack's, or
the one the policy's ``identities`` maps a shell account to), the policy groups the front
end found them in, the surface (``slack``, ``shell``, ``console``, ``demo``) and, from a
shell, the OS account or CI identity (``alice``, ``ci:release``; never a host, which is not
verified). Lines the engine writes by itself have the surface ``engine``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

ENGINE_ACTOR = "upgradebot"
ENGINE_SURFACE = "engine"
LOCAL_SURFACES = frozenset({"shell", "console"})
"""Surfaces whose identity is an OS account or a CI token, not a Slack session: they may
approve only when the policy says ``shell.approvals: true``."""


@dataclass(frozen=True)
class Actor:
    """Who acts: a user id, the usergroup ids the front end found them in, and where from."""

    user: str
    groups: frozenset[str] = field(default_factory=frozenset)
    surface: str = ""
    account: str = ""
    """The shell's OS account or CI identity (``alice``, ``ci:release``); else empty."""

    @property
    def local(self) -> bool:
        return self.surface in LOCAL_SURFACES


def as_actor(who: str | Actor) -> Actor:
    """``who`` as an :class:`Actor`: a bare user id is the engine's doing (surface ``engine``)."""
    return who if isinstance(who, Actor) else Actor(who, surface=ENGINE_SURFACE)
