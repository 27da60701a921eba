"""The claims of one process on its run threads' Slack effects, and the take-over of a dead holder's.

Each post of a run's thread that must be unique (the root, a step's or a gate's message, an
on-call notice) and each gate's closing rewrite is claimed in Redis right before its Slack
call (:meth:`~bot.storage.redis_store.RedisRunStore.claim_effect`), then recorded with the
run. A claim never recorded (its holder died, or stayed stopped, between the claim and the
record) keeps everyone else from the effect for its time to live
(:data:`~bot.storage.redis_store.EFFECT_TTL`, 10 minutes) — and a root message held so holds
every message of its thread, the gate's among them.

So a claim records who holds it: the process's owner id and its mark (:func:`bot.liveness.holder`:
boot and pid namespace, pid, start time). :meth:`EffectClaims.claim` finding an effect held by
a process that is provably dead (:func:`bot.liveness.holder_dead`: in this process's pid
space, and gone, a zombie, or its pid now another process's) takes the claim over at once,
in the script that checks the claim is still that holder's and the effect not recorded. A
holder that lives, however stopped or slow, and one this process cannot judge (another host
or container), keeps its claim until its time to live ends, as before. What the taker does is
what the sweep does once a claim lapsed: the effect again (the Web API has no idempotency
key, so a holder killed after Slack took its message but before its ``ts`` was recorded leaves
a second copy, sooner: docs/architecture.md, "Each thread message once").
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from bot.liveness import holder, holder_dead

if TYPE_CHECKING:
    from bot.storage.redis_store import RedisRunStore

log = logging.getLogger("upgradebot.slack.claims")


class EffectClaims:
    """``claim`` and ``release`` of :class:`~bot.slack.threads.SlackThreads`, for one owner id."""

    def __init__(self, store: RedisRunStore, *, owner: str) -> None:
        self.store, self.value = store, holder(owner)

    def claim(self, run_id: str, effect: str) -> tuple[str, str]:
        """Claim ``effect`` of ``run_id`` (see :meth:`RedisRunStore.claim_effect`); a claim held
        by a dead process is taken over (``("claimed", "")``)."""
        outcome, value = self.store.claim_effect(run_id, effect, owner=self.value)
        if outcome == "held" and value != self.value and holder_dead(value):
            dead = value
            outcome, value = self.store.claim_effect(run_id, effect, owner=self.value, dead=dead)
            if outcome == "claimed":
                log.warning("run %s: %s taken over from %s, which is gone", run_id, effect, dead)
        return outcome, value

    def release(self, run_id: str, effect: str) -> None:
        self.store.release_effect(run_id, effect, owner=self.value)
