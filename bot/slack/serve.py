"""``upgradebot serve``: the Slack front end as a long-running process.

Socket Mode when ``SLACK_APP_TOKEN`` is set (Bolt's ``SocketModeHandler``; no public
URL needed), else HTTP: ``POST /slack/events`` on ``--port`` (default 3000). Both modes
serve ``GET /healthz``, ``/readyz`` and ``/metrics`` on that port. The first line
printed is the HTTP URL. SIGTERM (or Ctrl-C) stops gracefully: no new requests, the
background work finishes (up to ``--drain`` seconds), then the process exits 0.

:func:`build_service` is the wiring the engine extends: extra verbs, the approval
callback, the Redis idempotency store, readiness checks and the runs gauge plug in as
arguments. Tests and benchmarks build a service and run it with :class:`HttpServer`.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

from bot import shell_messages
from bot import slack_messages as msg
from bot.settings import Settings, SettingsError, load_settings
from runbooks.cluster import Cluster
from runbooks.errors import ClusterConfigError, scrub
from runbooks.policy import Policy

if TYPE_CHECKING:  # the Slack, HTTP and metrics stacks load when serving, not with every CLI verb
    from slack_bolt import App

    from bot.runtime import Runtime
    from bot.slack.app import BotIdentity
    from bot.slack.http import Check, Readiness, WebApp
    from bot.slack.idempotency import Idempotency
    from bot.slack.metrics import Metrics, RunsByState
    from bot.slack.web import SlackWeb
    from bot.workers import Workers
    from handlers.access import Directory
    from handlers.decisions import Decisions
    from handlers.routing import Registry, Router, Verb

log = logging.getLogger("upgradebot.serve")
DEFAULT_PORT = 3000


def cluster_connector(settings: Settings) -> Callable[[str | None], Cluster]:
    """Opens the cluster of a context: the kubeconfig if there is one, else in-cluster."""

    def connect(context: str | None) -> Cluster:
        path = settings.kubeconfig_path()
        if path is None:
            if context:
                raise ClusterConfigError(shell_messages.no_kubeconfig())
            return Cluster.in_cluster()
        return Cluster.from_kubeconfig(path, context)

    return connect


def secrets_of(settings: Settings) -> list[str]:
    values = (settings.slack_bot_token, settings.slack_signing_secret, settings.slack_app_token)
    return [v.get_secret_value() for v in values if v is not None and v.get_secret_value()]


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
    app: App
    readiness: Readiness

    def wsgi(self, *, with_slack: bool = True) -> WebApp:
        from slack_bolt.adapter.wsgi import SlackRequestHandler

        from bot.slack.http import WebApp

        slack = SlackRequestHandler(self.app) if with_slack else None
        return WebApp(slack=slack, readiness=self.readiness, metrics=self.metrics)


def build_service(
    settings: Settings,
    policy: Policy,
    *,
    verbs: Sequence[Verb] = (),
    decisions: Decisions | None = None,
    idempotency: Idempotency | None = None,
    checks: Mapping[str, Check] | None = None,
    runs_by_state: RunsByState | None = None,
    connect: Callable[[str | None], Cluster] | None = None,
    directory: Directory | None = None,
    readiness_cache: float = 5.0,
    metrics: Metrics | None = None,
    web: SlackWeb | None = None,
) -> Service:
    """The Slack front end: ``help`` and ``inventory`` plus ``verbs``, ``decisions`` for the
    buttons, ``idempotency`` (default: in memory, one process only), extra readiness
    ``checks`` (e.g. ``{"redis": store.ping}``) and the runs gauge. ``metrics``, ``web`` and
    ``directory`` may be built by the caller (the engine wiring shares them with the run
    threads, :func:`bot.runtime.build_slack_service`)."""
    from bot.slack.app import BotIdentity, SlackDeps, build_app
    from bot.slack.http import Readiness
    from bot.slack.idempotency import InMemoryIdempotency
    from bot.slack.metrics import Metrics
    from bot.slack.web import SlackWeb, UsergroupDirectory, make_client
    from bot.workers import Workers
    from handlers import inventory
    from handlers.routing import Router, default_registry

    if settings.slack_bot_token is None or not settings.slack_bot_token.get_secret_value():
        raise SettingsError(msg.error_token_required())
    metrics = metrics or Metrics()
    metrics.set_runs_source(runs_by_state)
    web = web or SlackWeb(make_client(settings, metrics=metrics), metrics)
    identity = BotIdentity(settings.slack_bot_token.get_secret_value())
    directory = directory or UsergroupDirectory(web)
    registry = default_registry(inventory.verb(connect=connect or cluster_connector(settings), policy=policy), *verbs)
    router = Router(registry, policy, directory)
    workers = Workers(settings.workers)
    deps = SlackDeps(router=router, web=web, idempotency=idempotency or InMemoryIdempotency(),
                     workers=workers, metrics=metrics, decisions=decisions)
    app = build_app(settings, policy, deps, identity=identity)
    readiness = Readiness({"slack": lambda: identity.refresh(web), **(checks or {})},
                          cache_seconds=readiness_cache, secrets=secrets_of(settings))
    return Service(settings=settings, policy=policy, metrics=metrics, web=web, identity=identity,
                   directory=directory, registry=registry, router=router, workers=workers, app=app,
                   readiness=readiness)


class _SecretFilter(logging.Filter):
    """Last line of defence: the three Slack secrets never reach a log line."""

    def __init__(self, secrets: Sequence[str]) -> None:
        super().__init__()
        self.secrets = tuple(secrets)

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        cleaned = scrub(text, *self.secrets)
        if cleaned != text:
            record.msg, record.args = cleaned, None
        return True


def configure_logging(settings: Settings, stream: TextIO | None = None) -> None:
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(_SecretFilter(secrets_of(settings)))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)


def serve(settings: Settings, *, host: str, port: int, out: TextIO, stop: threading.Event,
          service: Service | None = None, runtime: Runtime | None = None, drain: float = 30.0) -> int:
    """Run until ``stop`` is set; then stop gracefully. Returns the exit code.

    Without ``service``: the run engine on Redis (:func:`bot.runtime.build_runtime`) and
    the Slack front end on it; the runtime resumes unfinished runs at start and periodically."""
    from bot.slack.http import HttpServer
    from bot.slack.web import error_code

    app_token = settings.slack_app_token.get_secret_value() if settings.slack_app_token else ""
    socket_mode = bool(app_token)
    if socket_mode and not app_token.startswith("xapp-"):
        raise SettingsError(msg.error_app_token_invalid())
    if not socket_mode and settings.slack_signing_secret is None:
        raise SettingsError(msg.error_signing_secret_required())
    if service is None:
        from bot.runtime import build_runtime, build_slack_service

        runtime = build_runtime(settings, settings.policy())
        service = build_slack_service(settings, runtime)
    if runtime is not None:
        runtime.start()
    http = HttpServer(service.wsgi(with_slack=not socket_mode), host=host, port=port,
                      threads=settings.http_threads).start()
    out.write(http.url + "\n")
    out.write(("Socket Mode; probes on " if socket_mode else "Slack requests on POST ") + http.url
              + ("" if socket_mode else "/slack/events") + "\n")
    out.flush()
    try:
        service.identity.refresh(service.web)
    except Exception as exc:  # not fatal: readiness says so until Slack answers
        log.warning(msg.warning_auth_test_failed(error_code(exc)))
    handler = None
    if socket_mode:
        from slack_bolt.adapter.socket_mode import SocketModeHandler

        handler = SocketModeHandler(service.app, app_token=app_token, logger=logging.getLogger("upgradebot.socket"))
        try:
            handler.connect()
        except Exception as exc:
            http.stop(timeout=5)
            service.workers.shutdown(timeout=1)
            if runtime is not None:
                runtime.stop(timeout=1)
            raise SettingsError(msg.error_socket_mode_failed(error_code(exc))) from exc
        service.readiness.add("socket_mode", lambda: _connected(handler))
    stop.wait()
    log.info("stopping: no new requests, finishing the work in progress (up to %.0f s)", drain)
    http.stop_accepting()
    if handler is not None:
        handler.close()
    started = time.monotonic()
    finished = service.workers.shutdown(timeout=drain)
    if runtime is not None:
        runtime.stop(timeout=max(1.0, drain - (time.monotonic() - started)))
    http.stop()
    log.info("stopped%s", "" if finished else " with work unfinished")
    return 0


def _connected(handler: object) -> None:
    if not handler.client.is_connected():  # type: ignore[attr-defined]
        raise ConnectionError("the Socket Mode connection is down")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"HTTP port (default {DEFAULT_PORT}; 0 picks one)")
    parser.add_argument("--host", default="0.0.0.0", help="address to listen on (default 0.0.0.0)")
    parser.add_argument("--drain", type=float, default=30.0, help="seconds to finish work on SIGTERM (default 30)")


def run(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    """``upgradebot serve`` once the CLI parsed its arguments."""
    configure_logging(settings)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    return serve(settings, host=args.host, port=args.port, out=out, stop=stop, drain=args.drain)


def add_serve_verb(verbs: Any) -> None:
    """``upgradebot serve`` on the CLI's subparsers."""
    serve_parser = verbs.add_parser(
        "serve", help="the Slack front end: Socket Mode with SLACK_APP_TOKEN, else HTTP on --port",
        usage="upgradebot serve [--port 3000] [--host 0.0.0.0] [--drain 30]",
    )
    add_arguments(serve_parser)


SERVE_VERBS: dict[str, Callable[[argparse.Namespace, Settings, TextIO], int]] = {"serve": run}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="upgradebot serve", description=__doc__.splitlines()[0] if __doc__ else None)
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run(args, load_settings(), sys.stdout)
    except SettingsError as exc:
        sys.stderr.write(shell_messages.settings_failed(" ".join(str(exc).split())) + "\n")
        return 2


if __name__ == "__main__":
    sys.exit(main())
