"""A submission whose write got no answer in time is taken back (``_Broker.retract``).

Found by the fuzz test of submissions while Redis hangs (``tests/e2e/test_fuzz_requests.py``):
under load, a Redis stopped (SIGSTOP) after it stored a batch and before it answered had
stored a submission the front end told "busy". The removal is sent at once on a socket of its
own, without the connection's handshake (which would wait on the stopped Redis), and runs when
Redis runs again.
"""

from __future__ import annotations

import json
import os
import signal
import time

from bot.jobs import ACK_DEADLINE, NAMESPACE, Jobs
from bot.storage.embedded import EmbeddedRedis
from bot.storage.redis_store import raw_client
from tests.e2e.runs_support import eventually


def test_a_stored_submission_taken_back_while_redis_is_stopped_is_gone_once_it_runs() -> None:
    with EmbeddedRedis() as server:
        jobs = Jobs.from_url(server.url, deadline=ACK_DEADLINE)
        assert jobs.submit("commands", "command", {"name": "kept"})
        message = jobs._actors["commands"].message("command", {"name": "told-busy", "queued_at": time.time()})
        jobs.broker.enqueue_by(message, time.monotonic() + ACK_DEADLINE)  # stored, as by a write whose answer came late
        sent = jobs.broker.sent()
        assert sent is not None and sent[0] == "commands"
        redis = raw_client(server.url)
        assert redis.hexists(f"{NAMESPACE}:commands.msgs", sent[1])
        pid = server._proc.pid  # type: ignore[union-attr]
        os.kill(pid, signal.SIGSTOP)
        try:
            jobs.broker.retract(*sent)  # a handshake would time out on the stopped Redis: nothing sent
        finally:
            os.kill(pid, signal.SIGCONT)

        def names() -> set[str]:
            return {json.loads(m)["args"][1]["name"] for m in redis.hvals(f"{NAMESPACE}:commands.msgs")}

        eventually(lambda: names() == {"kept"}, "the removal run once Redis runs again", timeout=10)
        assert sent[1].encode() not in redis.lrange(f"{NAMESPACE}:commands", 0, -1)
