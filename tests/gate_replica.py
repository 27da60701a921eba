"""One replica's run driver with its Slack thread, alone in its process, for the gate starvation test.

``python -m tests.gate_replica <redis url> <kubeconfig> <slack api url> <owner> <lease s> <run id> <mode> [<stop at>]``
builds what ``serve`` wires for a runs worker: the engine with the DaemonSet steps on real
Redis and on kubesim through its kubeconfig (a lease of ``<lease s>`` seconds), its observer
the run's Slack thread (:class:`~bot.slack.threads.SlackThreads`, paced one call a second
per channel as ``serve`` is, its effects claimed in Redis as ``serve`` claims them), and
prints ``ready``. ``drive`` mode reads a line (the test's go), drives the run once, sends
what its thread has queued and exits. ``decide`` mode reads a line (the clicked gate
message: its button's value, its ts, the root's ts), decides U0CAROL's Approve on it and
rewrites it as a decision worker's click listener does (``bot.slack.app``), sends what its
thread has queued and exits. ``sweep`` mode is a replica's sweep every 100 ms until
SIGTERM: drive the run (it takes the run over once the other's lease ran out) and reconcile
the thread (a gate message not posted yet goes out, a closed one still showing its buttons
is rewritten: ``min_age`` 0 here, where ``serve`` leaves a gate a minute to the process that
opened it, so that the test need not wait a minute); ``reconcile`` mode only reconciles.
With ``<stop at>`` the process stops itself (SIGSTOP) at that engine checkpoint
(:func:`tests.starving.stop_self_at`).
"""

from __future__ import annotations

import datetime as dt
import signal
import sys
import threading
from typing import Any

from slack_sdk import WebClient

from bot.slack.blocks import render_message
from bot.slack.claims import EffectClaims
from bot.slack.metrics import Metrics
from bot.slack.pacing import Pacer
from bot.slack.threads import SlackThreads
from bot.slack.web import SlackWeb
from bot.storage.redis_store import RedisRunStore
from handlers.access import StaticDirectory
from handlers.clicks import Click, EngineDecisions
from runbooks.cluster import Cluster
from runbooks.daemonset.steps import DaemonSetSteps
from runbooks.engine.commands import Engine
from runbooks.engine.runs import Run
from runbooks.engine.store import LeaseLost
from runbooks.policy import Policy
from tests.fakeslack import BOT_TOKEN
from tests.run_replica import POLICY
from tests.starving import stop_self_at

CHANNEL = "C0OPS"


def main(argv: list[str]) -> int:
    redis_url, kubeconfig, api_url, owner, lease, run_id, mode = argv[:7]
    store = RedisRunStore.from_url(redis_url)
    engine: Engine | None = None

    def set_origin(run_id: str, **refs: str) -> Run:
        assert engine is not None
        return engine.set_origin(run_id, **refs)

    claims: dict[str, Any] = {}
    if hasattr(store, "claim_effect"):  # absent before issue 40 (run to see the test fail there)
        effects = EffectClaims(store, owner=owner)  # as serve claims them
        claims["claim"], claims["release"] = effects.claim, effects.release
    threads = SlackThreads(web=SlackWeb(WebClient(token=BOT_TOKEN, base_url=api_url), Metrics()), pacer=Pacer(1.0),
                           set_origin=set_origin, audit=store.audit, **claims)
    engine = Engine(store=store, steps=DaemonSetSteps(), policy=Policy.model_validate(POLICY), owner=owner,
                    connect=lambda context: Cluster.from_kubeconfig(kubeconfig, context), observer=threads,
                    lease_ttl=dt.timedelta(seconds=float(lease)), checkpoint=stop_self_at(argv[7] if argv[7:] else None))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print("ready", flush=True)
    try:
        if mode == "drive":
            sys.stdin.readline()
            print(f"{owner} drove {run_id}: {engine.advance(run_id).state.value}", file=sys.stderr, flush=True)
        elif mode == "decide":
            value, gate_ts, root_ts = sys.stdin.readline().split()
            decisions = EngineDecisions(engine=engine, policy=engine.policy, directory=StaticDirectory())
            decided = decisions.decide(Click(action="approve", value=value, user="U0CAROL", channel=CHANNEL,
                                             message_ts=gate_ts, thread_ts=root_ts))
            print(f"{owner} decided {value}: {decided.accepted}", file=sys.stderr, flush=True)
            if decided.replace is not None:
                payload = render_message(decided.replace)[0]
                if claims:
                    threads.rewrite_decided(value, CHANNEL, gate_ts, payload)
                else:  # before issue 40, the listener's plain chat.update
                    threads.web.update(CHANNEL, gate_ts, payload)
        else:
            while not stop.wait(0.1):
                if mode == "sweep":
                    engine.advance(run_id)
                queued = threads.reconcile([engine.get(run_id)], min_age=0)
                if queued:
                    print(f"{owner} reconciled {queued} gate(s)", file=sys.stderr, flush=True)
    except LeaseLost as exc:
        print(f"{owner} lost the lease: {exc}", file=sys.stderr, flush=True)
    finally:
        threads.pacer.close(30)
        store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
