"""One replica's run driver, alone in its process, for the run-step starvation test.

``python -m tests.run_replica <redis url> <kubeconfig> <owner> <lease s> <run id> <mode> [<stop at>]``
builds the engine with the DaemonSet steps on real Redis and on kubesim through its
kubeconfig, with a lease of ``<lease s>`` seconds, and prints ``ready``. ``approve`` mode
then reads a line (the test's go), approves the run's open request as U0CAROL and drives
it once; ``resume`` mode drives the run every 100 ms until SIGTERM (a replica's resumer:
it takes the run over once the other's lease ran out). With ``<stop at>`` the process
stops itself (SIGSTOP) at that engine checkpoint (:func:`tests.starving.stop_self_at`).
Each drive's outcome goes to stderr.
"""

from __future__ import annotations

import datetime as dt
import signal
import sys
import threading

from bot.storage.redis_store import RedisRunStore
from runbooks.cluster import Cluster
from runbooks.daemonset.steps import DaemonSetSteps
from runbooks.engine.actors import Actor
from runbooks.engine.commands import Engine
from runbooks.engine.store import LeaseLost
from runbooks.policy import Policy
from tests.starving import stop_self_at

POLICY = {"approvers": {"users": ["U0BOB", "U0CAROL"]}, "reports": {"after": []},
          "targets": [{"namespace": "kube-system", "name": "nvidia-device-plugin-daemonset",
                       "waves": [{"nodes": "100%"}]}],
          "steps": {"observe_window": "1s", "poll_interval": "0.1s", "ready_timeout": "60s"}}


def main(argv: list[str]) -> int:
    redis_url, kubeconfig, owner, lease, run_id, mode = argv[:6]
    store = RedisRunStore.from_url(redis_url)
    engine = Engine(store=store, steps=DaemonSetSteps(), policy=Policy.model_validate(POLICY), owner=owner,
                    connect=lambda context: Cluster.from_kubeconfig(kubeconfig, context),
                    lease_ttl=dt.timedelta(seconds=float(lease)), checkpoint=stop_self_at(argv[6] if argv[6:] else None))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print("ready", flush=True)
    try:
        if mode == "approve":
            sys.stdin.readline()
            engine.approve(run_id, actor=Actor("U0CAROL"))
            print(f"{owner} drove {run_id}: {engine.advance(run_id).state.value}", file=sys.stderr, flush=True)
        else:
            while not stop.wait(0.1):
                engine.advance(run_id)
    except LeaseLost as exc:
        print(f"{owner} lost the lease: {exc}", file=sys.stderr, flush=True)
    finally:
        store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
