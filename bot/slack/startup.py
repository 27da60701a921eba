"""What ``upgradebot serve`` checks before it starts anything: the Slack secrets and the clusters.

:func:`check_slack_secrets` refuses (``SettingsError``, one line, the value never shown) a
Slack token or secret that is set but empty, or not of Slack's shape: ``SLACK_BOT_TOKEN``
an ``xoxb-`` token, ``SLACK_APP_TOKEN`` an ``xapp-`` token, ``SLACK_SIGNING_SECRET`` 16 to
256 letters, digits, ``-`` or ``_`` that are not a token (Slack's are 32 hex digits). An
empty signing secret once meant "no signature checked" (finding 1 of the security review):
a value is either usable or refused, never quietly taken as "off".

:func:`check_clusters` loads the kubeconfig for each cluster the policy's channels name
(the default context when a channel names none), as commands will, and returns the
readiness check that asks each API server's ``/version`` (one try, a short timeout; the
:class:`~bot.slack.http.Readiness` caches it with the other checks).
"""

from __future__ import annotations

import re

from bot.runtime import connector
from bot.settings import Settings, SettingsError
from bot.slack.http import Check
from handlers import messages as msg
from handlers import startup_messages as startup_msg
from runbooks.cluster import Cluster
from runbooks.cluster.retrying import RetryPolicy
from runbooks.errors import ClusterConfigError, ClusterError
from runbooks.policy import Policy

BOT_TOKEN = re.compile(r"xoxb-[0-9A-Za-z-]{10,250}")
APP_TOKEN = re.compile(r"xapp-[0-9A-Za-z-]{10,250}")
SIGNING_SECRET = re.compile(r"[0-9A-Za-z_-]{16,256}")
TOKEN_PREFIXES = ("xox", "xapp-")
"""A signing secret starting so is a token pasted in the wrong place."""
PROBE_TIMEOUT = (2.0, 3.0)
"""Seconds to connect to an API server and between bytes read, for ``/readyz``."""


def check_slack_secrets(settings: Settings, *, serving: bool) -> str:
    """The Slack secrets that are set, checked; the app token ("" when unset: HTTP).

    ``serving`` (``upgradebot serve``): over HTTP the signing secret is required too;
    a worker needs only the bot token."""
    bot = _value(settings, "SLACK_BOT_TOKEN")
    if bot is None:
        raise SettingsError(startup_msg.ERROR_TOKEN_REQUIRED)
    if not BOT_TOKEN.fullmatch(bot):
        raise SettingsError(startup_msg.ERROR_BOT_TOKEN_MALFORMED)
    app = _value(settings, "SLACK_APP_TOKEN")
    if app is not None and not APP_TOKEN.fullmatch(app):
        raise SettingsError(startup_msg.ERROR_APP_TOKEN_INVALID)
    secret = _value(settings, "SLACK_SIGNING_SECRET")
    if secret is not None and (not SIGNING_SECRET.fullmatch(secret) or secret.startswith(TOKEN_PREFIXES)):
        raise SettingsError(startup_msg.ERROR_SIGNING_SECRET_MALFORMED)
    if serving and app is None and secret is None:
        raise SettingsError(startup_msg.ERROR_SIGNING_SECRET_REQUIRED)
    return app or ""


def _value(settings: Settings, variable: str) -> str | None:
    """The variable's value; None when unset; refused when set but empty."""
    field = {"SLACK_BOT_TOKEN": settings.slack_bot_token, "SLACK_APP_TOKEN": settings.slack_app_token,
             "SLACK_SIGNING_SECRET": settings.slack_signing_secret}[variable]
    if field is None:
        return None
    value = field.get_secret_value()
    if not value.strip():
        raise SettingsError(startup_msg.error_secret_empty(variable))
    return value


def contexts_of(policy: Policy) -> list[str | None]:
    """The kubeconfig contexts commands use: those the channels name, and the default
    (None) unless every channel names one."""
    named = sorted({c.cluster for c in policy.channels.values() if c.cluster})
    default = not policy.channels or any(not c.cluster for c in policy.channels.values())
    return [*([None] if default else []), *named]


def check_clusters(settings: Settings, policy: Policy) -> Check:
    """Each cluster of :func:`contexts_of` opened as a command opens it (refused with
    ``SettingsError`` when its kubeconfig does not load); the readiness check of them all."""
    connect = connector(settings)
    contexts = contexts_of(policy)
    for context in contexts:
        try:
            connect(context).close()
        except ClusterError as exc:
            raise SettingsError(startup_msg.error_kubeconfig_unusable(str(exc))) from exc

    def ping() -> None:
        for context in contexts:
            with _probe(settings, context) as cluster:  # its errors name the cluster and its server
                cluster.version()

    return ping


def _probe(settings: Settings, context: str | None) -> Cluster:
    """The cluster of ``context`` as :func:`bot.runtime.connector` opens it, with one try and
    :data:`PROBE_TIMEOUT` (a probe must answer quickly)."""
    once = RetryPolicy(attempts=1)
    path = settings.kubeconfig_path()
    if path is None:
        if context:
            raise ClusterConfigError(msg.NO_KUBECONFIG)
        return Cluster.in_cluster(retry=once, timeout=PROBE_TIMEOUT)
    return Cluster.from_kubeconfig(path, context, retry=once, timeout=PROBE_TIMEOUT)
