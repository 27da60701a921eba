"""``upgradebot serve``: the Slack front end as a long-running process.

Socket Mode when ``SLACK_APP_TOKEN`` is set (Bolt's ``SocketModeHandler``; no public
URL needed), else HTTP: ``POST /slack/events`` on ``--port`` (default 3000). Both modes
serve ``GET /healthz``, ``/readyz`` and ``/metrics`` on that port. The first line
printed is the HTTP URL. SIGTERM (or Ctrl-C) stops gracefully: no new requests, long
reads (``verify``'s window) cancelled, the rest of the background work finishes (up to
``--drain`` seconds), then the process exits 0, within the drain even when a run's step
is still going (that run resumes after the restart, from its checkpoint, as after a crash).

:func:`build_slack_service` puts the Slack front end on a :class:`~bot.runtime.Runtime`:
every chat verb, clicks decided by the engine, the run threads, the reports' outlets,
Redis for idempotency and readiness, the runs gauge and the step durations.
:func:`build_service` is the front end alone (tests and benchmarks give it their own verbs
and decisions) and runs with :class:`~bot.slack.http.HttpServer`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import NoReturn, TextIO

from slack_bolt import App
from slack_bolt.adapter.wsgi import SlackRequestHandler

from bot import logs
from bot.exiting import exit_now
from bot.jobs import ACK_DEADLINE, LANES, Jobs, JobsUnavailable
from bot.processes import DEFAULT_GROUPS, WorkerProcesses, freeze_heap
from bot.runtime import Runtime, connector, open_store
from bot.settings import Settings, SettingsError
from bot.slack.app import Listeners, SlackDeps, build_app
from bot.slack.blocks import Payload
from bot.slack.claims import EffectClaims
from bot.slack.http import Check, HttpServer, Readiness, WebApp
from bot.slack.idempotency import Idempotency, InMemoryIdempotency
from bot.slack.identity import BotIdentity
from bot.slack.metrics import Metrics, RunsByState, StepTimer, runs_by_state
from bot.slack.pacing import Pacer
from bot.slack.socket_mode import SocketMode
from bot.slack.startup import check_clusters, check_slack_secrets
from bot.slack.threads import SlackOutlet, SlackThreads
from bot.slack.web import SlackWeb, UsergroupDirectory, error_code, make_client
from bot.storage.redis_store import RedisRunStore
from bot.workers import Quotas, Workers, long_reads
from handlers import inventory
from handlers import messages as msg
from handlers import startup_messages as startup_msg
from handlers.access import Directory
from handlers.clicks import Decisions, EngineDecisions
from handlers.routing import Deps, Registry, Router, Verb, default_registry
from handlers.verbs import VERBS, chat_verbs
from runbooks.cluster import Cluster
from runbooks.cluster.informing import Watches
from runbooks.engine.store import StoreUnavailable
from runbooks.policy import Policy

log = logging.getLogger("upgradebot.serve")
RECONCILE_WINDOW = dt.timedelta(days=1)
"""Runs ended longer ago than this keep their gate messages as they are at a start."""
RECONCILE_MIN_AGE = 60.0
"""Seconds a gate is left to the process that opened it before another posts its message.

Found with worker processes: a worker starting while another serves posted a second
request message for a gate the other was posting at that moment."""
NOTICE_THREADS, NOTICE_BACKLOG = 2, 512
"""Threads (and queued answers) that tell people the bot is busy or over a quota; beyond, the
answer is sent on the request's own thread (its ack waits for it), never dropped."""


def secrets_of(settings: Settings) -> list[str]:
    values = (settings.slack_bot_token, settings.slack_signing_secret, settings.slack_app_token)
    return [v.get_secret_value() for v in values if v is not None and v.get_secret_value()]


READ_ONLY_GROUPS: tuple[tuple[str, ...], ...] = (("decisions", "commands"),)
"""Read-only ``serve``'s worker process: its inventories (and the answers to what it refuses); no runs."""


def read_only_disabled() -> dict[str, str]:
    """What a read-only bot (no policy file) says of each chat verb but ``help`` and ``inventory``."""
    return {c.name: msg.READ_ONLY_VERB for c in VERBS if c.chat and c.name != inventory.COMMAND.name}


def inventory_verb(settings: Settings, policy: Policy, connect: Callable[[str | None], Cluster] | None = None, *,
                   watches: Watches | None = None) -> Verb:
    """``inventory``, the one verb that needs no run engine (a front end without one); with ``watches``
    (the process's), its nodes, unfinished pods and ResourceSlices are read from that watch cache."""
    return inventory.COMMAND.verb(Deps(policy=policy, connect=connect or connector(settings), watches=watches))


@dataclass
class Service:
    """Everything ``serve`` runs, built once; ``wsgi()`` is what the HTTP server serves."""

    settings: Settings
    policy: Policy
    metrics: Metrics
    web: SlackWeb
    identity: BotIdentity
    directory: Directory
    registry: Registry
    router: Router
    workers: Workers
    decision_workers: Workers
    app: App
    readiness: Readiness
    cancel: threading.Event
    """Set on SIGTERM: long reads (``verify``'s window) give up at once (:class:`~runbooks.engine.clocks.StoppableClock`)."""
    notices: Workers | None = None
    """The few threads that tell people the bot is busy: a burst of refusals never spawns a thread each."""
    listeners: Listeners | None = None
    """What the Bolt app calls; a worker process runs queued requests with them."""
    jobs: Jobs | None = None
    """The queue the listeners hand requests to (the front end of ``serve``); None: this process's pools."""
    watches: Watches | None = None
    """The watch cache of a service that answers ``inventory`` itself (read-only ``serve``'s worker), stopped
    with the workers."""

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no command or decision runs or waits (both pools); False if ``timeout`` passed first."""
        deadline = time.monotonic() + timeout
        return self.decision_workers.wait_idle(timeout) and self.workers.wait_idle(
            max(0.0, deadline - time.monotonic()))

    def stop_workers(self, timeout: float) -> bool:
        """Cancel long reads, take no more work, and wait up to ``timeout`` for the rest (both pools)."""
        self.cancel.set()
        deadline = time.monotonic() + timeout
        finished = self.decision_workers.shutdown(timeout=timeout)
        finished = self.workers.shutdown(timeout=max(0.5, deadline - time.monotonic())) and finished
        if self.notices is not None:
            self.notices.shutdown(timeout=max(0.5, deadline - time.monotonic()))
        if self.watches is not None:
            self.watches.close(timeout=max(0.5, deadline - time.monotonic()))
        return finished

    def wsgi(self, *, with_slack: bool = True, with_metrics: bool = True) -> WebApp:
        slack = SlackRequestHandler(self.app) if with_slack else None
        secret = self.settings.slack_signing_secret
        listeners = self.listeners
        take = None if listeners is None else (
            lambda body, environ: listeners.take(body, environ.get("HTTP_X_SLACK_RETRY_NUM")))
        return WebApp(slack=slack, readiness=self.readiness, metrics=self.metrics,
                      signing_secret=secret.get_secret_value() if secret else None, with_metrics=with_metrics,
                      take=take)

    def metrics_wsgi(self) -> WebApp:
        """``--metrics-port``: ``/metrics`` (and the probes), nothing of Slack's."""
        return WebApp(slack=None, readiness=self.readiness, metrics=self.metrics)


def build_service(
    settings: Settings,
    policy: Policy,
    *,
    verbs: Sequence[Verb] | None = None,
    decisions: Decisions | None = None,
    idempotency: Idempotency | None = None,
    checks: Mapping[str, Check] | None = None,
    runs_by_state: RunsByState | None = None,
    directory: Directory | None = None,
    readiness_cache: float = 5.0,
    metrics: Metrics | None = None,
    web: SlackWeb | None = None,
    cancel: threading.Event | None = None,
    disabled: Mapping[str, str] | None = None,
    jobs: Jobs | None = None,
    quotas: Quotas | None = None,
    rewrite: Callable[[str, str, str, Payload], object] | None = None,
) -> Service:
    """The Slack front end: ``help`` and ``verbs`` (default: ``inventory`` alone),
    ``decisions`` for the buttons, ``idempotency`` (default: in memory, one process only),
    ``quotas`` of long commands (default: counted in this process),
    extra readiness ``checks`` (e.g. ``{"redis": store.ping}``) and the runs gauge.
    ``metrics``, ``web`` and ``directory`` may be built by the caller (the runtime's
    wiring shares them with the run threads, :func:`build_slack_service`). With ``jobs`` the
    listeners only queue: worker processes run the requests (:func:`build_front`)."""
    check_slack_secrets(settings, serving=False)
    assert settings.slack_bot_token is not None
    metrics = metrics or Metrics()
    metrics.set_runs_source(runs_by_state)
    web = web or SlackWeb(make_client(settings, metrics=metrics), metrics)
    identity = BotIdentity(settings.slack_bot_token.get_secret_value())
    directory = directory or UsergroupDirectory(web)
    watches = Watches(connector(settings)) if verbs is None else None  # read-only: its worker's own cache
    registry = default_registry(*(verbs if verbs is not None else [inventory_verb(settings, policy, watches=watches)]))
    router = Router(registry, policy, directory, disabled=disabled)
    workers = Workers(settings.workers)
    decision_workers = Workers(settings.decision_workers, name="upgradebot-decide")
    notices = Workers(NOTICE_THREADS, backlog=NOTICE_BACKLOG, name="upgradebot-notice")
    quotas = quotas or Quotas(per_user=policy.limits.per_user, per_channel=policy.limits.per_channel,
                              reads=long_reads(settings.workers, settings.reserved_workers))
    deps = SlackDeps(router=router, web=web, idempotency=idempotency or InMemoryIdempotency(),
                     workers=workers, metrics=metrics, decision_workers=decision_workers, quotas=quotas,
                     notices=notices, decisions=decisions, jobs=jobs, rewrite=rewrite)
    app, listeners = build_app(settings, policy, deps, identity=identity)
    readiness = Readiness({"slack": slack_check(identity, web, metrics), **(checks or {})},
                          cache_seconds=readiness_cache, secrets=secrets_of(settings),
                          reported=("slack",))  # a Slack outage takes no replica out of rotation
    return Service(settings=settings, policy=policy, metrics=metrics, web=web, identity=identity,
                   directory=directory, registry=registry, router=router, workers=workers,
                   decision_workers=decision_workers, app=app, readiness=readiness,
                   cancel=cancel or threading.Event(), notices=notices, listeners=listeners, jobs=jobs,
                   watches=watches)


def build_front(settings: Settings, policy: Policy, *, store: RedisRunStore, jobs: Jobs,
                workers: WorkerProcesses | None, readiness_cache: float = 5.0, read_only: bool = False) -> Service:
    """``upgradebot serve``'s process: Slack's requests acked and queued, nothing run here.

    The verbs are known by name and lane only (the workers run them); readiness checks
    Slack, Redis, the worker processes ``serve`` started and that each lane has a live
    consumer (:meth:`~bot.jobs.Jobs.check_consumers`), also with ``UPGRADEBOT_WORKER_PROCESSES=0``
    (the workers run elsewhere); ``/metrics`` adds theirs. ``read_only`` (no policy file): ``help``
    and ``inventory`` only, the rest answered "read-only" by the worker (``upgradebot worker
    --read-only``), which takes the ``decisions`` and ``commands`` lanes (no runs)."""
    if read_only:
        verbs = [inventory_verb(settings, policy)]  # its lane only: the worker keeps the watch cache
        lanes: tuple[str, ...] = tuple(lane for group in READ_ONLY_GROUPS for lane in group)
    else:
        verbs = chat_verbs(Deps(policy=policy, connect=connector(settings)))
        lanes = LANES
    checks: dict[str, Check] = {"redis": jobs.ping}
    if workers is not None:
        checks["workers"] = workers.check
    # not ready until each lane's consumer has beaten once, serve's own workers or outside ones
    checks["consumers"] = lambda: jobs.check_consumers(lanes)
    metrics = Metrics(workers_dir=workers.metrics_dir if workers is not None else None)
    service = build_service(settings, policy, verbs=verbs, jobs=jobs, checks=checks, metrics=metrics,
                            runs_by_state=None if read_only else runs_by_state(store), readiness_cache=readiness_cache,
                            disabled=read_only_disabled() if read_only else None)
    if read_only:
        service.readiness.mode = "read-only"
    return service


def build_read_only_worker(settings: Settings, store: RedisRunStore) -> Service:
    """``upgradebot worker --read-only``: what read-only ``serve`` queues, answered (``help``,
    ``inventory`` from the process's watch cache, every other verb "read-only", a click "Approvals
    are not enabled"); deliveries claimed once and long commands counted in ``store``, as in a
    worker of the full bot."""
    policy = Policy()
    quotas = Quotas(per_user=policy.limits.per_user, per_channel=policy.limits.per_channel, shared=store,
                    reads=long_reads(settings.workers, settings.reserved_workers))
    return build_service(settings, policy, idempotency=store, quotas=quotas, disabled=read_only_disabled())


def build_slack_service(settings: Settings, runtime: Runtime, *, readiness_cache: float = 5.0) -> Service:
    """``upgradebot serve``: the Slack front end on the runtime (every chat verb, clicks decided
    by the engine, run threads, report outlets, Redis idempotency, the Redis readiness check,
    the runs gauge and the step durations)."""
    policy = runtime.policy
    metrics = Metrics()
    web = SlackWeb(make_client(settings, metrics=metrics), metrics)
    directory = UsergroupDirectory(web)
    runtime.observers.add(StepTimer(metrics))
    runtime.store.on_save = metrics.run_save_bytes.observe
    pacer = Pacer(settings.slack_pace)
    runtime.on_stop(pacer.close)
    # each post of a run's thread (and a gate's rewrite) claimed in Redis right before its Slack
    # call: one process makes it, whichever replica, however starved (issue 40); a claim whose
    # holder is provably dead is taken over at once (finding 10)
    claims = EffectClaims(runtime.store, owner=runtime.engine.leases.owner)
    threads = SlackThreads(web=web, pacer=pacer, set_origin=runtime.engine.set_origin,
                           self_approval=policy.approvers.allow_self_approval,
                           oncall=policy.oncall.channel or "", mention=policy.oncall.mention or "",
                           audit=runtime.engine.audit, claim=claims.claim, release=claims.release)
    runtime.observers.add(threads)
    # every sweep: a gate message whose post failed goes out (one opened a minute ago or more)
    runtime.advancer.also.append(lambda runs: threads.reconcile(runs, min_age=RECONCILE_MIN_AGE))
    try:  # gate messages a stopped bot never sent, and closed ones still showing buttons; a gate opened
        # in the last minute is left to the process that opened it (a worker starts while others serve)
        since = runtime.clock.now() - RECONCILE_WINDOW
        queued = threads.reconcile((r for r in runtime.engine.runs(limit=500) if r.active or r.updated_at >= since),
                                   min_age=RECONCILE_MIN_AGE)
        if queued:
            log.info("reconciling %d run thread(s) with their gates", queued)
    except StoreUnavailable as exc:
        log.warning("cannot reconcile the run threads now: %s", exc)
    if runtime.reports is not None:
        runtime.reports.outlets.add(SlackOutlet(web, policy))
    decisions = EngineDecisions(engine=runtime.engine, policy=policy, directory=directory)
    cancel = threading.Event()
    # every worker process and replica counts long commands in the store: one quota per user, not one each
    # and each process keeps some of its command threads from long reads (help, status, canary stay answered)
    quotas = Quotas(per_user=policy.limits.per_user, per_channel=policy.limits.per_channel, shared=runtime.store,
                    reads=long_reads(settings.workers, settings.reserved_workers))
    runtime.on_stop(quotas.close)
    return build_service(
        settings, policy, verbs=chat_verbs(runtime.deps(directory, cancel=cancel)), decisions=decisions,
        idempotency=runtime.store, cancel=cancel, quotas=quotas,
        checks={"redis": runtime.store.ping}, runs_by_state=runs_by_state(runtime.store), directory=directory,
        metrics=metrics, web=web, readiness_cache=readiness_cache, rewrite=threads.rewrite_decided,
    )


def configure_logging(settings: Settings, stream: TextIO | None = None) -> None:
    """``serve``'s log lines (:mod:`bot.logs`): ``LOG_LEVEL``, ``LOG_FORMAT``, the Slack secrets masked."""
    logs.configure_logging(level=settings.log_level, form=settings.log_format, secrets=secrets_of(settings),
                           stream=stream)


def check_durable(store: RedisRunStore, *, allow_volatile: bool) -> tuple[int, str]:
    """Refuse (``SettingsError``) a Redis that keeps nothing on disk, unless ``allow_volatile``; else
    the log line that says how it keeps its data (level, message), logged once the URL is printed."""
    url = store.safe_url
    try:
        kept = store.persistence()
    except StoreUnavailable as exc:
        if not allow_volatile:
            raise SettingsError(startup_msg.error_redis_persistence_unknown(str(exc))) from exc
        return logging.WARNING, str(exc)
    if kept is None:
        if not allow_volatile:
            raise SettingsError(startup_msg.error_redis_volatile(url))
        return logging.WARNING, startup_msg.warning_redis_volatile(url)
    return logging.INFO, f"Redis at {url} keeps its data in {kept}"


def serve(settings: Settings, *, host: str, port: int, out: TextIO, stop: threading.Event,
          service: Service | None = None, runtime: Runtime | None = None, drain: float = 30.0,
          allow_volatile: bool = False, metrics_port: int | None = None) -> int:
    """Run until ``stop`` is set; then stop gracefully. Returns the exit code.

    Without ``service``: the front end (:func:`build_front`), which acks and queues every
    request on Redis, and ``UPGRADEBOT_WORKER_PROCESSES`` sets of worker processes that run
    them (:mod:`bot.processes`; each resumes unfinished runs at start and periodically). Without a
    policy file (read-only) the same path: the front end queues, and as many read-only workers
    (``upgradebot worker --read-only``) answer the inventories and refuse the rest (issue 63:
    run in the acking process, they made its p99 ack 8-16x a bare Bolt app's).
    With ``service`` (and ``runtime``), everything in this process (tests).

    The first lines written are the URL and where Slack's requests go, before any log line
    (docs/operations.md): what start-up has to say (read-only, how Redis keeps its data) is
    logged after them, and the worker processes, which log as they start, start after them."""
    # before anything starts (a worker process, a port): the Slack secrets, the policy, the clusters
    app_token = check_slack_secrets(settings, serving=True)
    socket_mode = bool(app_token)
    policy = service.policy if service is not None else settings.policy()
    cluster_check = check_clusters(settings, policy)
    deployed = service is None  # its own process, as deployed (a test passes the service it built)
    read_only = deployed and settings.config_file is None
    notes: list[tuple[int, str]] = []  # logged once the URL is printed
    if read_only:  # help and inventory; no engine, no decisions; the same path as the full bot's
        notes.append((logging.WARNING, msg.SERVE_READ_ONLY))
        policy = Policy()
    workers: WorkerProcesses | None = None
    store: RedisRunStore | None = None
    if service is None:
        if not settings.redis_url and settings.in_pod:
            raise SettingsError(startup_msg.ERROR_REDIS_URL_IN_POD)
        store = open_store(settings)
        try:
            if not read_only:  # read-only keeps nothing in Redis but the requests on their way to its worker
                notes.append(check_durable(store, allow_volatile=allow_volatile))
            jobs = Jobs.from_url(store.url, deadline=ACK_DEADLINE)  # Slack's acks wait on it: 2 s at most
        except SettingsError:
            store.close()
            raise
        except JobsUnavailable as exc:
            store.close()
            raise SettingsError(str(exc)) from exc
        if settings.worker_processes:  # started below
            workers = (WorkerProcesses(READ_ONLY_GROUPS * settings.worker_processes, drain=drain, read_only=True)
                       if read_only else WorkerProcesses(DEFAULT_GROUPS * settings.worker_processes, drain=drain))
        service = build_front(settings, policy, store=store, jobs=jobs, workers=workers, read_only=read_only)
    service.readiness.add("cluster", cluster_check, required=False)  # reported: users are told, replicas stay
    if runtime is not None:  # a test's runtime, in this process
        runtime.start()
    if deployed:  # before the first request: its acks never wait on a pass over what start-up built
        freeze_heap()
    http = HttpServer(service.wsgi(with_slack=not socket_mode, with_metrics=metrics_port is None), host=host,
                      port=port, threads=settings.http_threads).start()
    metrics_http = (HttpServer(service.metrics_wsgi(), host=host, port=metrics_port, threads=2).start()
                    if metrics_port is not None else None)
    out.write(http.url + "\n")
    out.write(("Socket Mode; probes on " if socket_mode else "Slack requests on POST ") + http.url
              + ("" if socket_mode else "/slack/events") + "\n")
    out.flush()
    for level, note in notes:
        log.log(level, "%s", note)
    if workers is not None:
        workers.start()
    try:
        slack_check(service.identity, service.web, service.metrics)()
    except Exception as exc:  # not fatal: /readyz and upgradebot_slack_up report it until Slack answers
        log.warning(startup_msg.warning_auth_test_failed(error_code(exc)))
    handler = None
    if socket_mode:
        handler = SocketMode(service.app, app_token=app_token, metrics=service.metrics)
        try:
            handler.connect()
        except Exception as exc:
            http.stop(timeout=5)
            if metrics_http is not None:
                metrics_http.stop(timeout=1)
            service.stop_workers(timeout=1)
            if workers is not None:
                workers.stop(timeout=5)
            if runtime is not None:
                runtime.stop(timeout=1)
            raise SettingsError(startup_msg.error_socket_mode_failed(error_code(exc))) from exc
        service.readiness.add("socket_mode", handler.check, required=False)  # Slack's side: reported, never unready
    stop.wait()
    log.info("stopping: no new requests, long reads cancelled, finishing the work in progress (up to %.0f s)", drain)
    http.stop_accepting()
    if handler is not None:
        handler.close()
    started = time.monotonic()
    finished = workers.stop(timeout=drain) if workers is not None else True
    finished = service.stop_workers(timeout=max(0.5, drain - (time.monotonic() - started))) and finished
    if runtime is not None:
        runtime.stop(timeout=max(0.5, drain - (time.monotonic() - started)))
    http.stop()
    if metrics_http is not None:
        metrics_http.stop(timeout=1)
    if service.jobs is not None:
        service.jobs.stop()
    if store is not None:
        store.close()
    log.info("stopped%s", "" if finished else " with work unfinished")
    return 0


def run(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    """``upgradebot serve`` once the CLI parsed its arguments."""
    configure_logging(settings)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    code = serve(settings, host=args.host, port=args.port, out=out, stop=stop, drain=args.drain,
                 allow_volatile=args.allow_volatile_redis, metrics_port=args.metrics_port)
    return exit_leaving_work(code, out)


def exit_leaving_work(code: int, out: TextIO) -> NoReturn:
    """Exit with ``code`` at once (:func:`bot.exiting.exit_now`: the output and the log flushed, the
    exit handlers run); a process whose work outlived the drain exits so too, as a crash would. Not
    through the interpreter's teardown: freeing its ~2,000 modules took 0.3 s of CPU (1-2 s on a
    loaded node) for memory the OS frees anyway, and a pod being replaced waited for it (issue 35);
    everything that keeps data is closed by then."""
    left = [t.name for t in threading.enumerate() if t is not threading.current_thread() and not t.daemon
            and t.is_alive()]
    if left:  # a run's step outlived the drain: exiting anyway is what a crash does, and runs survive that
        log.warning("exiting with %d thread(s) still working (%s): their runs resume on the next start",
                    len(left), ", ".join(sorted(set(n.rsplit("_", 1)[0] for n in left))))
    exit_now(code, out)


def slack_check(identity: BotIdentity, web: SlackWeb, metrics: Metrics) -> Check:
    """``/readyz``'s ``slack`` check (auth.test), reported only: a Slack outage takes no replica
    out of rotation (issue 34 item 5); ``upgradebot_slack_up`` says what the last check saw."""

    def check() -> None:
        try:
            identity.refresh(web)
        except Exception:
            metrics.slack_up.set(0)
            raise
        metrics.slack_up.set(1)

    return check
