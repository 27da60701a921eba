"""``upgradebot worker``: runs what the front end queued (:mod:`bot.jobs`).

``upgradebot serve`` starts its workers itself (:mod:`bot.processes`); on other machines
or in other pods, ``upgradebot worker --lanes decisions`` and ``--lanes commands,runs``
take from the same Redis. A worker is the bot as ``serve`` wired it before the queue: the
run engine on Redis, every chat verb, clicks decided by the engine, the run threads in
Slack, the reports (in a worker of the ``runs`` lane); it answers each request as the
front end would have (``response_url``, ``chat.postMessage``), claiming each delivery once.

- ``decisions``: its own threads (``UPGRADEBOT_DECISION_WORKERS``); the runs a decision
  wakes are queued on ``runs``, not driven here, so a click is never behind a step.
- ``commands``/``runs``: ``UPGRADEBOT_WORKERS`` threads; runs are driven by the
  :class:`~bot.workers.Advancer` of the process (one drive per run in a process, the
  run's lease against other processes), which also sweeps: expires overdue requests,
  resumes unfinished runs (a dead replica's among them).

``--read-only``: the worker of a ``serve`` without a policy file (issue 63: its inventories
ran in the process that acks): ``help``, ``inventory`` from the process's watch cache, every
other verb answered "read-only" and every click "Approvals are not enabled"; no run engine,
only the lanes ``decisions`` and ``commands``; Redis claims each delivery once and counts the
long commands, as for the full bot.

SIGTERM: no more messages taken, long reads cancelled, what runs finishes (up to
``--drain``), exit 0.
"""

from __future__ import annotations

import argparse
import logging
import signal
import threading
import time
from typing import Any, TextIO

from bot.jobs import LANES, Jobs, JobsUnavailable
from bot.processes import die_with_parent, freeze_heap, keep_cache, lower_priority
from bot.runtime import build_runtime, open_store
from bot.settings import Settings, SettingsError
from bot.slack.serve import (
    READ_ONLY_GROUPS,
    Service,
    build_read_only_worker,
    build_slack_service,
    configure_logging,
    exit_leaving_work,
)
from handlers import startup_messages as startup_msg

log = logging.getLogger("upgradebot.worker")
READ_ONLY_LANES = tuple(lane for group in READ_ONLY_GROUPS for lane in group)

def lanes_of(text: str) -> set[str]:
    lanes = {part.strip() for part in text.split(",") if part.strip()}
    unknown = lanes - set(LANES)
    if not lanes or unknown:
        raise SettingsError(startup_msg.error_unknown_lanes(sorted(unknown), LANES))
    return lanes


def work(settings: Settings, lanes: set[str], *, stop: threading.Event, drain: float = 30.0,
         read_only: bool = False) -> int:
    """Take work off ``lanes`` until ``stop`` is set; then stop gracefully (``read_only``: see the module)."""
    if settings.worker_of:
        lower_priority(settings.worker_nice)  # first: a thread started before keeps the priority it had
        die_with_parent(settings.worker_of)
    if read_only:
        return work_read_only(settings, lanes, stop=stop, drain=drain)
    if settings.config_file is None:
        raise SettingsError(startup_msg.WORKER_NEEDS_POLICY)
    if not settings.redis_url and settings.in_pod:
        raise SettingsError(startup_msg.ERROR_REDIS_URL_IN_POD)
    runtime = build_runtime(settings, settings.policy())
    try:
        jobs = Jobs.from_url(runtime.store.url)
    except JobsUnavailable as exc:
        runtime.store.close()
        raise SettingsError(str(exc)) from exc
    drives = "runs" in lanes
    if not drives:  # a decision's run moves on in a worker of the runs lane
        runtime.engine.wake = lambda run_id: _queue_advance(jobs, run_id)
    service = build_slack_service(settings, runtime)
    listeners = service.listeners
    assert listeners is not None
    listeners.deps.later = jobs.later

    def handle(lane: str, kind: str, payload: dict[str, Any]) -> None:
        if kind == "advance":
            runtime.advancer.submit(str(payload.get("run", "")))
        else:
            listeners.run_job(lane, kind, payload)

    threads = settings.decision_workers if lanes == {"decisions"} else settings.workers
    dead_lettered = service.metrics.jobs_dead_lettered
    jobs.on_dead_letter = lambda lane, reason: dead_lettered.labels(lane=lane, reason=reason).inc()
    freeze_heap()
    keep_cache()
    jobs.consume(handle, lanes=lanes, threads=threads)
    runtime.start(sweep=drives, reports=drives)
    log.info("worker taking %s on %d thread(s)", ", ".join(sorted(lanes)), threads)
    code = _serve_until(stop, jobs)
    started = _wind_down(service, jobs, drain)
    runtime.stop(timeout=max(0.5, drain - (time.monotonic() - started)))
    return code


def work_read_only(settings: Settings, lanes: set[str], *, stop: threading.Event, drain: float) -> int:
    """``work`` for read-only ``serve``: no run engine; the store for claims and quotas only."""
    lanes = lanes & set(READ_ONLY_LANES)  # no runs without a policy: the runs lane (the default's) has no work
    if not lanes:
        raise SettingsError(startup_msg.error_unknown_lanes([], READ_ONLY_LANES))
    if not settings.redis_url and settings.in_pod:
        raise SettingsError(startup_msg.ERROR_REDIS_URL_IN_POD)
    store = open_store(settings)
    try:
        jobs = Jobs.from_url(store.url)
    except JobsUnavailable as exc:
        store.close()
        raise SettingsError(str(exc)) from exc
    service = build_read_only_worker(settings, store)
    listeners = service.listeners
    assert listeners is not None
    listeners.deps.later = jobs.later
    dead_lettered = service.metrics.jobs_dead_lettered
    jobs.on_dead_letter = lambda lane, reason: dead_lettered.labels(lane=lane, reason=reason).inc()
    freeze_heap()
    keep_cache()
    jobs.consume(listeners.run_job, lanes=lanes, threads=settings.workers)
    log.info("read-only worker taking %s on %d thread(s)", ", ".join(sorted(lanes)), settings.workers)
    code = _serve_until(stop, jobs)
    _wind_down(service, jobs, drain)
    listeners.deps.quotas.close()
    store.close()
    return code


def _wind_down(service: Service, jobs: Jobs, drain: float) -> float:
    """Take no more work, cancel what waits, and let what runs finish within ``drain`` seconds:
    the lanes' consumers, then the service's worker pools. Returns when the drain began."""
    log.info("worker stopping: no more work taken, finishing what runs (up to %.0f s)", drain)
    started = time.monotonic()
    service.cancel.set()
    jobs.stop(timeout=drain)
    service.stop_workers(timeout=max(0.5, drain - (time.monotonic() - started)))
    return started


def _serve_until(stop: threading.Event, jobs: Jobs) -> int:
    """Wait for ``stop``; 1 when a lane's consumer stopped first (this worker stops, to be started again)."""
    while not stop.wait(1.0):
        dead = jobs.dead_lanes()
        if dead:  # its lane's heartbeat stops too: serve's /readyz names it until a new worker takes it
            log.error("the consumer of the %s lane(s) is no longer running: this worker stops, to be started again",
                      ", ".join(dead))
            return 1
    return 0


def _queue_advance(jobs: Jobs, run_id: str) -> None:
    try:
        jobs.submit("runs", "advance", {"run": run_id})
    except JobsUnavailable as exc:  # the sweep of a runs worker moves it on later
        log.warning("run %s not queued to move on: %s", run_id, exc)


def run(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    """``upgradebot worker`` once the CLI parsed its arguments."""
    configure_logging(settings)
    lanes = lanes_of(args.lanes)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    return exit_leaving_work(work(settings, lanes, stop=stop, drain=args.drain,
                                  read_only=bool(getattr(args, "read_only", False))), out)
