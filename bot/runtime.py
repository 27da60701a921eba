"""The one place that builds the run engine, and what goes with it, for every front end.

- :func:`connector`: the one cluster factory: a kubeconfig context (``--kubeconfig``,
  else ``KUBECONFIG``, else ``~/.kube/config``), else the pod's ServiceAccount.
- :func:`open_store`: the Redis store (``REDIS_URL``, else this user's local server).
- :func:`build_engine`: the engine on a store with the DaemonSet steps, the policy, the
  cluster factory, the clock, the lease owner check and the crash tests' checkpoint.
  The shell uses it as it is; its ``wake`` runs the steps in the shell's process.
- :func:`build_runtime`: for the processes that stay (``serve``, ``console``, ``demo``):
  the engine with one fan-out of :class:`Observers` the front ends add themselves to,
  the :class:`~bot.workers.Advancer` as its ``wake`` (runs move on in background
  workers), the stability reports (scheduler, event collectors, outlets) when the
  policy schedules any, and the verbs bound to all of it (:meth:`Runtime.deps`).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from bot.settings import Settings
from bot.storage.layout import Keys
from bot.storage.local import local_redis_url
from handlers import messages
from handlers.routing import Deps
from runbooks.engine.clocks import StoppableClock, SystemClock
from runbooks.engine.leasing import parse_owner
from runbooks.engine.runs import Gate, Run, RunKind, Step
from runbooks.engine.transitioning import Observer
from runbooks.errors import ClusterConfigError

if TYPE_CHECKING:  # imported where used: a shell verb that never opens the store loads neither (nor, reading
    # runs only, the cluster adapter: issue 39)
    from bot.reports.wiring import Reports
    from bot.storage.redis_store import RedisRunStore
    from bot.workers import Advancer
    from handlers.access import Directory
    from runbooks.cluster import Cluster
    from runbooks.engine.commands import Engine
    from runbooks.engine.steps import Clock
    from runbooks.policy import Policy

log = logging.getLogger("upgradebot.runtime")
T = TypeVar("T")
Connect = Callable[[str | None], "Cluster"]


def connector(settings: Settings, kubeconfig: str | None = None) -> Connect:
    """Opens the cluster of a context: the kubeconfig if there is one, else in-cluster."""

    def connect(context: str | None) -> Cluster:
        from runbooks.cluster import Cluster

        path = settings.kubeconfig_path(kubeconfig)
        if path is None:
            if context:
                raise ClusterConfigError(messages.NO_KUBECONFIG)
            return Cluster.in_cluster()
        return Cluster.from_kubeconfig(path, context)

    return connect


def open_store(settings: Settings) -> RedisRunStore:
    """The run store on ``REDIS_URL``, else on this user's local Redis (started if needed);
    keys an older version left under the old prefix are moved first."""
    from bot.storage.redis_store import RedisRunStore

    store = RedisRunStore.from_url(settings.redis_url or local_redis_url(settings.state_dir))
    moved = store.migrate_keys()
    if moved:
        log.info("moved %d Redis key(s) of an older version under the prefix %s", moved, Keys.prefix)
    return store


def local_owner_dead(owner: str) -> bool:
    """Whether a lease owner is a process on this host that no longer exists, or has ended unreaped."""
    parsed = parse_owner(owner)
    if parsed is None or parsed[0] != socket.gethostname() or parsed[1] == os.getpid():
        return False
    try:
        os.kill(parsed[1], 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return exited(parsed[1])


def exited(pid: int) -> bool:
    """Whether ``pid`` is a process that has ended but not been reaped (a zombie: its parent died
    with it and nobody waited for it yet). Signal 0 still reaches it, yet it holds nothing."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            state = stat.read().rsplit(")", 1)[1].split()[0]  # after "pid (comm)", which may hold spaces
    except FileNotFoundError:  # reaped meanwhile, unless there is no /proc (not Linux)
        return os.path.isdir("/proc/self")
    except (OSError, IndexError):
        return False
    return state in ("Z", "X")


def killer(point: str | None, *, parent: int | None = None) -> Callable[[str], None]:
    """The checkpoint hook of the crash tests: SIGKILL at ``point`` (``parent`` first: a
    worker takes the ``serve`` that started it along); a no-op without one."""

    def checkpoint(reached: str) -> None:
        if point and reached == point:
            if parent:
                os.kill(parent, signal.SIGKILL)
            os.kill(os.getpid(), signal.SIGKILL)

    return checkpoint


def build_engine(settings: Settings, policy: Policy, *, store: RedisRunStore, connect: Connect,
                 clock: Clock | None = None, observer: Observer | None = None) -> Engine:
    """The engine with the DaemonSet steps, a migration's and a repair's, and the process's
    watch cache its steps share; nobody is woken until the caller sets ``wake``. Without
    ``REDIS_URL`` the runs are in this user's own Redis, which no bot serving Slack reads: a
    request from the shell or the console is then refused unless an approver can approve it
    there (``slack_sees_runs``, issue 64)."""
    # Imported here, not at the top: the steps (and the engine's commands) are for the verbs
    # that act, and `upgradebot status` or `--help` start without them (issue 39).
    from runbooks.cluster.informing import Watches
    from runbooks.daemonset.quarantining import QuarantineSteps, ReleaseSteps
    from runbooks.daemonset.repairing import RepairSteps
    from runbooks.daemonset.steps import DaemonSetSteps
    from runbooks.dra.claim_cleanup import ClaimCleanupSteps
    from runbooks.dra.migration_run import MigrationSteps
    from runbooks.engine.commands import Engine

    return Engine(store=store, steps=DaemonSetSteps(), policy=policy, connect=connect, clock=clock or SystemClock(),
                  observer=observer, owner_dead=local_owner_dead, checkpoint=killer(settings.test_kill_at, parent=settings.worker_of),
                  kinds={RunKind.MIGRATION: MigrationSteps(), RunKind.REPAIR: RepairSteps(),
                         RunKind.CLEANUP: ClaimCleanupSteps(), RunKind.QUARANTINE: QuarantineSteps(),
                         RunKind.RELEASE: ReleaseSteps()}, watches=Watches(connect),
                  slack_sees_runs=settings.redis_url is not None)


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

    def on_progress(self, run: Run) -> None:
        self._each("on_progress", run)


@dataclass
class Runtime:
    """The run engine and what goes with it, for one process."""

    policy: Policy
    store: RedisRunStore
    engine: Engine
    observers: Observers
    connect: Connect
    clock: Clock
    advancer: Advancer
    reports: Reports | None
    """The stability reports (None when ``reports.after`` schedules none)."""
    stopping: list[Callable[[float], object]] = field(default_factory=list)
    """What a front end asked to stop with the runtime (the Slack pacer), last added first."""

    def on_stop(self, stop: Callable[[float], object]) -> None:
        """``stop(timeout)`` is called when the runtime stops, after the run drives."""
        self.stopping.append(stop)

    def deps(self, directory: Directory, *, cancel: threading.Event | None = None) -> Deps:
        """What the verbs use on a chat surface whose user groups ``directory`` resolves;
        ``cancel``, once set, cuts the verbs' waits short (a serving bot's SIGTERM)."""
        clock = StoppableClock(self.clock, cancel) if cancel is not None else self.clock
        return Deps(policy=self.policy, connect=self.connect, directory=directory, engine=self.engine,
                    read_tally=self.store.read_tally, clock=clock)

    def start(self, *, sweep: bool = True, reports: bool = True) -> Runtime:
        """Resume unfinished runs now and periodically (``sweep``), then start the reports (``reports``)."""
        if sweep:
            self.advancer.start()
        if reports and self.reports is not None:
            log.info("starting the stability reports (scheduler and event collectors)")
            self.reports.start()
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """Finish the drives in progress (up to ``timeout``), then stop the reports and the store."""
        self.advancer.stop(timeout)
        if self.engine.watches is not None:
            self.engine.watches.close()
        for stop in reversed(self.stopping):
            try:
                stop(timeout)
            except Exception:
                log.exception("stopping %s failed", getattr(stop, "__qualname__", stop))
        if self.reports is not None:
            try:
                self.reports.stop()
            except Exception:
                log.exception("stopping the stability reports failed")
        self.store.close()


def build_runtime(
    settings: Settings, policy: Policy, *, store: RedisRunStore | None = None,
    connect: Connect | None = None, clock: Clock | None = None,
) -> Runtime:
    """The engine on Redis (``REDIS_URL``, else this user's local server) with the DaemonSet
    steps, its runs moved on by the :class:`Advancer`, and the stability reports."""
    from bot.reports.wiring import Reports
    from bot.workers import Advancer

    store = store or open_store(settings)
    connect = connect or connector(settings)
    clock = clock or SystemClock()
    observers = Observers()
    engine = build_engine(settings, policy, store=store, connect=connect, clock=clock, observer=observers)
    advancer = Advancer(engine, workers=settings.workers, interval=settings.sweep_interval)
    engine.wake = advancer.submit
    reports = Reports(store=store, engine=engine, policy=policy, connect=connect, clock=clock) \
        if policy.reports.after else None
    return Runtime(policy=policy, store=store, engine=engine, observers=observers, connect=connect, clock=clock,
                   advancer=advancer, reports=reports)
