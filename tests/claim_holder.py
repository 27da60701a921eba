"""A process that claims one Slack effect of a run's thread as a ``serve`` worker does, then
holds it: the state a worker killed between its claim and the record of Slack's answer leaves.

``python -m tests.claim_holder <redis url> <run id> <effect>`` claims ``<effect>`` (``ts``: the
run's root message) with its own owner id, the way ``serve`` wires its run threads' claims,
prints ``claimed`` (or what the claim answered) and waits on stdin; the test then SIGKILLs it
(the claim's owner is dead) or SIGSTOPs it (a live owner, stopped in its Slack call).
"""

from __future__ import annotations

import os
import socket
import sys

from bot.storage.redis_store import RedisRunStore
from runbooks.engine.leasing import owner_id


def main(argv: list[str]) -> int:
    redis_url, run_id, effect = argv[:3]
    store = RedisRunStore.from_url(redis_url)
    owner = owner_id(socket.gethostname(), os.getpid())  # a worker's engine owner, as build_engine makes it
    try:  # serve's claims (absent before finding 10: run to see the test fail there)
        from bot.slack.claims import EffectClaims
    except ImportError:
        outcome, _ = store.claim_effect(run_id, effect, owner=owner)
    else:
        outcome, _ = EffectClaims(store, owner=owner).claim(run_id, effect)
    print(outcome, flush=True)
    sys.stdin.read()  # held until killed, or stopped and then killed
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
