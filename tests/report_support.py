"""Helpers for the stability-report tests: a run in monitoring on kubesim, a report world.

:func:`monitoring_run` stores a run as the engine leaves it after a promotion (its baseline
taken from an inventory of the cluster, ``promote_started_at`` on the API server's clock)
without running the steps, so a test starts where monitoring does. :class:`World` wires the
scheduler, the collectors and the poster on real Redis, the way ``bot/reports/wiring.py``
does, with a clock and an outlet of the test's choosing.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bot.reports.collector import Collectors
from bot.reports.posting import ReportOutlet, ReportPoster
from bot.reports.scheduler import ReportScheduler
from bot.storage.redis_store import RedisRunStore
from handlers.replies import Reply
from kubesim import KubeSim
from runbooks.cluster import Cluster, RetryPolicy
from runbooks.daemonset.baselines import baseline_from
from runbooks.daemonset.steps import DaemonSetSteps
from runbooks.engine.clocks import ClusterClock
from runbooks.engine.commands import Engine
from runbooks.engine.runs import Run, RunState, Target, new_run_id
from runbooks.engine.steps import Clock
from runbooks.inventory import take_inventory
from runbooks.policy import Policy
from runbooks.stability.reporting import metric_sampler

NS, DS = "kube-system", "nvidia-device-plugin-daemonset"
TARGET = f"{NS}/{DS}"
CTR = "nvidia-device-plugin-ctr"
OLD = "nvcr.io/nvidia/k8s-device-plugin:v0.14.2"
RETRIES = RetryPolicy(attempts=4, base_delay=0.05, max_delay=0.5, deadline=5)


def wait_until(check: Callable[[], object], timeout: float = 20.0) -> None:
    """Poll ``check`` until it is truthy; AssertionError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "not reached in time"
        time.sleep(0.05)


def policy(*after: str, **sections: Any) -> Policy:
    return Policy.model_validate({"oncall": {"channel": "C0ONCALL", "mention": "S0ONCALL"},
                                  "reports": {"after": list(after or ("24h", "48h"))}, **sections})


def connector(sim: KubeSim) -> Callable[[str | None], Cluster]:
    return lambda context: Cluster.from_kubeconfig(sim.kubeconfig, context, retry=RETRIES)


def monitoring_run(store: RedisRunStore, sim: KubeSim, *, promoted: dt.datetime | None = None,
                   origin: dict[str, str] | None = None, metrics: dict[str, Any] | None = None) -> Run:
    """A run of the plugin DaemonSet in ``monitoring``, promoted at ``promoted`` (default: now, server time);
    ``metrics``: its ``metrics_before``/``metrics_promoted``, as the canary and promote steps record them."""
    with connector(sim)(None) as cluster:
        base = baseline_from(take_inventory(cluster, targets=[TARGET]), TARGET)
        now = cluster.server_time()
    run = Run(id=new_run_id(), target=Target(cluster="kubesim", namespace=NS, name=DS), image=OLD, container=CTR,
              node="gpu-node1", requester="U0ALICE", state=RunState.MONITORING, created_at=now, updated_at=now,
              progress={"baseline": base.model_dump(mode="json"), "promote_started_at": (promoted or now).isoformat(),
                        **(metrics or {})},
              origin=origin if origin is not None else {"surface": "slack", "channel": "C0OPS", "ts": "1700000000.000100"})
    return store.create(run)


@dataclass
class Posts:
    """An outlet that records what would be posted."""

    items: list[tuple[str, str, Reply]] = field(default_factory=list)

    def to_thread(self, run: Run, reply: Reply) -> str | None:
        self.items.append(("thread", run.id, reply))
        return f"t{len(self.items)}"

    def to_oncall(self, run: Run, reply: Reply) -> str | None:
        self.items.append(("oncall", run.id, reply))
        return f"o{len(self.items)}"

    def titles(self) -> list[tuple[str, str]]:
        return [(where, reply.title or "") for where, _, reply in self.items]


@dataclass
class World:
    """The report machinery of one bot process, on real Redis and kubesim."""

    store: RedisRunStore
    engine: Engine
    collectors: Collectors
    poster: ReportPoster
    scheduler: ReportScheduler

    def stop(self) -> None:
        self.scheduler.stop()
        self.store.close()


def world(redis_url: str, sim: KubeSim, pol: Policy, outlet: ReportOutlet, *, owner: str, clock: Clock | None = None,
          threaded: bool = False, connect: Callable[[str | None], Cluster] | None = None, **scheduler: Any) -> World:
    """Own Redis connections, own schedule: what a second bot process would have
    (``connect``: the clusters by context, default ``sim``'s own kubeconfig)."""
    store = RedisRunStore.from_url(redis_url)
    connect = connect or connector(sim)
    clock = clock or ClusterClock(connect(None).server_time)
    engine = Engine(store=store, steps=DaemonSetSteps(), policy=pol, connect=connect)
    collectors = Collectors(store=store, connect=connect, owner=owner, clock=clock, threaded=threaded,
                            flush_every=0.2, watch_timeout=5, retry_delay=0.5, metrics=metric_sampler(pol))
    poster = ReportPoster(store=store, engine=engine, policy=pol, connect=connect, outlet=outlet, clock=clock,
                          owner=owner, flush=collectors.flush)
    sched = ReportScheduler(store=store, poster=poster, policy=pol, clock=clock, collectors=collectors, owner=owner,
                            **scheduler)
    return World(store=store, engine=engine, collectors=collectors, poster=poster, scheduler=sched)
