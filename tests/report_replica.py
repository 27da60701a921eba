"""One bot process's report machinery, alone in its process, for the starvation tests.

``python -m tests.report_replica <redis url> <kubeconfig> <slack api url> <owner> <lease s> <after>...``
builds what :func:`tests.report_support.world` builds (real Redis, kubesim through its
kubeconfig, the fake Slack through ``SlackOutlet``) and drives its scheduler on kubesim's
clock as the demo does: :meth:`~bot.reports.scheduler.ReportScheduler.run_due` every 50 ms.
It prints ``ready`` once it has ticked, and stops (lease given up) on SIGTERM. A test may
SIGSTOP and SIGCONT it: a process starved past its lease.
"""

from __future__ import annotations

import datetime as dt
import signal
import sys
import threading
from typing import Any

from slack_sdk import WebClient

from bot.reports import posting
from bot.slack.metrics import Metrics
from bot.slack.threads import SlackOutlet
from bot.slack.web import SlackWeb
from runbooks.cluster import Cluster
from tests.fakeslack import BOT_TOKEN
from tests.report_support import RETRIES, policy, world


def main(argv: list[str]) -> int:
    redis_url, kubeconfig, api_url, owner, lease = argv[:5]
    pol = policy(*argv[5:])
    if hasattr(posting, "CLAIM_TTL"):
        # Only versions before issue 40 (run to see the starvation test fail there): their report
        # claim lasted a TTL (5 min), scaled down here as the lease is, so that the test's stop
        # outlasts it. Today's claims have no TTL; the fencing token decides.
        posting.CLAIM_TTL = dt.timedelta(seconds=float(lease))  # type: ignore[attr-defined]
    web = SlackWeb(WebClient(token=BOT_TOKEN, base_url=api_url), Metrics())
    sim: Any = None  # kubesim runs in the test's process: reached through its kubeconfig

    def connect(context: str | None) -> Cluster:
        return Cluster.from_kubeconfig(kubeconfig, context, retry=RETRIES)

    w = world(redis_url, sim, pol, SlackOutlet(web, pol), owner=owner, connect=connect, tick=0.05,
              lease_ttl=float(lease), retry_after=0.5)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    w.scheduler.run_due()
    print("ready", flush=True)
    try:
        while not stop.wait(0.05):
            for run_id, after, outcome in w.scheduler.run_due():
                print(f"{owner} {run_id} {after} {outcome}", file=sys.stderr, flush=True)
    finally:
        w.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
