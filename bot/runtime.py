"""The one place that builds the run engine for ``serve``, ``console`` and ``demo``.

:func:`build_runtime` makes a :class:`Runtime`: the Redis store, the engine with the
DaemonSet steps, the policy and the cluster factory, one fan-out :class:`Observers` the
front ends add themselves to (the Slack thread, the console, the step timer), and the
:class:`~bot.advancing.Advancer` that moves runs on in the background.
:func:`build_slack_service` puts the Slack front end on a runtime (``upgradebot serve``).

Extensions plug in here without editing the front ends. After building, every module
named in :data:`EXTENSIONS` that exists is imported and its ``plug(runtime)`` called;
it may add chat verbs (``runtime.verbs``), observers (``runtime.observers.add``),
background services started and stopped with the runtime (``runtime.add_service``), and
hooks called when a front end exists (``runtime.slack_hooks``: the Slack client, the
decisions, the directory; ``runtime.console_hooks``: the console chat).
The stability reports (issue 6) plug their collector, scheduler and ``report`` verb in
through ``bot/reports/wiring.py``.
"""

from __future__ import annotations

import importlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from bot.advancing import Advancer
from bot.settings import Settings
from bot.storage.redis_store import RedisRunStore
from handlers.routing import Verb
from runbooks.cluster import Cluster
from runbooks.engine.commands import Engine
from runbooks.engine.runs import Gate, Run, Step
from runbooks.engine.steps import Clock
from runbooks.engine.transitioning import Observer
from runbooks.policy import Policy

if TYPE_CHECKING:
    from bot.console import Chat
    from bot.slack.serve import Service
    from bot.slack.web import SlackWeb
    from handlers.access import Directory
    from handlers.decisions import Decisions

log = logging.getLogger("upgradebot.wiring")
T = TypeVar("T")

EXTENSIONS: tuple[str, ...] = ("bot.reports.wiring",)
"""Modules with a ``plug(runtime: Runtime) -> None``, called by :func:`build_runtime` when present."""


class Observers:
    """Every observer of the engine, told in the order added; one failing does not stop the rest."""

    def __init__(self) -> None:
        self._observers: list[Observer] = []
        self._lock = threading.Lock()

    def add(self, observer: Observer) -> None:
        with self._lock:
            self._observers.append(observer)

    def of_type(self, kind: type[T]) -> list[T]:
        """The observers that are ``kind`` (tests wait for the Slack threads' pacer)."""
        with self._lock:
            return [o for o in self._observers if isinstance(o, kind)]

    def _each(self, method: str, *args: object) -> None:
        with self._lock:
            observers = list(self._observers)
        for observer in observers:
            try:
                getattr(observer, method)(*args)
            except Exception:  # one front end failing must not keep the others uninformed
                log.exception("observer %s.%s failed", type(observer).__name__, method)

    def on_state(self, run: Run) -> None:
        self._each("on_state", run)

    def on_step(self, run: Run, step: Step) -> None:
        self._each("on_step", run, step)

    def on_gate(self, run: Run, gate: Gate) -> None:
        self._each("on_gate", run, gate)


@dataclass
class Runtime:
    """The run engine and what goes with it, for one process."""

    policy: Policy
    store: RedisRunStore
    engine: Engine
    observers: Observers
    connect: Callable[[str | None], Cluster]
    clock: Clock
    advancer: Advancer
    verbs: list[Verb] = field(default_factory=list)
    """Chat verbs added by extensions (issue 6: ``report``), registered after the run verbs."""
    services: list[tuple[str, Callable[[], object], Callable[[float], object]]] = field(default_factory=list)
    slack_hooks: list[Callable[[SlackWeb, Decisions, Directory], Decisions]] = field(default_factory=list)
    """Called by :func:`build_slack_service` once the Slack client exists: each may attach itself
    (post somewhere) and returns the decisions to use (the given ones, or them behind its own buttons)."""
    console_hooks: list[Callable[[Chat], None]] = field(default_factory=list)
    """Called by :func:`bot.console.build_chat` with the console chat (to print into it)."""

    def add_service(self, name: str, start: Callable[[], object], stop: Callable[[float], object]) -> None:
        """A background service (e.g. the report scheduler) started and stopped with the runtime."""
        self.services.append((name, start, stop))

    def chat_verbs(self, directory: Directory, advance: Callable[[str], None] | None = None) -> list[Verb]:
        """The run verbs (and the extensions' verbs) for a chat surface."""
        from handlers.run_verbs import RunVerbDeps, run_verbs

        deps = RunVerbDeps(engine=self.engine, policy=self.policy, directory=directory, connect=self.connect,
                           advance=advance or self.advancer.submit)
        return [*run_verbs(deps), *self.verbs]

    def start(self, *, sweep: bool = True) -> Runtime:
        """Resume unfinished runs now and periodically (``sweep``), then start the services."""
        if sweep:
            self.advancer.start()
        for name, start, _ in self.services:
            log.info("starting %s", name)
            start()
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """Finish the drives in progress (up to ``timeout``), then stop the services, last first."""
        self.advancer.stop(timeout)
        for name, _, stop in reversed(self.services):
            try:
                stop(timeout)
            except Exception:
                log.exception("stopping %s failed", name)
        self.store.close()


def build_runtime(
    settings: Settings, policy: Policy, *, store: RedisRunStore | None = None,
    connect: Callable[[str | None], Cluster] | None = None, clock: Clock | None = None,
) -> Runtime:
    """The engine on Redis (``REDIS_URL``, else this user's local server) with the DaemonSet steps."""
    from bot.shell.runs import killer, local_owner_dead
    from bot.slack.serve import cluster_connector
    from bot.storage.local import local_redis_url
    from runbooks.daemonset.steps import DaemonSetSteps
    from runbooks.engine.clocks import SystemClock

    store = store or RedisRunStore.from_url(settings.redis_url or local_redis_url(settings.state_dir))
    connect = connect or cluster_connector(settings)
    clock = clock or SystemClock()
    observers = Observers()
    engine = Engine(store=store, steps=DaemonSetSteps(), policy=policy, connect=connect, clock=clock,
                    observer=observers, owner_dead=local_owner_dead, checkpoint=killer(settings.test_kill_at))
    advancer = Advancer(engine, workers=settings.workers, interval=settings.sweep_interval)
    runtime = Runtime(policy=policy, store=store, engine=engine, observers=observers, connect=connect,
                      clock=clock, advancer=advancer)
    plug_extensions(runtime)
    return runtime


def plug_extensions(runtime: Runtime) -> None:
    """Call ``plug(runtime)`` of every module of :data:`EXTENSIONS` that exists."""
    for name in EXTENSIONS:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue
            raise
        module.plug(runtime)


def build_slack_service(settings: Settings, runtime: Runtime, *, readiness_cache: float = 5.0) -> Service:
    """``upgradebot serve``: the Slack front end on the runtime (run verbs, buttons, run threads,
    Redis idempotency, the Redis readiness check, the runs gauge and the step durations)."""
    from bot.slack.metrics import Metrics
    from bot.slack.pacing import Pacer
    from bot.slack.run_metrics import StepTimer, runs_by_state
    from bot.slack.serve import build_service
    from bot.slack.threads import SlackThreads
    from bot.slack.web import SlackWeb, UsergroupDirectory, make_client
    from handlers.clicks import EngineDecisions

    policy = runtime.policy
    metrics = Metrics()
    web = SlackWeb(make_client(settings, metrics=metrics), metrics)
    directory = UsergroupDirectory(web)
    runtime.observers.add(StepTimer(metrics))
    pacer = Pacer(settings.slack_pace)
    runtime.add_service("the Slack message pacer", lambda: None, pacer.close)
    runtime.observers.add(SlackThreads(web=web, pacer=pacer, set_origin=runtime.engine.set_origin,
                                       self_approval=policy.approvers.allow_self_approval))
    decisions: Decisions = EngineDecisions(engine=runtime.engine, policy=policy, directory=directory,
                                           advance=runtime.advancer.submit)
    for hook in runtime.slack_hooks:
        decisions = hook(web, decisions, directory)
    return build_service(
        settings, policy, verbs=runtime.chat_verbs(directory), decisions=decisions, idempotency=runtime.store,
        checks={"redis": runtime.store.ping}, runs_by_state=runs_by_state(runtime.store), connect=runtime.connect,
        directory=directory, metrics=metrics, web=web, readiness_cache=readiness_cache,
    )
